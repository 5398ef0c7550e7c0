"""Accuracy of the CPU back end's SIMD math against an extended-precision reference (x87 long
double) and against NumPy, over the whole range each function claims (log-uniform magnitudes,
both signs). float64 sin/cos/tan/log1p/tanh/exp/expm1 are our own code (codegen/f64math.py
``OWN_F64``), the rest glibc's libmvec through the loop vectoriser; float32 exp, expm1, sin,
cos, tan, log, log1p, log2, log10 and tanh are our own (codegen/f32math.py ``OWN_F32``), the
rest the float64 functions on widened lanes, rounded once (``mathlib.F32_VIA_F64``). Prints a
Markdown table; ``run_all.py`` copies it into RESULTS.md.

``--all-float32 NAME ...``: every finite float32 (2^32 - 2^25 values) through each one-argument
function, against NumPy's float64 function (its error, a few float64 ulp, is 2^-27 of a
float32 ulp) and x87 long double wherever the error is near or above half an ulp. Minutes per
function.

Usage: python benchmarks/accuracy.py [n_points]
       python benchmarks/accuracy.py --all-float32 exp sin ...   (or "all")
"""
from __future__ import annotations

import math
import sys
import time

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


def f_log2(x):
    return np.log2(x)


def f_log10(x):
    return np.log10(x)


def f_exp2(x):
    return np.exp2(x)


def f_sinh(x):
    return np.sinh(x)


def f_cosh(x):
    return np.cosh(x)


def f_arcsin(x):
    return np.arcsin(x)


def f_arccos(x):
    return np.arccos(x)


def f_arctan(x):
    return np.arctan(x)


def f_arcsinh(x):
    return np.arcsinh(x)


def f_arccosh(x):
    return np.arccosh(x)


def f_arctanh(x):
    return np.arctanh(x)


def f_cbrt(x):
    return np.cbrt(x)


def f_erf(x):
    return sg.erf(x)


def f_erfc(x):
    return sg.erfc(x)


def f_arctan2(y, x):
    return np.arctan2(y, x)


def f_hypot(x, y):
    return np.hypot(x, y)


def f_fmod(x, y):
    return np.fmod(x, y)


def _erf_reference(fn):
    """NumPy has no erf: ``math``'s (float64, < 1 ulp there) element by element."""
    each = np.vectorize(fn, otypes=[np.float64])
    return lambda x: each(np.asarray(x, np.float64))


def _sample(rng, lo, hi, n, kind):
    """n points in [lo, hi]: "lin" uniform, "log" log-uniform, "log+-" log-uniform magnitudes
    with random signs, "to-1" -1 + a log-uniform distance in [lo, hi] (log1p's left end)."""
    if kind == "lin":
        return rng.uniform(lo, hi, n)
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    if kind == "log+-":
        return mag * rng.choice([-1.0, 1.0], n)
    return {"to-1": -1.0 + mag, "to+1": 1.0 + mag, "below+1": 1.0 - mag}.get(kind, mag)


SPAN_PREFIX = {"to-1": "-1 + ", "to+1": "1 + ", "below+1": "1 - ", "log+-": "+-"}
F64_TRIG = [(-1e4, 1e4, "lin"), (1e-300, 1.7e308, "log+-")]
F32_TRIG = [(-1e4, 1e4, "lin"), (1e-45, 3.4e38, "log+-")]
F32_ALL = [(1e-45, 3.4e38, "log+-")]
# name, function, NumPy ufunc, argument spans (lo, hi, kind) per dtype
CASES = [
    ("exp", f_exp, np.exp, {"float64": [(-745, 709, "lin")],
                            "float32": [(-104, 89, "lin"), (1e-45, 1, "log+-")]}),
    ("log", f_log, np.log, {"float64": [(5e-324, 1.7e308, "log")],
                            "float32": [(1e-45, 3.4e38, "log")]}),
    ("log1p", f_log1p, np.log1p, {"float64": [(1e-300, 1.7e308, "log"), (1e-300, 1, "log+-"),
                                              (1e-16, 1, "to-1")],
                                  "float32": [(1e-45, 3.4e38, "log"), (1e-45, 1, "log+-"),
                                              (6e-8, 1, "to-1")]}),
    ("expm1", f_expm1, np.expm1, {"float64": [(-50, 700, "lin"), (1e-300, 1, "log+-")],
                                  "float32": [(-20, 89, "lin"), (1e-45, 1, "log+-")]}),
    ("sin", f_sin, np.sin, {"float64": F64_TRIG, "float32": F32_TRIG}),
    ("cos", f_cos, np.cos, {"float64": F64_TRIG, "float32": F32_TRIG}),
    ("tan", f_tan, np.tan, {"float64": F64_TRIG, "float32": F32_TRIG}),
    ("tanh", f_tanh, np.tanh, {"float64": [(-20, 20, "lin"), (1e-300, 40, "log+-")],
                               "float32": [(-10, 10, "lin"), (1e-45, 20, "log+-")]}),
    ("sqrt", f_sqrt, np.sqrt, {"float64": [(5e-324, 1.7e308, "log")],
                               "float32": [(1e-45, 3.4e38, "log")]}),
    # float32 only: the float64 versions are libmvec's (their accuracy is glibc's to state)
    ("log2", f_log2, np.log2, {"float32": [(1e-45, 3.4e38, "log")]}),
    ("log10", f_log10, np.log10, {"float32": [(1e-45, 3.4e38, "log")]}),
    ("exp2", f_exp2, np.exp2, {"float32": [(-150, 128, "lin"), (1e-45, 1, "log+-")]}),
    ("sinh", f_sinh, np.sinh, {"float32": [(-90, 90, "lin"), (1e-45, 90, "log+-")]}),
    ("cosh", f_cosh, np.cosh, {"float32": [(-90, 90, "lin"), (1e-45, 90, "log+-")]}),
    ("arcsin", f_arcsin, np.arcsin, {"float32": [(-1, 1, "lin"), (1e-45, 1, "log+-")]}),
    ("arccos", f_arccos, np.arccos, {"float32": [(-1, 1, "lin"), (1e-45, 1, "log+-")]}),
    ("arctan", f_arctan, np.arctan, {"float32": F32_ALL}),
    ("arcsinh", f_arcsinh, np.arcsinh, {"float32": F32_ALL}),
    ("arccosh", f_arccosh, np.arccosh, {"float32": [(1, 3.4e38, "log"), (6e-8, 1, "to+1")]}),
    ("arctanh", f_arctanh, np.arctanh, {"float32": [(1e-45, 1, "log+-"), (6e-8, 1, "below+1")]}),
    ("cbrt", f_cbrt, np.cbrt, {"float32": F32_ALL}),
    ("erf", f_erf, _erf_reference(math.erf), {"float32": [(-5, 5, "lin"), (1e-45, 10, "log+-")]}),
    ("erfc", f_erfc, _erf_reference(math.erfc), {"float32": [(-5, 11, "lin"),
                                                            (1e-45, 10, "log+-")]}),
]
# two arguments: name, function, ufunc, per dtype ((x lo, hi, kind), (y lo, hi, kind))
CASES2 = [
    ("pow", f_pow, np.power, {"float64": ((1e-3, 1e3, "log"), (-50, 50, "lin")),
                              "float32": ((1e-2, 1e2, "log"), (-10, 10, "lin"))}),
    ("arctan2", f_arctan2, np.arctan2, {"float32": (F32_ALL[0], F32_ALL[0])}),
    ("hypot", f_hypot, np.hypot, {"float32": (F32_ALL[0], F32_ALL[0])}),
    ("fmod", f_fmod, np.fmod, {"float32": (F32_ALL[0], (1e-10, 1e10, "log+-"))}),
]


def ulps(got, ref_ld, dtype):
    ref = ref_ld.astype(dtype)
    spacing = np.spacing(np.abs(ref).astype(dtype)).astype(np.longdouble)
    err = np.abs(got.astype(np.longdouble) - ref_ld)
    ok = np.isfinite(ref) & np.isfinite(got) & (spacing > 0)
    return err[ok] / spacing[ok]


def reference(ufunc, x):
    """ufunc in x87 long double, where NumPy has it (erf: the float64 reference as is)."""
    try:
        return ufunc(*(v.astype(np.longdouble) for v in x))
    except TypeError:
        return ufunc(*x).astype(np.longdouble)


def implementation(name, dtype, nargs=1) -> str:
    """Which code the CPU back end runs for this function and dtype."""
    from symgrad.codegen import jit, mathlib
    cpu = jit.target()["math"]
    if dtype == "float64" and name in mathlib.OWN_F64 and not cpu.precise:
        return "own"
    if dtype == "float32" and name in mathlib.OWN_F32 and not cpu.precise:
        return "own"
    if name in mathlib.INTRINSICS:
        return "LLVM intrinsic"
    if dtype == "float32" and name in mathlib.F32_VIA_F64:
        return f"float64 {implementation(name, 'float64', nargs)}, rounded"
    return "libmvec" if cpu.variants(mathlib.MATH_NAMES[name], dtype, nargs) else "libm"


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
                ref = reference(ufunc, [x])
                u_sym = ulps(got, ref, dtype)
                with np.errstate(over="ignore"):     # (NumPy warns where it overflows)
                    u_np = ulps(np.asarray(ufunc(x), dtype), ref, dtype)
                worst_sym = max(worst_sym, float(u_sym.max()))
                worst_np = max(worst_np, float(u_np.max()))
                frac = max(frac, float(np.mean(u_sym > 1.0)))
            span = "; ".join(f"{SPAN_PREFIX.get(kind, '')}"
                             f"[{lo:g}, {hi:g}]{'' if kind == 'lin' else ' log'}"
                             for lo, hi, kind in spans)
            rows.append((name, dtype, implementation(name, dtype), span, worst_sym, worst_np, frac))
    for name, fn, ufunc, ranges in CASES2:
        for dtype, spans in ranges.items():
            f = sg.differentiate(fn)
            x, y = (_sample(rng, lo, hi, n, kind).astype(dtype) for lo, hi, kind in spans)
            ref = reference(ufunc, [x, y])
            u_sym, u_np = ulps(f(x, y), ref, dtype), ulps(ufunc(x, y), ref, dtype)
            span = ", ".join(f"{v} in {'+-' if kind == 'log+-' else ''}[{lo:g}, {hi:g}]"
                             f"{'' if kind == 'lin' else ' log'}"
                             for v, (lo, hi, kind) in zip("xy", spans))
            rows.append((name, dtype, implementation(name, dtype, 2), span,
                         float(u_sym.max()), float(u_np.max()), float(np.mean(u_sym > 1.0))))
    return rows


def table(rows) -> str:
    lines = ["| function | dtype | symgrad uses | range | symgrad max ulp | NumPy max ulp | "
             "symgrad > 1 ulp |", "|---|---|---|---|---|---|---|"]
    for name, dtype, impl, span, us, un, frac in rows:
        lines.append(f"| {name} | {dtype} | {impl} | {span} | {us:.2f} | {un:.2f} | "
                     f"{100 * frac:.3f}% |")
    return "\n".join(lines)


def all_float32(name, chunk_bits=22):
    """(max ulp, the float32 where it is, fraction above 1/2 ulp, seconds) of ``name`` over
    every finite float32, 2^chunk_bits bit patterns at a time."""
    fn, ufunc = next((fn, uf) for nm, fn, uf, _ in CASES if nm == name)
    f = sg.differentiate(fn)
    worst, where, above, count, t0 = 0.0, None, 0, 0, time.perf_counter()
    step = 1 << chunk_bits
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        x = x[np.isfinite(x)]
        if x.size == 0:
            continue
        got = f(x).astype(np.float64)
        with np.errstate(all="ignore"):
            ref = np.asarray(ufunc(x.astype(np.float64)), np.float64)
            ref32 = ref.astype(np.float32)
            spacing = np.spacing(np.abs(ref32)).astype(np.float64)
            err = np.abs(got - ref) / spacing
        ok = np.isfinite(ref32) & np.isfinite(got) & (spacing > 0)
        near = ok & (err > 0.5 - 1e-6)           # refined against long double
        if near.any():
            sub = x[near]
            err[near] = ulps(got[near].astype(np.float32), reference(ufunc, [sub]),
                             "float32")
        err = np.where(ok, err, 0.0)
        k = int(np.argmax(err))
        if err[k] > worst:
            worst, where = float(err[k]), float(x[k])
        above += int(np.count_nonzero(err > 0.5))
        count += int(np.count_nonzero(ok))
    return worst, where, above / max(count, 1), time.perf_counter() - t0


def main(argv):
    if argv[:1] == ["--all-float32"]:
        names = [c[0] for c in CASES if "float32" in c[3]] if argv[1:] == ["all"] else argv[1:]
        print("| function | max ulp (every finite float32) | at | > 0.5 ulp | seconds |")
        print("|---|---|---|---|---|")
        for name in names:
            worst, where, frac, secs = all_float32(name)
            print(f"| {name} | {worst:.4f} | {where!r} | {100 * frac:.4f}% | {secs:.0f} |",
                  flush=True)
        return
    n = int(argv[0]) if argv else 1_000_000
    print(table(measure(n)))


if __name__ == "__main__":
    main(sys.argv[1:])
