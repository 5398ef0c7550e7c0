"""EM for a 1-D Gaussian mixture, with the M-step read off a gradient that symgrad computes.

EM maximises Q(theta) = sum_i sum_k r_ik log p(x_i, z_i = k | theta), where the E-step
responsibilities r_ik = p(z_i = k | x_i, theta_old) are held fixed. Written as one function,
the responsibilities are computed from the parameters *behind* ``sg.stop_gradient``, so the
derivative treats them as the constants they are::

    r = sg.stop_gradient(np.exp(lj - logsumexp(lj, axis=1)))      # E-step
    return np.sum(r * lj)                                          # Q

For a Gaussian mixture the gradient of Q at theta_old gives the exact M-step (below: N_k from
the logits' gradient, then the means, then the variances), which the script checks against the
textbook closed form. It also checks Fisher's identity (grad Q = grad log-likelihood at
theta_old) and shows that without ``stop_gradient`` the gradient is a different, wrong one.

    python examples/em_gmm.py [--iterations 60]
"""
import argparse

import numpy as np

import symgrad as sg

TRUE_WEIGHTS = np.array([0.3, 0.5, 0.2])
TRUE_MEANS = np.array([-2.0, 0.5, 3.0])
TRUE_SDS = np.array([0.5, 0.8, 0.4])


def make_data(n=600, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.choice(3, size=n, p=TRUE_WEIGHTS)
    return rng.normal(TRUE_MEANS[z], TRUE_SDS[z])


def logsumexp(z, axis=None):
    m = sg.stop_gradient(np.max(z, axis=axis, keepdims=True))
    return m + np.log(np.sum(np.exp(z - m), axis=axis, keepdims=True))


def log_joint(logits, mu, var, x):
    """log p(x_i, z_i = k) as an (n, K) array: log pi_k + log N(x_i | mu_k, var_k)."""
    log_pi = logits - logsumexp(logits)
    xc = np.reshape(x, (x.shape[0], 1))
    return log_pi - 0.5 * (np.log(2.0 * np.pi * var) + (xc - mu) ** 2 / var)


def expected_complete_loglik(logits, mu, var, x):
    """EM's Q: responsibilities from the same parameters, behind stop_gradient."""
    lj = log_joint(logits, mu, var, x)
    r = sg.stop_gradient(np.exp(lj - logsumexp(lj, axis=1)))
    return np.sum(r * lj)


def q_without_stop_gradient(logits, mu, var, x):
    lj = log_joint(logits, mu, var, x)
    r = np.exp(lj - logsumexp(lj, axis=1))
    return np.sum(r * lj)


def log_likelihood(logits, mu, var, x):
    return np.sum(logsumexp(log_joint(logits, mu, var, x), axis=1))


grad_q = sg.grad(expected_complete_loglik, wrt=(0, 1, 2))
grad_q_no_stop = sg.grad(q_without_stop_gradient, wrt=(0, 1, 2))
grad_ll = sg.grad(log_likelihood, wrt=(0, 1, 2))
loglik = sg.differentiate(log_likelihood)


def m_step_from_gradient(logits, mu, var, x):
    """The exact M-step, from dQ/d(logits, mu, var) at the current parameters:
    dQ/da_k = N_k - n pi_k,  dQ/dmu_k = sum_i r_ik (x_i - mu_k) / var_k,
    dQ/dvar_k = (S_k - N_k var_k) / (2 var_k^2)  with S_k = sum_i r_ik (x_i - mu_k)^2."""
    g_logits, g_mu, g_var = grad_q(logits, mu, var, x)
    n = len(x)
    pi = np.exp(logits - np.max(logits))
    pi /= pi.sum()
    counts = g_logits + n * pi                       # N_k
    new_mu = mu + var * g_mu / counts
    scatter = 2.0 * var ** 2 * g_var + counts * var  # S_k around the old means
    new_var = scatter / counts - (new_mu - mu) ** 2  # ... moved to the new means
    return np.log(counts / n), new_mu, new_var


def m_step_closed_form(logits, mu, var, x):
    """The textbook M-step, with the responsibilities computed in plain NumPy."""
    pi = np.exp(logits - np.max(logits))
    pi /= pi.sum()
    dens = pi * np.exp(-0.5 * (x[:, None] - mu) ** 2 / var) / np.sqrt(2 * np.pi * var)
    r = dens / dens.sum(axis=1, keepdims=True)
    counts = r.sum(axis=0)
    new_mu = (r * x[:, None]).sum(axis=0) / counts
    new_var = (r * (x[:, None] - new_mu) ** 2).sum(axis=0) / counts
    return np.log(counts / len(x)), new_mu, new_var


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    say = (lambda *a: None) if args.quiet else print

    x = make_data()
    logits = np.zeros(3)
    mu = np.quantile(x, [0.2, 0.5, 0.8])
    var = np.full(3, np.var(x))

    # Fisher's identity: with the responsibilities behind stop_gradient, grad Q = grad log L
    gq, gl, gn = grad_q(logits, mu, var, x), grad_ll(logits, mu, var, x), grad_q_no_stop(logits, mu, var, x)
    fisher = max(float(np.max(np.abs(a - b))) for a, b in zip(gq, gl))
    no_stop = max(float(np.max(np.abs(a - b))) for a, b in zip(gn, gl))
    say(f"max |grad Q - grad log L| with stop_gradient:    {fisher:.1e}")
    say(f"max |grad Q - grad log L| without stop_gradient: {no_stop:.1e}  (differentiates the E-step too)")

    history, m_step_error = [loglik(logits, mu, var, x)], 0.0
    for it in range(args.iterations):
        new = m_step_from_gradient(logits, mu, var, x)
        ref = m_step_closed_form(logits, mu, var, x)
        m_step_error = max(m_step_error, max(float(np.max(np.abs(a - b))) for a, b in zip(new, ref)))
        logits, mu, var = new
        history.append(loglik(logits, mu, var, x))
        if it % 10 == 0 or it == args.iterations - 1:
            say(f"iteration {it:3d}  log-likelihood {history[-1]:.6f}")
    say(f"\nlargest difference from the closed-form M-step: {m_step_error:.1e}")
    order = np.argsort(mu)
    weights = np.exp(logits - np.max(logits))
    weights /= weights.sum()
    say(f"weights {np.round(weights[order], 3)}  (true {TRUE_WEIGHTS})")
    say(f"means   {np.round(mu[order], 3)}  (true {TRUE_MEANS})")
    say(f"sds     {np.round(np.sqrt(var[order]), 3)}  (true {TRUE_SDS})")
    return {"loglik": history, "fisher": fisher, "no_stop": no_stop, "m_step_error": m_step_error,
            "weights": weights[order], "means": mu[order], "sds": np.sqrt(var[order])}


if __name__ == "__main__":
    main()
