"""Programs written as their authors write them (textbooks, reference implementations,
tutorials), each through the whole API contract (``check_api`` in tests/user_program_check.py:
values, gradients against central differences, value_and_grad, jvp, jacobian in both modes,
hessian and hvp, vmap, the exported .py and .c, the CUDA plan's emulation, sympy where the
arguments are scalars). Found by the ``hunt2`` pass: ``sg.hvp`` of an array beside a pytree
argument (fixed, tests/test_pytrees.py) and the CUDA kernels' index of ``R[i, j - 1]`` beside
``D[i, j - 1]`` of another shape (soft-DTW, DTW-like tables; fixed, tests/test_ptx_emulate.py).
ADBench's LSTM as written was refused (``x2``, a view of one row of ``s2``, alive while other
rows are written, though rebound on the next line; fixed, tests/test_aliasing.py)."""
import math

import numpy as np
import pytest
import scipy.optimize
from scipy.special import betaln, gammaln, logsumexp

import symgrad as sg
from adbench_models import lstm_model   # lstm_predict's cell, as ADBench's
from user_program_check import check_api


# 1. Kalman filter log-likelihood (Durbin & Koopman / Murphy ch. 18 style)
def kalman_loglik(log_qr, ys, F, H):
    q, r = np.exp(log_qr[0]), np.exp(log_qr[1])
    n = F.shape[0]
    Q = q * np.eye(n)
    R = r * np.eye(H.shape[0])
    x = np.zeros(n)
    P = np.eye(n)
    ll = 0.0
    for y in ys:
        # predict
        x = F @ x
        P = F @ P @ F.T + Q
        # update
        v = y - H @ x
        S = H @ P @ H.T + R
        Sinv = np.linalg.inv(S)
        K = P @ H.T @ Sinv
        x = x + K @ v
        P = (np.eye(n) - K @ H) @ P
        sign, logdet = np.linalg.slogdet(S)
        ll -= 0.5 * (logdet + v @ Sinv @ v + len(y) * np.log(2 * np.pi))
    return ll


def kalman_loglik_solve(log_qr, ys, F, H):
    q, r = np.exp(log_qr)
    n, m = F.shape[0], H.shape[0]
    x, P = np.zeros(n), np.eye(n)
    ll = 0.0
    for t in range(len(ys)):
        x = F.dot(x)
        P = F.dot(P).dot(F.T) + q * np.eye(n)
        S = H.dot(P).dot(H.T) + r * np.eye(m)
        v = ys[t] - H.dot(x)
        K = np.linalg.solve(S, H.dot(P)).T
        x += K.dot(v)
        P -= K.dot(H).dot(P)
        ll += -0.5 * (np.linalg.slogdet(S)[1] + v.dot(np.linalg.solve(S, v)) + m * np.log(2 * np.pi))
    return ll


# 2. VAE ELBO, reparameterisation trick (Kingma & Welling, appendix B)
def vae_elbo(W1, b1, Wmu, bmu, Wlv, blv, W2, b2, X, eps):
    h = np.tanh(X @ W1 + b1)
    mu = h @ Wmu + bmu
    logvar = h @ Wlv + blv
    z = mu + np.exp(0.5 * logvar) * eps
    logits = np.tanh(z @ W2 + b2)
    # Bernoulli decoder
    log_px = np.sum(X * logits - np.logaddexp(0, logits), axis=1)
    kl = -0.5 * np.sum(1 + logvar - mu ** 2 - np.exp(logvar), axis=1)
    return np.mean(log_px - kl)


# 3. beta-binomial and negative-binomial MLE
def betabinom_nll(log_ab, k, n):
    a, b = np.exp(log_ab)
    logpmf = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + betaln(k + a, n - k + b) - betaln(a, b)
    return -np.sum(logpmf)


def negbinom_nll(params, y):
    r = np.exp(params[0])
    p = 1.0 / (1.0 + np.exp(-params[1]))
    ll = gammaln(y + r) - gammaln(r) - gammaln(y + 1) + r * np.log(p) + y * np.log1p(-p)
    return -ll.sum()


# 4. logistic regression (for scipy.optimize)
def logistic_loss(w, X, y, lam):
    z = X @ w
    return np.sum(np.log1p(np.exp(-y * z))) / len(y) + 0.5 * lam * np.dot(w, w)


# 5. ADBench LSTM as written in ADBench's autograd module (its cell: adbench_models)
def lstm_predict(w, w2, s, x):
    s2 = s.copy()
    x2 = x * w2[0]
    for i in range(0, len(s), 2):
        (s2[i], s2[i + 1]) = lstm_model(w[i], w[i + 1], s[i], s[i + 1], x2)
        x2 = s2[i]
    return (x2 * w2[1] + w2[2], s2)


def lstm_objective(main_params, extra_params, state, sequence, _range=None):
    if _range is None:
        _range = range(0, len(sequence) - 1)
    total = 0.0
    count = 0
    _input = sequence[_range[0]]
    all_states = [state]
    for t in _range:
        ypred, new_state = lstm_predict(main_params, extra_params, all_states[t], _input)
        all_states.append(new_state)
        ynorm = ypred - np.log(sum(np.exp(ypred), 2))
        ygold = sequence[t + 1]
        total += sum(ygold * ynorm)
        count += ygold.shape[0]
        _input = ygold
    return -total / count


# 6. physics-informed loss: -u'' = f on a grid, Dirichlet ends
def pinn_loss_gradient(u, x, f):
    dx = x[1] - x[0]
    ux = np.gradient(u, dx)
    uxx = np.gradient(ux, dx)
    residual = -uxx - f
    return np.mean(residual ** 2) + u[0] ** 2 + u[-1] ** 2


def pinn_loss_slices(u, dx, f):
    uxx = (u[2:] - 2 * u[1:-1] + u[:-2]) / dx ** 2
    return np.mean((-uxx - f[1:-1]) ** 2) + u[0] ** 2 + u[-1] ** 2


# 7. GP marginal likelihood, GPML algorithm 2.1
def gp_nlml(hyp, X, y):
    ell, sf2, sn2 = np.exp(hyp[0]), np.exp(2 * hyp[1]), np.exp(2 * hyp[2])
    n = X.shape[0]
    sqdist = np.sum(X ** 2, 1).reshape(-1, 1) + np.sum(X ** 2, 1) - 2 * np.dot(X, X.T)
    K = sf2 * np.exp(-0.5 / ell ** 2 * sqdist)
    L = np.linalg.cholesky(K + sn2 * np.eye(n))
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return 0.5 * y.dot(alpha) + np.log(np.diag(L)).sum() + 0.5 * n * np.log(2 * np.pi)


# 8. 2-D XY model energy (periodic lattice) with np.roll
def xy_energy(theta, J, h):
    right = np.roll(theta, -1, axis=1)
    down = np.roll(theta, -1, axis=0)
    return -J * np.sum(np.cos(theta - right) + np.cos(theta - down)) - h * np.sum(np.cos(theta))


def ising_energy(s, J):
    return -J * np.sum(s * (np.roll(s, 1, axis=0) + np.roll(s, 1, axis=1)))


# 9. ridge regression by the normal equations: validation error as a function of lambda
def ridge_validation(lam, X, y, Xv, yv):
    d = X.shape[1]
    w = np.linalg.solve(X.T @ X + lam * np.eye(d), X.T @ y)
    r = Xv @ w - yv
    return r @ r / len(yv)


# 10. soft-DTW (tslearn's njit reference) and DTW with a hard min
def soft_dtw(D, gamma):
    m, n = D.shape
    R = np.zeros((m + 2, n + 2)) + np.inf
    R[0, 0] = 0.
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            r0 = -R[i - 1, j - 1] / gamma
            r1 = -R[i - 1, j] / gamma
            r2 = -R[i, j - 1] / gamma
            rmax = max(max(r0, r1), r2)
            rsum = np.exp(r0 - rmax) + np.exp(r1 - rmax) + np.exp(r2 - rmax)
            softmin = - gamma * (np.log(rsum) + rmax)
            R[i, j] = D[i - 1, j - 1] + softmin
    return R[m, n]


def dtw(x, y):
    n, m = len(x), len(y)
    D = np.full((n + 1, m + 1), np.inf)
    D[0, 0] = 0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost = (x[i - 1] - y[j - 1]) ** 2
            D[i, j] = cost + min(D[i - 1, j], D[i, j - 1], D[i - 1, j - 1])
    return D[n, m]


# 11. MLP (the loss Adam trains)
def mlp_loss(W1, b1, W2, b2, X, y):
    h = np.maximum(0, X @ W1 + b1)
    out = h @ W2 + b2
    return np.mean((out[:, 0] - y) ** 2)


# 12. Black-Scholes call (math.erf, scalar) and Cox partial likelihood
def black_scholes_call(S, K, T, r, sigma):
    d1 = (math.log(S / K) + (r + 0.5 * sigma ** 2) * T) / (sigma * math.sqrt(T))
    d2 = d1 - sigma * math.sqrt(T)
    N = lambda v: 0.5 * (1 + math.erf(v / math.sqrt(2)))
    return S * N(d1) - K * math.exp(-r * T) * N(d2)


def cox_nll(beta, X, event):
    # rows sorted by time ascending: risk set of i is rows i..n-1
    eta = X @ beta
    risk = np.log(np.cumsum(np.exp(eta)[::-1])[::-1])
    return -np.sum(event * (eta - risk))

# 13. HMC's leapfrog with sg.grad of the potential inside, a GMM with scipy's logsumexp,
# Newton's square root (a while loop on data), RK4 of Lotka-Volterra fitted to observations
def U(q):
    return 0.5 * np.sum(q ** 2) + 0.1 * np.sum(q ** 4)


dU = sg.grad(U)


def leapfrog_energy(q, p, eps):
    p = p - 0.5 * eps * dU(q)
    for _ in range(5):
        q = q + eps * p
        p = p - eps * dU(q)
    q = q + eps * p
    p = p - 0.5 * eps * dU(q)
    return U(q) + 0.5 * np.sum(p ** 2)


def gmm_nll(means, log_sigmas, logits, X):
    diff = X[:, None, :] - means[None]
    ll = (-0.5 * np.sum((diff / np.exp(log_sigmas)[None]) ** 2, axis=2) - np.sum(log_sigmas, axis=1)
          - 0.5 * X.shape[1] * np.log(2 * np.pi))
    log_w = logits - logsumexp(logits)
    return -np.sum(logsumexp(ll + log_w, axis=1))


def newton_sqrt(a):
    x = a
    while abs(x * x - a) > 1e-12 * a:
        x = 0.5 * (x + a / x)
    return x


def lotka_volterra_loss(theta, y0, obs, dt):
    alpha, beta, delta, gamma = theta
    def f(y):
        return np.array([alpha * y[0] - beta * y[0] * y[1], delta * y[0] * y[1] - gamma * y[1]])
    y = y0
    loss = 0.0
    for t in range(obs.shape[0]):
        k1 = f(y)
        k2 = f(y + 0.5 * dt * k1)
        k3 = f(y + 0.5 * dt * k2)
        k4 = f(y + dt * k3)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        loss = loss + np.sum((y - obs[t]) ** 2)
    return loss

RNG = np.random.default_rng(0)
F, H = np.array([[1.0, 0.1], [0.0, 0.9]]), np.array([[1.0, 0.0]])
YS = RNG.standard_normal((5, 1))
K_OBS, N_OBS = np.array([3., 5., 2., 7., 4.]), np.array([10., 10., 8., 12., 9.])
VAE = [RNG.standard_normal(s) * 0.5 for s in [(4, 3), (3,), (3, 2), (2,), (3, 2), (2,), (2, 4), (4,)]]
VAE_X, VAE_EPS = (RNG.random((3, 4)) > 0.5).astype(float), RNG.standard_normal((3, 2))
XL, YL = RNG.standard_normal((8, 3)), np.sign(RNG.standard_normal(8))
XG = np.linspace(0, 1, 9)
UG, FG = np.sin(np.pi * XG) + 0.1 * RNG.standard_normal(9), np.pi ** 2 * np.sin(np.pi * XG)
X_GP, Y_GP = RNG.standard_normal((5, 2)), RNG.standard_normal(5)
THETA = RNG.standard_normal((3, 4))
XR, YR, XV, YV = RNG.standard_normal((8, 3)), RNG.standard_normal(8), RNG.standard_normal((5, 3)), RNG.standard_normal(5)
D_COST = RNG.random((3, 4))
X_SERIES, Y_SERIES = RNG.standard_normal(4), RNG.standard_normal(5)
MLP = (RNG.standard_normal((3, 4)), RNG.standard_normal(4) * 0.1, RNG.standard_normal((4, 1)), np.zeros(1))
XM, YM = RNG.standard_normal((6, 3)), RNG.standard_normal(6)
XC, EVENT = RNG.standard_normal((6, 2)), np.array([1., 0., 1., 1., 0., 1.])
FD = dict(fd_rtol=1e-5, fd_atol=1e-6)

CASES = {
    "kalman_inv": (kalman_loglik, (np.array([-1.0, -0.5]), YS, F, H), dict(vmap_axes=(0, None, None, None))),
    "kalman_solve": (kalman_loglik_solve, (np.array([-1.0, -0.5]), YS, F, H), dict(hessian=False)),
    "vae_weights": (vae_elbo, (*VAE, VAE_X, VAE_EPS), dict(wrt=(0, 1, 2, 3, 4, 5, 6, 7, 9), hessian=False)),
    "vae_noise": (vae_elbo, (*VAE, VAE_X, VAE_EPS), dict(wrt=9)),
    "betabinom": (betabinom_nll, (np.array([0.3, 0.8]), K_OBS, N_OBS), dict(vmap_axes=(0, None, None))),
    "negbinom": (negbinom_nll, (np.array([0.5, 0.2]), K_OBS), dict(vmap_axes=(0, None))),
    "logistic": (logistic_loss, (RNG.standard_normal(3), XL, YL, 0.1), dict(wrt=(0, 1), vmap_axes=(0, None, None, None))),
    "pinn_np_gradient": (pinn_loss_gradient, (UG, XG, FG), dict(fd_rtol=1e-5, fd_atol=1e-5, vmap_axes=(0, None, None))),
    "pinn_slices": (pinn_loss_slices, (UG, 0.125, FG), dict(wrt=(0, 1), fd_rtol=1e-5, fd_atol=1e-5)),
    "gp_gpml_2_1": (gp_nlml, (np.array([0.1, 0.2, -1.0]), X_GP, Y_GP), dict(vmap_axes=(0, None, None), **FD)),
    "xy_model": (xy_energy, (THETA, 1.0, 0.3), dict(wrt=(0, 1, 2), vmap_axes=(0, None, None))),
    "ising": (ising_energy, (np.sign(THETA), 0.7), dict(wrt=(0, 1))),
    "ridge_normal_equations": (ridge_validation, (0.5, XR, YR, XV, YV), dict(wrt=(0, 1))),
    # wrt=0: d/dgamma is nan (0 * inf from the inf border, as in JAX), the finite difference is not
    "soft_dtw": (soft_dtw, (D_COST, 0.5), FD),
    "dtw": (dtw, (X_SERIES, Y_SERIES), dict(wrt=(0, 1), vmap_axes=(0, None))),
    "mlp": (mlp_loss, (*MLP, XM, YM), dict(wrt=(0, 1, 2, 3))),
    "black_scholes": (black_scholes_call, (100.0, 95.0, 0.5, 0.02, 0.25), dict(wrt=(0, 2, 3, 4), sympy=True)),
    "cox": (cox_nll, (np.array([0.3, -0.4]), XC, EVENT), dict(wrt=(0, 1), vmap_axes=(0, None, None))),
    "hmc_leapfrog": (leapfrog_energy, (RNG.standard_normal(3), RNG.standard_normal(3), 0.1),
                     dict(wrt=(0, 1, 2), vmap_axes=(0, 0, None))),
    "gmm": (gmm_nll, (RNG.standard_normal((2, 2)), 0.1 * RNG.standard_normal((2, 2)), np.array([0.2, -0.1]),
                      RNG.standard_normal((5, 2))), dict(wrt=(0, 1, 2), vmap_axes=(0, None, None, None))),
    # export_c=False: a while loop on data exports only to .py (README, sg.export)
    "newton_sqrt": (newton_sqrt, (2.0,), dict(export_c=False)),
    "lotka_volterra_rk4": (lotka_volterra_loss, (np.array([1.0, 0.4, 0.3, 0.8]), np.array([1.0, 0.5]),
                                                 RNG.random((4, 2)), 0.1), dict(wrt=(0, 1, 3), **FD)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_program_through_the_whole_api(name, tmp_path):
    fn, args, kw = CASES[name]
    check_api(fn, args, tmp_path=tmp_path, **kw)


def test_logistic_regression_with_scipy_minimize():
    """L-BFGS-B with jac=f.grad and Newton-CG with hessp=f.hessp reach one optimum."""
    f = sg.differentiate(logistic_loss)
    w0, args = np.zeros(3), (XL, YL, 0.1)
    a = scipy.optimize.minimize(f, w0, args=args, jac=f.grad, method="L-BFGS-B", tol=1e-12)
    b = scipy.optimize.minimize(f, w0, args=args, jac=f.grad, hessp=f.hessp, method="Newton-CG", tol=1e-12)
    assert a.success and b.success
    np.testing.assert_allclose(a.x, b.x, rtol=1e-6, atol=1e-8)
    assert np.max(np.abs(f.grad(b.x, *args))) < 1e-8


def test_adbench_lstm_objective_as_written():
    """ADBench's autograd LSTM objective unchanged: builtin sum(..., 2), s.copy(), rows of s2
    written by tuple assignment while x2 views another row."""
    rng = np.random.default_rng(2)
    args = (rng.standard_normal((4, 12)) * 0.5, rng.standard_normal((3, 3)) * 0.5,
            rng.standard_normal((4, 3)) * 0.5, rng.standard_normal((4, 3)))
    check_api(lstm_objective, args, wrt=(0, 1), hessian=False, **FD)


def test_mlp_trained_with_adam_and_a_global_clipnorm():
    """Keras' loop: Adam(global_clipnorm=...).minimize five times, against the update written
    out in NumPy (Keras' Adam, epsilon hat; tf.clip_by_global_norm) on the checked gradient."""
    params = [p.copy() for p in MLP]
    opt = sg.optim.Adam(learning_rate=0.05, global_clipnorm=0.5)
    grad = sg.grad(mlp_loss, wrt=(0, 1, 2, 3), target="python")
    ref = [p.copy() for p in MLP]
    m, v = [np.zeros_like(p) for p in ref], [np.zeros_like(p) for p in ref]
    for t in range(1, 6):
        loss = opt.minimize(mlp_loss, params, XM, YM)
        assert loss == pytest.approx(mlp_loss(*ref, XM, YM), rel=1e-12)
        g = grad(*ref, XM, YM)
        norm = np.sqrt(sum(np.sum(gi * gi) for gi in g))
        g = [gi * 0.5 / max(norm, 0.5) for gi in g]
        alpha = 0.05 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        for k in range(4):
            m[k] += (g[k] - m[k]) * (1 - 0.9)
            v[k] += (g[k] * g[k] - v[k]) * (1 - 0.999)
            ref[k] = ref[k] - m[k] * alpha / (np.sqrt(v[k]) + 1e-7)
    for p, r in zip(params, ref):
        np.testing.assert_allclose(p, r, rtol=1e-10, atol=1e-12)
    assert mlp_loss(*params, XM, YM) < mlp_loss(*MLP, XM, YM)
