"""Derivatives at special points and Python-number arithmetic follow the conventions of
DESIGN.md §3 on every target: np.logaddexp at a tie (every order), d/dy 0 ** y = 0,
np.std / np.var / np.linalg.norm where the spread is 0, and, on target="python", NumPy's
arithmetic where the generated code meets two Python floats ((-a) ** b is nan, 1 / 0 is inf)."""
import numpy as np
import pytest
import sympy

import symgrad as sg

TARGETS = ["cpu", "python"]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def logaddexp(a, b):
    return np.logaddexp(a, b)


def _nested_grad(fn, wrts, target):
    f = sg.differentiate(fn, target=target)
    for w in wrts:
        f = sg.grad(f, wrt=w)
    return f


_A, _B = sympy.symbols("a b")
_LOGADDEXP = sympy.log(sympy.exp(_A) + sympy.exp(_B))


def _truth(wrts, a, b):
    expr = _LOGADDEXP
    for w in wrts:
        expr = sympy.diff(expr, (_A, _B)[w])
    return float(expr.evalf(30, subs={_A: sympy.Float(a, 30), _B: sympy.Float(b, 30)}))


ORDERS = [(0,), (1,), (0, 0), (0, 1), (1, 1), (0, 0, 0), (0, 0, 1), (1, 1, 1)]
POINTS = [(0.0, 0.0), (1.5, 1.5), (-3.0, -3.0), (2.0, -3.0), (-3.0, 2.0), (40.0, -2.0), (-1.0, 30.0)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("wrts", ORDERS, ids=str)
def test_logaddexp_derivatives_match_sympy(target, wrts):
    f = _nested_grad(logaddexp, wrts, target)
    for a, b in POINTS:
        np.testing.assert_allclose(f(a, b), _truth(wrts, a, b), rtol=1e-12, atol=1e-15,
                                   err_msg=f"d{wrts} at {(a, b)}")


@pytest.mark.parametrize("target", TARGETS)
def test_logaddexp_tie_second_derivative_is_one_quarter_on_arrays(target):
    f = _nested_grad(lambda_free_sum, (0, 0), target)
    np.testing.assert_allclose(f(np.zeros(3), np.zeros(3)), 0.25, rtol=1e-15)


def lambda_free_sum(a, b):
    return np.sum(np.logaddexp(a, b))


@pytest.mark.parametrize("target", TARGETS)
def test_logaddexp_values_follow_numpy(target):
    a = np.array([0.0, 1.0, -700.0, 30.0, 800.0, np.inf, -np.inf, np.inf, np.nan, 1.0])
    b = np.array([0.0, 1.0, -701.0, -30.0, -800.0, np.inf, -np.inf, 3.0, 1.0, np.nan])
    got = sg.differentiate(logaddexp, target=target)(a, b)
    np.testing.assert_array_equal(got, np.logaddexp(a, b))
    assert sg.differentiate(logaddexp, target=target)(1000.0, -1000.0) == 1000.0


def power(x, y):
    return np.power(x, y)


@pytest.mark.parametrize("target", TARGETS)
def test_d_dy_zero_to_the_y_is_zero(target):
    g = sg.differentiate(power, wrt=(0, 1), target=target).grad
    assert g(0.0, 2.0) == (0.0, 0.0)
    assert g(0.0, 0.0) == (0.0, 0.0)            # 0 ** y at y = 0: d/dx is 0 too (b == 0)
    assert g(0.0, 1.0) == (1.0, 0.0)
    dx, dy = g(np.array([0.0, 2.0, 0.0]), np.array([0.5, 3.0, 3.0]))
    np.testing.assert_allclose(dx, [np.inf, 12.0, 0.0])
    np.testing.assert_allclose(dy, [0.0, 8.0 * np.log(2.0), 0.0], rtol=1e-15)
    second = _nested_grad(power, (1, 1), target)
    assert second(0.0, 2.0) == 0.0
    np.testing.assert_allclose(second(2.0, 3.0), 8.0 * np.log(2.0) ** 2, rtol=1e-14)


def std(x):
    return np.std(x)


def var(x):
    return np.var(x)


def norm(x):
    return np.linalg.norm(x)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [std, var, norm])
def test_zero_spread_has_gradient_zero(target, fn):
    f = sg.differentiate(fn, target=target)
    for x in (np.array([3.0]), np.array([2.0, 2.0, 2.0])):
        if fn is norm:
            x = x * 0.0
        np.testing.assert_array_equal(f.grad(x), np.zeros_like(x))
        assert f(x) == fn(x)
    x = np.array([1.0, 3.0, -2.0])
    np.testing.assert_allclose(f(x), fn(x), rtol=1e-15)
    assert sg.check_grad(f, x) < 1e-6


def neg_power(a, b):
    return (-a) ** b


def reciprocal(x):
    return 1.0 / x


def square(x):
    return x ** 2.0


@pytest.mark.parametrize("fn, args, want", [
    (neg_power, (2.0, 0.5), np.nan), (reciprocal, (0.0,), np.inf), (reciprocal, (-0.0,), -np.inf),
    (square, (1e200,), np.inf)])
def test_python_numbers_follow_numpy(fn, args, want):
    with np.errstate(all="ignore"):
        assert np.isnan(fn(*map(np.float64, args))) if np.isnan(want) else \
            fn(*map(np.float64, args)) == want
    for target in TARGETS:
        got = sg.differentiate(fn, target=target)(*args)
        assert type(got) is float
        np.testing.assert_array_equal(got, want)
