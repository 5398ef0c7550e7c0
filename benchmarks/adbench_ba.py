"""ADBench bundle adjustment (issue 11): per-observation Jacobian blocks by
``sg.vmap(sg.jacobian(residual))`` beside JAX's ``vmap(jacrev)`` and ``vmap(jacfwd)``.

The residual is ADBench's ``compute_reproj_err`` with radial distortion: one observation sees
a camera (11 parameters: Rodrigues rotation 3, centre 3, focal length 1, principal point 2,
radial distortion 2), a point (3) and a weight (1), 15 parameters ``p`` in all, and gives the
2 numbers ``w * (project(cam, X) - feat)``; its Jacobian block is 2 x 15. ADBench's rotation
has a branch for a zero angle (``X + rot x X``); the data here has no zero rotation, so both
tools run the general formula (no branch, the same arithmetic for both).

* ``objective``  ``sg.vmap(residual)`` / ``jax.jit(jax.vmap(residual))``: the (n, 2) residuals;
* ``jacobian``   ``sg.vmap(sg.jacobian(residual))`` (mode "auto": 15 inputs > 2 outputs, so
                 reverse mode) and ``mode="fwd"``; ``jax.jit(jax.vmap(jax.jacrev(residual)))``
                 and ``jacfwd``: the (n, 2, 15) blocks.

ADBench's figure of merit is Jacobian time / objective time of the same tool (target <= 2.5).
A second table: the dense Hessian of Rosenbrock, n = 100, ``sg.hessian`` against
``jax.jit(jax.hessian)``. JAX is optional (``pip install .[bench]``). Every figure is the
median of ``--repeat`` timed calls after a warm-up call (compilation excluded); the results
are checked against each other first.

    python benchmarks/adbench_ba.py [--n 10000] [--repeat 15]
"""
import argparse
import os
import platform

import numpy as np

import symgrad as sg
from timing import median_time


def cross(a, b, xp=np):
    return xp.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                     a[0] * b[1] - a[1] * b[0]])


def make_residual(xp):
    """ADBench's ``compute_reproj_err`` on ``p = (cam[11], X[3], w)``, written once for NumPy
    (what symgrad reads) and jax.numpy."""

    def residual(p, feat):
        rot, center, focal = p[0:3], p[3:6], p[6]
        x0, kappa, X, w = p[7:9], p[9:11], p[11:14], p[14]
        Xc = X - center
        theta = xp.sqrt(xp.sum(rot * rot))
        axis = rot / theta
        cos, sin = xp.cos(theta), xp.sin(theta)
        Xcam = Xc * cos + cross(axis, Xc, xp) * sin + axis * (xp.sum(axis * Xc) * (1.0 - cos))
        proj = Xcam[0:2] / Xcam[2]
        rsq = xp.sum(proj * proj)
        distorted = proj * (1.0 + kappa[0] * rsq + kappa[1] * rsq * rsq)
        return w * (distorted * focal + x0 - feat)
    return residual


residual = make_residual(np)


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def ba_data(n, rng):
    """n observations: cameras in front of their points, as in ADBench's generated sets."""
    rot = rng.uniform(-0.3, 0.3, size=(n, 3))
    center = rng.uniform(-1, 1, size=(n, 3))
    focal = rng.uniform(300, 400, size=(n, 1))
    x0 = rng.uniform(-2, 2, size=(n, 2))
    kappa = rng.uniform(-1e-3, 1e-3, size=(n, 2))
    X = center + rng.uniform(-1, 1, size=(n, 3)) + np.array([0.0, 0.0, 8.0])
    w = rng.uniform(0.5, 1.5, size=(n, 1))
    P = np.concatenate([rot, center, focal, x0, kappa, X, w], axis=1)
    feat = rng.uniform(-50, 50, size=(n, 2))
    return P, feat


def jax_runs():
    """JAX's objective, vmap(jacrev), vmap(jacfwd) and Hessian, jitted; None without JAX."""
    try:
        import jax
    except Exception:  # noqa: BLE001 - any failure means "peer not available"
        return None, None
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    res = make_residual(jnp)

    def ready(f):
        return lambda *a: f(*a).block_until_ready()

    def rosen(x):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    return {"objective": ready(jax.jit(jax.vmap(res))),
            "jacrev": ready(jax.jit(jax.vmap(jax.jacrev(res)))),
            "jacfwd": ready(jax.jit(jax.vmap(jax.jacfwd(res)))),
            "hessian": ready(jax.jit(jax.hessian(rosen)))}, jax.__version__


def finite_difference_blocks(P, feat, k=3, eps=1e-6):
    """The first k observations' blocks by central differences (a check independent of AD)."""
    blocks = np.empty((k, 2, 15))
    for i in range(k):
        for j in range(15):
            step = np.zeros(15)
            step[j] = eps * max(1.0, abs(P[i, j]))
            blocks[i, :, j] = (residual(P[i] + step, feat[i]) - residual(P[i] - step, feat[i])) \
                / (2 * step[j])
    return blocks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="observations (default 10^4)")
    parser.add_argument("--hessian-n", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    P, feat = ba_data(args.n, rng)

    objective = sg.vmap(residual)
    jac = {"rev": sg.vmap(sg.jacobian(residual)), "fwd": sg.vmap(sg.jacobian(residual, mode="fwd"))}
    blocks = jac["rev"](P, feat)
    assert blocks.shape == (args.n, 2, 15)
    np.testing.assert_allclose(blocks[:3], finite_difference_blocks(P, feat), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jac["fwd"](P, feat), blocks, rtol=1e-10, atol=1e-9)
    runs = {"symgrad objective": lambda: objective(P, feat),
            "symgrad vmap(jacobian) (auto = rev)": lambda: jac["rev"](P, feat),
            "symgrad vmap(jacobian, mode=fwd)": lambda: jac["fwd"](P, feat)}
    peer, jax_version = jax_runs()
    if peer is not None:
        np.testing.assert_allclose(np.asarray(peer["objective"](P, feat)), objective(P, feat),
                                   rtol=1e-12, atol=1e-9)
        for name in ("jacrev", "jacfwd"):
            np.testing.assert_allclose(np.asarray(peer[name](P, feat)), blocks, rtol=1e-10, atol=1e-9)
        runs["jax jit(vmap(residual))"] = lambda: peer["objective"](P, feat)
        runs["jax jit(vmap(jacrev))"] = lambda: peer["jacrev"](P, feat)
        runs["jax jit(vmap(jacfwd))"] = lambda: peer["jacfwd"](P, feat)
    times = {name: median_time(fn, args.repeat) for name, fn in runs.items()}

    print(f"ADBench BA, n={args.n} observations, 2x15 Jacobian blocks, float64, medians of "
          f"{args.repeat}; {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}" + (f", JAX {jax_version}" if jax_version else
                                              ", JAX not installed"))
    for name, t in times.items():
        tool = "symgrad objective" if name.startswith("symgrad") else "jax jit(vmap(residual))"
        print(f"  {name:38s} {t * 1e3:8.2f} ms   {t / times[tool]:5.2f}x its objective")

    x = np.linspace(-1.2, 1.0, args.hessian_n)
    hessian = sg.hessian(rosenbrock)
    H = hessian(x)
    hess_runs = {"symgrad hessian": lambda: hessian(x)}
    if peer is not None:
        np.testing.assert_allclose(np.asarray(peer["hessian"](x)), H, rtol=1e-12, atol=1e-9)
        hess_runs["jax jit(hessian)"] = lambda: peer["hessian"](x)
    hess_times = {name: median_time(fn, args.repeat * 20) for name, fn in hess_runs.items()}
    print(f"dense Hessian of Rosenbrock, n={args.hessian_n}, medians of {args.repeat * 20}")
    for name, t in hess_times.items():
        print(f"  {name:38s} {t * 1e6:8.1f} us   {t / hess_times['symgrad hessian']:5.2f}x symgrad")
    return times, hess_times


if __name__ == "__main__":
    main()
