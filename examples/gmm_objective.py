"""The ADBench GMM objective (Srajer, Kukelova & Fitzgibbon 2018, "A benchmark of selected
algorithmic differentiation tools on some problems in computer vision and machine learning",
the `gmm` equation), written as plain NumPy from the paper:

    sum_i logsumexp_k( alpha_k + sum(q_k) - 1/2 |Q_k (x_i - mu_k)|^2 )
      - n logsumexp(alpha) + log Wishart prior(Q_k) + constant

Q_k = diag(exp(q_k)) + L_k, with L_k strictly lower triangular, filled column by column from
icf[k, d:]. The triangle is built with a gather from a constant index table, the products
Q_k (x_i - mu_k) with one batched matmul over the components (layout (K, n, d), so the
gradient of each L_k is one (d, n) @ (n, d) product).
"""
import math

import numpy as np
from scipy.special import multigammaln

import symgrad as sg


def tril_index(d):
    """For each entry (r, c) of a d x d matrix, 1 + its position in icf[k, d:] (column-major
    strictly-lower order), or 0 for entries on or above the diagonal."""
    index = np.zeros((d, d), dtype=np.int64)
    k = 1
    for c in range(d):
        for r in range(c + 1, d):
            index[r, c] = k
            k += 1
    return index.reshape(-1)


def logsumexp_columns(a):
    m = sg.stop_gradient(np.max(a, axis=0, keepdims=True))
    return np.log(np.sum(np.exp(a - m), axis=0)) + m[0]


def logsumexp(a):
    m = sg.stop_gradient(np.max(a))
    return np.log(np.sum(np.exp(a - m))) + m


def gmm_objective(alphas, means, icf, x, wishart_gamma, wishart_m, tril, log_gamma_term):
    n, d = x.shape
    k = alphas.shape[0]
    q = icf[:, :d]
    qdiag = np.exp(q)
    sum_qs = np.sum(q, axis=1)
    padded = np.concatenate([np.zeros((k, 1)), icf[:, d:]], axis=1)
    lower = padded[:, tril].reshape(k, d, d)                       # (k, d, d)
    centered = x[None, :, :] - means[:, None, :]                   # (k, n, d)
    qx = qdiag[:, None, :] * centered + centered @ np.transpose(lower, (0, 2, 1))
    inner = (alphas + sum_qs)[:, None] - 0.5 * np.sum(qx * qx, axis=2)   # (k, n)
    slse = np.sum(logsumexp_columns(inner))
    constant = -n * d * 0.5 * math.log(2 * math.pi)
    m = wishart_m
    frobenius = np.sum(qdiag * qdiag, axis=1) + np.sum(icf[:, d:] ** 2, axis=1)
    prior = np.sum(0.5 * wishart_gamma * wishart_gamma * frobenius - m * sum_qs)
    n_w = d + m + 1
    c = n_w * d * (math.log(wishart_gamma) - 0.5 * math.log(2)) - log_gamma_term
    return constant + slse - n * logsumexp(alphas) + prior - k * c


def make_problem(d, k, n, seed=0):
    """Random parameters and data as ADBench generates them, plus the static tables."""
    rng = np.random.default_rng(seed)
    alphas = rng.standard_normal(k)
    means = rng.uniform(0, 1, (k, d))
    icf = rng.uniform(0, 1, (k, d + d * (d - 1) // 2)) * 0.1
    x = rng.standard_normal((n, d))
    gamma, m = 1.0, 0
    log_gamma_term = float(multigammaln(0.5 * (d + m + 1), d))
    return (alphas, means, icf, x, gamma, m, tril_index(d), log_gamma_term)


objective = sg.differentiate(gmm_objective, wrt=(0, 1, 2))

if __name__ == "__main__":
    args = make_problem(d=10, k=25, n=1000)
    value, (g_alphas, g_means, g_icf) = objective.value_and_grad(*args)
    print(f"GMM objective (d=10, K=25, n=1000): {value:.6f}")
    print(f"gradient norms: alphas {np.linalg.norm(g_alphas):.4f}, means {np.linalg.norm(g_means):.4f}, "
          f"icf {np.linalg.norm(g_icf):.4f}")
