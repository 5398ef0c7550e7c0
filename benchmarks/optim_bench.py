"""One optimizer step, symgrad against plain NumPy (float64, medians).

For Adam and SGD with momentum on one variable of n elements:

* ``numpy``          the textbook NumPy update: every operator makes a temporary array;
* ``numpy in-place`` the same with ufunc ``out=`` into preallocated scratch (what a careful
                     NumPy programmer writes);
* ``symgrad kernel`` the compiled, fused update kernel alone, as the optimizer calls it:
                     reading ``w, m, v, g`` and writing ``out=`` into spare buffers;
* ``kernel, out=in`` the same kernel writing ``out=(w, m, v)`` over its own inputs, which the
                     CPU back end refuses to alias (fresh outputs, then a copy each);
* ``symgrad step``   ``optimizer.apply_gradients``: the kernel plus the Python bookkeeping
                     (hyperparameter scalars, bias correction, slot swap, scratch -> variable).

    python benchmarks/optim_bench.py [--sizes 1000,100000,1000000] [--repeat 30]
"""
import argparse
import math
import os
import platform

import numpy as np

import symgrad as sg
from symgrad import optim
from timing import median_time

B1, B2, EPS, LR, MOM = 0.9, 0.999, 1e-7, 1e-3, 0.9
# the kernels' clipping and weight-decay arguments when both are off
NO_CLIP = (optim.NO_CLIP, *(np.asarray(x) for x in (1.0, 1.0, -np.inf, np.inf)), None, None)


def adam_numpy(w, m, v, g, t):
    m[...] = B1 * m + (1 - B1) * g
    v[...] = B2 * v + (1 - B2) * g * g
    alpha = LR * math.sqrt(1 - B2 ** t) / (1 - B1 ** t)
    w -= alpha * m / (np.sqrt(v) + EPS)


def adam_numpy_inplace(w, m, v, g, t, s1, s2):
    m -= g
    m *= B1
    m += g                                   # m = b1 m + (1 - b1) g
    np.multiply(g, g, out=s1)
    v -= s1
    v *= B2
    v += s1                                  # v = b2 v + (1 - b2) g^2
    alpha = LR * math.sqrt(1 - B2 ** t) / (1 - B1 ** t)
    np.sqrt(v, out=s1)
    s1 += EPS
    np.multiply(m, alpha, out=s2)
    s2 /= s1
    w -= s2


def momentum_numpy(w, vel, g):
    vel[...] = MOM * vel - LR * g
    w += vel


def momentum_numpy_inplace(w, vel, g, s1):
    vel *= MOM
    np.multiply(g, LR, out=s1)
    vel -= s1
    w += vel


def bench(n, repeat):
    rng = np.random.default_rng(0)
    g = rng.normal(size=n)
    rows = []

    w, m, v = rng.normal(size=n), np.zeros(n), np.zeros(n)
    s1, s2 = np.empty(n), np.empty(n)
    rows.append(("adam", "numpy", median_time(lambda: adam_numpy(w, m, v, g, 3), repeat)))
    rows.append(("adam", "numpy in-place",
                 median_time(lambda: adam_numpy_inplace(w, m, v, g, 3, s1, s2), repeat)))
    kernel = optim._kernel(optim._adam_kernel, "cpu")
    a = NO_CLIP + tuple(np.asarray(x) for x in (1e-3, 1 - B1, 1 - B2, EPS))
    w2, m2, v2 = w.copy(), m.copy(), v.copy()
    rows.append(("adam", "symgrad kernel", median_time(
        lambda: kernel(w, m, v, g, *a, out=(w2, m2, v2)), repeat)))
    rows.append(("adam", "kernel, out=in", median_time(
        lambda: kernel(w, m, v, g, *a, out=(w, m, v)), repeat)))
    opt = sg.optim.Adam(LR)
    rows.append(("adam", "symgrad step", median_time(lambda: opt.apply_gradients([(g, w)]), repeat)))

    vel = np.zeros(n)
    rows.append(("sgd momentum", "numpy", median_time(lambda: momentum_numpy(w, vel, g), repeat)))
    rows.append(("sgd momentum", "numpy in-place",
                 median_time(lambda: momentum_numpy_inplace(w, vel, g, s1), repeat)))
    kernel = optim._kernel(optim._sgd_momentum_kernel, "cpu")
    a = NO_CLIP + (np.asarray(LR), np.asarray(MOM), False)
    vel2 = vel.copy()
    rows.append(("sgd momentum", "symgrad kernel", median_time(
        lambda: kernel(w, vel, g, *a, out=(w2, vel2)), repeat)))
    rows.append(("sgd momentum", "kernel, out=in", median_time(
        lambda: kernel(w, vel, g, *a, out=(w, vel)), repeat)))
    opt = sg.optim.SGD(LR, momentum=MOM)
    rows.append(("sgd momentum", "symgrad step",
                 median_time(lambda: opt.apply_gradients([(g, w)]), repeat)))
    return rows


def check_agreement(n=1000):
    """The fused kernel computes the same step as the NumPy code (to rounding)."""
    rng = np.random.default_rng(1)
    g = rng.normal(size=n)
    w1 = rng.normal(size=n)
    w2, m, v = w1.copy(), np.zeros(n), np.zeros(n)
    opt = sg.optim.Adam(LR)
    for t in range(1, 4):
        opt.apply_gradients([(g, w1)])
        adam_numpy(w2, m, v, g, t)
    return float(np.max(np.abs(w1 - w2)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()},"
          f" NumPy {np.__version__}; float64; median of {args.repeat}")
    print(f"max |symgrad Adam - NumPy Adam| after 3 steps: {check_agreement():.1e}\n")
    print(f"{'update':<14}{'implementation':<16}" + "".join(f"{'n=' + s:>14}" for s in args.sizes.split(",")))
    results = {}
    for n in (int(s) for s in args.sizes.split(",")):
        for opt, impl, t in bench(n, args.repeat):
            results.setdefault((opt, impl), []).append(t)
    for (opt, impl), ts in results.items():
        print(f"{opt:<14}{impl:<16}" + "".join(f"{_fmt(t):>14}" for t in ts))


def _fmt(seconds):
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


if __name__ == "__main__":
    main()
