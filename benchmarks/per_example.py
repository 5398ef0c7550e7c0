"""Per-example gradients of logistic regression (issue 11): n examples, d features, float64.

* ``symgrad vmap(grad)``  ``sg.vmap(sg.grad(loss), in_axes=(None, 0, 0))(w, X, y)``: the
                          (n, d) matrix of every example's gradient, one compiled function;
* ``symgrad grad``        the single batched gradient of the summed loss (d values): the
                          target is per-example within 2x of it;
* ``numpy hand``          the per-example gradients written by hand in NumPy
                          (``X * coef[:, None]``), and the batched one (``X.T @ coef``);
* ``jax jit(vmap(grad))`` ``jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))`` on the
                          same inputs, when JAX is importable (``pip install .[bench]``).

Every figure is the median of ``--repeat`` timed calls after a warm-up call (compilation
excluded); the results are checked against each other first.

    python benchmarks/per_example.py [--n 100000] [--d 100] [--repeat 9]
"""
import argparse
import os
import platform

import numpy as np

import symgrad as sg
from timing import median_time


def example_loss(w, x, y):
    return np.logaddexp(0.0, -y * (x @ w))


def total_loss(w, X, Y):
    return np.sum(np.logaddexp(0.0, -Y * (X @ w)))


def numpy_coef(w, X, Y):
    """d/dz log(1 + exp(-y z)) at z = x.w: -y sigmoid(-y z), per example."""
    return -Y / (1.0 + np.exp(Y * (X @ w)))


def numpy_per_example(w, X, Y):
    return X * numpy_coef(w, X, Y)[:, None]


def numpy_batched(w, X, Y):
    return X.T @ numpy_coef(w, X, Y)


def jax_per_example():
    try:
        import jax
    except Exception:  # noqa: BLE001 - any failure means "peer not available"
        return None, None
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def loss(w, x, y):
        return jnp.logaddexp(0.0, -y * (x @ w))
    f = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))
    return (lambda w, X, Y: f(w, X, Y).block_until_ready()), jax.__version__


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, args.d))
    Y = np.sign(rng.normal(size=args.n))
    w = rng.normal(size=args.d) / np.sqrt(args.d)

    per_example = sg.vmap(sg.grad(example_loss), in_axes=(None, 0, 0))
    batched = sg.grad(total_loss)
    G = per_example(w, X, Y)
    np.testing.assert_allclose(G, numpy_per_example(w, X, Y), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(G.sum(axis=0), batched(w, X, Y), rtol=1e-9)
    runs = {"symgrad vmap(grad)": lambda: per_example(w, X, Y),
            "symgrad grad (batched)": lambda: batched(w, X, Y),
            "numpy hand": lambda: numpy_per_example(w, X, Y),
            "numpy hand (batched)": lambda: numpy_batched(w, X, Y)}
    jax_fn, jax_version = jax_per_example()
    if jax_fn is not None:
        np.testing.assert_allclose(np.asarray(jax_fn(w, X, Y)), G, rtol=1e-10, atol=1e-14)
        runs["jax jit(vmap(grad))"] = lambda: jax_fn(w, X, Y)
    times = {name: median_time(fn, args.repeat) for name, fn in runs.items()}

    print(f"per-example gradients of logistic regression, n={args.n}, d={args.d}, float64, "
          f"medians of {args.repeat}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
          + (f", JAX {jax_version}" if jax_version else ", JAX not installed"))
    base = times["symgrad vmap(grad)"]
    for name, t in times.items():
        print(f"  {name:24s} {t * 1e3:8.2f} ms   {t / base:5.2f}x symgrad vmap(grad)")
    ratio = base / times["symgrad grad (batched)"]
    print(f"  per-example / batched gradient: {ratio:.2f}x (target <= 2)")
    return times


if __name__ == "__main__":
    main()
