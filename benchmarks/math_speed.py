"""Speed of the CPU back end's own float64 maths against glibc libmvec, side by side in one
process: W1's gradient (10^7 points) and per-function throughput, each compiled twice, once
with codegen.mathlib's own functions and once with libmvec for the functions libmvec has
(exp and expm1 stay ours in both: the baseline is the code before sin/cos/log1p/tanh were ours).

Usage: python benchmarks/math_speed.py [n_points]   (medians of 7 runs; reports the load)
"""
from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

import symgrad as sg
from codegen import mathlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads as W  # noqa: E402

BASELINE_OWN = ("exp", "expm1")


@contextlib.contextmanager
def libmvec_for_the_rest():
    """Compile with libmvec for every function except the baseline's own ones."""
    saved = dict(mathlib.OWN_F64)
    for op in list(mathlib.OWN_F64):
        if op not in BASELINE_OWN:
            del mathlib.OWN_F64[op]
    try:
        yield
    finally:
        mathlib.OWN_F64.update(saved)


def median_time(fn, runs=7):
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def f_sin(x):
    return np.sin(x)


def f_cos(x):
    return np.cos(x)


def f_log1p(x):
    return np.log1p(x)


def f_tanh(x):
    return np.tanh(x)


def f_log(x):
    return np.log(x)


FUNCTIONS = {"sin": (f_sin, -10, 10), "cos": (f_cos, -10, 10), "log1p": (f_log1p, 0, 10),
             "tanh": (f_tanh, -3, 3), "log": (f_log, 0.01, 100)}


def compiled(fn, args, baseline):
    ctx = libmvec_for_the_rest() if baseline else contextlib.nullcontext()
    with ctx:
        f = sg.differentiate(fn) if len(args) == 1 else sg.grad(fn, wrt=(0, 1))
        out = f(*args)      # compiles now, under the chosen math
    return f, out


def main(n=10 ** 7):
    rng = np.random.default_rng(0)
    print(f"load average at start: {os.getloadavg()}; threads: {os.cpu_count()}")
    x = rng.uniform(-2, 2, n)
    y = rng.uniform(-2, 2, n)
    outs = (np.empty_like(x), np.empty_like(y))
    rows = []
    gb, _ = compiled(W.w1, (x, y), baseline=True)
    go, _ = compiled(W.w1, (x, y), baseline=False)
    for _ in range(2):      # alternate, so drifting load hits both alike
        tb = median_time(lambda: gb(x, y, out=outs))
        to = median_time(lambda: go(x, y, out=outs))
    rows.append(("W1 gradient (out=)", tb, to))
    for name, (fn, lo, hi) in FUNCTIONS.items():
        v = rng.uniform(lo, hi, n)
        fb, _ = compiled(fn, (v,), baseline=True)
        fo, _ = compiled(fn, (v,), baseline=False)
        res = np.empty_like(v)
        tb = median_time(lambda: fb(v, out=res))
        to = median_time(lambda: fo(v, out=res))
        rows.append((f"{name}, [{lo:g}, {hi:g}]", tb, to))
    print(f"n = {n:.0e}, medians of 7; load average at end: {os.getloadavg()}")
    print("| kernel | libmvec (before) | own (after) | speed-up | own, ns/element |")
    print("|---|---|---|---|---|")
    for name, tb, to in rows:
        print(f"| {name} | {tb * 1e3:.2f} ms | {to * 1e3:.2f} ms | {tb / to:.2f}x | {to / n * 1e9:.2f} |")


if __name__ == "__main__":
    main(int(float(sys.argv[1])) if len(sys.argv) > 1 else 10 ** 7)
