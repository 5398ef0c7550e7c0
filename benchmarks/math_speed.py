"""Speed of the CPU back end's own float64 maths against glibc libmvec, side by side in one
process: W1's gradient (10^7 points) and per-function throughput, each compiled twice, once
with codegen.mathlib's own functions and once with libmvec for the functions libmvec has
(exp and expm1 stay ours in both: the baseline is the code before sin/cos/log1p/tanh were ours).

``--float32``: the same for float32, libmvec's float functions (before) against ours (after:
codegen/f32math.py ``OWN_F32``, and the float64 functions on widened lanes for the rest,
``mathlib.F32_VIA_F64``), with W1 in float64 beside them (float32 must stay faster).

Usage: python benchmarks/math_speed.py [--float32] [n_points]   (medians of 7 runs; reports
the load)
"""
from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

import symgrad as sg
from symgrad.codegen import mathlib

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


@contextlib.contextmanager
def libmvec_float32():
    """Compile float32 maths as before OWN_F32 and F32_VIA_F64: libmvec's (libm's) float
    functions."""
    saved, own = set(mathlib.F32_VIA_F64), dict(mathlib.OWN_F32)
    mathlib.F32_VIA_F64.clear()
    mathlib.OWN_F32.clear()
    try:
        yield
    finally:
        mathlib.F32_VIA_F64.update(saved)
        mathlib.OWN_F32.update(own)


def side_by_side(before, after, runs=7):
    """Medians of ``runs`` calls each, interleaved so that drifting load hits both alike:
    (wall before, wall after, CPU before, CPU after); CPU is the process time of all threads,
    which a shared machine inflates less than the wall clock."""
    before(), after()
    samples = {"wb": [], "wa": [], "cb": [], "ca": []}
    for _ in range(runs):
        for fn, w, c in ((before, "wb", "cb"), (after, "wa", "ca")):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            samples[c].append(time.process_time() - c0)
            samples[w].append(time.perf_counter() - t0)
    return tuple(float(np.median(samples[k])) for k in ("wb", "wa", "cb", "ca"))


def f_sin(x):
    return np.sin(x)


def f_cos(x):
    return np.cos(x)


def f_log1p(x):
    return np.log1p(x)


def f_tanh(x):
    return np.tanh(x)


def f_tan(x):
    return np.tan(x)


def f_log(x):
    return np.log(x)


FUNCTIONS = {"sin": (f_sin, -10, 10), "cos": (f_cos, -10, 10), "tan": (f_tan, -10, 10),
             "log1p": (f_log1p, 0, 10), "tanh": (f_tanh, -3, 3),
             "log (libmvec in both: noise check)": (f_log, 0.01, 100)}


def f_exp(x):
    return np.exp(x)


def f_expm1(x):
    return np.expm1(x)


def f_arctan(x):
    return np.arctan(x)


def f_log2(x):
    return np.log2(x)


FUNCTIONS_F32 = {"sin": (f_sin, -10, 10), "cos": (f_cos, -10, 10), "tan": (f_tan, -10, 10),
                 "exp": (f_exp, -10, 10), "expm1": (f_expm1, -1, 1), "log": (f_log, 0.01, 100),
                 "log1p": (f_log1p, 0, 10), "log2": (f_log2, 0.01, 100),
                 "tanh": (f_tanh, -3, 3), "arctan": (f_arctan, -10, 10)}


def compiled(fn, args, baseline, float32=False):
    ctx = contextlib.nullcontext()
    if baseline:
        ctx = libmvec_float32() if float32 else libmvec_for_the_rest()
    with ctx:
        f = sg.differentiate(fn) if len(args) == 1 else sg.grad(fn, wrt=(0, 1))
        out = f(*args)      # compiles now, under the chosen math
    return f, out


def main_float32(n=10 ** 7):
    """float32: libmvec's float functions (before) against ours through float64 (after)."""
    rng = np.random.default_rng(0)
    print(f"load average at start: {os.getloadavg()}; symgrad threads: {cpu_threads()}")
    x64, y64 = rng.uniform(-2, 2, n), rng.uniform(-2, 2, n)
    x, y = x64.astype(np.float32), y64.astype(np.float32)
    rows = []
    gb, _ = compiled(W.w1, (x, y), baseline=True, float32=True)
    go, _ = compiled(W.w1, (x, y), baseline=False, float32=True)
    g64, _ = compiled(W.w1, (x64, y64), baseline=False)
    outs = (np.empty_like(x), np.empty_like(y))
    outs64 = (np.empty_like(x64), np.empty_like(y64))
    rows.append(("W1 float32 gradient (out=)",) + side_by_side(lambda: gb(x, y, out=outs),
                                                              lambda: go(x, y, out=outs)))
    rows.append(("W1 float32 gradient (fresh outputs)",) + side_by_side(lambda: gb(x, y),
                                                                       lambda: go(x, y)))
    rows.append(("W1: float32 after (before) vs float64 (after), out=",)
                + side_by_side(lambda: g64(x64, y64, out=outs64), lambda: go(x, y, out=outs)))
    small, repeat = 2 ** 15, 300      # in cache, as main's per-function rows
    for name, (fn, lo, hi) in FUNCTIONS_F32.items():
        v = rng.uniform(lo, hi, small).astype(np.float32)
        fb, _ = compiled(fn, (v,), baseline=True, float32=True)
        fo, _ = compiled(fn, (v,), baseline=False, float32=True)
        res = np.empty_like(v)
        times = side_by_side(lambda: [fb(v, out=res) for _ in range(repeat)],
                             lambda: [fo(v, out=res) for _ in range(repeat)])
        rows.append((f"{name} float32, [{lo:g}, {hi:g}], in cache",)
                    + tuple(t * n / (small * repeat) for t in times))
    print(f"n = {n:.0e}, medians of 7 interleaved runs; load average at end: {os.getloadavg()}")
    print("| kernel | before, wall | after, wall | before / after | before, CPU | after, CPU | "
          "before / after (CPU) | after, CPU ns/element |")
    print("|---|---|---|---|---|---|---|---|")
    for name, wb, wa, cb, ca in rows:
        print(f"| {name} | {wb * 1e3:.2f} ms | {wa * 1e3:.2f} ms | {wb / wa:.2f}x | "
              f"{cb * 1e3:.2f} ms | {ca * 1e3:.2f} ms | {cb / ca:.2f}x | {ca / n * 1e9:.2f} |")


def main(n=10 ** 7):
    rng = np.random.default_rng(0)
    print(f"load average at start: {os.getloadavg()}; symgrad threads: {cpu_threads()}")
    x = rng.uniform(-2, 2, n)
    y = rng.uniform(-2, 2, n)
    outs = (np.empty_like(x), np.empty_like(y))
    rows = []
    gb, _ = compiled(W.w1, (x, y), baseline=True)
    go, _ = compiled(W.w1, (x, y), baseline=False)
    rows.append(("W1 gradient (out=)",) + side_by_side(lambda: gb(x, y, out=outs),
                                                      lambda: go(x, y, out=outs)))
    rows.append(("W1 gradient (fresh outputs)",) + side_by_side(lambda: gb(x, y), lambda: go(x, y)))
    # per function: 2^15 points (in and out fit in L2, so it measures the maths, not the
    # memory), 300 calls per sample; times are scaled to 10^7 points
    small = 2 ** 15
    repeat = 300
    for name, (fn, lo, hi) in FUNCTIONS.items():
        v = rng.uniform(lo, hi, small)
        fb, _ = compiled(fn, (v,), baseline=True)
        fo, _ = compiled(fn, (v,), baseline=False)
        res = np.empty_like(v)
        times = side_by_side(lambda: [fb(v, out=res) for _ in range(repeat)],
                             lambda: [fo(v, out=res) for _ in range(repeat)])
        rows.append((f"{name}, [{lo:g}, {hi:g}], in cache",)
                    + tuple(t * n / (small * repeat) for t in times))
    print(f"n = {n:.0e}, medians of 7 interleaved runs; load average at end: {os.getloadavg()}")
    print("| kernel | libmvec (before), wall | own (after), wall | speed-up | "
          "before, CPU | after, CPU | speed-up (CPU) | after, CPU ns/element |")
    print("|---|---|---|---|---|---|---|---|")
    for name, wb, wa, cb, ca in rows:
        print(f"| {name} | {wb * 1e3:.2f} ms | {wa * 1e3:.2f} ms | {wb / wa:.2f}x | "
              f"{cb * 1e3:.2f} ms | {ca * 1e3:.2f} ms | {cb / ca:.2f}x | {ca / n * 1e9:.2f} |")


def cpu_threads():
    from symgrad.codegen import llvm
    return llvm.num_threads()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--float32"]
    run = main_float32 if "--float32" in sys.argv[1:] else main
    run(int(float(args[0])) if args else 10 ** 7)
