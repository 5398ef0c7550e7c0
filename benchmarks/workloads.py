"""The benchmark workloads W1-W5 (issue 3), written once as plain NumPy source that symgrad
differentiates, plus the hand-derived gradients the peers run.

The same source also runs under JAX: :func:`with_module` rebinds the function's ``np`` to
``jax.numpy``, so "jax.jit of the same source" is literally the same code.
"""
from __future__ import annotations

import math
import types

import numpy as np

# ----------------------------------------------------------------------------------------------
# W1: an elementwise function of two arrays; its full gradient.


def w1(x, y):
    return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(x * y)


def w1_grad_numpy(x, y):
    """Hand-derived gradient, NumPy (shared subexpressions computed once)."""
    e = np.exp(-x * x)
    t = np.tanh(x * y)
    d = 1.0 - t * t
    yy = y * y
    gx = np.sin(y) - 2.0 * x * e * np.log1p(yy) + y * d
    gy = x * np.cos(y) + e * 2.0 * y / (1.0 + yy) + x * d
    return gx, gy


# ----------------------------------------------------------------------------------------------
# W2: stable softmax cross-entropy over 10^6 logits.


def w2(x, t):
    z = x - np.max(x)
    return -np.sum(t * (z - np.log(np.sum(np.exp(z)))))


def w2_symgrad(x, t):
    import symgrad as sg
    z = x - sg.stop_gradient(np.max(x))
    return -np.sum(t * (z - np.log(np.sum(np.exp(z)))))


def w2_grad_numpy(x, t):
    e = np.exp(x - np.max(x))
    return e * (np.sum(t) / np.sum(e)) - t


# ----------------------------------------------------------------------------------------------
# W3: Rosenbrock, n = 1000.


def w3(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def w3_grad_numpy(x):
    g = np.zeros_like(x)
    d = x[1:] - x[:-1] ** 2
    g[:-1] = -400.0 * x[:-1] * d - 2.0 * (1.0 - x[:-1])
    g[1:] += 200.0 * d
    return g


# ----------------------------------------------------------------------------------------------
# W5: the ADBench GMM objective (Srajer, Kukelova & Fitzgibbon 2018), from the paper's
# equations: sum_i logsumexp_k(alpha_k + sum(q_k) - 1/2 |Q_k (x_i - mu_k)|^2)
# - n logsumexp(alpha) + Wishart prior, with Q_k = diag(exp(q_k)) + strictly lower L_k.

GMM_SIZES = [(2, 5, 1000), (10, 25, 1000), (20, 50, 1000), (64, 200, 1000)]
WISHART_GAMMA = 1.0
WISHART_M = 0


def _logsumexp(a, axis):
    m = np.max(a, axis=axis, keepdims=True)
    return np.log(np.sum(np.exp(a - m), axis=axis)) + np.sum(m, axis=axis)


def _lower_triangles(icf, d):
    """(K, d, d) strictly-lower-triangular factors from icf[:, d:], column by column."""
    k = icf.shape[0]
    cols = []
    start = d
    for i in range(d):
        count = d - i - 1
        cols.append(np.concatenate([np.zeros((k, i + 1)), icf[:, start:start + count]], axis=1))
        start += count
    return np.stack(cols, axis=2)


def gmm_objective(alphas, means, icf, x):
    n, d = x.shape
    k = alphas.shape[0]
    log_diag = icf[:, :d]
    q_diag = np.exp(log_diag)                               # (K, d)
    sum_qs = np.sum(log_diag, axis=1)                        # (K,)
    ls = _lower_triangles(icf, d)                            # (K, d, d)
    xc = x[:, None, :] - means[None, :, :]                   # (n, K, d)
    lx = q_diag[None, :, :] * xc + np.sum(ls[None, :, :, :] * xc[:, :, None, :], axis=3)
    inner = alphas[None, :] + sum_qs[None, :] - 0.5 * np.sum(lx * lx, axis=2)
    total = np.sum(_logsumexp(inner, 1)) - n * _logsumexp(alphas, 0)
    # Wishart prior
    m = d + WISHART_M + 1
    prior = np.sum(0.5 * WISHART_GAMMA ** 2 * (np.sum(q_diag * q_diag, axis=1)
                                                + np.sum(icf[:, d:] * icf[:, d:], axis=1))
                   - WISHART_M * sum_qs)
    lgamma = 0.25 * d * (d - 1) * math.log(math.pi) + sum(
        math.lgamma(0.5 * m + 0.5 * (1 - j)) for j in range(1, d + 1))
    c = m * d * (math.log(WISHART_GAMMA) - 0.5 * math.log(2)) - lgamma
    return total - n * d * 0.5 * math.log(2 * math.pi) + prior - k * c


def gmm_inputs(d, k, n, seed=0):
    rng = np.random.default_rng(seed)
    alphas = rng.normal(size=k)
    means = rng.uniform(size=(k, d))
    icf = rng.normal(size=(k, d + d * (d - 1) // 2)) * 0.1
    x = rng.uniform(size=(n, d))
    return alphas, means, icf, x


# ----------------------------------------------------------------------------------------------


def with_module(fn, module, **extra):
    """``fn`` with its global ``np`` rebound (to run the same source under jax.numpy)."""
    g = dict(fn.__globals__)
    g["np"] = module
    g.update(extra)
    return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
