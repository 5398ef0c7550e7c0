"""Accuracy of the CPU back end's SIMD math (glibc libmvec through the loop vectoriser)
against an extended-precision reference (x87 long double) and against NumPy, over wide
ranges. Prints a Markdown table; ``run_all.py`` copies it into RESULTS.md.

Usage: python benchmarks/accuracy.py [n_points]
"""
from __future__ import annotations

import sys

import numpy as np

import symgrad as sg


def f_exp(x):
    return np.exp(x)


def f_log(x):
    return np.log(x)


def f_log1p(x):
    return np.log1p(x)


def f_expm1(x):
    return np.expm1(x)


def f_sin(x):
    return np.sin(x)


def f_cos(x):
    return np.cos(x)


def f_tanh(x):
    return np.tanh(x)


def f_sqrt(x):
    return np.sqrt(x)


def f_pow(x, y):
    return x ** y


def _uniform(rng, lo, hi, n, log=False):
    if log:
        return np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    return rng.uniform(lo, hi, n)


# name, function, NumPy ufunc, argument ranges (lo, hi, log-uniform) per dtype
CASES = [
    ("exp", f_exp, np.exp, {"float64": [(-745, 709, False)], "float32": [(-103, 88, False)]}),
    ("log", f_log, np.log, {"float64": [(1e-300, 1e300, True)], "float32": [(1e-37, 1e37, True)]}),
    ("log1p", f_log1p, np.log1p, {"float64": [(-0.999, 1e10, False), (1e-12, 1, True)],
                                  "float32": [(-0.999, 1e6, False), (1e-6, 1, True)]}),
    ("expm1", f_expm1, np.expm1, {"float64": [(-50, 700, False), (1e-12, 1, True)],
                                  "float32": [(-20, 88, False), (1e-6, 1, True)]}),
    ("sin", f_sin, np.sin, {"float64": [(-1e4, 1e4, False), (1e-8, 1e15, True)],
                            "float32": [(-1e4, 1e4, False)]}),
    ("cos", f_cos, np.cos, {"float64": [(-1e4, 1e4, False), (1e-8, 1e15, True)],
                            "float32": [(-1e4, 1e4, False)]}),
    ("tanh", f_tanh, np.tanh, {"float64": [(-20, 20, False), (1e-10, 1, True)],
                               "float32": [(-10, 10, False)]}),
    ("sqrt", f_sqrt, np.sqrt, {"float64": [(1e-300, 1e300, True)], "float32": [(1e-37, 1e37, True)]}),
]


def ulps(got, ref_ld, dtype):
    ref = ref_ld.astype(dtype)
    spacing = np.spacing(np.abs(ref).astype(dtype)).astype(np.longdouble)
    err = np.abs(got.astype(np.longdouble) - ref_ld)
    ok = np.isfinite(ref) & np.isfinite(got) & (spacing > 0)
    return err[ok] / spacing[ok]


def measure(n=1_000_000, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for name, fn, ufunc, ranges in CASES:
        for dtype, spans in ranges.items():
            f = sg.differentiate(fn)
            worst_sym, worst_np, frac = 0.0, 0.0, 0.0
            for lo, hi, log in spans:
                x = _uniform(rng, lo, hi, n, log).astype(dtype)
                got = f(x)
                ref = ufunc(x.astype(np.longdouble))
                u_sym = ulps(got, ref, dtype)
                u_np = ulps(ufunc(x), ref, dtype)
                worst_sym = max(worst_sym, float(u_sym.max()))
                worst_np = max(worst_np, float(u_np.max()))
                frac = max(frac, float(np.mean(u_sym > 1.0)))
            span = "; ".join(f"[{lo:g}, {hi:g}]{' log' if log else ''}" for lo, hi, log in spans)
            rows.append((name, dtype, span, worst_sym, worst_np, frac))
    # pow: two arguments
    for dtype, (xl, xh), (yl, yh) in (("float64", (1e-3, 1e3), (-50, 50)),
                                      ("float32", (1e-2, 1e2), (-10, 10))):
        f = sg.differentiate(f_pow)
        x = _uniform(rng, xl, xh, n, True).astype(dtype)
        y = rng.uniform(yl, yh, n).astype(dtype)
        ref = np.power(x.astype(np.longdouble), y.astype(np.longdouble))
        u_sym, u_np = ulps(f(x, y), ref, dtype), ulps(np.power(x, y), ref, dtype)
        rows.append(("pow", dtype, f"x in [{xl:g}, {xh:g}] log, y in [{yl:g}, {yh:g}]",
                     float(u_sym.max()), float(u_np.max()), float(np.mean(u_sym > 1.0))))
    return rows


def table(rows) -> str:
    lines = ["| function | dtype | range | symgrad max ulp | NumPy max ulp | symgrad > 1 ulp |",
             "|---|---|---|---|---|---|"]
    for name, dtype, span, us, un, frac in rows:
        lines.append(f"| {name} | {dtype} | {span} | {us:.2f} | {un:.2f} | {100 * frac:.3f}% |")
    return "\n".join(lines)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    print(table(measure(n)))
