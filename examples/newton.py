"""Newton's method with ``sg.hessian`` and ``sg.grad``: Rosenbrock in n dimensions.

Each step solves ``H(x) p = -g(x)`` with the dense Hessian from ``sg.hessian`` (one compiled
forward-over-reverse program) and the gradient from ``sg.grad``, then backtracks along p
until the value decreases enough (Armijo); where the Hessian is not positive definite (far
from the minimum) it is shifted until it is. Near the minimum the steps are full
and convergence is quadratic: the gradient norm roughly squares each iteration.

If scipy is installed it also runs ``scipy.optimize.minimize(method="Newton-CG")`` with
``jac=f.grad, hess=sg.hessian(f)`` and checks the derivatives against scipy's hand-written
``rosen_der``/``rosen_hess``; without scipy that part is skipped.

    python examples/newton.py [--n 10] [--target cpu|python]
"""
import argparse
import time

import numpy as np

import symgrad as sg

try:
    from scipy.optimize import minimize, rosen_der, rosen_hess
except ImportError:   # optional: the Newton iteration itself needs only symgrad and NumPy
    minimize = None


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def newton(f, grad, hess, x0, tol=1e-10, max_steps=200):
    """Damped Newton iteration; returns ``(x, history)``, history one ``(f, |g|)`` per step."""
    x = np.array(x0, dtype=np.float64)
    history = []
    for _ in range(max_steps):
        g = grad(x)
        value, gnorm = f(x), float(np.linalg.norm(g))
        history.append((value, gnorm))
        if gnorm < tol:
            break
        step = _descent_direction(hess(x), g)
        t = 1.0
        while f(x + t * step) > value + 1e-4 * t * float(g @ step) and t > 1e-12:
            t *= 0.5   # Armijo backtracking
        x = x + t * step
    return x, history


def _descent_direction(H, g):
    """The Newton direction ``-H^-1 g``; where H is not positive definite (far from the
    minimum), that of ``H + shift * I`` with the smallest doubling shift that makes it so (a
    descent direction between Newton's and steepest descent's)."""
    shift, eye = 0.0, np.eye(len(g))
    while True:
        try:
            L = np.linalg.cholesky(H + shift * eye)
        except np.linalg.LinAlgError:
            shift = max(2.0 * shift, 1e-3 * np.abs(H).max())
            continue
        return -np.linalg.solve(L.T, np.linalg.solve(L, g))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="dimension (default 10)")
    parser.add_argument("--target", default="cpu", choices=("cpu", "python"))
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    say = (lambda *a: None) if args.quiet else print

    f = sg.differentiate(rosenbrock, target=args.target)
    grad, hess = sg.grad(f), sg.hessian(f)
    x0 = np.linspace(-1.2, 1.0, args.n)
    say(f"Rosenbrock, n = {args.n}, x0 = linspace(-1.2, 1, n), target = {args.target}")
    say(f"the Hessian's generated source:\n{hess.source_for(x0)}")

    f(x0), grad(x0), hess(x0)   # compile before timing
    start = time.perf_counter()
    x, history = newton(f, grad, hess, x0)
    elapsed = time.perf_counter() - start
    say(f"{'step':>4}  {'f(x)':>10}  {'|grad f|':>10}")
    for k, (value, gnorm) in enumerate(history):
        say(f"{k:>4}  {value:>10.3e}  {gnorm:>10.3e}")
    say(f"sg.hessian Newton: {len(history) - 1} steps, max|x - 1| = {np.max(np.abs(x - 1)):.1e}, "
        f"{1e3 * elapsed:.1f} ms")
    out = {"x": x, "history": history}

    if minimize is None:
        say("scipy is not installed: the scipy.optimize comparison is skipped")
        return out
    out["hess_error"] = float(np.max(np.abs(hess(x0) - rosen_hess(x0))))
    out["grad_error"] = float(np.max(np.abs(grad(x0) - rosen_der(x0))))
    say(f"max |sg.hessian - scipy.rosen_hess| = {out['hess_error']:.1e}, "
        f"max |sg.grad - scipy.rosen_der| = {out['grad_error']:.1e}")
    start = time.perf_counter()
    out["scipy"] = minimize(f, x0, method="Newton-CG", jac=grad, hess=hess,
                            options={"xtol": 1e-12, "maxiter": 1000})
    elapsed = time.perf_counter() - start
    res = out["scipy"]
    say(f"scipy Newton-CG (jac=sg.grad, hess=sg.hessian): success={res.success}, {res.nit} "
        f"iterations, nhev={res.nhev}, max|x - 1| = {np.max(np.abs(res.x - 1)):.1e}, "
        f"{1e3 * elapsed:.1f} ms")
    return out


if __name__ == "__main__":
    main()
