"""The ADBench GMM objective (examples/gmm_objective.py) through the whole pipeline."""
import pathlib
import sys

import numpy as np

import symgrad as sg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
import gmm_objective as gmm  # noqa: E402


def _reference_objective(alphas, means, icf, x, gamma, m, tril, log_gamma_term):
    """A direct loop over points and components, as the paper writes the equation."""
    n, d = x.shape
    k = len(alphas)
    total = 0.0
    for i in range(n):
        terms = []
        for j in range(k):
            q = np.diag(np.exp(icf[j, :d]))
            q += np.concatenate([[0.0], icf[j, d:]])[tril].reshape(d, d)
            r = q @ (x[i] - means[j])
            terms.append(alphas[j] + np.sum(icf[j, :d]) - 0.5 * r @ r)
        total += np.log(np.sum(np.exp(terms)))
    lse_alpha = np.log(np.sum(np.exp(alphas)))
    frob = np.sum(np.exp(icf[:, :d]) ** 2) + np.sum(icf[:, d:] ** 2)
    prior = 0.5 * gamma * gamma * frob - m * np.sum(icf[:, :d])
    c = (d + m + 1) * d * (np.log(gamma) - 0.5 * np.log(2)) - log_gamma_term
    return -n * d * 0.5 * np.log(2 * np.pi) + total - n * lse_alpha + prior - k * c


def test_objective_matches_the_equation():
    args = gmm.make_problem(d=3, k=4, n=6, seed=1)
    f = sg.differentiate(gmm.gmm_objective, target="python")
    np.testing.assert_allclose(f(*args), _reference_objective(*args), rtol=1e-12)


def test_gradient_matches_finite_differences():
    args = gmm.make_problem(d=3, k=4, n=6, seed=2)
    f = sg.differentiate(gmm.gmm_objective, wrt=(0, 1, 2), target="python")
    assert sg.check_grad(f, *args, wrt=(0, 1, 2)) < 1e-6


def test_gradient_has_no_batch_of_outer_products():
    """The triangle's gradient is one (d, n) @ (n, d) product per component, not n outer
    products summed afterwards (that would need n * K * d * d memory at ADBench sizes)."""
    args = gmm.make_problem(d=4, k=3, n=50, seed=3)
    graph = sg.grad(gmm.gmm_objective, wrt=(0, 1, 2))._graph(list(args))
    biggest = max(node.size for node in graph.nodes())
    assert biggest <= 3 * 50 * 4


def _central_differences(fn, args, i, h=1e-6):
    out = np.zeros_like(args[i])
    for j in np.ndindex(out.shape):
        up, down = list(args), list(args)
        up[i], down[i] = args[i].copy(), args[i].copy()
        up[i][j] += h
        down[i][j] -= h
        out[j] = (fn(*up) - fn(*down)) / (2 * h)
    return out


def test_compiled_gradient_matches_the_equation():
    """The compiled gradient (its means' cotangent a reassociated sum: symgrad.sum_pull) against
    central differences of the loop over points and components, and the reference back end."""
    args = gmm.make_problem(d=3, k=4, n=6, seed=4)
    cpu = sg.grad(gmm.gmm_objective, wrt=(0, 1, 2))(*args)
    ref = sg.grad(gmm.gmm_objective, wrt=(0, 1, 2), target="python")(*args)
    for i in range(3):
        np.testing.assert_allclose(cpu[i], _central_differences(_reference_objective, args, i),
                                   rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(cpu[i], ref[i], rtol=1e-12, atol=1e-12)
