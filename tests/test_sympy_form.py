"""The derivative as mathematics: ``f.sympy``/``f.grad.sympy``/``f.grad.latex``.

The check is the one a reader would do by hand: ``sympy.diff`` of the function's own sympy form
equals the sympy form of symgrad's derivative (the difference simplifies to zero), on the op
cases of ``test_derivatives``."""
import numpy as np
import pytest
import sympy

import symgrad as sg
from symgrad.regions import EXPANDED
from symgrad.ir import OPS
from symgrad.sympy_form import INDEX, LENGTH, LEAVES, MAX_ELEMENTS, SYMPY_RULES, element_symbols

from test_derivatives import ARRAY_FUNCTIONS, BINARY, UNARY

# Almost-everywhere derivatives: sympy differentiates sign into DiracDelta terms that vanish off
# a measure-zero set; symgrad (like JAX) takes them as zero.
def _difference_is_zero(expr) -> bool:
    expr = sympy.simplify(sympy.sympify(expr).replace(sympy.DiracDelta, lambda *a: sympy.S.Zero))
    if expr == 0:
        return True
    # Folded constants are floats (log(2) ** x's derivative carries 0.693147180559945): what is
    # left must be rounding-sized coefficients only.
    rounded = sympy.expand(expr.evalf()).replace(
        lambda a: a.is_Float and abs(a) < 1e-12, lambda a: sympy.S.Zero)
    return sympy.simplify(rounded) == 0


def _zero_on_domain(expr, symbols, low, high) -> bool:
    """The identity on the case's domain: symgrad's rules may select away points outside it
    (pow's d/dy is log(where(x == 0, 1, x)) * x**y, 0 at x == 0 where sympy's log(0) is not),
    so a difference sympy cannot simplify to zero is evaluated at points inside the domain."""
    if _difference_is_zero(expr):
        return True
    expr = sympy.piecewise_fold(sympy.sympify(expr))
    for t in (0.13, 0.37, 0.61, 0.89):
        point = {s: sympy.Float(low + (high - low) * ((t + 0.17 * k) % 1.0), 30)
                 for k, s in enumerate(symbols)}
        value = complex(expr.evalf(30, subs=point))
        if abs(value) > 1e-20:
            return False
    return True


def test_every_op_has_a_sympy_rule():
    missing = [op for op in OPS if op not in SYMPY_RULES and op not in LEAVES and op not in EXPANDED]
    assert not missing, f"ops without a sympy rule: {missing}"


@pytest.mark.parametrize("name, fn, low, high", UNARY, ids=[u[0] for u in UNARY])
def test_unary_derivative_is_sympy_diff(name, fn, low, high):
    f = sg.differentiate(fn, target="python")
    x = 0.5 * (low + high)
    (s,) = element_symbols("x", ()).ravel()
    assert _difference_is_zero(sympy.diff(f.sympy(x), s) - f.grad.sympy(x))


@pytest.mark.parametrize("name, fn, low, high", BINARY, ids=[b[0] for b in BINARY])
def test_binary_derivative_is_sympy_diff(name, fn, low, high):
    f = sg.differentiate(fn, wrt=(0, 1), target="python")
    x, y = 0.5 * (low + high), 0.6 * low + 0.4 * high
    form, grads = f.sympy(x, y), f.grad.sympy(x, y)
    assert isinstance(grads, tuple) and len(grads) == 2
    symbols = sympy.symbols("x y", real=True)
    for symbol, g in zip(symbols, grads):
        assert _zero_on_domain(sympy.diff(form, symbol) - g, symbols, low, high), (name, symbol)


# Array cases: element symbols x_0, ... / x_{i,j}; the gradient is an Array/Matrix of partials.
# max/min reductions are checked elsewhere (sympy differentiates Max into Heaviside terms whose
# tie convention differs from symgrad's even split), and a gather at a traced index (argmax)
# has no closed form; the rest exactly.
_ARRAY_CASES = [a for a in ARRAY_FUNCTIONS if a[0] not in (
    "max", "max_axis", "min_axis_keepdims", "reduce_max_tf", "broadcast_rows", "clip",
    "take_method_argmax")]


@pytest.mark.parametrize("name, fn, shape", _ARRAY_CASES, ids=[a[0] for a in _ARRAY_CASES])
def test_array_derivative_is_sympy_diff(name, fn, shape):
    f = sg.differentiate(fn, target="python")
    x = np.random.default_rng(0).uniform(0.5, 1.5, shape)
    form, grad = f.sympy(x), f.grad.sympy(x)
    elements = element_symbols("x", shape)
    expected = np.asarray(grad.tolist(), dtype=object).reshape(shape)
    assert isinstance(grad, sympy.Matrix if len(shape) == 2 else sympy.Array)
    assert grad.shape == (shape if len(shape) != 1 else shape)
    point = {s: sympy.Rational(int(v * 64), 64) for s, v in zip(elements.ravel(), x.ravel())}
    for index in np.ndindex(shape):
        difference = sympy.diff(form, elements[index]) - expected[index]
        # at a rational point (simplify of every element of a 12-element case is slow); exact
        # but for constants folded to floats (1 / log(2) in log2)
        assert abs(sympy.N(difference.subs(point), 30)) < 1e-14, (name, index)


def test_extremum_gradient_form():
    """The max's gradient splits ties evenly: a Piecewise on equality with the max."""
    f = sg.differentiate(lambda x: np.max(x * x), target="python")
    g = f.grad.sympy(np.ones(2))
    x0, x1 = element_symbols("x", (2,))
    at = {x0: 3, x1: -1}
    assert [e.subs(at) for e in g] == [6, 0]
    assert [e.subs({x0: 1, x1: -1}) for e in g] == [1, -1]   # a tie: half each


def test_stop_gradient_is_a_function_with_zero_derivative():
    f = sg.differentiate(lambda x: x * sg.stop_gradient(x * x), target="python")
    form = f.sympy(2.0)
    x = sympy.Symbol("x", real=True)
    assert "stop_gradient" in str(form)
    assert sympy.diff(form, x) - f.grad.sympy(2.0) == 0


def test_gather_with_traced_indices_is_a_clear_error():
    def lookup(table, labels):
        return np.sum(table[labels] ** 2)
    g = sg.grad(lookup, target="python")
    with pytest.raises(NotImplementedError, match="traced integer indices"):
        g.sympy(np.ones((3, 2)), np.array([0, 2]))


def test_large_arrays_get_the_symbolic_length_form():
    """Past MAX_ELEMENTS, 1-d arrays of one length are x[i] with 0 <= i < n and reductions Sum."""
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "examples"))
    from quickstart_defs import f
    big = np.linspace(0.1, 0.9, MAX_ELEMENTS + 1)
    x, y = sympy.symbols("x y", real=True)
    xi, yi = (sympy.IndexedBase(name, real=True)[INDEX] for name in "xy")
    for indexed, scalar in zip(f.grad.sympy(big, big), f.grad.sympy(0.5, 0.5)):
        assert indexed.subs({xi: x, yi: y}) == scalar


def _cross_entropy(x, t):
    return -np.sum(t * np.log(np.exp(x) / np.sum(np.exp(x))))


def test_a_reduction_over_a_symbolic_length_is_a_sum():
    g = sg.grad(_cross_entropy, target="python")
    big = np.linspace(-1, 1, MAX_ELEMENTS + 1)
    form = g.sympy(big, big)
    assert form.has(sympy.Sum) and form.has(LENGTH) and form.has(INDEX)
    # at n = 3 the formula gives the gradient of three elements
    x3, t3 = np.array([0.3, -1.2, 2.0]), np.array([0.2, 0.5, 0.3])
    xb, tb = sympy.IndexedBase("x", real=True), sympy.IndexedBase("t", real=True)
    values = {**{xb[k]: x3[k] for k in range(3)}, **{tb[k]: t3[k] for k in range(3)}}
    expected = g(x3, t3)
    for k in range(3):
        element = form.subs(LENGTH, 3).doit().subs(INDEX, k).doit()
        assert float(element.subs(values)) == pytest.approx(expected[k], rel=1e-13)
    assert r"\sum_{" in g.latex(big, big)


@pytest.mark.parametrize("fn, what", [
    (lambda x: np.max(x) * x, "max"),
    (lambda x: np.sum(x[1:] * x[:-1]), "getitem"),
], ids=["max", "shift"])
def test_what_a_symbolic_length_cannot_express_is_named(fn, what):
    with pytest.raises(NotImplementedError, match=f"symbolic length.*: {what}"):
        sg.grad(fn, target="python").sympy(np.ones(MAX_ELEMENTS + 1))


def test_large_arrays_of_other_shapes_are_refused_clearly():
    f = sg.differentiate(lambda x: np.sum(np.sin(x)), target="python")
    with pytest.raises(ValueError, match="1-d of one length"):
        f.grad.sympy(np.ones((30, 30)))


def test_element_symbol_names():
    assert [str(s) for s in element_symbols("x", (2,))] == ["x_0", "x_1"]
    assert str(element_symbols("w", (2, 3))[1, 2]) == "w_{1,2}"


def test_quickstart_latex_is_the_readme_one():
    import pathlib
    import re
    import sys
    root = pathlib.Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "examples"))
    from quickstart_defs import f
    readme = (root / "README.md").read_text()
    shown = re.search(r"```latex\n(.*?)\n```", readme, re.S).group(1)
    assert f.grad.latex(1.0, 2.0) == shown


from hypothesis import given, settings, strategies as st  # noqa: E402

from test_random_programs import _load, program_text  # noqa: E402


# derandomize: the same ten programs every run (sympy's simplification of some generated
# formulas takes minutes; a run must not depend on which ones a random draw picks)
@settings(max_examples=10, deadline=None, derandomize=True)
@given(text=program_text(), seed=st.integers(0, 2 ** 16))
def test_random_programs_sympy_form_evaluates_to_the_gradient(tmp_path_factory, text, seed):
    fn = _load(text, tmp_path_factory.mktemp("sympy_programs"))
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.5, 1.5, 4) + np.array([0.0123, -0.0234, 0.0345, -0.0456])   # no ties
    y = float(rng.uniform(-1.5, 1.5)) + 0.00567
    g = sg.grad(fn, wrt=(0, 1), target="python")
    form_x, form_y = g.sympy(x, y)
    point = dict(zip(element_symbols("x", (4,)).ravel(), x.tolist()))
    point[sympy.Symbol("y", real=True)] = y
    gx, gy = g(x, y)
    got_x = [float(sympy.N(e.subs(point))) for e in form_x]
    np.testing.assert_allclose(got_x, gx, rtol=1e-10, atol=1e-12, err_msg=text)
    assert float(sympy.N(form_y.subs(point))) == pytest.approx(gy, rel=1e-10, abs=1e-12)
