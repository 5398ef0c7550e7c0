"""Accuracy of the CPU back end's SIMD math against an extended-precision reference (x87 long
double) and against NumPy, over the whole range each function claims (log-uniform magnitudes,
both signs). float64 sin/cos/tan/log1p/tanh/exp/expm1 are our own code (codegen/f64math.py
``OWN_F64``), the rest glibc's libmvec through the loop vectoriser. Prints a Markdown table;
``run_all.py`` copies it into RESULTS.md.

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


def f_tan(x):
    return np.tan(x)


def f_tanh(x):
    return np.tanh(x)


def f_sqrt(x):
    return np.sqrt(x)


def f_pow(x, y):
    return x ** y


def _sample(rng, lo, hi, n, kind):
    """n points in [lo, hi]: "lin" uniform, "log" log-uniform, "log+-" log-uniform magnitudes
    with random signs, "to-1" -1 + a log-uniform distance in [lo, hi] (log1p's left end)."""
    if kind == "lin":
        return rng.uniform(lo, hi, n)
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    if kind == "log+-":
        return mag * rng.choice([-1.0, 1.0], n)
    return -1.0 + mag if kind == "to-1" else mag


F64_TRIG = [(-1e4, 1e4, "lin"), (1e-300, 1.7e308, "log+-")]
F32_TRIG = [(-1e4, 1e4, "lin"), (1e-30, 3e38, "log+-")]
# name, function, NumPy ufunc, argument spans (lo, hi, kind) per dtype
CASES = [
    ("exp", f_exp, np.exp, {"float64": [(-745, 709, "lin")], "float32": [(-103, 88, "lin")]}),
    ("log", f_log, np.log, {"float64": [(5e-324, 1.7e308, "log")],
                            "float32": [(1e-45, 3e38, "log")]}),
    ("log1p", f_log1p, np.log1p, {"float64": [(1e-300, 1.7e308, "log"), (1e-300, 1, "log+-"),
                                              (1e-16, 1, "to-1")],
                                  "float32": [(1e-30, 3e38, "log"), (1e-30, 1, "log+-"),
                                              (1e-7, 1, "to-1")]}),
    ("expm1", f_expm1, np.expm1, {"float64": [(-50, 700, "lin"), (1e-300, 1, "log+-")],
                                  "float32": [(-20, 88, "lin"), (1e-30, 1, "log+-")]}),
    ("sin", f_sin, np.sin, {"float64": F64_TRIG, "float32": F32_TRIG}),
    ("cos", f_cos, np.cos, {"float64": F64_TRIG, "float32": F32_TRIG}),
    ("tan", f_tan, np.tan, {"float64": F64_TRIG, "float32": F32_TRIG}),
    ("tanh", f_tanh, np.tanh, {"float64": [(-20, 20, "lin"), (1e-300, 40, "log+-")],
                               "float32": [(-10, 10, "lin"), (1e-30, 20, "log+-")]}),
    ("sqrt", f_sqrt, np.sqrt, {"float64": [(5e-324, 1.7e308, "log")],
                               "float32": [(1e-45, 3e38, "log")]}),
]


def ulps(got, ref_ld, dtype):
    ref = ref_ld.astype(dtype)
    spacing = np.spacing(np.abs(ref).astype(dtype)).astype(np.longdouble)
    err = np.abs(got.astype(np.longdouble) - ref_ld)
    ok = np.isfinite(ref) & np.isfinite(got) & (spacing > 0)
    return err[ok] / spacing[ok]


def implementation(name, dtype, nargs=1) -> str:
    """Which code the CPU back end runs for this function and dtype."""
    from symgrad.codegen import jit, mathlib
    math = jit.target()["math"]
    if dtype == "float64" and name in mathlib.OWN_F64 and not math.precise:
        return "own"
    if name in mathlib.INTRINSICS:
        return "LLVM intrinsic"
    return "libmvec" if math.variants(mathlib.MATH_NAMES[name], dtype, nargs) else "libm"


def measure(n=1_000_000, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for name, fn, ufunc, ranges in CASES:
        for dtype, spans in ranges.items():
            f = sg.differentiate(fn)
            worst_sym, worst_np, frac = 0.0, 0.0, 0.0
            for lo, hi, kind in spans:
                x = _sample(rng, lo, hi, n, kind).astype(dtype)
                got = f(x)
                ref = ufunc(x.astype(np.longdouble))
                u_sym = ulps(got, ref, dtype)
                u_np = ulps(ufunc(x), ref, dtype)
                worst_sym = max(worst_sym, float(u_sym.max()))
                worst_np = max(worst_np, float(u_np.max()))
                frac = max(frac, float(np.mean(u_sym > 1.0)))
            span = "; ".join(f"{'-1 + ' if kind == 'to-1' else '+-' if kind == 'log+-' else ''}"
                             f"[{lo:g}, {hi:g}]{'' if kind == 'lin' else ' log'}"
                             for lo, hi, kind in spans)
            rows.append((name, dtype, implementation(name, dtype), span, worst_sym, worst_np, frac))
    # pow: two arguments
    for dtype, (xl, xh), (yl, yh) in (("float64", (1e-3, 1e3), (-50, 50)),
                                      ("float32", (1e-2, 1e2), (-10, 10))):
        f = sg.differentiate(f_pow)
        x = _sample(rng, xl, xh, n, "log").astype(dtype)
        y = rng.uniform(yl, yh, n).astype(dtype)
        ref = np.power(x.astype(np.longdouble), y.astype(np.longdouble))
        u_sym, u_np = ulps(f(x, y), ref, dtype), ulps(np.power(x, y), ref, dtype)
        rows.append(("pow", dtype, implementation("pow", dtype, 2),
                     f"x in [{xl:g}, {xh:g}] log, y in [{yl:g}, {yh:g}]",
                     float(u_sym.max()), float(u_np.max()), float(np.mean(u_sym > 1.0))))
    return rows


def table(rows) -> str:
    lines = ["| function | dtype | symgrad uses | range | symgrad max ulp | NumPy max ulp | "
             "symgrad > 1 ulp |", "|---|---|---|---|---|---|---|"]
    for name, dtype, impl, span, us, un, frac in rows:
        lines.append(f"| {name} | {dtype} | {impl} | {span} | {us:.2f} | {un:.2f} | "
                     f"{100 * frac:.3f}% |")
    return "\n".join(lines)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    print(table(measure(n)))
