"""Idioms NumPy/Python users write routinely: each traced on every target (cpu, python, the
CUDA plan under codegen.ptx_emulate), its gradient against central differences; what symgrad
refuses, refused at the line."""
import functools
import os
import sys

import numpy as np
import pytest

import symgrad as sg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from user_program_check import check_program  # noqa: E402

TARGETS = ("cpu", "python")
X = np.array([0.3, -1.2, 2.0, 0.7])


def _refused(fn, args, *words):
    with pytest.raises(sg.UnsupportedSyntaxError) as info:
        sg.differentiate(fn, target="python").grad(*args)
    message = str(info.value)
    assert os.path.basename(__file__) in message and all(w in message for w in words), message
    return info.value


# -- 1. the walrus operator; for ... else, while ... else ------------------------------------

def walrus_in_condition(x):
    if (s := np.sum(x * x)) > 1.0:      # data decides; s is bound either way
        y = s * x
    else:
        y = x
    return np.sum(y) + s


def walrus_in_expression(x):
    total = (m := np.mean(x)) * 2.0 + np.sum((d := x - m) * d)
    return total + m + np.sum(d)


def walrus_in_comprehension(x):
    rows = [(last := np.sin(x[i]) * x[i]) for i in range(3)]
    return sum(rows) + last          # the name belongs to the function (PEP 572)


def walrus_static(x):
    if (n := x.shape[0]) > 2:        # a static condition: decided while tracing
        return np.sum(x[:n - 1] ** 2)
    return np.sum(x)


def walrus_refused_in_data_choice(x):
    s = np.sum(x)
    return s if s > 0 else (t := s * 2.0)


def for_else_static_completed(x):
    for i in range(3):
        x = x * 1.1 + i
    else:
        x = np.sin(x)
    return np.sum(x)


def for_else_static_broken(x):
    for i in range(5):
        x = x * 1.1
        if i == 2:
            break
    else:
        x = np.sin(x)                # not run: the loop broke
    return np.sum(x)


def for_else_data_break(x):
    acc = np.zeros(2)
    for v in x.reshape(-1, 2):       # a loop region whose break is on data
        acc = acc + v * v
        if np.sum(acc) > 3.0:
            break
    else:
        acc = acc * 10.0             # only when no row tipped it over
    return np.sum(acc * np.array([1.0, 2.0]))


def for_else_nested_break(x):
    s = 0.0 * x[0]
    for i in range(2):
        for j in range(3):           # this break is the inner loop's: the outer completes
            s = s + x[j] * (i + 1)
            if j == 1:
                break
    else:
        s = s * 3.0
    return s


def while_else_data(x):
    s = np.sum(x * x)
    while s > 0.1:                   # a while on data without break: the else always runs
        s = s * 0.5
    else:
        s = s + np.sum(x)
    return s


def while_else_data_break(x):
    s = 0.0 * x[0]
    i = 0.0 * x[0]
    while i < 8.0:
        i = i + 1.0
        s = s + np.sin(i * x[0]) * x[1]
        if s > 1.5:
            break
    else:
        s = -s
    return s + 0.1 * i * x[0]


def while_else_static(x):
    k = 0
    while k < 3:
        x = np.cos(x) + 0.1 * k
        k += 1
    else:
        x = x * x
    return np.sum(x)


LOOP_PROGRAMS = [
    (walrus_in_condition, [X]), (walrus_in_condition, [X * 0.2]),
    (walrus_in_expression, [X]), (walrus_in_comprehension, [X]), (walrus_static, [X]),
    (for_else_static_completed, [X]), (for_else_static_broken, [X]),
    (for_else_data_break, [np.array([0.3, 0.2, 1.1, 0.4, 1.5, 0.1])]),     # breaks at row 2
    (for_else_data_break, [np.array([0.3, 0.2, 0.1, 0.4, 0.5, 0.1])]),     # completes
    (for_else_nested_break, [X]),
    (while_else_data, [X]), (while_else_static, [X]),
    (while_else_data_break, [np.array([0.4, 1.3])]),     # breaks
    (while_else_data_break, [np.array([0.4, 0.1])]),     # completes
]


@pytest.mark.parametrize("fn, args", LOOP_PROGRAMS, ids=lambda v: getattr(v, "__name__", ""))
def test_walrus_and_loop_else(fn, args):
    check_program(fn, args)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_for_else_on_data_in_both_precisions(dtype):
    fn = for_else_data_break
    for x in (np.array([0.3, 0.2, 1.1, 0.4, 1.5, 0.1]), np.array([0.3, 0.2, 0.1, 0.4, 0.5, 0.1])):
        x = x.astype(dtype)
        for target in TARGETS:
            f = sg.differentiate(fn, target=target)
            np.testing.assert_allclose(f(x), fn(x), rtol=1e-6)
            g = f.grad(x)
            assert g.dtype == dtype
            want = sg.differentiate(fn, target="python").grad(x.astype(np.float64))
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_walrus_in_a_choice_on_data_is_refused_at_its_line():
    _refused(walrus_refused_in_data_choice, [X], "walrus", "conditional expression")


# -- 6. the naive sigmoid's gradient where exp overflows -------------------------------------

def sigmoid_divide(x):
    return np.sum(1 / (1 + np.exp(-x)))


def sigmoid_reciprocal(x):
    return np.sum(np.reciprocal(1 + np.exp(-x)))


def sigmoid_power(x):
    return np.sum((1 + np.exp(-x)) ** -1)


def sigmoid_commuted_scaled(x):     # exp(u) + c, a numerator, and a constant other than 1
    return np.sum(x * x / (np.exp(2.0 * x) + 3.0))


def _stable_sigmoid_derivative(x):
    """s (1 - s) = e / (1 + e)**2 with e = exp(-|x|) (the derivative is even): no overflow,
    no cancellation (it underflows, to 0 or a subnormal, past |x| = 708)."""
    e = np.exp(-np.abs(x))
    return e / (1 + e) ** 2


SIGMOIDS = [sigmoid_divide, sigmoid_reciprocal, sigmoid_power]
EXTREMES = np.array([-800.0, -710.0, -40.0, -1.5, 0.0, 0.3, 40.0, 710.0, 800.0])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", SIGMOIDS, ids=lambda f: f.__name__)
def test_the_naive_sigmoid_has_a_finite_gradient_where_exp_overflows(fn, target):
    f = sg.differentiate(fn, target=target)
    with np.errstate(over="ignore"):
        assert f(EXTREMES) == fn(EXTREMES)   # the value is computed as written
        g = f.grad(EXTREMES)
    assert np.all(np.isfinite(g)), g
    # -s (1 - s): absolute accuracy in the tail where s rounds to 1 (s'(40) = 4e-18 gives 0),
    # JAX's logistic rule; relative accuracy where s is small
    np.testing.assert_allclose(g, _stable_sigmoid_derivative(EXTREMES), rtol=1e-12, atol=1e-16)
    small = EXTREMES < 0
    np.testing.assert_allclose(g[small], _stable_sigmoid_derivative(EXTREMES[small]), rtol=1e-12,
                               atol=1e-300)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", SIGMOIDS, ids=lambda f: f.__name__)
def test_the_naive_sigmoid_in_float32_at_plus_minus_100(fn, target):
    x = np.array([-100.0, -30.0, 0.0, 2.0, 100.0], np.float32)
    with np.errstate(over="ignore"):
        g = sg.differentiate(fn, target=target).grad(x)
    assert g.dtype == np.float32 and np.all(np.isfinite(g)), g
    np.testing.assert_allclose(g, _stable_sigmoid_derivative(x.astype(np.float64)), rtol=2e-6,
                               atol=1e-30)


@pytest.mark.parametrize("fn", SIGMOIDS + [sigmoid_commuted_scaled], ids=lambda f: f.__name__)
def test_the_logistic_rule_against_central_differences(fn):
    check_program(fn, [np.array([-3.0, -0.4, 0.0, 0.25, 2.5])])


@pytest.mark.parametrize("fn", SIGMOIDS, ids=lambda f: f.__name__)
def test_the_logistic_rule_keeps_the_second_derivative_finite(fn):
    x = np.array([-800.0, -710.0, -1.5, 0.0, 0.3, 710.0, 800.0])
    v = np.ones_like(x)
    with np.errstate(over="ignore"):
        h = sg.hvp(fn, target="python")(x, v)
    s = 1 / (1 + np.exp(-np.clip(x, -700, 700)))
    assert np.all(np.isfinite(h)), h
    np.testing.assert_allclose(h, s * (1 - s) * (1 - 2 * s), rtol=1e-10, atol=1e-300)


def test_the_logistic_rule_under_the_cuda_emulation():
    from user_program_check import check_cuda
    for fn in SIGMOIDS:
        f = sg.differentiate(fn, target="python").grad
        with np.errstate(over="ignore"):
            check_cuda(f, [EXTREMES], _stable_sigmoid_derivative(EXTREMES), tol=1e-12)


# -- 2. .item(), float(x), int(x); functools.partial -------------------------------------------

def item_and_float(x):
    s = np.sum(x * x).item()              # a Python float, traced
    m = float(np.max(x))
    first = x.item(0) + x.reshape(2, 2).item(1, 1)
    return x * s + m * first + float(x[1] * 2.0)


def item_in_a_loop(x):
    acc = 0.0 * x
    for i in range(x.shape[0]):
        acc = acc + float(x[i]) * np.sin(x)
    return np.sum(acc)


def _scaled_power(a, b, scale=1.0, power=2):
    return scale * a ** power + b


def partial_of_a_helper(x):
    square_plus = functools.partial(_scaled_power, power=2, scale=3.0)
    cube = functools.partial(_scaled_power, x, power=3)
    return np.sum(square_plus(x, 1.0)) + np.sum(cube(0.5)) + np.sum(functools.partial(np.sum, axis=0)(x))


def int_of_data_as_a_shape(x):
    return np.sum(np.zeros(int(np.sum(x))) + 1.0) * x


def bool_of_data(x):
    return x * 2.0 if bool(np.sum(x)) else x


@pytest.mark.parametrize("fn", [item_and_float, item_in_a_loop, partial_of_a_helper],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_python_numbers_of_traced_values_and_partials(fn, dtype):
    x = X.astype(dtype)
    if dtype == np.float64:
        check_program(fn, [x])
        return
    want = fn(x)
    for target in TARGETS:
        f = sg.differentiate(fn, target=target)
        got = f(x)
        assert np.asarray(got).dtype == np.asarray(want).dtype   # a Python float is weak
        np.testing.assert_allclose(got, want, rtol=2e-6)
        g = f.grad(x)
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, sg.differentiate(fn, target="python").grad(X), rtol=2e-5)


def test_item_of_more_than_one_element_is_numpys_error():
    def item_of_vector(x):
        return x.item() * x
    with pytest.raises(TypeError, match="size 1"):
        sg.differentiate(item_of_vector, target="python")(X)


def test_int_of_a_traced_value_is_refused_at_its_line():
    _refused(int_of_data_as_a_shape, [X], "int() of a traced value", "shape")


def test_bool_of_a_traced_value_is_refused_at_its_line():
    _refused(bool_of_data, [X], "bool() of a traced value")


# -- 3. ufunc methods; where= and initial= of reductions -------------------------------------
A = np.array([[0.3, -1.2, 2.0], [0.7, 1.1, -0.4]])


def ufunc_reductions(a):
    return (np.add.reduce(a) * 1.0, np.multiply.reduce(a, axis=1), np.maximum.reduce(a, axis=1, keepdims=True),
            np.minimum.reduce(a, axis=None), np.add.reduce(a, axis=(0, 1)))


def logaddexp_reductions(a):
    return (np.logaddexp.reduce(a), np.logaddexp.reduce(a, axis=1, keepdims=True),
            np.logaddexp.reduce(a * 400.0, axis=None))     # large: the max keeps it finite


def ufunc_accumulations(a):
    return np.add.accumulate(a), np.multiply.accumulate(a, axis=1), np.add.accumulate(a[0] * a[1])


def masked_reductions(a):
    mask = a > 0
    return (np.sum(a, where=mask), np.sum(a * a, axis=1, where=mask, keepdims=True),
            np.mean(a, where=mask), np.mean(a, axis=1, where=np.array([True, False, True])),
            np.max(a, where=mask, initial=-1.0), np.min(a, axis=1, where=mask, initial=5.0),
            np.max(a, initial=1.5), np.prod(a, where=mask), a.sum(where=mask), a.max(axis=0, initial=0.0),
            a.mean(axis=1, where=mask))


REDUCTION_PROGRAMS = [ufunc_reductions, logaddexp_reductions, ufunc_accumulations, masked_reductions]


@pytest.mark.parametrize("fn", REDUCTION_PROGRAMS, ids=lambda f: f.__name__)
def test_ufunc_methods_and_masked_reductions(fn):
    check_program(fn, [A])


@pytest.mark.parametrize("fn", REDUCTION_PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("target", TARGETS)
def test_ufunc_methods_and_masked_reductions_in_float32(fn, target):
    a = A.astype(np.float32)
    f = sg.differentiate(fn, target=target)
    for got, want in zip(f(a), fn(a)):
        assert np.asarray(got).dtype == np.asarray(want).dtype
        np.testing.assert_allclose(got, want, rtol=3e-6, atol=1e-6)
    g = f.grad(a)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, sg.differentiate(fn, target="python").grad(A), rtol=3e-5, atol=1e-5)


def test_logaddexp_reduce_at_infinities_matches_numpy():
    def lse(a):
        return np.logaddexp.reduce(a, axis=1)
    a = np.array([[-np.inf, -np.inf], [-np.inf, 0.5], [1000.0, 1000.0]])
    for target in TARGETS:
        f = sg.differentiate(lse, target=target)
        np.testing.assert_array_equal(f(a), lse(a))
        g = f.grad(a)
        # a row of only -inf has no derivative (0/0 in the softmax): nan, not a made-up number
        assert np.all(np.isnan(g[0]))
        np.testing.assert_allclose(g[1:], [[0.0, 1.0], [0.5, 0.5]])


def test_max_over_a_mask_without_initial_is_numpys_error():
    def masked_max(a):
        return np.max(a, where=a > 0)
    with pytest.raises(ValueError, match="initial"):
        sg.differentiate(masked_max, target="python")(A)


# -- 4. np.polyval, np.interp; np.copyto and out= -------------------------------------------
XP = np.array([-1.0, 0.0, 0.5, 2.0])
FP = np.array([0.3, -0.7, 1.1, 0.4])


def polyval_program(p, x):
    return np.polyval(p, x) + np.polyval([p[0], 2.0, p[2]], x[0]) + np.polyval(p, 0.5)


def interp_program(x, fp):
    return np.interp(x, XP, fp) + np.interp(x * 0.5, XP, fp, left=-2.0, right=3.0)


def interp_traced_knots(x, xp):
    return np.interp(x, np.sort(xp), FP)


@pytest.mark.parametrize("wrt", [0, 1])
def test_polyval_gradients_in_coefficients_and_points(wrt):
    check_program(polyval_program, [np.array([0.5, -1.5, 2.0, 0.25]), np.array([-1.3, 0.2, 0.9])], wrt=wrt)


def test_polyval_gradient_is_finite_where_x_times_x_overflows():
    # NumPy starts Horner's loop from zeros_like(x) * x; that product's derivative must be a
    # structural zero, not 0.0 * (x * x) = nan once x * x overflows (the derivative 2x - 2 is
    # finite). The values keep NumPy's nan at inf; an empty coefficient list gives zeros.
    x = np.array([1e200, -1e200, 0.5, np.inf])
    for target in TARGETS:
        f = sg.differentiate(lambda x: np.polyval([1.0, -2.0, 3.0], x), target=target)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(f(x), np.polyval([1.0, -2.0, 3.0], x))
            np.testing.assert_array_equal(f.grad(x), [2e200, -2e200, -1.0, np.nan])
        assert "0.0 * x *" not in f.grad.source and "* 0.0" not in f.grad.source
        empty = sg.differentiate(lambda x: np.polyval(np.zeros(0), x) + x, target=target)
        np.testing.assert_array_equal(empty(x[:3]), x[:3])
        np.testing.assert_array_equal(empty.grad(x[:3]), np.ones(3))


@pytest.mark.parametrize("wrt", [0, 1])
def test_interp_gradients_inside_the_segments(wrt):
    # points inside segments (not at knots) and outside the knots on both sides
    x = np.array([-2.5, -0.7, 0.2, 0.31, 1.4, 3.0])
    check_program(interp_program, [x, FP], wrt=wrt)


def test_interp_with_traced_knots_is_not_differentiated_in_them():
    x, xp = np.array([-0.7, 0.2, 1.4]), np.array([0.5, -1.0, 2.0, 0.0])
    for target in TARGETS:
        f = sg.differentiate(interp_traced_knots, wrt=(0, 1), target=target)
        np.testing.assert_array_equal(f(x, xp), interp_traced_knots(x, xp))
        gx, gxp = f.grad(x, xp)
        np.testing.assert_array_equal(gxp, np.zeros(4))
        np.testing.assert_allclose(gx, [-1.0, 3.6, -0.7 / 1.5])


def _slopes():
    return np.diff(FP) / np.diff(XP)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_interp_at_the_knots_is_exact_with_jaxs_one_sided_derivatives(target, dtype):
    """Values at the knots are fp exactly (NumPy's); the derivative in x at an interior knot
    and at xp[0] is the slope to the right, at xp[-1] the slope to the left (jnp.interp's
    convention); in fp it is the knot's own weight, 1."""
    def at(x, fp):
        return np.interp(x, XP, fp)
    x, fp = XP.astype(dtype), FP.astype(dtype)
    f = sg.differentiate(at, wrt=(0, 1), target=target)
    value = f(x, fp)
    assert value.dtype == np.float64 == np.interp(x, XP, fp).dtype   # NumPy's double loop
    np.testing.assert_array_equal(value, np.interp(x, XP, fp))
    gx, gfp = f.grad(x, fp)
    assert gx.dtype == dtype and gfp.dtype == dtype
    slopes = _slopes()
    np.testing.assert_allclose(gx, [slopes[0], slopes[1], slopes[2], slopes[2]], rtol=1e-6)
    np.testing.assert_allclose(gfp, np.ones(4))


@pytest.mark.parametrize("target", TARGETS)
def test_interp_clamps_outside_the_knots_with_zero_slope(target):
    def outside(x, fp):
        return np.interp(x, XP, fp), np.interp(x, XP, fp, left=5.0, right=-5.0)
    x = np.array([-9.0, -1.0 - 1e-12, 2.0 + 1e-12, 9.0])
    f = sg.differentiate(outside, wrt=(0, 1), target=target)
    for got, want in zip(f(x, FP), outside(x, FP)):
        np.testing.assert_array_equal(got, want)
    gx, gfp = f.grad(x, FP)
    np.testing.assert_array_equal(gx, np.zeros(4))
    np.testing.assert_array_equal(gfp, [2.0, 0.0, 0.0, 2.0])   # fp[0], fp[-1] of the default clamps


def interp_under_cuda(x, fp):
    return np.interp(x, XP, fp)


def test_interp_and_polyval_under_the_cuda_emulation():
    check_program(interp_under_cuda, [np.array([-0.7, 0.2, 1.4, 0.1, 1.9]), FP], wrt=(0, 1))
    check_program(polyval_program, [np.array([0.5, -1.5, 2.0, 0.25]), np.array([-1.3, 0.2, 0.9])], wrt=(0, 1))


def copyto_program(x):
    y = np.zeros((2, 4))
    np.copyto(y, x)                        # broadcast into both rows
    z = np.ones(4)
    np.copyto(z, x * 3.0, where=x > 0)     # only where the mask is set
    return np.sum(y * y) + np.sum(z * x)


def out_program(x):
    y = np.empty_like(x)
    np.add(x, x * x, out=y)
    np.multiply(y, 2.0, out=y)             # input and output the same array: NumPy's semantics
    w = x.copy()
    np.exp(w, out=w)
    v = np.zeros(6)
    np.sin(x, out=v[1:5])                  # into a view: v's slice
    r = np.subtract(y, 1.0, out=y)         # the result is the output array itself
    return np.sum(r) + np.sum(w) + np.sum(v * v)


def out_in_a_loop(x):
    acc = np.zeros_like(x)
    for k in range(x.shape[0]):
        np.add(acc, np.sin(x * k), out=acc)
    return np.sum(acc * x)


def out_into_an_argument(x):
    np.multiply(x, 2.0, out=x)
    return np.sum(x)


def out_into_an_alias(x):
    y = np.zeros(4)
    alias = y
    np.add(x, 1.0, out=y)
    return np.sum(alias * x)


def copyto_into_an_argument(x, y):
    np.copyto(y, x)
    return np.sum(y)


def out_with_the_wrong_kind(x):
    y = np.zeros(4, dtype=np.int64)
    np.add(x, 1.0, out=y)
    return np.sum(x)


@pytest.mark.parametrize("fn", [copyto_program, out_program, out_in_a_loop], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_copyto_and_out_write_in_place(fn, dtype):
    x = X.astype(dtype)
    if dtype == np.float64:
        check_program(fn, [x])
        return
    for target in TARGETS:
        f = sg.differentiate(fn, target=target)
        np.testing.assert_allclose(f(x), fn(x), rtol=1e-5)
        g = f.grad(x)
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, sg.differentiate(fn, target="python").grad(X), rtol=1e-5, atol=1e-5)


def test_out_and_copyto_never_write_the_callers_array():
    x = X.copy()
    _refused(out_into_an_argument, [x], "argument array 'x'")
    _refused(copyto_into_an_argument, [x, np.zeros(4)], "argument array 'y'")
    _refused(out_into_an_alias, [x], "may share memory with 'alias'")
    np.testing.assert_array_equal(x, X)


def test_out_casts_as_numpy_does():
    with pytest.raises(TypeError, match="same_kind"):
        sg.differentiate(out_with_the_wrong_kind, target="python")(X)


# -- 5. any / all / sorted / min / max builtins over traced values ---------------------------

def builtins_over_scalars(x):
    a, b, c = x[0], x[1], x[2]
    return max(a, b) + min(b, c) * 2.0 + max([a * 2.0, b, c]) + min(a, b, c, x[3]) + max(x) - min(x)


def truth_builtins(x):
    s = np.sum(x * x)
    if any(x > 1.5) and not all(x > 0):     # traced bools: an if on data
        s = s * 2.0
    if all([x[0] > -5.0, x[3] < 5.0]):      # a list of traced bools
        s = s + np.sum(x)
    if any([False, x[1] > 0]):
        s = s - 100.0
    return s


def sorted_builtin(x):
    ordered = sorted(x)                       # a 1-d array: np.sort, as a list
    top = sorted([x[0] * 2.0, x[1], x[3]], reverse=True)
    return sum(o * w for o, w in zip(ordered, [1.0, 2.0, 3.0, 4.0])) + top[0] - top[2]


def sorted_with_key(x):
    return np.sum(np.array(sorted(x, key=abs)))


@pytest.mark.parametrize("fn", [builtins_over_scalars, truth_builtins, sorted_builtin],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("x", [X, np.array([2.0, 1.0, -0.5, 3.0])], ids=["x1", "x2"])
def test_python_builtins_over_traced_values(fn, x):
    check_program(fn, [x])


@pytest.mark.parametrize("target", TARGETS)
def test_builtin_max_of_a_tie_splits_the_gradient_as_np_maximum(target):
    """Python's max(a, b) returns a on a tie; the value is the same, the derivative is
    np.maximum's: half to each (JAX's convention, what a central difference sees)."""
    def tie(x):
        return max(x[0], x[1]) + min(x[2], x[3])
    x = np.array([1.5, 1.5, -2.0, -2.0])
    np.testing.assert_array_equal(sg.differentiate(tie, target=target).grad(x), [0.5, 0.5, 0.5, 0.5])


def test_sorted_with_a_key_is_refused_at_its_line():
    _refused(sorted_with_key, [X], "sorted(..., key=...)")


def test_any_of_rows_is_numpys_ambiguity_error():
    def any_rows(a):
        return np.sum(a) if any(a > 0) else 0.0
    with pytest.raises(ValueError, match="ambiguous"):
        sg.differentiate(any_rows, target="python")(A)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", SIGMOIDS + [sigmoid_commuted_scaled], ids=lambda f: f.__name__)
def test_the_logistic_rule_in_forward_mode(fn, target):
    x = EXTREMES if fn is not sigmoid_commuted_scaled else np.array([-3.0, -0.4, 0.0, 0.25, 2.5, 400.0])
    v = np.linspace(0.5, 1.5, x.size)
    with np.errstate(over="ignore"):
        value, tangent = sg.jvp(fn, target=target)(x, v)
        want = np.dot(sg.differentiate(fn, target="python").grad(x), v)
    assert np.isfinite(tangent)
    np.testing.assert_allclose(tangent, want, rtol=1e-12)


# -- every idiom's gradient lowered for target="cuda" assembles with ptxas --------------------
_PTX_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
import symgrad as sg
import test_user_idioms as t
programs = [
    (t.for_else_data_break, [np.array([0.3, 0.2, 1.1, 0.4, 1.5, 0.1])], 0),
    (t.while_else_data_break, [np.array([0.4, 1.3])], 0),
    (t.walrus_in_condition, [t.X], 0),
    (t.item_and_float, [t.X], 0),
    (t.masked_reductions, [t.A], 0),
    (t.logaddexp_reductions, [t.A], 0),
    (t.interp_program, [np.array([-2.5, -0.7, 0.2, 1.4, 3.0]), t.FP], (0, 1)),
    (t.polyval_program, [np.array([0.5, -1.5, 2.0, 0.25]), np.array([-1.3, 0.2, 0.9])], (0, 1)),
    (t.out_program, [t.X], 0),
    (t.sorted_builtin, [t.X], 0),
    (t.sigmoid_divide, [t.EXTREMES], 0),
]
for path, (fn, args, wrt) in zip(sys.argv[1:], programs):
    open(path, "w").write(sg.grad(fn, wrt=wrt, target="python").ptx(*args, arch="ARCH"))
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_idiom_gradients_assemble_with_ptxas(tmp_path, arch):
    from ptx_child import assemble_in_child
    files = [tmp_path / f"idiom{i}.ptx" for i in range(11)]
    assemble_in_child(_PTX_SCRIPT.replace("ARCH", arch), files, arch=arch)


def test_builtin_max_of_arrays_is_numpys_ambiguity_error():
    def max_of_rows(a):
        return np.sum(max(a[0], a[1]))          # Python compares the rows: ambiguous in NumPy
    with pytest.raises(ValueError, match="ambiguous"):
        max_of_rows(A)
    with pytest.raises(ValueError, match="ambiguous"):
        sg.differentiate(max_of_rows, target="python")(A)


def _item_as_shape(x, k):
    return np.sum(np.zeros(k.item()) + x[0])


def _item_as_slice_bound(x, k):
    return np.sum(x[:k.item()])


def _item_as_range_bound(x, k):
    s = 0.0
    for i in range(k.item()):
        s = s + x[i]
    return s


def _item_as_index(x, k):
    return x[k.item()] * 2.0 + x * k.item()     # a traced int: a gather and a factor


@pytest.mark.parametrize("fn, words", [(_item_as_shape, "shape that depends on traced data"),
                                       (_item_as_slice_bound, "slice bounds that depend on data"),
                                       (_item_as_range_bound, "range() over a traced value")],
                         ids=lambda v: getattr(v, "__name__", ""))
def test_a_traced_int_used_as_a_python_int_is_refused_at_its_line(fn, words):
    _refused(fn, [np.ones(3), np.array(2)], words)


@pytest.mark.parametrize("target", TARGETS)
def test_a_traced_int_from_item_indexes_and_scales(target):
    x = np.array([0.5, -1.0, 2.0])
    f = sg.differentiate(_item_as_index, target=target)
    np.testing.assert_array_equal(f(x, np.array(2)), _item_as_index(x, np.array(2)))
    np.testing.assert_array_equal(f.grad(x, np.array(1)), [1.0, 7.0, 1.0])   # 3 rows of 2 x[k]


def _out_into_a_scalar(x):
    s = np.sum(x)
    np.multiply(x[0], 2.0, out=s)
    return s


def _out_by_position(x):
    y = np.zeros(4)
    np.add(x, 1.0, y)
    return np.sum(y)


@pytest.mark.parametrize("fn, words", [(_out_into_a_scalar, "out=) into 's', a scalar"),
                                       (_out_by_position, "output given by position")],
                         ids=lambda v: getattr(v, "__name__", ""))
def test_outputs_that_are_not_the_functions_arrays_are_refused_at_the_line(fn, words):
    _refused(fn, [X], words)


def int_and_float_of_a_loop_index(x):
    s = 0.0 * x[0]
    for i in range(x.shape[0]):               # a loop region: i is traced
        s = s + x[int(i)] * float(i) + np.sin(x[i]) * float(x[i])
    return s


def test_int_and_float_of_a_loop_index_keep_the_loop_a_region():
    x = np.linspace(-1.0, 1.0, 12)
    check_program(int_and_float_of_a_loop_index, [x])
    source = sg.differentiate(int_and_float_of_a_loop_index, target="python").source_for(x)
    assert "for i in range(12):" in source     # one loop, not twelve unrolled iterations


@pytest.mark.parametrize("target", TARGETS)
def test_functools_reduce_and_operator_functions(target):
    """functools.reduce folds with each step traced as a call (a product of a slice, a chain
    of matrix products, operator.add with a start value); operator.add & co. are the
    operators; an empty sequence without a start value is Python's TypeError."""
    import operator

    def f(x, Ms):
        return (functools.reduce(lambda a, b: a * b, x[:3])
                + functools.reduce(np.matmul, Ms).sum()
                + functools.reduce(operator.add, [x[0], x[1]], 10.0)
                + operator.truediv(operator.pow(x[3], 2), operator.sub(x[0], 3.0)))
    x = np.array([0.5, -1.5, 2.0, 3.0])
    Ms = [np.random.default_rng(i).normal(size=(3, 3)) for i in range(3)]
    np.testing.assert_allclose(sg.differentiate(f, target=target)(x, Ms), f(x, Ms), rtol=1e-14)
    assert sg.check_grad(f, x, Ms, wrt=(0, 1)) < 1e-8
    with pytest.raises(TypeError, match="reduce\\(\\) of empty iterable"):
        sg.differentiate(lambda x: functools.reduce(operator.add, x[:0]), target=target)(x)
