"""Speed of the CPU back end's own float64 maths against glibc libmvec, side by side in one
process: W1's gradient (10^7 points) and per-function throughput, each compiled twice, once
with codegen.mathlib's own functions and once with libmvec for the functions libmvec has
(exp and expm1 stay ours in both: the baseline is the code before sin/cos/log1p/tanh were ours).

``--float32``: per-element CPU time of float32 maths three ways in one process: libmvec's float
functions, our float64 code on widened lanes (codegen/f32math.py ``OWN_F32``, what CPUs
without FMA run) and our float32 code (``f32single.SINGLE_F32``), W1's gradient included.

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
from symgrad.codegen import f32single, mathlib

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


@contextlib.contextmanager
def widened_float32():
    """Compile float32 maths as before f32single.SINGLE_F32: our float64-arithmetic code on
    widened lanes for every function (what CPUs without FMA run)."""
    saved = dict(f32single.SINGLE_F32)
    f32single.SINGLE_F32.clear()
    try:
        yield
    finally:
        f32single.SINGLE_F32.update(saved)


def built(fn, args, ctx):
    with ctx:
        f = sg.differentiate(fn) if len(args) == 1 else sg.grad(fn, wrt=(0, 1))
        f(*args)        # compiles now, under the chosen math
    return f


def interleaved_cpu(calls: dict, runs=7) -> dict:
    """Median process CPU time of each call, the calls interleaved run by run."""
    samples = {k: [] for k in calls}
    for fn in calls.values():
        fn()
    for _ in range(runs):
        for k, fn in calls.items():
            c0 = time.process_time()
            fn()
            samples[k].append(time.process_time() - c0)
    return {k: float(np.median(v)) for k, v in samples.items()}


def repeated(f, args, repeat):
    """``repeat`` calls of f into preallocated outputs (fresh ones would time the page
    faults of new memory, not the maths)."""
    outs = tuple(np.empty_like(a) for a in args)
    out = outs if len(args) > 1 else outs[0]

    def run():
        for _ in range(repeat):
            f(*args, out=out)
    return run


F32_VARIANTS = {"libmvec float": libmvec_float32, "widened (float64 code)": widened_float32,
                "float32 code": contextlib.nullcontext}


def main_float32(n=10 ** 7):
    """float32 per element, process CPU time (SYMGRAD_NUM_THREADS=1 recommended):
    libmvec's float functions, our float64 code on widened lanes (before SINGLE_F32), and our
    float32 code, with W1's gradient in float32 and float64."""
    rng = np.random.default_rng(0)
    print(f"load average at start: {os.getloadavg()}; symgrad threads: {cpu_threads()}")
    small, repeat = 2 ** 15, 100      # in cache: the maths, not the memory
    rows = []
    cases = [("W1 gradient", W.w1, -2, 2)] + [(name, fn, lo, hi)
                                               for name, (fn, lo, hi) in FUNCTIONS_F32.items()]
    for name, fn, lo, hi in cases:
        v = rng.uniform(lo, hi, small).astype(np.float32)
        args = (v, v[::-1].copy()) if fn is W.w1 else (v,)
        fs = {k: built(fn, args, ctx()) for k, ctx in F32_VARIANTS.items()}
        t = interleaved_cpu({k: repeated(f, args, repeat) for k, f in fs.items()})
        rows.append((f"{name}, [{lo:g}, {hi:g}]",) + tuple(t[k] / (small * repeat) * 1e9
                                                          for k in F32_VARIANTS))
    v64 = rng.uniform(-2, 2, small)
    args64 = (v64, v64[::-1].copy())
    g64 = built(W.w1, args64, contextlib.nullcontext())
    t64 = interleaved_cpu({"w1": repeated(g64, args64, repeat)})["w1"]
    print(f"2^15 points in cache, {repeat} calls per sample, medians of 7 interleaved samples "
          f"(process CPU time); load average at end: {os.getloadavg()}")
    print("| float32 kernel | " + " | ".join(f"{k}, ns/element" for k in F32_VARIANTS)
          + " | float32 code vs widened | vs libmvec |")
    print("|---|" + "---|" * (len(F32_VARIANTS) + 2))
    for name, *ts in rows:
        print(f"| {name} | " + " | ".join(f"{t:.3f}" for t in ts)
              + f" | {ts[1] / ts[2]:.2f}x | {ts[0] / ts[2]:.2f}x |")
    print(f"| W1 gradient in float64, [-2, 2] (for scale) | {t64 / (small * repeat) * 1e9:.3f} ns/element |")


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
