"""The side a select does not pick never reaches a derivative, not even as ``0 * nan``
(DESIGN.md §3). Tangent's safe sqrt (a data-dependent if, traced to a select) had a NaN
gradient for every input, and ``np.where(x > 0, np.sqrt(x), 0.0)`` a NaN gradient at 0 (as in
JAX): the select's cotangent ``where(c, g, 0)`` was multiplied into the other side's rule. The
simplifier now sinks such selects outwards in derivative code (only there: the user's own
computation keeps NumPy's semantics)."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import ptx_emulate

TARGETS = ["cpu", "python", "cuda-emulated"]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # both sides are computed


def safe_sqrt(a):
    if a >= 0:
        r = np.sqrt(a)
    else:
        r = np.sqrt(-a)
    return r


def relu_sqrt(x):
    return np.where(x > 0, np.sqrt(x), 0.0)


def masked_log(x):
    return np.sum(np.where(x > 0, np.log(x), 0.0) * x)


def scalar_condition(x, s):   # a scalar select over a vector: the sum must keep the select
    return np.sum(np.where(s > 0, np.sqrt(s) * x, x))


def _derivative(fn, order, target, args, wrt=0):
    f = sg.differentiate(fn, wrt=wrt, target="python" if target == "cuda-emulated" else target)
    for _ in range(order):
        f = f.grad
    if target == "cuda-emulated":
        return ptx_emulate.run(f._graph(list(args)), list(args))
    return f(*args)


POINTS = [4.0, -4.0, 0.25, -0.25, np.array([4.0, -4.0, 1.0, -9.0]),
          np.array([4.0, -4.0], dtype=np.float32)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("a", POINTS, ids=lambda a: repr(a).replace(" ", ""))
def test_safe_sqrt_derivatives_are_finite_and_right(target, a):
    mag = np.abs(a)
    first = _derivative(safe_sqrt, 1, target, (a,))
    second = _derivative(safe_sqrt, 2, target, (a,))
    rtol = 1e-6 if np.asarray(a).dtype == np.float32 else 1e-14
    np.testing.assert_allclose(first, np.sign(a) / (2 * np.sqrt(mag)), rtol=rtol)
    np.testing.assert_allclose(second, -0.25 * mag ** -1.5, rtol=rtol)


@pytest.mark.parametrize("target", TARGETS)
def test_where_sqrt_has_gradient_zero_where_not_selected(target):
    x = np.array([0.0, 4.0, -1.0, 0.25])
    np.testing.assert_array_equal(_derivative(relu_sqrt, 1, target, (x,)), [0.0, 0.25, 0.0, 1.0])
    np.testing.assert_array_equal(_derivative(relu_sqrt, 1, target, (0.0,)), 0.0)
    np.testing.assert_array_equal(_derivative(relu_sqrt, 2, target, (x,)),
                                  [0.0, -1 / 32, 0.0, -2.0])


@pytest.mark.parametrize("target", TARGETS)
def test_masked_log_times_x(target):
    x = np.array([0.0, 1.0, -1.0, np.e])
    np.testing.assert_allclose(_derivative(masked_log, 1, target, (x,)), [0, 1, 0, 2], rtol=1e-15)
    np.testing.assert_allclose(_derivative(masked_log, 2, target, (x,)), [0, 1, 0, 1 / np.e],
                               rtol=1e-15)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("s, want", [(0.0, 0.0), (-1.0, 0.0), (4.0, 6.0 / 4)])
def test_scalar_condition_over_a_vector(target, s, want):
    x = np.array([1.0, 2.0, 3.0])
    assert _derivative(scalar_condition, 1, target, (x, s), wrt=1) == want


def test_generated_derivative_is_one_select():
    # a scalar condition: a branch, each side's derivative computed only when taken
    source = sg.differentiate(safe_sqrt, target="python").grad.source_for(1.0)
    assert "if a >= 0.0:\n        b_a = 1.0 / (2.0 * np.sqrt(a))\n    else:\n" \
           "        b_a = -1.0 / (2.0 * np.sqrt(-a))" in source, source
    assert "0.0 *" not in source and "* 0.0" not in source and "np.where" not in source
    source = sg.differentiate(relu_sqrt, target="python").grad.source_for(np.ones(3))
    assert "np.where(x > 0.0, 1.0 / (2.0 * np.sqrt(x)), 0.0)" in source, source


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_forward_code_keeps_numpy_semantics(target):
    """A select the user multiplies is computed as written: NumPy's 0 * nan is nan."""
    def user(x):
        return np.where(x > 0, x, 0.0) * np.log(x)
    x = np.array([-1.0, 2.0])
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(sg.differentiate(user, target=target)(x), user(x))


def outer_select(x, y):   # a (3, 1) condition over a (3, 4) select: the sum over y's axis sinks
    return np.sum(np.where(np.reshape(x, (3, 1)) > 0,
                           np.reshape(np.sqrt(x), (3, 1)) * np.reshape(y, (1, 4)), 0.0))


@pytest.mark.parametrize("target", TARGETS)
def test_broadcast_condition_sinks_through_the_sum(target):
    x, y = np.array([0.0, 1.0, 4.0]), np.arange(4.0)
    dx, dy = _derivative(outer_select, 1, target, (x, y), wrt=(0, 1))
    np.testing.assert_array_equal(dx, [0.0, 3.0, 1.5])
    np.testing.assert_array_equal(dy, [3.0, 3.0, 3.0, 3.0])


def nested_selects_with_zero_sides(x, s):
    # the derivative nests selects on three conditions with scalar zeros on both sides of one:
    # the select-swap rule once swapped them back and forth forever (RecursionError)
    v2 = x * 3.0 if s < 0.1 else x * 2.0
    return np.sum(np.minimum(x, np.where(v2 > v2, v2 * v2, v2 - v2)))


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_nested_selects_simplify_and_differentiate(target):
    x = np.array([0.3, -0.2, 0.5, 0.1])
    np.testing.assert_array_equal(sg.grad(nested_selects_with_zero_sides, target=target)(x, 0.7),
                                  [0.0, 1.0, 0.0, 0.0])
    assert sg.grad(nested_selects_with_zero_sides, wrt=1, target=target)(x, 0.7) == 0.0


def nested_select_gives_the_shape(m, v):
    # the inner select is (2, 3, 3) only through m: folding where(c, where(c, 0, m), 0) into
    # where(c, 0, 0) once gave the (3, 1) of c, and the next op failed to broadcast
    c = v > 2.0
    picked = np.where(c, np.where(c, 0.0, m), 0.0)
    return np.sum(np.reshape(picked, (18,)) * np.arange(18.0)) + np.sum(np.where(c, m, 0.0))


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_nested_select_keeps_the_shape(target):
    m = np.linspace(0.5, 2.0, 18).reshape(2, 3, 3)
    v = np.array([[1.5], [2.5], [3.5]])
    f = sg.differentiate(nested_select_gives_the_shape, target=target)
    np.testing.assert_allclose(f(m, v), nested_select_gives_the_shape(m, v), rtol=1e-14)
    assert sg.check_grad(f, m, v) < 1e-8
