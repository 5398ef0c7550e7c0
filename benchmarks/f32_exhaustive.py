"""Every float32 through the CPU back end's float32 maths: the largest error in ulps per
function against NumPy's float64 function of the widened argument (within 1 float64 ulp,
2^-29 of a float32 ulp); NaN, infinities and signed zeros checked on every input against
that reference rounded to float32 (the C functions' rules). ``--numpy``: NumPy's float32
ufunc's largest error too (slower).

Usage: python benchmarks/f32_exhaustive.py [--numpy] [--stride=N] [op ...]   (default:
codegen.f32single.SINGLE_F32, every float32: 2^32 inputs in chunks of 2^24, about 8 minutes of
one core per function; --stride=N: every Nth bit pattern only)
"""
from __future__ import annotations

import sys
import time

import numpy as np

import symgrad as sg
from symgrad.codegen import f32single, jit

CHUNK = 1 << 24


def ulp_error(got, ref):
    """|got - ref| in float32 ulps at ref, where ref rounds to a finite float32 and got is
    finite (the rest is checked as special values)."""
    with np.errstate(over="ignore", invalid="ignore"):
        ref32 = ref.astype(np.float32)
        spacing = np.spacing(np.abs(ref32)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - ref) / spacing
    return np.where(np.isfinite(ref32) & np.isfinite(got), err, 0.0)


def special_mismatches(got, want):
    """Elements whose NaN-ness, infinity or signed zero differs from ``want``'s."""
    bad = np.isnan(got) != np.isnan(want)
    odd = (np.isinf(want) | (want == 0)) & ((got != want) | (np.signbit(got) != np.signbit(want)))
    return int(bad.sum() + odd.sum())


def sweep(op: str, numpy_too: bool = False, stride: int = 1) -> dict:
    ufunc = getattr(np, op)
    f = sg.differentiate(lambda x: ufunc(x))
    worst, worst_x, numpy_worst, mismatches = 0.0, 0.0, float("nan"), 0
    for start in range(0, 1 << 32, CHUNK * stride):
        x = np.arange(start, min(start + CHUNK * stride, 1 << 32), stride,
                      dtype=np.uint64).astype(np.uint32).view(np.float32)
        with np.errstate(all="ignore"):
            got = f(x)
            ref = ufunc(x.astype(np.float64))
        err = ulp_error(got, ref)
        i = int(np.argmax(err))
        if err[i] > worst:
            worst, worst_x = float(err[i]), float(x[i])
        if numpy_too:
            with np.errstate(all="ignore"):
                numpy_err = float(ulp_error(ufunc(x), ref).max())
            numpy_worst = numpy_err if not numpy_worst >= numpy_err else numpy_worst
        with np.errstate(over="ignore", invalid="ignore"):
            mismatches += special_mismatches(got, ref.astype(np.float32))
    return {"op": op, "max_ulp": worst, "at": worst_x, "numpy_max_ulp": numpy_worst,
            "special_mismatches": mismatches}


def main(argv):
    numpy_too = "--numpy" in argv
    stride = next((int(a.split("=")[1]) for a in argv if a.startswith("--stride=")), 1)
    ops = [a for a in argv if not a.startswith("--")] or sorted(f32single.SINGLE_F32)
    fma = jit.target()["math"].fma
    what = "every float32" if stride == 1 else f"every {stride}th float32 bit pattern"
    print(f"float32 computed in float32: {fma} (FMA); {what}, 2^32 / {stride} inputs")
    print("| function | max ulp (ours) | at x | NumPy float32 max ulp | special mismatches |")
    print("|---|---|---|---|---|")
    for op in ops:
        t0 = time.perf_counter()
        r = sweep(op, numpy_too, stride)
        print(f"| {op} | {r['max_ulp']:.3f} | {r['at']!r} | {r['numpy_max_ulp']:.3f} | "
              f"{r['special_mismatches']} |  ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
