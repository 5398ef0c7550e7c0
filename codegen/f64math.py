"""Our own float64 math functions, as LLVM IR the loop vectoriser widens with the rest of a
fused loop: exp, expm1, sin, cos, tan, log1p and tanh (``OWN_F64``: op -> (function name, body
builder)), within 1.8 ulp over the whole float64 range (expm1 1.77, tanh 0.84), and the
far-argument library of sin/cos/tan (Payne-Hanek reduction, compiled once per process).
``codegen.mathlib.CPUMath`` calls them in place of libm/libmvec unless
``SYMGRAD_PRECISE_MATH=1``.

Why this module is long: each function is a sequence of IR-building steps (range reduction,
polynomial, reconstruction, special cases) that shares the helpers above it (``_F64``, the
pi/2 reduction, the far-lane machinery); split further, each piece would be read without the
reduction it relies on.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from llvmlite import ir

if TYPE_CHECKING:
    from .mathlib import CPUMath

_NO_CALLER_SAVED = re.compile(r'^((define|declare) [^\n]*@"(_ZGV[a-z]N(4|8|16)v_symgrad_\w+_far'
                              r'(_fma)?|(sg_)?symgrad_trig_far_lanes(4|8|16)(_fma)?)"\([^\n]*)$',
                              re.M)
NO_CALLER_SAVED_GROUP = 'attributes #899 = { "no_caller_saved_registers" }'


def _mark_no_caller_saved(text: str, groups: list[str]) -> str:
    """Give the 256- and 512-bit far-argument helpers (``_far_libraries``) the x86
    ``no_caller_saved_registers`` attribute, on their definitions and on the kernels'
    declarations (llvmlite has no string function attributes, hence the text edit). Not the
    scalar and 2-lane ones: LLVM ends a function whose result is narrower than 256 bits with
    ``vzeroupper`` when it saved wide registers, which would clear the upper lanes its caller
    relies on being preserved."""
    if not _NO_CALLER_SAVED.search(text):
        return text
    if NO_CALLER_SAVED_GROUP not in groups:
        groups.append(NO_CALLER_SAVED_GROUP)
    return _NO_CALLER_SAVED.sub(r"\1 #899", text)


# ----------------------------------------------------------------------------------------------
# Our own float64 exp and expm1: branch-free IR the loop vectoriser widens like any arithmetic,
# accurate to < 1 ulp (libmvec's AVX2 exp/expm1 reach 2.9 ulp). Reduction x = k ln2 + r with
# ln2 split Cody-Waite style (k * LN2_HI is exact for |k| < 2^21), |r| <= ln2/2, then
# e^r - 1 = r + r^2 Q(r) with Q a Chebyshev fit to r^10 (EXP_POLY: 3e-19 relative to e^r),
# by Horner's rule. The Taylor series needs terms to r^13 for 4e-18: one multiply-add more
# per element (W2's exp pass 2% slower). Estrin's scheme, with its shorter chain, made that
# pass 6% slower (two multiplies more) and W1 no faster, so Horner it is.

LN2_HI = 6.93147180369123816490e-01     # 0x3FE62E42FEE00000: 32 significant bits
LN2_LO = 1.90821492927058770002e-10
INV_LN2 = 1.44269504088896338700e+00
EXP_POLY = [0.5, 0.1666666666666667, 0.04166666666666667, 0.008333333333326084,
            0.0013888888888883711, 0.0001984126987500228, 2.480158732567746e-05,
            2.7557255170001095e-06, 2.755727347871873e-07, 2.5105312729536056e-08,
            2.0914755325831755e-09]     # (e^r - 1 - r) / r^2, |r| <= ln2/2
TANH_EXP_POLY = [0.5, 0.16666666666666605, 0.04166666666670298, 0.008333333332518305,
                 0.0013888888982583854, 0.00019841263566769927, 2.4801848727673565e-05,
                 2.7550345434185905e-06, 2.767620651330766e-07, 2.3806392752218538e-08,
                 2.8066287344840106e-09]    # the same for 0 <= r < ln2 (_tanh_body)


def _exp_parts(b: ir.IRBuilder, x):
    """(k as i64, e^r - 1) for x clamped to [-746, 710] (NaN handled by the callers): x = k ln2
    + r, k rounded to nearest, |r| <= ln2/2."""
    d = ir.DoubleType()
    c = lambda v: ir.Constant(d, v)   # noqa: E731 - local shorthand
    # fmuladd: a fused multiply-add where the CPU has one (Horner at half the instructions)
    fma = b.module.declare_intrinsic("llvm.fmuladd", [d], ir.FunctionType(d, [d, d, d]))
    # clamp with compares and selects (cheap blends; NaN is patched by the caller)
    xc = b.select(b.fcmp_ordered("<", x, c(-746.0)), c(-746.0), x)
    xc = b.select(b.fcmp_ordered(">", xc, c(710.0)), c(710.0), xc)
    k, r, q = _exp_reduction(b, xc, "llvm.rint", EXP_POLY)
    return k, b.call(fma, [b.fmul(r, r), q, r])           # e^r - 1


def _exp_reduction(b: ir.IRBuilder, x, rounding: str, poly: list):
    """(k as i64, r, Q(r)) with x = k ln2 + r, k = x / ln2 rounded by the ``rounding``
    intrinsic, and e^r - 1 = r + r^2 Q(r) (``poly``: EXP_POLY or TANH_EXP_POLY, fitted to
    the r that rounding leaves); |x| <= 746 (ln2 in two parts: k LN2_HI is exact)."""
    d = ir.DoubleType()
    c = lambda v: ir.Constant(d, v)   # noqa: E731 - local shorthand
    mod = b.module
    rint = mod.declare_intrinsic(rounding, [d], ir.FunctionType(d, [d]))
    kf = b.call(rint, [b.fmul(x, c(INV_LN2))])
    r = b.fsub(b.fsub(x, b.fmul(kf, c(LN2_HI))), b.fmul(kf, c(LN2_LO)))
    return b.fptosi(kf, ir.IntType(64)), r, _F64(b).horner(r, poly)


def _pow2(b: ir.IRBuilder, k):
    """2^k as a double for k in [-1022, 1023] (built from the exponent bits)."""
    i64 = ir.IntType(64)
    bits = b.shl(b.add(k, ir.Constant(i64, 1023)), ir.Constant(i64, 52))
    return b.bitcast(bits, ir.DoubleType())


def _scale(b: ir.IRBuilder, v, k):
    """v * 2^k for k in [-1076, 1024], in two steps so neither factor leaves the normal range
    (overflow to inf and gradual underflow come out right)."""
    i64 = ir.IntType(64)
    k1 = b.ashr(k, ir.Constant(i64, 1))
    return b.fmul(b.fmul(v, _pow2(b, k1)), _pow2(b, b.sub(k, k1)))


def _define(module: ir.Module, name: str, body) -> ir.Function:
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    d = ir.DoubleType()
    fn = ir.Function(module, ir.FunctionType(d, [d]), name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")   # inlined before the vectoriser runs
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    out = body(b, x)
    isnan = b.fcmp_unordered("uno", x, x)
    b.ret(b.select(isnan, x, out))
    return fn


def _exp_body(b, x, math=None):
    k, p = _exp_parts(b, x)
    return _scale(b, b.fadd(ir.Constant(ir.DoubleType(), 1.0), p), k)


def _expm1_body(b, x, math=None):
    """e^x - 1 = 2^k p + (2^k - 1): both terms exact-ish for |k| <= 53 (no cancellation for
    k >= 0, mild for k < 0); beyond, 2^k (1 + p) - 1."""
    d, i64 = ir.DoubleType(), ir.IntType(64)
    k, p = _exp_parts(b, x)
    one = ir.Constant(d, 1.0)
    small = b.icmp_signed("<=", b.select(b.icmp_signed("<", k, ir.Constant(i64, 0)),
                                         b.neg(k), k), ir.Constant(i64, 53))
    ks = b.select(small, k, ir.Constant(i64, 0))     # keep _pow2 in range on both paths
    t = _pow2(b, ks)
    near = b.fadd(b.fmul(t, p), b.fsub(t, one))
    far = b.fsub(_scale(b, b.fadd(one, p), k), one)
    # expm1(-0) is -0 (near's sum of zeros is +0)
    return b.select(b.fcmp_ordered("==", x, ir.Constant(d, 0.0)), x, b.select(small, near, far))



# ----------------------------------------------------------------------------------------------
# Our own float64 sin, cos, log1p and tanh, in the same style. Polynomial coefficients and the
# pi/2 split are derived with mpmath by benchmarks/derive_math_coefficients.py (Chebyshev fits;
# tests/test_math_accuracy.py re-derives them and checks these tables).

PIO2_PARTS = [1.5707963267341256, 6.077100506303966e-11, 2.0222662487111665e-21,
              8.4784276603689e-32]     # pi/2 = sum; the first three have 32 significant bits
PIO2_FMA_PARTS = [1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33]
TWO_OVER_PI = 0.6366197723675814
TWO_OVER_PI_BITS = int(
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a424dd2e006492eea09"
    "d1921cfe1deb1cb129a73ee88235f52ebb4484e99c7026b45f7e413991d639835339f49c845f8bbdf9283b1ff8"
    "97ffde05980fef2f118b5a0a6d1f6d367ecf27cb09b74f463f669e5fea2d7527bac7ebe5f17b3d0739f78a5292"
    "ea6bfb5fb11f8d5d0856033046fc7b6bab", 16)     # floor(2/pi 2^1216)
TWO_OVER_PI_WORDS = 20                  # 19 words of bits and one of zeros above them
SIN_POLY = [-0.16666666666666666, 0.008333333333333331, -0.00019841269841264567,
            2.755731921895467e-06, -2.5052106100223988e-08, 1.6058510870346914e-10,
            -7.585486197905696e-13]          # (sin r - r) / r^3 in z = r^2, |r| <= pi/4
COS_POLY = [0.041666666666666664, -0.0013888888888887241, 2.4801587298532203e-05,
            -2.7557317151829844e-07, 2.0876121528679728e-09,
            -1.1380867752723252e-11]         # (cos r - 1 + z/2) / z^2
LOG_POLY = [0.6666666666666666, 0.4000000000000088, 0.2857142857080329, 0.222222223917858,
            0.18181795632452163, 0.1538624012056702, 0.13268761951330021,
            0.13086743139119072]             # (2 atanh s - 2 s) / s^3 in z = s^2, |s| <= 0.1716


# Cody-Waite bound: k = rint(|x| 2/pi) < 2^21 keeps k * PIO2_PARTS[i] exact (32 + 21 bits).
# Lanes beyond it (and inf) take our Payne-Hanek reduction (_payne_hanek) through a call.
REDUCE_MAX = 2.0 ** 21
SHIFTER = 6755399441055744.0            # 1.5 * 2^52: x + SHIFTER rounds x to an integer
SIGN_BIT = -(1 << 63)


class Scalar:
    """Shorthand for emitting scalar arithmetic in one float type and the integer type of its
    width (the vectoriser widens all of it). ``fma_intrinsic`` is the one ``fma`` calls:
    llvm.fmuladd where either rounding is fine (_F64), llvm.fma where one rounding is needed."""

    def __init__(self, b: ir.IRBuilder, ftype, itype, sign_bit: int, fma_intrinsic: str):
        self.b = b
        self.ftype, self.itype, self.sign_bit = ftype, itype, sign_bit
        self._fma = self._intrinsic(fma_intrinsic, 3)
        self._fabs = self._intrinsic("llvm.fabs", 1)

    def _intrinsic(self, name: str, arity: int):
        return self.b.module.declare_intrinsic(
            name, [self.ftype], ir.FunctionType(self.ftype, [self.ftype] * arity))

    def fma(self, a, x, y):
        return self.b.call(self._fma, [a, x, y])

    def c(self, v):
        return ir.Constant(self.ftype, v)

    def i(self, v):
        return ir.Constant(self.itype, v)

    def abs(self, x):
        return self.b.call(self._fabs, [x])

    def horner(self, z, coeffs):
        acc = self.c(coeffs[-1])
        for coef in reversed(coeffs[:-1]):
            acc = self.fma(acc, z, self.c(coef))
        return acc

    def bits(self, x):
        return self.b.bitcast(x, self.itype)

    def from_bits(self, n):
        return self.b.bitcast(n, self.ftype)

    def xor_sign(self, x, sign):
        """x with its sign bit xor-ed by the sign bit of the integer ``sign``."""
        return self.from_bits(self.b.xor(self.bits(x), self.b.and_(sign, self.i(self.sign_bit))))


def log_terms(f: Scalar, u, sqrt_half_bits: int, poly):
    """fdlibm's terms of log u for a finite u > 0 (normal: callers scale subnormals): u = 2^e m
    with m in [sqrt(1/2), sqrt(2)) (``sqrt_half_bits``: the bits of sqrt(1/2) in u's type),
    f = m - 1 (exact), s = f / (2 + f), R = s^2 poly(s^2) and f^2 / 2; returns (e as an
    integer, f, s, R, f^2 / 2). log m = 2 atanh s = f - (f^2/2 - s (f^2/2 + R))."""
    b = f.b
    mantissa = {64: 52, 32: 23}[f.itype.width]
    bits = f.bits(u)
    e = b.ashr(b.sub(bits, f.i(sqrt_half_bits)), f.i(mantissa))
    m = f.from_bits(b.sub(bits, b.shl(e, f.i(mantissa))))
    frac = b.fsub(m, f.c(1.0))
    s = b.fdiv(frac, b.fadd(f.c(2.0), frac))
    z = b.fmul(s, s)
    r = b.fmul(z, f.horner(z, poly))
    hfsq = b.fmul(b.fmul(frac, frac), f.c(0.5))
    return e, frac, s, r, hfsq


class _F64(Scalar):
    """Scalar double arithmetic."""

    def __init__(self, b: ir.IRBuilder, fused: bool = True):
        super().__init__(b, ir.DoubleType(), ir.IntType(64), SIGN_BIT, "llvm.fmuladd")
        self.fused = fused      # False: CPUs without FMA (and tests of their code path)
        self.d, self.i64 = self.ftype, self.itype

    def fma(self, a, x, y):
        """a * x + y, fused where the CPU can (only used where either rounding is fine);
        spelled as a multiply and an add for CPUs without FMA, which is what llvm.fmuladd
        becomes there anyway, so that other machines can test that code path too."""
        if not self.fused:
            return self.b.fadd(self.b.fmul(a, x), y)
        return super().fma(a, x, y)

    def fma_exact(self, a, x, y):
        """a * x + y with one rounding (llvm.fma: only emitted for CPUs that have FMA)."""
        return self.b.call(self._intrinsic("llvm.fma", 3), [a, x, y])

    def fast_two_sum(self, a, y):
        """(s, e) with s + e = a + y exactly, for a = 0 or a's exponent >= y's (Dekker)."""
        b = self.b
        s = b.fadd(a, y)
        return s, b.fsub(y, b.fsub(s, a))

    def two_sum(self, a, y):
        """(s, e) with s + e = a + y exactly (Knuth's TwoSum, any magnitudes)."""
        b = self.b
        s = b.fadd(a, y)
        v = b.fsub(s, a)
        return s, b.fadd(b.fsub(a, b.fsub(s, v)), b.fsub(y, v))

    def two_diff(self, a, y):
        """(s, e) with s + e = a - y exactly (Knuth's branch-free TwoSum)."""
        b = self.b
        s = b.fsub(a, y)
        v = b.fsub(s, a)
        return s, b.fadd(b.fsub(a, b.fsub(s, v)), b.fsub(b.fneg(y), v))


def _reduce_pio2(f: _F64, ax, fused: bool):
    """|x| = k pi/2 + (rh + rl) for 0 <= |x| <= REDUCE_MAX: returns (k as i64, rh, rl), r
    right to ~2^-120 absolute even next to a multiple of pi/2, where it cancels to ~2^-60.

    rh + rl need not be normalised (rl may exceed half an ulp of rh by a few bits where r is
    tiny): the polynomials use rl only linearly, and there the r^2 terms are negligible.
    """
    b = f.b
    t = b.fadd(b.fmul(ax, f.c(TWO_OVER_PI)), f.c(SHIFTER))
    k = b.fsub(t, f.c(SHIFTER))
    if fused:
        # pi/2 in three 53-bit parts (159 bits): ax - k C1 is exact in one fma (the result
        # fits: it is a multiple of 2^-52 below 1, or Sterbenz for |x| < 1), k C2 is split
        # exactly by fma, and a TwoSum keeps what the subtraction rounds off. (Dropping the
        # TwoSum for a second fma on r - rh loses 2^-86 next to multiples of pi/2, where r is
        # 2^-60: 6.7 ulp; test_sin_cos_next_to_multiples_of_half_pi catches it.)
        c1, c2, c3 = PIO2_FMA_PARTS
        r = f.fma_exact(b.fneg(k), f.c(c1), ax)
        w = b.fmul(k, f.c(c2))
        w_low = f.fma_exact(k, f.c(c2), b.fneg(w))
        rh, e = f.two_diff(r, w)
        return f.bits(t), rh, b.fsub(e, b.fadd(w_low, b.fmul(k, f.c(c3))))
    # Without FMA, Cody-Waite with a four-part pi/2 (149 bits): ax - k P1 is exact
    # (Sterbenz), k P2 and k P3 are exact, and two TwoSums keep what the subtractions round off.
    p1, p2, p3, p4 = (b.fmul(k, f.c(p)) for p in PIO2_PARTS)
    a = b.fsub(ax, p1)
    s1, e1 = f.two_diff(a, p2)
    rh, e2 = f.two_diff(s1, p3)
    return f.bits(t), rh, b.fsub(b.fadd(e1, e2), p4)      # the low bits of t are k


def _sin_poly(f: _F64, rh, rl, z):
    """sin(rh + rl) = rh + (rh z S(z) + rl (1 - z/2)) for |rh| <= pi/4, as (head, rest)."""
    tail = f.b.fmul(rl, f.fma(z, f.c(-0.5), f.c(1.0)))
    return rh, f.fma(f.b.fmul(rh, z), f.horner(z, SIN_POLY), tail)


def _cos_poly(f: _F64, rh, rl, z):
    """cos(rh + rl) = w + ((1 - w) - z/2 + z^2 C(z) - rh rl) with w = 1 - z/2 rounded: the
    parenthesis recovers what w rounded off, so the sum is within ~0.6 ulp. (head, rest)."""
    b = f.b
    hz = b.fmul(z, f.c(0.5))
    w = b.fsub(f.c(1.0), hz)
    lost = b.fsub(b.fsub(f.c(1.0), w), hz)
    tail = f.fma(b.fmul(z, z), f.horner(z, COS_POLY), b.fneg(b.fmul(rh, rl)))
    return w, b.fadd(lost, tail)


def _quotient(f: _F64, num, den):
    """(nh + nl) / (dh + dl), each pair a head and a smaller rest: the rounded quotient q0 of
    the rounded sums, corrected by the residual (n - q0 d) / d, with the parts each sum
    rounded off (Fast2Sum: the heads are the bigger terms) and fma's exact q0 d where the CPU
    has FMA, so the result is within ~1 ulp."""
    b = f.b
    (nh, nl), (dh, dl) = num, den
    n, d = b.fadd(nh, nl), b.fadd(dh, dl)
    n_lost = b.fsub(nl, b.fsub(n, nh))
    d_lost = b.fsub(dl, b.fsub(d, dh))
    q0 = b.fdiv(n, d)
    residual = b.fadd(f.fma(b.fneg(q0), d, n), f.fma(b.fneg(q0), d_lost, n_lost))
    return b.fadd(q0, b.fdiv(residual, d))


def _sin_cos_body(cname: str):
    """sin, cos or tan: the polynomials of the quadrant for |x| <= REDUCE_MAX (Cody-Waite),
    a call that reduces the rare far lanes with Payne-Hanek beyond."""

    def body(b, x, math):
        f = _F64(b, math.fma)
        ax = f.abs(x)
        near = b.fcmp_ordered("<=", ax, f.c(REDUCE_MAX))
        k, rh, rl = _reduce_pio2(f, b.select(near, ax, f.c(0.0)), math.fma)   # far, NaN: 0
        v = _quadrant_value(f, cname, x, k, rh, rl)
        return b.select(near, v, b.call(_far_helper(b.module, cname, math), [x]))
    return body


def _quadrant_value(f: _F64, cname: str, x, k, rh, rl):
    """sin, cos or tan of |x| = k pi/2 + rh + rl (only k's low two bits matter), signed."""
    b = f.b
    z = b.fmul(rh, rh)
    sin_r, cos_r = _sin_poly(f, rh, rl, z), _cos_poly(f, rh, rl, z)
    q = b.add(k, f.i(1 if cname == "cos" else 0))  # cos x = sin(x + pi/2): one quadrant on
    odd = b.icmp_unsigned("!=", b.and_(q, f.i(1)), f.i(0))
    pick = lambda a, c: tuple(b.select(odd, u, v) for u, v in zip(a, c))   # noqa: E731
    if cname == "tan":      # tan(r + k pi/2) = tan r for even k, -1 / tan r for odd k
        v = _quotient(f, pick(cos_r, sin_r), pick(sin_r, cos_r))
        v = f.xor_sign(v, b.shl(q, f.i(63)))
    else:
        v = b.fadd(*pick(cos_r, sin_r))
        v = f.xor_sign(v, b.shl(q, f.i(62)))       # quadrants 2 and 3 negate
    if cname != "cos":
        v = f.xor_sign(v, f.bits(x))               # odd functions: f(-0) = -0 too
    return v


def _payne_hanek(f: _F64, ax):
    """|x| = k pi/2 + (rh + rl) for huge finite |x| > REDUCE_MAX (scalar code: far lanes only).

    |x| = m 2^e with m a 53-bit integer. Bits of 2/pi worth 4 / 2^e or more only add multiples
    of 4 to |x| 2/pi, so a 192-bit window W of them starting there (2 integer and 190
    fraction bits once times 2^e) gives |x| 2/pi mod 4 = m W mod 2^192, exactly up to the
    2^-137 the window drops. Its top bits (rounded) are k, the rest f in [-1/2, 1/2), from
    which r = f pi/2. In 64-bit words with 128-bit products (what x86-64 multiplies natively).
    """
    b = f.b
    i64, i128 = f.i64, ir.IntType(128)
    bits = f.bits(ax)
    e = b.sub(b.lshr(bits, f.i(52)), f.i(1075))
    e = b.select(b.icmp_signed("<", e, f.i(-31)), f.i(-31), e)   # 2^21 = 2^52 2^-31
    e = b.select(b.icmp_signed(">", e, f.i(972)), f.i(972), e)   # inf: any window (NaN later)
    m = b.or_(b.and_(bits, f.i((1 << 52) - 1)), f.i(1 << 52))
    shift = b.sub(f.i(1216 - 190), e)                            # bit of 2/pi 2^1216 at W's 0
    table = _two_over_pi_table(b.module)
    word, offset = b.lshr(shift, f.i(6)), b.and_(shift, f.i(63))
    words = [b.load(b.gep(table, [ir.Constant(ir.IntType(32), 0), b.add(word, f.i(j))],
                          inbounds=True)) for j in range(4)]
    # W's words: (t_j >> offset) | (t_j+1 << (64 - offset)), the second shift split in two
    # so that offset 0 shifts by 64 nowhere (that would be poison)
    window = [b.or_(b.lshr(words[j], offset),
                    b.shl(b.shl(words[j + 1], f.i(1)), b.sub(f.i(63), offset))) for j in range(3)]
    # m W mod 2^192, word by word: s1 = (m w0 >> 64) + m w1, s2 = (s1 >> 64) + m w2
    wide = lambda v: b.zext(v, i128)                             # noqa: E731
    low = lambda v: b.trunc(v, i64)                              # noqa: E731
    m128 = wide(m)
    p0 = b.mul(m128, wide(window[0]))
    s1 = b.add(b.lshr(p0, ir.Constant(i128, 64)), b.mul(m128, wide(window[1])))
    s2 = b.add(b.lshr(s1, ir.Constant(i128, 64)), b.mul(m128, wide(window[2])))
    top = b.add(low(s2), f.i(1 << 61))                           # + 2^189: round k to nearest
    k = b.lshr(top, f.i(62))
    # f 2^126 as a signed 128-bit number: the top word's low 62 bits minus 2^61, then s1's
    # low word (the third word only adds < 2^-126, far below f's >= 2^-62)
    head = b.sub(b.and_(top, f.i((1 << 62) - 1)), f.i(1 << 61))
    frac = b.or_(b.shl(b.sext(head, i128), ir.Constant(i128, 64)), wide(low(s1)))
    negative = b.icmp_signed("<", frac, ir.Constant(i128, 0))
    mag = b.select(negative, b.neg(frac), frac)
    ctlz = b.module.declare_intrinsic("llvm.ctlz", [i128],
                                      ir.FunctionType(i128, [i128, ir.IntType(1)]))
    lz = b.call(ctlz, [mag, ir.Constant(ir.IntType(1), 0)])
    lz = b.select(b.icmp_unsigned(">", lz, ir.Constant(i128, 127)), ir.Constant(i128, 127), lz)
    norm = b.shl(mag, lz)                                        # leading bit at 127
    lz64 = low(lz)
    # f = norm 2^(-126 - lz): its top 53 bits exactly, then the next 64 (rounded)
    hi = b.fmul(b.uitofp(low(b.lshr(norm, ir.Constant(i128, 75))), f.d),
                _pow2(b, b.sub(f.i(75 - 126), lz64)))
    lo = b.fmul(b.uitofp(low(b.lshr(norm, ir.Constant(i128, 11))), f.d),
                _pow2(b, b.sub(f.i(11 - 126), lz64)))
    hi = b.select(negative, b.fneg(hi), hi)
    lo = b.select(negative, b.fneg(lo), lo)
    # r = (hi + lo) pi/2 as a double-double (fma exact: this is scalar code, libm's fma on
    # CPUs without FMA is fine for the rare far lanes)
    c1, c2 = PIO2_FMA_PARTS[0], PIO2_FMA_PARTS[1]
    rh = b.fmul(hi, f.c(c1))
    rest = b.fadd(b.fmul(hi, f.c(c2)), b.fmul(lo, f.c(c1)))
    rl = b.fadd(f.fma_exact(hi, f.c(c1), b.fneg(rh)), rest)
    s = b.fadd(rh, rl)
    return k, s, b.fsub(rl, b.fsub(s, rh))


def _two_over_pi_table(module: ir.Module):
    table = module.globals.get("symgrad_two_over_pi")
    if table is None:
        ty = ir.ArrayType(ir.IntType(64), TWO_OVER_PI_WORDS)
        words = [(TWO_OVER_PI_BITS >> (64 * j)) & ((1 << 64) - 1) for j in range(TWO_OVER_PI_WORDS)]
        table = ir.GlobalVariable(module, ty, "symgrad_two_over_pi")
        table.global_constant = True
        table.linkage = "internal"
        table.initializer = ir.Constant(ty, words)
    return table


FAR_FUNCTIONS = {"sin": 0, "cos": 1, "tan": 2}     # the shared far code's selector


def _far_helper(module: ir.Module, cname: str, math: "CPUMath") -> ir.Function:
    """The declaration of ``symgrad_<cname>_far(x)``: sin, cos or tan where |x| >
    REDUCE_MAX, else 0, from the far libraries (``_far_libraries``, compiled once per process).

    It stays a call with SIMD versions of our own, ``_ZGV<isa>N<lanes>v_...``, that the loop
    vectoriser substitutes like libmvec's, so the loop around stays vectorised. Each tests
    all lanes at once and only when one is far runs our Payne-Hanek reduction on the far
    lanes. The 256- and 512-bit ones are ``no_caller_saved_registers`` (see
    _mark_no_caller_saved): with the C convention every vector register is caller-saved, and
    the loop would reload all its constants after each call; this way the check costs a
    compare and a branch. Kept out of the kernels, the code costs them no compile time.
    """
    sym = _far_name(cname, math)
    fn = module.globals.get(sym)
    if fn is not None:
        return fn
    math.far_library()
    d = ir.DoubleType()
    fn = ir.Function(module, ir.FunctionType(d, [d]), sym)
    notes = getattr(module, "math_calls", None)     # absent where no SIMD text is attached
    if notes is not None:
        notes.add((cname + "_far", "float64", 1, sym))
    return fn


def _far_name(cname: str, math: "CPUMath") -> str:
    # The two reductions (FMA or not, see _F64) are separate libraries with separate names.
    return f"symgrad_{cname}_far" + ("_fma" if math.fma else "")


def _far_libraries(math: "CPUMath") -> list[tuple[str, dict[str, str]]]:
    """The far libraries' module texts, each with {public symbol: its sg_ name in the
    module}: the shared Payne-Hanek code (``_far_core_text``), then per function of
    FAR_FUNCTIONS its checks (``_far_checks_text``), which call the shared code. A kernel
    that calls only sin and cos compiles no tan checks."""
    return [_far_core_text(math)] + [_far_checks_text(math, cname) for cname in FAR_FUNCTIONS]


def _far_core_name(lanes: int, math: "CPUMath") -> str:
    tag = "_fma" if math.fma else ""
    return f"symgrad_trig_far{tag}" if lanes == 1 else f"symgrad_trig_far_lanes{lanes}{tag}"


def _far_core_text(math: "CPUMath") -> tuple[str, dict[str, str]]:
    """``symgrad_trig_far(x, which)`` and its lane loops, a library of optnone functions
    only (codegen.jit.is_light: no IR pipeline, the -O0 code generator, a fraction of the
    -O3 one's time on this long code). Only far lanes get here; optnone, its instructions are
    selected alike by either code generator, so its results are the same."""
    module = ir.Module(name="symgrad_far_core")
    tag = "_fma" if math.fma else ""
    public = {}
    scalar = _far_value(module, math, tag)
    fns = [(1, scalar)] + [(lanes, _far_lanes(module, lanes, math, tag))
                           for lanes in sorted({n for _, n in _far_widths(math)})]
    for lanes, fn in fns:
        fn.linkage = ""                      # exported: the checks' libraries call them
        public[_far_core_name(lanes, math)] = fn.name
    groups = []
    text = _mark_no_caller_saved(str(module), groups)
    return text + "\n" + "\n".join(groups) + "\n", public


def _far_widths(math: "CPUMath") -> list[tuple[str, int]]:
    """(SIMD name of sin's far check, lanes) for this target's vector widths."""
    return math.variants("sin_far", "float64", 1)


def _far_checks_text(math: "CPUMath", cname: str) -> tuple[str, dict[str, str]]:
    """The far checks of one function, scalar and SIMD: each tests all lanes at once and
    calls the shared code (``_far_core_text``) only when one lane is far."""
    d, i32 = ir.DoubleType(), ir.IntType(32)
    module = ir.Module(name=f"symgrad_{cname}_far")
    which = ir.Constant(i32, FAR_FUNCTIONS[cname])
    public = {}
    scalar = _far_name(cname, math)
    versions = [(scalar, d, 1)]
    versions += [(name, ir.VectorType(d, lanes), lanes)
                 for name, lanes in math.variants(cname + "_far", "float64", 1)]
    for name, ty, lanes in versions:
        slow = ir.Function(module, ir.FunctionType(ty, [ty, i32]), _far_core_name(lanes, math))
        slow.attributes.add("nounwind")
        local = "sg_" + name            # jit.load hands out sg_ symbols
        public[name] = local
        fn = _far_function(module, local, [ty])
        fn.linkage = ""                  # exported from the library
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        x = fn.args[0]
        zero = ir.Constant(ty, [0.0] * ty.count if isinstance(ty, ir.VectorType) else 0.0)
        b.ret(_if_far(b, _any_lane(b, _is_far(b, x)),
                      lambda: b.call(slow, [x, which], name="far"), zero))
    groups = []
    text = _mark_no_caller_saved(str(module).replace('@"sg__ZGV', '@"_ZGV'), groups)
    text = text.replace('@"_ZGV', '@"sg__ZGV')      # (the mark matches the public names)
    return text + "\n" + "\n".join(groups) + "\n", public


def _far_function(module, name, arg_types, rare=False):
    fn = ir.Function(module, ir.FunctionType(arg_types[0], arg_types), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")     # the vectoriser must see the call, not its branches
    fn.attributes.add("nounwind")
    if rare:
        # Only far lanes get here: unoptimised code compiles in a fraction of the time, and
        # the results stay the same (the double-double steps use llvm.fma, always exact).
        fn.attributes.add("optnone")
    return fn


def _is_far(b: ir.IRBuilder, x):
    ty = x.type
    vector = isinstance(ty, ir.VectorType)
    fabs_name = f"llvm.fabs.v{ty.count}f64" if vector else "llvm.fabs.f64"
    fabs = b.module.globals.get(fabs_name) or ir.Function(
        b.module, ir.FunctionType(ty, [ty]), fabs_name)
    bound = ir.Constant(ty, [REDUCE_MAX] * ty.count if vector else REDUCE_MAX)
    return b.fcmp_ordered(">", b.call(fabs, [x]), bound, name="far")


def _any_lane(b, far):
    if not isinstance(far.type, ir.VectorType):
        return far
    mask = ir.IntType(far.type.count)
    return b.icmp_unsigned("!=", b.bitcast(far, mask), ir.Constant(mask, 0))


def _far_value(module: ir.Module, math: "CPUMath", tag: str) -> ir.Function:
    """``symgrad_trig_far(x, which)``: sin, cos or tan (FAR_FUNCTIONS) of a far argument through
    the Payne-Hanek reduction, NaN for inf; scalar code, one copy in the library."""
    name = "sg_symgrad_trig_far" + tag
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = _far_function(module, name, [ir.DoubleType(), ir.IntType(32)], rare=True)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x, which = fn.args
    f = _F64(b, math.fma)
    ax = f.abs(x)
    reduced = _payne_hanek(f, ax)
    v = None
    for cname, code in reversed(FAR_FUNCTIONS.items()):     # LLVM shares the polynomials
        value = _quadrant_value(f, cname, x, *reduced)
        v = value if v is None else b.select(
            b.icmp_unsigned("==", which, ir.Constant(ir.IntType(32), code)), value, v)
    b.ret(b.select(b.fcmp_ordered("==", ax, f.c(float("inf"))), f.c(float("nan")), v))
    return fn


def _far_lanes(module: ir.Module, lanes: int, math: "CPUMath", tag: str) -> ir.Function:
    """``symgrad_trig_far_lanes<n>(x, which)``: symgrad_trig_far on each far lane of x (the
    others are left as they are: the caller selects the near lanes' own result)."""
    name = f"sg_symgrad_trig_far_lanes{lanes}{tag}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    d = ir.DoubleType()
    vt, i32 = ir.VectorType(d, lanes), ir.IntType(32)
    fn = _far_function(module, name, [vt, i32], rare=True)
    scalar = _far_value(module, math, tag)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x, which = fn.args
    buf = b.alloca(ir.ArrayType(d, lanes), name="lanes")
    b.store(x, b.bitcast(buf, vt.as_pointer()), align=8)     # the array's alignment
    head, body, call, done = (fn.append_basic_block(n) for n in ("lane", "lane.body",
                                                                 "lane.far", "lane.done"))
    entry = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(i32, name="i")
    i.add_incoming(ir.Constant(i32, 0), entry)
    b.cbranch(b.icmp_unsigned("<", i, ir.Constant(i32, lanes)), body, done)
    b.position_at_end(body)
    ptr = b.gep(buf, [ir.Constant(i32, 0), i], inbounds=True)
    xi = b.load(ptr)
    nxt = b.add(i, ir.Constant(i32, 1))
    i.add_incoming(nxt, call)
    i.add_incoming(nxt, body)
    b.cbranch(_is_far(b, xi), call, head)
    b.position_at_end(call)
    b.store(b.call(scalar, [xi, which]), ptr)
    b.branch(head)
    b.position_at_end(done)
    b.ret(b.load(b.bitcast(buf, vt.as_pointer()), align=8))
    return fn


def _if_far(b: ir.IRBuilder, cond, then, otherwise):
    """``then()`` emitted under ``cond`` (marked unlikely), ``otherwise`` elsewhere: a phi."""
    before = b.block
    with b.if_then(cond, likely=False):
        value = then()
        then_end = b.block
    phi = b.phi(value.type)
    phi.add_incoming(value, then_end)
    phi.add_incoming(otherwise, before)
    return phi


def _log1p_body(b, x, math=None):
    """log(1 + x) = e ln2 + log(m) + c with u = 1 + x rounded = 2^e m, m in [sqrt(1/2),
    sqrt(2)), and c = (x - (u - 1)) / u the part of x that u rounded off (exact numerator:
    u - 1 and the difference are exact by Sterbenz for u < 2^53; beyond, c is negligible).
    log(m) = log(1 + f) = 2 atanh(s), s = f / (2 + f), arranged as in fdlibm's log: f - (f^2/2
    - s (f^2/2 + R(s^2))) keeps the big terms exact and the error below 1 ulp."""
    f = _F64(b, math is None or math.fma)
    u = b.fadd(f.c(1.0), x)
    c = b.fdiv(b.fsub(x, b.fsub(u, f.c(1.0))), u)
    e, frac, s, r, hfsq = log_terms(f, u, 0x3FE6A09E667F3BCD, LOG_POLY)   # bits of sqrt(1/2)
    # e as a double without an int-to-float conversion (slow on AVX2): the bits of SHIFTER
    # plus e are the double SHIFTER + e (one binade, ulp 1, for |e| < 2^51)
    ef = b.fsub(f.from_bits(b.add(e, f.bits(f.c(SHIFTER)))), f.c(SHIFTER))
    low = b.fadd(b.fmul(ef, f.c(LN2_LO)), c)
    inner = b.fsub(b.fsub(hfsq, b.fadd(b.fmul(s, b.fadd(hfsq, r)), low)), frac)
    y = b.fsub(b.fmul(ef, f.c(LN2_HI)), inner)
    lt = lambda v: b.fcmp_ordered("<", x, f.c(v))   # noqa: E731 - local shorthand
    y = b.select(b.fcmp_ordered("<", f.abs(x), f.c(2.0 ** -54)), x, y)  # log1p(x) = x, -0 too
    y = b.select(b.fcmp_ordered("==", x, f.c(float("inf"))), x, y)
    y = b.select(b.fcmp_ordered("==", x, f.c(-1.0)), f.c(float("-inf")), y)
    return b.select(lt(-1.0), f.c(float("nan")), y)


def _tanh_body(b, x, math=None):
    """tanh|x| = E / (E + 2) with E = e^2|x| - 1, at every |x| (the sign is x's): no
    polynomial of tanh itself, whose degree-23 series below 0.55 cost as many multiply-adds
    as the exp beside it, both computed in every lane of a vector.

    2|x| = k ln2 + r with k rounded down (0 <= r < ln2) and e^r - 1 = r + w, w = r^2 Q(r),
    so E = (2^k - 1) + 2^k r + 2^k w adds non-negative terms, each smaller than the one
    before (2^k r and 2^k w exact, 2^k - 1 too for k <= 53), summed as a head and a tail
    (Fast2Sum twice): e^r - 1 is never rounded on its own, which would cost up to an ulp of
    the result where e^r - 1 and tanh lie in binades apart. E + 2 by TwoSum, then the
    quotient of the pairs (_quotient_by_reciprocal). Clamped at 2|x| = 40, where the quotient
    rounds to 1; for tiny |x| (r^2 underflows) it is 2|x| / 2 = |x| exactly."""
    f = _F64(b, math is None or math.fma)
    ax = f.abs(x)
    two_ax = b.fmul(ax, f.c(2.0))
    two_ax = b.select(b.fcmp_ordered("<", two_ax, f.c(40.0)), two_ax, f.c(40.0))
    k, r, q = _exp_reduction(b, two_ax, "llvm.floor", TANH_EXP_POLY)
    scale = _pow2(b, k)
    head, low = f.fast_two_sum(b.fsub(scale, f.c(1.0)), b.fmul(scale, r))
    num = f.fast_two_sum(head, b.fadd(low, b.fmul(scale, b.fmul(b.fmul(r, r), q))))
    dh, dl = f.two_sum(f.c(2.0), num[0])
    return f.xor_sign(_quotient_by_reciprocal(f, num, (dh, b.fadd(dl, num[1]))), f.bits(x))


def _quotient_by_reciprocal(f: _F64, num, den):
    """(nh + nl) / (dh + dl) for normalised pairs, one division: q0 = n (1/d) is within ~1.5
    ulp, and the residual step q0 + (n - q0 d) / d, its division a product with the same 1/d,
    brings it within ~0.5 ulp (the residual is tiny: 1/d's error matters at 2^-53 of it)."""
    b = f.b
    (nh, nl), (dh, dl) = num, den
    inv = b.fdiv(f.c(1.0), dh)
    # without FMA the residual's products round: from a correctly rounded q0 (a second
    # division) the step then stays within ~1 ulp
    q0 = b.fmul(nh, inv) if f.fused else b.fdiv(nh, dh)
    residual = b.fadd(f.fma(b.fneg(q0), dh, nh), f.fma(b.fneg(q0), dl, nl))
    return f.fma(residual, inv, q0)


OWN_F64 = {"exp": ("sg_exp_f64", _exp_body), "expm1": ("sg_expm1_f64", _expm1_body),
           "sin": ("sg_sin_f64", _sin_cos_body("sin")), "cos": ("sg_cos_f64", _sin_cos_body("cos")),
           "tan": ("sg_tan_f64", _sin_cos_body("tan")),
           "log1p": ("sg_log1p_f64", _log1p_body), "tanh": ("sg_tanh_f64", _tanh_body)}


# ----------------------------------------------------------------------------------------------
# The out-of-line library of the same functions (``_own_library_text``): for kernels whose
# loops would inline many of them (codegen.kernel.OUTLINE_MATH_CALLS). Inlined and widened in
# every loop, each call is 40-70 scalar instructions that LLVM's -O3 pipeline optimises,
# vectorises and schedules again per call site (straight-line code of 250 statements: 370
# calls, 13 s of LLVM); out of line, a call site is one vector call that the loop vectoriser
# substitutes from the ``_ZGV`` variants below, and the library is compiled once per process
# and function (and kept in jit's disk cache).

def _own_name(op: str, math: "CPUMath") -> str:
    return f"symgrad_{op}_own" + ("_fma" if math.fma else "")


def _own_lanes(module: ir.Module, name: str, lanes: int, scalar: ir.Function) -> ir.Function:
    """``<lanes x double> name(<lanes x double>)``: ``scalar`` (inlined) on each lane. The
    lanes go through memory to a loop (``_own_lane_loop``) the vectoriser is told to widen by
    exactly ``lanes``: one vector iteration, no remainder, the same widened code a kernel's
    loop gets from inlining. Two lanes are done one by one: LLVM declines the forced
    two-wide loop (and says so on stderr)."""
    d = ir.DoubleType()
    vt = ir.VectorType(d, lanes)
    fn = ir.Function(module, ir.FunctionType(vt, [vt]), name)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    if lanes <= 2:
        out = fn.args[0]
        for k in range(lanes):
            lane = ir.Constant(ir.IntType(32), k)
            out = b.insert_element(out, b.call(scalar, [b.extract_element(fn.args[0], lane)]), lane)
        b.ret(out)
        return fn
    src = b.alloca(vt, name="in")
    dst = b.alloca(vt, name="out")
    b.store(fn.args[0], src)
    b.call(_own_lane_loop(module, name + ".lanes", lanes, scalar), [src, dst])
    b.ret(b.load(dst))
    return fn


def _own_lane_loop(module: ir.Module, name: str, lanes: int, scalar: ir.Function) -> ir.Function:
    """``name(src, dst)``: dst[i] = scalar(src[i]) for i < lanes. Out of line (noinline)
    because inlined into its caller, SROA would turn the lane buffers into one vector value
    carried around the loop, which the vectoriser cannot widen."""
    d, i64 = ir.DoubleType(), ir.IntType(64)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR_T, PTR_T]), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    for a in fn.args:
        a.add_attribute("noalias")
    src, dst = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    head, done = fn.append_basic_block("lane"), fn.append_basic_block("lane.done")
    entry = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(i64, name="i")
    i.add_incoming(ir.Constant(i64, 0), entry)
    xi = b.load(b.gep(src, [i], inbounds=True, source_etype=d), typ=d)
    b.store(b.call(scalar, [xi]), b.gep(dst, [i], inbounds=True, source_etype=d))
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, head)
    b.cbranch(b.icmp_unsigned("<", nxt, ir.Constant(i64, lanes)), head, done)   # see _own_loops
    b.position_at_end(done)
    b.ret_void()
    return fn


PTR_T = ir.PointerType()


def _own_library_module(op: str, math: "CPUMath") -> tuple[ir.Module, dict[str, str]]:
    """The library of our own ``op``, scalar and SIMD versions, and {public symbol: its sg_
    name in the module} (``CPUMath.own_library`` finishes, compiles and binds it)."""
    name, body = OWN_F64[op]
    module = ir.Module(name=f"symgrad_{op}_own")
    module.math_calls = set()
    inline = _define(module, name, lambda b, x: body(b, x, math))
    public_scalar = _own_name(op, math)
    d = ir.DoubleType()
    scalar = ir.Function(module, ir.FunctionType(d, [d]), "sg_" + public_scalar)
    scalar.attributes.add("nounwind")
    b = ir.IRBuilder(scalar.append_basic_block("entry"))
    b.ret(b.call(inline, [scalar.args[0]]))
    public = {public_scalar: scalar.name}
    for vname, lanes in math.variants(op + "_own", "float64", 1):
        public[vname] = _own_lanes(module, "sg_" + vname, lanes, inline).name
    return module, public


_LANE_BRANCH = re.compile(r'^(define [^\n]*@"sg__ZGV[a-z]N(\d+)v_[^\n]*\.lanes"\([^\n]*\n(?:.*\n)*?'
                          r'  br i1 [^\n]*label %"lane", label %"lane.done")$', re.M)


def _own_loops(text: str) -> str:
    """Tell the vectoriser to widen each lane loop by its lane count. llvmlite cannot write
    the self-referencing ``distinct`` node LLVM requires of a loop ID, hence the text edit."""
    nodes = []

    def tag(m):
        k = 9000 + 3 * len(nodes)
        nodes.append(f'!{k} = distinct !{{!{k}, !{k + 1}, !{k + 2}}}\n'
                     f'!{k + 1} = !{{!"llvm.loop.vectorize.enable", i1 true}}\n'
                     f'!{k + 2} = !{{!"llvm.loop.vectorize.width", i32 {m.group(2)}}}\n')
        return m.group(1) + f", !llvm.loop !{k}"
    return _LANE_BRANCH.sub(tag, text) + "".join(nodes)
