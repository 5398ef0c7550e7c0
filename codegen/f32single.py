"""Our own float32 exp, sin, cos, log, log1p and tanh in float32 arithmetic, for CPUs with FMA
(``SINGLE_F32``: op -> (function name, body builder)): branch-free IR the loop vectoriser
widens at the full float32 width, twice the lanes of codegen.f32math's widened float64 code,
which CPUs without FMA run instead (``codegen.mathlib.CPUMath.call`` chooses; never with
``SYMGRAD_PRECISE_MATH=1``). Each within ``ULP_BOUND`` ulps over every float32, NaN,
infinities and signed zeros as the C functions.

Each reduction keeps its big terms exact in float32 with fma (x - k ln2_hi, x - k pi/2_hi, the
product k pi/2_mid split by fma and TwoSum) and ends with one rounding of a big exact term plus
a small one. Tables from benchmarks/derive_math_coefficients.py (``coefficients_f32``:
Chebyshev fits rounded to float32, each within 2^-30 of its function); ULP_BOUND is what
benchmarks/f32_exhaustive.py measured, rounded up. sin and cos reduce in float32 up to
REDUCE_MAX_F32 and call a far check of their own (``_far_single``) beyond, whose SIMD versions
run f32math's widened code on the far lanes only.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from llvmlite import ir

from .f32math import EXP_CLAMP, OWN_F32, _define, define_float
from .f64math import (_F64, Scalar, _any_lane, _far_function, _far_name, _if_far,
                      _mark_no_caller_saved, log_terms)

if TYPE_CHECKING:
    from .mathlib import CPUMath


EXP_POLY_F32 = [0.5, 0.1666666716337204, 0.04166645556688309, 0.00833331048488617,
                0.0013934543821960688, 0.00019891983538400382]     # (e^r - 1 - r) / r^2
LOG_POLY_F32 = [0.6666666865348816, 0.4000012278556824, 0.2855081856250763,
                0.23330561816692352]                          # (2 atanh s - 2s) / s^3 in s^2
TANH_POLY_F32 = [-0.3333333432674408, 0.1333332359790802, -0.05396470054984093,
                 0.02181844972074032, -0.008526332676410675,
                 0.0025263905990868807]                       # (tanh r - r) / r^3 in r^2
LN2_F32 = [0.6931471824645996, -1.9046542121259336e-09]
LOG_LN2_F32 = [0.693145751953125, 1.428606765330187e-06]
INV_LN2_F32 = [1.4426950216293335]
SHIFTER_F32 = 12582912.0        # 1.5 * 2^23: x + SHIFTER_F32 rounds x to an integer
SQRT_HALF_BITS_F32 = 0x3F3504F3
MIN_NORMAL_F32 = 2.0 ** -126
TANH_POLY_MAX_F32 = 0.55
TANH_CLAMP_F32 = 20.0           # 1 - 2 / (e^20 + 1) rounds to 1 in float32
SIGN_BIT_F32 = -(1 << 31)
SIN_POLY_F32 = [-0.1666666716337204, 0.008333331905305386, -0.00019840039021801203,
                2.7243779641139554e-06]                       # (sin r - r) / r^3 in r^2
COS_POLY_F32 = [0.0416666641831398, -0.0013888279208913445,
                2.454286914144177e-05]                        # (cos r - 1 + r^2/2) / r^4
PIO2_F32 = [1.5707963705062866, -4.371138828673793e-08, -1.7151245100058819e-15]
TWO_OVER_PI_F32 = [0.6366197466850281]
# sin and cos reduce in float32 up to here (k < 2^13.4: the reduction's error, k 2^-76 and
# the roundings of the last part, stays below 2^-56 absolute, 2^-28 of the smallest |r| of
# a float32, 2^-27.8 at 252.89821); beyond, and for inf, the widened code (Payne-Hanek from
# 2^21) through the far check FAR_F32
REDUCE_MAX_F32 = 2.0 ** 14


class _F32(Scalar):
    """Scalar float32 arithmetic (the vectoriser widens it at float32 width)."""

    def __init__(self, b: ir.IRBuilder, math: "CPUMath"):
        # fma rounds once (llvm.fma: this code is only emitted for CPUs with FMA)
        super().__init__(b, ir.FloatType(), ir.IntType(32), SIGN_BIT_F32, "llvm.fma")
        self.math = math
        self.f, self.i32 = self.ftype, self.itype

    def pow2(self, k):
        """2^k for k in [-126, 127], from the exponent bits."""
        return self.from_bits(self.b.shl(self.b.add(k, self.i(127)), self.i(23)))

    def scale(self, v, k):
        """v * 2^k for k in [-150, 128] in two steps (each factor normal): overflow to inf
        and gradual underflow round once, at the second product."""
        k1 = self.b.ashr(k, self.i(1))
        return self.b.fmul(self.b.fmul(v, self.pow2(k1)), self.pow2(self.b.sub(k, k1)))


def _define_single(module: ir.Module, name: str, body, math: "CPUMath") -> ir.Function:
    """``float name(float)`` computed in float32: ``body(f, x)``; NaN in, the same NaN out."""
    return define_float(module, name, lambda b, x: body(_F32(b, math), x))


def _exp_parts_f32(f: _F32, xc):
    """(k as i32, e^r - 1) with xc = k ln2 + r, |r| <= ln2/2, for xc in EXP_CLAMP: xc - k
    LN2_HI is exact in one fma (a multiple of 2^-25 below 1), the LN2_LO step rounds once
    (2^-24 of r, a fifth of an ulp of e^r)."""
    b = f.b
    t = f.fma(xc, f.c(INV_LN2_F32[0]), f.c(SHIFTER_F32))    # rint by the shifter: the low
    kf = b.fsub(t, f.c(SHIFTER_F32))                         # bits of t are k
    r = f.fma(b.fneg(kf), f.c(LN2_F32[0]), xc)
    r = f.fma(b.fneg(kf), f.c(LN2_F32[1]), r)
    p = f.fma(b.fmul(r, r), f.horner(r, EXP_POLY_F32), r)
    return b.sub(f.bits(t), f.bits(f.c(SHIFTER_F32))), p


def _exp_single(f: _F32, x):
    """e^x = 2^k (1 + p), x clamped to EXP_CLAMP (e^-104 rounds to 0, e^89 to inf)."""
    b = f.b
    lo, hi = EXP_CLAMP
    xc = b.select(b.fcmp_ordered("<", x, f.c(lo)), f.c(lo), x)
    xc = b.select(b.fcmp_ordered(">", xc, f.c(hi)), f.c(hi), xc)
    k, p = _exp_parts_f32(f, xc)
    return f.scale(b.fadd(f.c(1.0), p), k)


def _log_sum_f32(f: _F32, ef, frac, s, r, hfsq, low):
    """log u + low from log_terms of u (ef: e as a float) and a small ``low``, arranged as
    fdlibm's logf: e LOG_LN2_HI - ((f^2/2 - (s (f^2/2 + R) + e LOG_LN2_LO + low)) - f), where
    the big terms are exact."""
    b = f.b
    low = f.fma(ef, f.c(LOG_LN2_F32[1]), low)
    inner = b.fsub(b.fsub(hfsq, f.fma(s, b.fadd(hfsq, r), low)), frac)
    return b.fsub(b.fmul(ef, f.c(LOG_LN2_F32[0])), inner)


def _log_single(f: _F32, x):
    """log x; subnormal x scaled by 2^23 first (e - 23)."""
    b = f.b
    sub = b.fcmp_ordered("<", x, f.c(MIN_NORMAL_F32))
    u = b.select(sub, b.fmul(x, f.c(2.0 ** 23)), x)
    e, frac, s, r, hfsq = log_terms(f, u, SQRT_HALF_BITS_F32, LOG_POLY_F32)
    e = b.sub(e, b.select(sub, f.i(23), f.i(0)))
    y = _log_sum_f32(f, b.sitofp(e, f.f), frac, s, r, hfsq, f.c(0.0))
    y = b.select(b.fcmp_ordered("==", x, f.c(float("inf"))), x, y)
    y = b.select(b.fcmp_ordered("==", x, f.c(0.0)), f.c(float("-inf")), y)
    return b.select(b.fcmp_ordered("<", x, f.c(0.0)), f.c(float("nan")), y)


def _log1p_single(f: _F32, x):
    """log(1 + x) = log u + c / u with u = 1 + x rounded and c what the sum rounded off
    (Fast2Sum, exact: the larger of 1 and x first); u >= 2^-24 is normal. |x| < 2^-25:
    x itself (log1p x = x - x^2/2 rounds to x; -0 kept)."""
    b = f.b
    u = b.fadd(f.c(1.0), x)
    small = b.fcmp_ordered("<", x, f.c(1.0))
    big, other = b.select(small, f.c(1.0), x), b.select(small, x, f.c(1.0))
    c = b.fdiv(b.fsub(other, b.fsub(u, big)), u)
    e, frac, s, r, hfsq = log_terms(f, u, SQRT_HALF_BITS_F32, LOG_POLY_F32)
    y = _log_sum_f32(f, b.sitofp(e, f.f), frac, s, r, hfsq, c)
    y = b.select(b.fcmp_ordered("<", f.abs(x), f.c(2.0 ** -25)), x, y)
    y = b.select(b.fcmp_ordered("==", x, f.c(float("inf"))), x, y)
    y = b.select(b.fcmp_ordered("==", x, f.c(-1.0)), f.c(float("-inf")), y)
    return b.select(b.fcmp_ordered("<", x, f.c(-1.0)), f.c(float("nan")), y)


def _tanh_single(f: _F32, x):
    """tanh|x| = |x| + |x|^3 P(x^2) below TANH_POLY_MAX_F32, else 1 - 2 / (e^2|x| + 1) with
    the denominator (2^k + 1) + 2^k p kept as a sum of two floats (Fast2Sum) and the
    quotient and the final difference carried to one rounding; the sign is x's."""
    b = f.b
    ax = f.abs(x)
    z = b.fmul(ax, ax)
    poly = f.fma(b.fmul(ax, z), f.horner(z, TANH_POLY_F32), ax)
    two_ax = b.fmul(ax, f.c(2.0))
    two_ax = b.select(b.fcmp_ordered("<", two_ax, f.c(TANH_CLAMP_F32)), two_ax,
                      f.c(TANH_CLAMP_F32))
    k, p = _exp_parts_f32(f, two_ax)
    scale = f.pow2(k)
    head = b.fadd(scale, f.c(1.0))
    tail = b.fmul(scale, p)
    den = b.fadd(head, tail)
    den_lost = b.fsub(tail, b.fsub(den, head))
    # 2 / (den + den_lost) = w + corr: the division's remainder is exact in one fma
    w = b.fdiv(f.c(2.0), den)
    rem = f.fma(b.fneg(w), den, f.c(2.0))
    corr = b.fmul(f.fma(b.fneg(w), den_lost, rem), b.fmul(w, f.c(0.5)))
    # 1 - w - corr rounded once: 1 - w = h + lost exactly (Fast2Sum, 1 > w)
    h = b.fsub(f.c(1.0), w)
    lost = b.fsub(b.fsub(f.c(1.0), h), w)
    far = b.fadd(h, b.fsub(lost, corr))
    t = b.select(b.fcmp_ordered("<", ax, f.c(TANH_POLY_MAX_F32)), poly, far)
    return f.xor_sign(t, f.bits(x))


def _two_diff(f: _F32, a, y):
    """(s, e) with s + e = a - y exactly (Knuth's TwoSum)."""
    b = f.b
    s = b.fsub(a, y)
    v = b.fsub(s, a)
    return s, b.fadd(b.fsub(a, b.fsub(s, v)), b.fsub(b.fneg(y), v))


def _reduce_single(f: _F32, ax):
    """(k as i32, rh, rl) with ax = k pi/2 + rh + rl, for ax <= REDUCE_MAX_F32: ax - k C1 is
    exact in one fma (a multiple of 2^-24 below 1), k C2 splits exactly by fma and TwoSum
    keeps what the difference rounds; k C3 (2^-35 at most) rounds by 2^-59. rh + rl is not
    normalised where r is tiny: the polynomials use rl linearly, and there z is negligible."""
    b = f.b
    t = f.fma(ax, f.c(TWO_OVER_PI_F32[0]), f.c(SHIFTER_F32))
    kf = b.fsub(t, f.c(SHIFTER_F32))
    c1, c2, c3 = PIO2_F32
    r1 = f.fma(b.fneg(kf), f.c(c1), ax)
    w = b.fmul(kf, f.c(c2))
    w_lo = f.fma(kf, f.c(c2), b.fneg(w))
    rh, e = _two_diff(f, r1, w)
    rl = b.fsub(e, f.fma(kf, f.c(c3), w_lo))
    return b.sub(f.bits(t), f.bits(f.c(SHIFTER_F32))), rh, rl


def _sin_cos_reduced(f: _F32, rh, rl):
    """(sin r, cos r) of r = rh + rl, |r| <= pi/4, each a big exact term plus a small one
    rounded once: sin r = rh + (rl (1 - z/2) + rh z S(z)); cos r = w + ((1 - w - z/2) - zlo/2
    - rh rl + z^2 C(z)) with w = 1 - z/2 (Fast2Sum) and z + zlo = rh^2 exactly (fma)."""
    b = f.b
    z = b.fmul(rh, rh)
    sin_small = f.fma(b.fmul(rh, z), f.horner(z, SIN_POLY_F32),
                      f.fma(b.fmul(z, f.c(-0.5)), rl, rl))
    sin_r = b.fadd(rh, sin_small)
    z_lo = f.fma(rh, rh, b.fneg(z))
    hz = b.fmul(z, f.c(0.5))
    w = b.fsub(f.c(1.0), hz)
    tail = b.fsub(b.fsub(b.fsub(f.c(1.0), w), hz), b.fmul(z_lo, f.c(0.5)))
    tail = f.fma(b.fmul(z, z), f.horner(z, COS_POLY_F32), f.fma(b.fneg(rh), rl, tail))
    return sin_r, b.fadd(w, tail)


def _sin_cos_single(cname: str):
    """sin or cos: float32 Cody-Waite for |x| <= REDUCE_MAX_F32, the far check (FAR_F32:
    the widened code, lanes past the bound only) beyond, for inf and NaN."""

    def body(f: _F32, x):
        b = f.b
        ax = f.abs(x)
        near = b.fcmp_ordered("<=", ax, f.c(REDUCE_MAX_F32))
        k, rh, rl = _reduce_single(f, b.select(near, ax, f.c(0.0)))
        sin_r, cos_r = _sin_cos_reduced(f, rh, rl)
        q = b.add(k, f.i(1 if cname == "cos" else 0))      # cos x = sin(x + pi/2)
        odd = b.icmp_unsigned("!=", b.and_(q, f.i(1)), f.i(0))
        v = f.xor_sign(b.select(odd, cos_r, sin_r), b.shl(q, f.i(30)))
        if cname == "sin":
            v = f.xor_sign(v, f.bits(x))            # odd: sin(-0) = -0 too
        return b.select(near, v, b.call(_far_single(b.module, cname, f.math), [x]))
    return body


# The far checks of the float32 sin and cos, as f64math's of the float64 ones: a call with
# SIMD versions of our own (8 and 16 float lanes, no_caller_saved_registers: the check costs
# the loop a compare and a branch) that only when a lane is past REDUCE_MAX_F32 computes the
# widened function (OWN_F32's code) lane by lane. No 4-lane version: 128-bit helpers cannot
# keep every register (see f64math._mark_no_caller_saved); SSE-only CPUs call the scalar one.
FAR_F32 = ("sin", "cos")


def _far_single(module: ir.Module, cname: str, math: "CPUMath") -> ir.Function:
    """The declaration of ``symgrad_<cname>f_far(x)``: the float32 function where |x| >
    REDUCE_MAX_F32, else 0 (its library registered once per process and reduction)."""
    sym = _far_name(cname + "f", math)
    fn = module.globals.get(sym)
    if fn is not None:
        return fn
    _far_library_f32(math)
    fl = ir.FloatType()
    fn = ir.Function(module, ir.FunctionType(fl, [fl]), sym)
    notes = getattr(module, "math_calls", None)
    if notes is not None:
        notes.add((cname + "f_far", "float32", 1, sym))
    return fn


def _far_library_f32(math: "CPUMath") -> None:
    key = ("float32", math.fma)
    if key in math._far_loaded:
        return
    math.far_library()              # the float64 far checks the widened code calls
    for cname in FAR_F32:
        text, public = _far_checks_text_f32(math, cname)
        math.add_library_module(text, public, replace=True)
    math._far_loaded.add(key)


def _is_far_f32(b: ir.IRBuilder, x):
    ty = x.type
    vector = isinstance(ty, ir.VectorType)
    name = f"llvm.fabs.v{ty.count}f32" if vector else "llvm.fabs.f32"
    fabs = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(ty, [ty]), name)
    bound = ir.Constant(ty, [REDUCE_MAX_F32] * ty.count if vector else REDUCE_MAX_F32)
    return b.fcmp_ordered(">", b.call(fabs, [x]), bound, name="far")


def _far_checks_text_f32(math: "CPUMath", cname: str) -> tuple[str, dict[str, str]]:
    """The scalar far check (the widened function inlined, under the far test) and its SIMD
    versions (the scalar one on every lane, only when one lane is far)."""
    fl = ir.FloatType()
    module = ir.Module(name=f"symgrad_{cname}f_far")
    name, wide_body = OWN_F32[cname]
    widened = _define(module, name, lambda b, xd: wide_body(_F64(b, math.fma), xd, math))
    public_scalar = _far_name(cname + "f", math)
    scalar = _far_function(module, "sg_" + public_scalar, [fl])
    scalar.linkage = ""
    b = ir.IRBuilder(scalar.append_basic_block("entry"))
    x = scalar.args[0]
    b.ret(_if_far(b, _is_far_f32(b, x), lambda: b.call(widened, [x]), ir.Constant(fl, 0.0)))
    public = {public_scalar: scalar.name}
    for vname, lanes in math.variants(cname + "f_far", "float32", 1):
        vt = ir.VectorType(fl, lanes)
        each = _far_lanes_f32(module, f"sg_{public_scalar}_lanes{lanes}", vt, scalar)
        fn = _far_function(module, "sg_" + vname, [vt])
        fn.linkage = ""
        public[vname] = fn.name
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        xv = fn.args[0]
        b.ret(_if_far(b, _any_lane(b, _is_far_f32(b, xv)),
                      lambda b=b, xv=xv, each=each: b.call(each, [xv]),
                      ir.Constant(vt, [0.0] * lanes)))
    groups: list[str] = []
    text = _mark_no_caller_saved(str(module).replace('@"sg__ZGV', '@"_ZGV'), groups)
    text = text.replace('@"_ZGV', '@"sg__ZGV')      # (the mark matches the public names)
    text = _FAR_LANES_F32.sub(r"\1 #899", text)
    return text + "\n" + "\n".join(groups) + "\n", public


# the lane loops of the float32 far checks: no_caller_saved_registers too (the group
# _mark_no_caller_saved added for the checks), so that the checks, which call only them, keep
# every register and cost the loop around no spills
_FAR_LANES_F32 = re.compile(r'^(define [^\n]*@"sg_symgrad_\w+f_far(_fma)?_lanes(8|16)"\([^\n]*)$',
                            re.M)


def _far_lanes_f32(module: ir.Module, name: str, vt: ir.VectorType, scalar) -> ir.Function:
    """The scalar far check on every lane (out of line: only reached when a lane is far)."""
    fn = _far_function(module, name, [vt], rare=True)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    xv = out = fn.args[0]
    for k in range(vt.count):
        lane = ir.Constant(ir.IntType(32), k)
        out = b.insert_element(out, b.call(scalar, [b.extract_element(xv, lane)]), lane)
    b.ret(out)
    return fn


# op -> (function name, body): computed in float32 where the CPU has FMA (CPUMath.fma)
SINGLE_F32 = {"exp": ("sg_exp_f32s", _exp_single), "sin": ("sg_sin_f32s", _sin_cos_single("sin")),
              "cos": ("sg_cos_f32s", _sin_cos_single("cos")), "log": ("sg_log_f32s", _log_single),
              "log1p": ("sg_log1p_f32s", _log1p_single), "tanh": ("sg_tanh_f32s", _tanh_single)}
# op -> the largest error in float32 ulps of SINGLE_F32's code over every float32
# (benchmarks/f32_exhaustive.py measured, rounded up; tests/test_math_accuracy_f32.py holds
# samples to it)
ULP_BOUND = {"sin": 1.0, "cos": 1.0, "exp": 1.0, "log": 1.0, "log1p": 1.0, "tanh": 1.0}


def call(builder: ir.IRBuilder, op: str, x, math: "CPUMath") -> ir.Value:
    """Our own float32 ``op`` of x in float32 arithmetic (an op of SINGLE_F32), inlined."""
    name, body = SINGLE_F32[op]
    fn = _define_single(builder.module, name, body, math)
    return builder.call(fn, [x], name=op)
