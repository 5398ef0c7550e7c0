"""Our own float32 math functions: exp, expm1, sin, cos, tan, log, log1p, log2, log10 and tanh
(``OWN_F32``: op -> (function name, body builder)), as branch-free IR the loop vectoriser
widens with the rest of a fused loop. ``codegen.mathlib.CPUMath`` calls them for float32
unless ``SYMGRAD_PRECISE_MATH=1``; the other float32 functions are the float64 ones on
widened lanes (``mathlib.F32_VIA_F64``).

On CPUs with FMA, exp, sin, cos, log, log1p and tanh are computed in float32 arithmetic
instead (``codegen.f32single``: twice the lanes per vector); this module's code (the widened
one) is what CPUs without FMA run for all ten (llvm.fma would be a libcall there, and
unfused float32 steps lose the exactness the reductions rest on), and what the float32 far
checks of f32single run on lanes past their reduction's bound.

Each evaluates in float64 arithmetic from the float32 argument widened (exactly) and rounds
once at the end, like the float64 route, but with reductions and polynomials sized for a
float32 result: every value below is within 2^-30 relative of the true one before the final
rounding (Taylor series, whose truncation is bounded by the first omitted term, and float64
operations, each 2^-53), so the float32 result is within 0.5 + 2^-6 ulp, NaN, infinities and
signed zeros as the C functions (NumPy's). Half the multiply-adds of the float64 code and no
double-double steps: about 2x the time of libmvec's float functions (which reach 3.8 ulp;
float64 lanes are half as many per vector), where the float64 code on widened lanes took 4x.
Ranges: float32 needs no care for overflow inside float64 (e^89 is finite there), so each
result is rounded to inf or to a subnormal by the final conversion alone.
"""
from __future__ import annotations

import math as _math
from typing import TYPE_CHECKING

from llvmlite import ir

from .f64math import (LN2_HI, LN2_LO, INV_LN2, PIO2_FMA_PARTS, REDUCE_MAX, SHIFTER,
                      TWO_OVER_PI, _F64, _far_helper, _pow2, _reduce_pio2)

if TYPE_CHECKING:
    from .mathlib import CPUMath

# e^r - 1 = r + r^2 (1/2! + r/3! + ... + r^6/8!) for |r| <= ln2/2: the first omitted term,
# r^9/9!, is below 2^-31 of e^r and 2^-30 of e^r - 1.
EXP_TAYLOR = [1.0 / _math.factorial(i) for i in range(2, 9)]
# sin r = r + r^3 S(r^2) to r^11 (omitted r^13/13!: 2^-36 of sin r for |r| <= pi/4); cos r =
# 1 - r^2/2 + r^4 C(r^2) to r^10 (omitted r^12/12!: 2^-32 of cos r).
SIN_TAYLOR = [(-1.0) ** (i + 1) / _math.factorial(2 * i + 3) for i in range(5)]
COS_TAYLOR = [(-1.0) ** i / _math.factorial(2 * i + 4) for i in range(4)]
# log m = 2 atanh s = 2s (1 + s^2/3 + ... + s^10/11), s = (m - 1) / (m + 1), |s| <= 0.1716
# for m in [sqrt(1/2), sqrt(2)): the omitted s^12/13 is below 2^-34.
ATANH_TAYLOR = [1.0 / (2 * i + 3) for i in range(5)]
LN2 = _math.log(2.0)
INV_LN10 = 1.0 / _math.log(10.0)
SQRT_HALF_BITS = 0x3FE6A09E667F3BCD
EXP_CLAMP = (-104.0, 89.0)      # e^-104 rounds to 0 in float32, e^89 to inf
LOG1P_TINY = 2.0 ** -29         # below, log1p x = x - x^2/2 to 2^-58; above, 1 + x is exact
TANH_CLAMP = 40.0               # (e^40 - 1) / (e^40 + 1) rounds to 1


def define_float(module: ir.Module, name: str, compute) -> ir.Function:
    """``float name(float)`` returning ``compute(b, x)``; NaN in, the same NaN out. Inlined
    before the vectoriser runs, as f64math's functions."""
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fl = ir.FloatType()
    fn = ir.Function(module, ir.FunctionType(fl, [fl]), name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    out = compute(b, x)
    b.ret(b.select(b.fcmp_unordered("uno", x, x), x, out))
    return fn


def _define(module: ir.Module, name: str, body) -> ir.Function:
    """``float name(float)``: ``body(b, xd)`` of the widened argument, rounded once."""
    return define_float(module, name, lambda b, x: b.fptrunc(body(b, b.fpext(x, ir.DoubleType())),
                                                             ir.FloatType()))


def _exp_reduce(f: _F64, x):
    """(k as i64, e^r - 1) with x = k ln2 + r, x clamped to EXP_CLAMP (kept as is within it):
    k * LN2_HI is exact (|k| <= 151), the rest rounds once each (2^-53)."""
    b = f.b
    lo, hi = EXP_CLAMP
    xc = b.select(b.fcmp_ordered("<", x, f.c(lo)), f.c(lo), x)
    xc = b.select(b.fcmp_ordered(">", xc, f.c(hi)), f.c(hi), xc)
    t = b.fadd(b.fmul(xc, f.c(INV_LN2)), f.c(SHIFTER))     # rint by the shifter: the low
    kf = b.fsub(t, f.c(SHIFTER))                             # bits of t are k
    r = b.fsub(b.fsub(xc, b.fmul(kf, f.c(LN2_HI))), b.fmul(kf, f.c(LN2_LO)))
    p = f.fma(b.fmul(r, r), f.horner(r, EXP_TAYLOR), r)
    return b.sub(f.bits(t), f.bits(f.c(SHIFTER))), p


def _exp_body(f: _F64, x, math):
    """e^x = 2^k (1 + p): 2^k is a normal float64 for every k of the clamped range."""
    k, p = _exp_reduce(f, x)
    return f.b.fmul(f.b.fadd(f.c(1.0), p), _pow2(f.b, k))


def _expm1_value(f: _F64, x):
    """e^x - 1 = 2^k p + (2^k - 1): 2^k - 1 is exact for |k| <= 53 and rounds by 2^-53 of
    the result beyond; the sum cancels by at most 1.5x (k = -1, 1) on the clamped range."""
    k, p = _exp_reduce(f, x)
    t = _pow2(f.b, k)
    return f.fma(t, p, f.b.fsub(t, f.c(1.0)))


def _expm1_body(f: _F64, x, math):
    # the reduction turns -0 into +0 (x - 0 ln2): zeros are their own value
    return f.b.select(f.b.fcmp_ordered("==", x, f.c(0.0)), x, _expm1_value(f, x))


def _tanh_body(f: _F64, x, math):
    """tanh|x| = E / (E + 2), E = e^2|x| - 1: no cancellation anywhere, and E relative to
    2^-30 down to the smallest subnormal (k = 0 there, E = p); the sign is x's."""
    b = f.b
    two_ax = b.fmul(f.abs(x), f.c(2.0))
    two_ax = b.select(b.fcmp_ordered("<", two_ax, f.c(TANH_CLAMP)), two_ax, f.c(TANH_CLAMP))
    e = _expm1_value(f, two_ax)
    return f.xor_sign(b.fdiv(e, b.fadd(e, f.c(2.0))), f.bits(x))


def _reduce_f32(f: _F64, ax, fused: bool):
    """(k as i64, r) with |x| = k pi/2 + r, |x| <= REDUCE_MAX. With FMA: |x| - k C1 is exact
    (f64math._reduce_pio2's argument), and the second fma rounds once and leaves out k C3 <
    2^-88, 2^-60 of the smallest |r| of a float32 in range (2^-27.8, at 252.89821: every
    float32 in [pi/4, 2^21] checked in long double). Without FMA, f64math's reduction."""
    b = f.b
    if not fused:
        k, rh, rl = _reduce_pio2(f, ax, False)
        return k, b.fadd(rh, rl)
    t = b.fadd(b.fmul(ax, f.c(TWO_OVER_PI)), f.c(SHIFTER))
    k = b.fsub(t, f.c(SHIFTER))
    c1, c2, _ = PIO2_FMA_PARTS
    r = f.fma_exact(b.fneg(k), f.c(c1), ax)
    return f.bits(t), f.fma_exact(b.fneg(k), f.c(c2), r)


def _trig_body(cname: str):
    """sin, cos or tan: Cody-Waite for |x| <= REDUCE_MAX, f64math's far-argument call (Payne-
    Hanek, float64 accurate) beyond and for inf."""

    def body(f: _F64, x, math):
        b = f.b
        ax = f.abs(x)
        near = b.fcmp_ordered("<=", ax, f.c(REDUCE_MAX))
        k, r = _reduce_f32(f, b.select(near, ax, f.c(0.0)), math.fma)
        z = b.fmul(r, r)
        sin_r = f.fma(b.fmul(r, z), f.horner(z, SIN_TAYLOR), r)
        cos_r = f.fma(z, f.fma(z, f.horner(z, COS_TAYLOR), f.c(-0.5)), f.c(1.0))
        q = b.add(k, f.i(1 if cname == "cos" else 0))      # cos x = sin(x + pi/2)
        odd = b.icmp_unsigned("!=", b.and_(q, f.i(1)), f.i(0))
        if cname == "tan":      # tan(r + k pi/2) = tan r for even k, -1 / tan r for odd k
            v = b.fdiv(b.select(odd, cos_r, sin_r), b.select(odd, sin_r, cos_r))
            v = f.xor_sign(v, b.shl(q, f.i(63)))
        else:
            v = f.xor_sign(b.select(odd, cos_r, sin_r), b.shl(q, f.i(62)))
        if cname != "cos":
            v = f.xor_sign(v, f.bits(x))           # odd functions: f(-0) = -0 too
        return b.select(near, v, b.call(_far_helper(b.module, cname, math), [x]))
    return body


def _log_value(f: _F64, u):
    """(e, log m) with u = 2^e m, m in [sqrt(1/2), sqrt(2)), for a finite u > 0 (e as a
    float64, exact); log m by the atanh series, relative to 2^-34."""
    b = f.b
    bits = f.bits(u)
    e = b.ashr(b.sub(bits, f.i(SQRT_HALF_BITS)), f.i(52))
    m = f.from_bits(b.sub(bits, b.shl(e, f.i(52))))
    frac = b.fsub(m, f.c(1.0))
    s2 = b.fmul(b.fdiv(frac, b.fadd(f.c(2.0), frac)), f.c(2.0))     # 2s
    z = b.fmul(s2, b.fmul(s2, f.c(0.25)))                            # s^2
    log_m = f.fma(b.fmul(s2, z), f.horner(z, ATANH_TAYLOR), s2)
    ef = b.fsub(f.from_bits(b.add(e, f.bits(f.c(SHIFTER)))), f.c(SHIFTER))   # (no int to float)
    return ef, log_m


def _log_specials(f: _F64, u, y):
    """log of u = 0 is -inf, of u < 0 NaN, of inf inf (NaN is the caller's)."""
    b = f.b
    y = b.select(b.fcmp_ordered("==", u, f.c(float("inf"))), u, y)
    y = b.select(b.fcmp_ordered("==", u, f.c(0.0)), f.c(float("-inf")), y)
    return b.select(b.fcmp_ordered("<", u, f.c(0.0)), f.c(float("nan")), y)


def _log_body(base: str):
    """log, log2 or log10 = (e ln2 + log m) / ln(base): every float32 > 0 is a normal float64,
    and the sum cancels by at most 2x (e = 1, m = sqrt(1/2)); log2 adds e exactly."""

    def body(f: _F64, x, math):
        b = f.b
        ef, log_m = _log_value(f, x)
        if base == "2":
            y = b.fadd(ef, b.fmul(log_m, f.c(INV_LN2)))
        else:
            y = f.fma(ef, f.c(LN2), log_m)
            y = b.fmul(y, f.c(INV_LN10)) if base == "10" else y
        return _log_specials(f, x, y)
    return body


def _log1p_body(f: _F64, x, math):
    """log(1 + x) with 1 + x exact in float64 for LOG1P_TINY <= |x| < 2^53 (x has 24 bits);
    below, x - x^2/2 (which keeps -0)."""
    b = f.b
    u = b.fadd(f.c(1.0), x)
    ef, log_m = _log_value(f, u)
    y = _log_specials(f, u, f.fma(ef, f.c(LN2), log_m))
    tiny = b.fsub(x, b.fmul(b.fmul(x, x), f.c(0.5)))
    return b.select(b.fcmp_ordered("<", f.abs(x), f.c(LOG1P_TINY)), tiny, y)


OWN_F32 = {"exp": ("sg_exp_f32", _exp_body), "expm1": ("sg_expm1_f32", _expm1_body),
           "sin": ("sg_sin_f32", _trig_body("sin")), "cos": ("sg_cos_f32", _trig_body("cos")),
           "tan": ("sg_tan_f32", _trig_body("tan")), "log": ("sg_log_f32", _log_body("e")),
           "log2": ("sg_log2_f32", _log_body("2")), "log10": ("sg_log10_f32", _log_body("10")),
           "log1p": ("sg_log1p_f32", _log1p_body), "tanh": ("sg_tanh_f32", _tanh_body)}


def call(builder: ir.IRBuilder, op: str, x, math: "CPUMath") -> ir.Value:
    """Our own float32 ``op`` of x (an op of OWN_F32), inlined."""
    name, body = OWN_F32[op]
    fn = _define(builder.module, name, lambda b, xd: body(_F64(b, math.fma), xd, math))
    return builder.call(fn, [x], name=op)
