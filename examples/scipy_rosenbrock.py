"""scipy.optimize with symgrad derivatives: Rosenbrock in 100 dimensions.

Every gradient-based method gets its gradient three ways and the Newton methods their
Hessian-vector products two ways:

* ``jac=f.grad``                                   the compiled gradient;
* ``jac=True`` with ``sg.value_and_grad(f)``       value and gradient from one compiled call;
* finite differences                                scipy's 2-point gradient (``jac=None``);
* ``hessp=f.hessp`` / ``sg.hvp(f)``               exact Hessian-vector products, against
  ``hess="2-point"``                                 finite differences of the exact gradient
                                                     (Newton-CG and the trust-region methods
                                                     need a callable gradient; differencing a
                                                     differenced gradient does not converge).

For each run it prints scipy's counters (nfev, njev, nhev), the number of times the objective
itself was really evaluated (finite differences evaluate it n+1 times per gradient), the final
value and the wall time.

    python examples/scipy_rosenbrock.py [--n 100]
"""
import argparse
import os
import time

# L-BFGS-B calls BLAS on tiny vectors; OpenBLAS threads then cost more than the whole solve
# (0.3-1.5 s instead of 30 ms on a busy 2-core machine). Must be set before NumPy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from scipy.optimize import minimize, rosen, rosen_der, rosen_hess_prod  # noqa: E402

import symgrad as sg  # noqa: E402


@sg.differentiate
def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


class Counted:
    """Counts calls of a callable (how often scipy really evaluates the objective)."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


def run(method, x0, mode):
    """One minimisation; ``mode`` says where the derivatives come from."""
    f = Counted(rosenbrock)
    kwargs = {}
    if mode == "f.grad":
        fun, kwargs["jac"] = f, rosenbrock.grad
    elif mode == "value_and_grad":
        vg = sg.value_and_grad(rosenbrock)
        fun, kwargs["jac"] = Counted(vg), True
        f = fun
    elif method in NEEDS_HESS:   # exact gradient, Hessian-vector products by differences
        fun, kwargs["jac"] = f, rosenbrock.grad
    else:                        # finite differences (n + 1 objective calls per gradient)
        fun, kwargs["jac"] = f, None
    if method in NEEDS_HESS:
        if mode == "finite differences":
            kwargs["hess"] = "2-point"
        else:
            kwargs["hessp"] = rosenbrock.hessp if mode == "f.grad" else sg.hvp(rosenbrock)
    start = time.perf_counter()
    result = minimize(fun, x0, method=method, options={"maxiter": 20000}, **kwargs)
    elapsed = time.perf_counter() - start
    return result, f.calls, elapsed


NEEDS_JAC = NEEDS_HESS = ("Newton-CG", "trust-ncg", "trust-krylov")
METHODS = ("CG", "BFGS", "L-BFGS-B", "Newton-CG", "trust-ncg", "trust-krylov")
MODES = ("f.grad", "value_and_grad", "finite differences")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="dimension (default 100)")
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args(argv)
    x0 = np.linspace(-1.2, 1.0, args.n)

    # symgrad's derivatives against scipy's hand-written ones
    p = np.cos(np.arange(args.n))
    print(f"Rosenbrock, n = {args.n}, x0 = linspace(-1.2, 1, n)")
    print(f"  |value - scipy.rosen|              = {abs(rosenbrock(x0) - rosen(x0)):.1e}")
    print(f"  max |grad - scipy.rosen_der|       = {np.max(np.abs(rosenbrock.grad(x0) - rosen_der(x0))):.1e}")
    print(f"  max |hessp - scipy.rosen_hess_prod| = "
          f"{np.max(np.abs(rosenbrock.hessp(x0, p) - rosen_hess_prod(x0, p))):.1e}\n")
    sg.value_and_grad(rosenbrock)(x0), sg.hvp(rosenbrock)(x0, p)   # compile before timing

    header = f"{'method':<13}{'derivatives':<20}{'ok':<4}{'f(x*)':>10}{'nit':>7}{'nfev':>7}" \
             f"{'njev':>7}{'nhev':>7}{'f calls':>9}{'time':>10}"
    print(header)
    print("-" * len(header))
    rows = []
    for method in args.methods.split(","):
        for mode in MODES:
            result, calls, elapsed = run(method, x0, mode)
            rows.append((method, mode, result, calls, elapsed))
            label = "FD hessp" if mode == "finite differences" and method in NEEDS_HESS else mode
            print(f"{method:<13}{label:<20}{'yes' if result.success else 'no':<4}"
                  f"{result.fun:>10.1e}{result.get('nit', 0):>7}{result.nfev:>7}"
                  f"{result.get('njev', 0):>7}{result.get('nhev', 0):>7}{calls:>9}"
                  f"{1e3 * elapsed:>8.0f} ms")
    return rows


if __name__ == "__main__":
    main()
