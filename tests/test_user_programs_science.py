"""Scientific code as users write it: least squares through scipy.optimize with jac=f.grad and
hess=, an ODE integrated by a hand-written RK4 loop, a Gaussian-process log-likelihood with
np.linalg, physics energies with np.where / np.clip / np.maximum / abs kinks evaluated at
their ties, each checked on target="cpu" and "python" against NumPy and central differences,
and through the CUDA emulation (tests/user_program_check.py)."""
import math
import os
import sys

import numpy as np
import pytest

import symgrad as sg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from user_program_check import check_program  # noqa: E402

RNG = np.random.default_rng(5)
T_DATA = np.linspace(0.0, 4.0, 20)
Y_DATA = 2.5 * np.exp(-1.3 * T_DATA) + 0.4 + 0.01 * RNG.normal(size=20)


def residual_sum(p, t, y):
    a, k, c = p
    model = a * np.exp(-k * t) + c
    return 0.5 * np.sum((model - y) ** 2)


def test_least_squares_with_scipy_jac_and_hess():
    optimize = pytest.importorskip("scipy.optimize")
    check_program(residual_sum, [np.array([1.0, 1.0, 0.0]), T_DATA, Y_DATA])
    for target in ("cpu", "python"):
        f = sg.differentiate(residual_sum, target=target)
        hess = sg.hessian(residual_sum, target=target)
        res = optimize.minimize(f, np.array([1.0, 1.0, 0.0]), args=(T_DATA, Y_DATA), jac=f.grad,
                                hess=hess, method="trust-exact", options={"gtol": 1e-10})
        ref = optimize.minimize(residual_sum, np.array([1.0, 1.0, 0.0]), args=(T_DATA, Y_DATA),
                                method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-14,
                                                                "maxiter": 20000})
        assert res.success
        np.testing.assert_allclose(res.x, ref.x, rtol=1e-4)
        np.testing.assert_allclose(f.grad(res.x, T_DATA, Y_DATA), 0.0, atol=1e-7)


def rk4(f, y, t0, t1, steps, params):
    h = (t1 - t0) / steps
    t = t0
    for _ in range(steps):
        k1 = f(t, y, params)
        k2 = f(t + h / 2, y + h / 2 * k1, params)
        k3 = f(t + h / 2, y + h / 2 * k2, params)
        k4 = f(t + h, y + h * k3, params)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t = t + h
    return y


def lotka_volterra(t, y, params):
    alpha, beta, delta, gamma = params
    prey, pred = y[0], y[1]
    return np.array([alpha * prey - beta * prey * pred, delta * prey * pred - gamma * pred])


def final_state_loss(params, y0):
    y = rk4(lotka_volterra, y0, 0.0, 2.0, 40, params)
    return np.sum((y - np.array([1.0, 1.0])) ** 2)


def test_rk4_lotka_volterra():
    check_program(final_state_loss, [np.array([1.1, 0.4, 0.1, 0.4]), np.array([2.0, 1.0])], wrt=(0, 1))


def pendulum(t, y, params):
    g_over_l, damping = params[0], params[1]
    return np.stack([y[1], -g_over_l * np.sin(y[0]) - damping * y[1]])


def test_rk4_pendulum_trajectory_loss():
    def loss(params, y0, obs):
        y = y0
        err = 0.0
        for i in range(obs.shape[0]):
            y = rk4(pendulum, y, 0.0, 0.1, 2, params)
            err = err + (y[0] - obs[i]) ** 2
        return err
    obs = np.sin(np.linspace(0.1, 2.0, 12))
    check_program(loss, [np.array([9.81, 0.2]), np.array([0.5, 0.0]), obs], wrt=(0, 1))


def rbf_kernel(x1, x2, lengthscale, variance):
    sqdist = (x1[:, None] - x2[None, :]) ** 2
    return variance * np.exp(-0.5 * sqdist / lengthscale ** 2)


def gp_nll_cholesky(log_params, x, y):
    ls, var, noise = np.exp(log_params)
    n = x.shape[0]
    K = rbf_kernel(x, x, ls, var) + noise * np.eye(n)
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return 0.5 * y @ alpha + np.sum(np.log(np.diag(L))) + 0.5 * n * math.log(2 * math.pi)


def gp_nll_slogdet(log_params, x, y):
    ls, var, noise = np.exp(log_params)
    K = rbf_kernel(x, x, ls, var) + noise * np.eye(len(x))
    sign, logdet = np.linalg.slogdet(K)
    return 0.5 * y @ np.linalg.solve(K, y) + 0.5 * logdet + 0.5 * len(x) * np.log(2 * np.pi)


def test_gaussian_process_log_likelihood():
    x = np.linspace(0, 3, 7)
    y = np.sin(x) + 0.1 * RNG.normal(size=7)
    p = np.log(np.array([0.8, 1.2, 0.1]))
    check_program(gp_nll_cholesky, [p, x, y], fd_rtol=1e-5)
    check_program(gp_nll_slogdet, [p, x, y], fd_rtol=1e-5)
    np.testing.assert_allclose(gp_nll_cholesky(p, x, y), gp_nll_slogdet(p, x, y), rtol=1e-12)
    for target in ("cpu", "python"):
        np.testing.assert_allclose(sg.grad(gp_nll_cholesky, target=target)(p, x, y),
                                   sg.grad(gp_nll_slogdet, target=target)(p, x, y), rtol=1e-9)


def contact_energy(q, k, floor):
    # spring chain on a floor: penalty where a mass goes below it, friction-like |v| terms
    d = q - floor
    penalty = np.where(d < 0.0, 0.5 * k * d ** 2, 0.0)
    springs = 0.5 * np.sum(np.diff(q) ** 2)
    hinge = np.maximum(0.0, 1.0 - q)
    capped = np.clip(q, -1.0, 1.0)
    return np.sum(penalty) + springs + np.sum(hinge) + np.sum(np.abs(q - 0.5)) + np.sum(capped)


def test_physics_energy_with_kinks_away_from_ties():
    q = np.array([-0.3, 0.2, 0.7, 1.4, -1.6])
    check_program(contact_energy, [q, 50.0, 0.0], wrt=(0, 1))


def test_physics_energy_at_its_ties():
    """q exactly at every kink: where d == 0 (both sides have slope 0), maximum's tie (half
    to each side, as a central difference), clip's bounds (half), abs at 0 (0)."""
    q = np.array([0.0, 1.0, -1.0, 0.5, 0.25])
    for target in ("cpu", "python"):
        g = sg.grad(contact_energy, target=target)(q, 50.0, 0.0)
        springs = np.zeros(5)
        springs[:-1] -= np.diff(q)
        springs[1:] += np.diff(q)
        hinge = np.array([-1.0, -0.5, -1.0, -1.0, -1.0])
        absq = np.sign(q - 0.5)
        capped = np.array([1.0, 0.5, 0.5, 1.0, 1.0])
        penalty = np.where(q < 0.0, 50.0 * q, 0.0)
        np.testing.assert_allclose(g, penalty + springs + hinge + absq + capped, rtol=1e-12, atol=1e-15)


def lennard_jones(pos, eps=1.0, sigma=1.0):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            r2 = np.sum((pos[i] - pos[j]) ** 2)
            s6 = (sigma ** 2 / r2) ** 3
            e += 4 * eps * (s6 * s6 - s6)
    return e


def test_lennard_jones_pairs_loop():
    pos = np.array([[0.0, 0.0], [1.1, 0.1], [0.4, 1.2], [1.5, 1.3], [-0.9, 0.8]])
    check_program(lennard_jones, [pos], fd_rtol=1e-5)
    for target in ("cpu", "python"):
        h = sg.hessian(lennard_jones, target=target)(pos[:3])
        assert h.shape == (3, 2, 3, 2)
        np.testing.assert_allclose(h.reshape(6, 6), h.reshape(6, 6).T, rtol=1e-10, atol=1e-10)


def test_pairwise_energy_vectorised():
    def energy(pos):
        diff = pos[:, None, :] - pos[None, :, :]
        r2 = np.sum(diff ** 2, axis=-1) + np.eye(pos.shape[0])
        inv = np.triu(1.0 / np.sqrt(r2), k=1)
        return np.sum(inv)
    check_program(energy, [RNG.normal(size=(6, 3))])


def newton_sqrt(a, tol=1e-12):
    x = a
    while abs(x * x - a) > tol:
        x = 0.5 * (x + a / x)
    return x


def bisect_sqrt(a, tol=1e-10):
    lo, hi = 0.0, 2.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if mid * mid - a > 0:
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi)


def test_while_loops_with_a_tolerance_vmap_and_hessian():
    check_program(newton_sqrt, [2.0])
    a = np.array([0.5, 2.0, 9.0, 100.0])
    for target in ("cpu", "python"):
        np.testing.assert_allclose(sg.vmap(sg.differentiate(newton_sqrt, target=target))(a), np.sqrt(a),
                                   rtol=1e-14)
        np.testing.assert_allclose(sg.vmap(sg.grad(newton_sqrt, target=target))(a), 0.5 / np.sqrt(a),
                                   rtol=1e-12)
        assert sg.hessian(newton_sqrt, target=target)(4.0) == pytest.approx(-0.25 * 4.0 ** -1.5, rel=1e-10)
        # bisection: piecewise constant in a, so its gradient is 0 (as central differences)
        f = sg.differentiate(bisect_sqrt, target=target)
        assert f(2.0) == pytest.approx(bisect_sqrt(2.0), rel=1e-15)
        assert f.grad(2.0) == 0.0
