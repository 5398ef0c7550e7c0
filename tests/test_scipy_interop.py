"""scipy.optimize with symgrad derivatives: ``jac=f.grad``, ``jac=True`` with
``sg.value_and_grad``, ``hessp=f.hessp`` / ``sg.hvp(f)`` for Newton-CG and the trust-region
methods, and extra ``args``."""
import numpy as np
import pytest

import symgrad as sg

optimize = pytest.importorskip("scipy.optimize")


@sg.differentiate
def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def scaled_quadratic(x, a):
    """A convex quadratic with data ``a`` passed through scipy's ``args``."""
    return 0.5 * np.sum(a * x * x) - np.sum(x) + 0.25 * np.sum(x ** 4)


N = 12
X0 = np.linspace(-1.2, 1.0, N)


def test_derivatives_match_scipy_rosenbrock():
    p = np.cos(np.arange(N))
    assert rosenbrock(X0) == pytest.approx(optimize.rosen(X0), rel=1e-14)
    np.testing.assert_allclose(rosenbrock.grad(X0), optimize.rosen_der(X0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rosenbrock.hessp(X0, p), optimize.rosen_hess_prod(X0, p),
                               rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(sg.hvp(rosenbrock)(X0, p), optimize.rosen_hess_prod(X0, p),
                               rtol=1e-12, atol=1e-10)
    value, grad = sg.value_and_grad(rosenbrock)(X0)
    assert isinstance(value, float) and value == rosenbrock(X0)
    np.testing.assert_array_equal(grad, rosenbrock.grad(X0))


@pytest.mark.parametrize("method", ["CG", "BFGS", "L-BFGS-B"])
def test_jac_is_f_grad(method):
    res = optimize.minimize(rosenbrock, X0, jac=rosenbrock.grad, method=method,
                            options={"maxiter": 5000, "gtol": 1e-8} if method != "L-BFGS-B" else
                            {"maxiter": 5000, "gtol": 1e-10, "ftol": 1e-14})
    assert res.success, res.message
    np.testing.assert_allclose(res.x, np.ones(N), atol=1e-4)


@pytest.mark.parametrize("method", ["CG", "BFGS", "L-BFGS-B"])
def test_jac_true_with_value_and_grad(method):
    vg = sg.value_and_grad(rosenbrock)
    exact = optimize.minimize(rosenbrock, X0, jac=rosenbrock.grad, method=method)
    fused = optimize.minimize(vg, X0, jac=True, method=method)
    assert fused.success, fused.message
    # the same numbers as the separate value/gradient functions, in the same number of calls
    assert fused.nfev == exact.nfev and fused.njev == exact.njev
    np.testing.assert_allclose(fused.x, exact.x, rtol=1e-10, atol=1e-12)


def test_exact_gradients_need_far_fewer_evaluations_than_finite_differences():
    exact = optimize.minimize(rosenbrock, X0, jac=rosenbrock.grad, method="BFGS")
    fd = optimize.minimize(rosenbrock, X0, method="BFGS")
    assert exact.nfev * N / 2 < fd.nfev


@pytest.mark.parametrize("method", ["Newton-CG", "trust-ncg", "trust-krylov"])
@pytest.mark.parametrize("which", ["f.hessp", "sg.hvp"])
def test_hessp_methods(method, which):
    hessp = rosenbrock.hessp if which == "f.hessp" else sg.hvp(rosenbrock)
    res = optimize.minimize(rosenbrock, X0, jac=rosenbrock.grad, hessp=hessp, method=method,
                            options={"maxiter": 2000})
    assert res.success, res.message
    np.testing.assert_allclose(res.x, np.ones(N), atol=1e-4)
    assert res.nhev > 0


@pytest.mark.parametrize("method", ["BFGS", "Newton-CG", "trust-ncg"])
def test_extra_args_reach_every_callable(method):
    a = np.linspace(1.0, 3.0, 6)
    f = sg.differentiate(scaled_quadratic)
    kwargs = {"hessp": f.hessp} if method != "BFGS" else {}
    res = optimize.minimize(sg.value_and_grad(f), np.zeros(6), args=(a,), jac=True,
                            method=method, **kwargs)
    assert res.success, res.message
    # stationarity: a x - 1 + x^3 = 0
    np.testing.assert_allclose(a * res.x - 1 + res.x ** 3, 0.0, atol=1e-6)


def test_hessp_is_compiled_once():
    f = sg.differentiate(scaled_quadratic)
    a = np.ones(4)
    f.hessp(np.zeros(4), np.ones(4), a)
    h = f._hessp
    f.hessp(np.ones(4), np.ones(4), a)
    assert f._hessp is h and len(h._cache) == 1
