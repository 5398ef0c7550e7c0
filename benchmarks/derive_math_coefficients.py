"""Derive the constants of codegen/f64math.py's own float64 functions with mpmath.

Each polynomial is a Chebyshev fit (mpmath.chebyfit: interpolation at Chebyshev nodes, within a
small factor of the minimax error) of the smooth part of a function in z = r^2, evaluated at 60
digits, then rounded to double. The pi/2 split for the Cody-Waite reduction is computed here too.
``python benchmarks/derive_math_coefficients.py`` prints the tables; tests/test_math_accuracy.py
re-derives them and checks that f64math.py holds exactly these numbers.

``coefficients_f32``: the same for codegen/f32single.py's float32-arithmetic functions, each fit
rounded to float32 (tests/test_math_accuracy_f32.py checks f32single.py holds them).
"""
from __future__ import annotations

import mpmath as mp
import numpy as np

SIN_COS_R_MAX = 0.7854 * 1.01    # |r| <= pi/4, plus the slack of a rounded quotient
LOG_S_MAX = 0.17158              # s = f / (2 + f) for 1 + f in [sqrt(1/2), sqrt(2))
EXP_R_MAX = 0.34657359 * 1.001   # |r| <= ln2/2 (x = k ln2 + r, k rounded), plus slack
EXP_TERMS = 11                   # (e^r - 1 - r) / r^2 to r^10: 0.003 ulp (to r^9: 0.37 in expm1)
TANH_R_MAX = 0.69314718 * 1.001  # 0 <= r < ln2 (2|x| = k ln2 + r, k rounded down), plus slack


def _odd_tail(fn, leading):
    """z -> (fn(r) - r) / r^3 at r = sqrt(z): the part of an odd function past its linear term."""
    def tail(z):
        if z == 0:
            return mp.mpf(leading)
        r = mp.sqrt(z)
        return (fn(r) - r) / (z * r)
    return tail


def _cos_tail(z):
    """(cos r - 1 + r^2 / 2) / r^4 at r = sqrt(z)."""
    if z == 0:
        return mp.mpf(1) / 24
    return (mp.cos(mp.sqrt(z)) - 1 + z / 2) / (z * z)


def _log_tail(z):
    """(2 atanh(s) - 2 s) / s^3 at s = sqrt(z): log(1 + f) = 2 atanh(f / (2 + f))."""
    if z == 0:
        return mp.mpf(2) / 3
    s = mp.sqrt(z)
    return (2 * mp.atanh(s) - 2 * s) / (z * s)


def _exp_tail(r):
    """(e^r - 1 - r) / r^2: what the exp polynomial fits, in r (e^r is neither odd nor even)."""
    if r == 0:
        return mp.mpf(1) / 2
    return (mp.exp(r) - 1 - r) / (r * r)


def _fit(fn, hi, n, lo=0):
    with mp.workdps(60):
        coeffs = mp.chebyfit(fn, [mp.mpf(lo), mp.mpf(hi)], n)
    return [float(c) for c in reversed(coeffs)]     # lowest degree first


def _split(value, parts, bits):
    """value as a sum of doubles: the first parts - 1 of ``bits`` significant bits (so that
    k * part is exact for k < 2^(53 - bits)), the last one rounded to 53 bits."""
    out = []
    rest = mp.mpf(value)
    for i in range(parts):
        if i == parts - 1:
            out.append(float(rest))
            break
        e = int(mp.floor(mp.log(abs(rest), 2))) + 1
        scale = mp.mpf(2) ** (bits - e)
        head = mp.nint(rest * scale) / scale
        out.append(float(head))
        rest -= head
    return out


def coefficients() -> dict[str, list]:
    with mp.workdps(420):        # 1216 bits of 2/pi need ~370 digits
        pio2 = mp.pi / 2
        return {
            "PIO2_PARTS": _split(pio2, 4, 32),
            "PIO2_FMA_PARTS": _split(pio2, 3, 53),
            "TWO_OVER_PI": [float(2 / mp.pi)],
            # floor(2/pi 2^1216) for the Payne-Hanek reduction of huge arguments
            "TWO_OVER_PI_BITS": [int(mp.floor(2 / mp.pi * mp.mpf(2) ** 1216))],
            "SIN_POLY": _fit(_odd_tail(mp.sin, mp.mpf(-1) / 6), SIN_COS_R_MAX ** 2, 7),
            "COS_POLY": _fit(_cos_tail, SIN_COS_R_MAX ** 2, 6),
            "LOG_POLY": _fit(_log_tail, LOG_S_MAX ** 2, 8),
            "EXP_POLY": _fit(_exp_tail, EXP_R_MAX, EXP_TERMS, -EXP_R_MAX),
            "TANH_EXP_POLY": _fit(_exp_tail, TANH_R_MAX, EXP_TERMS),
        }


def _float32(values):
    return [float(np.float32(float(v))) for v in values]


def _float32_parts(value, parts):
    """value as a sum of float32, each the rest rounded to float32."""
    out, rest = [], mp.mpf(value)
    for _ in range(parts):
        out.append(float(np.float32(float(rest))))
        rest -= out[-1]
    return out


EXP_R_MAX_F32 = 0.34658 * 1.01     # |r| <= ln2/2 (float32 rint of x / ln2), plus slack
TANH_POLY_MAX_F32 = 0.55


def coefficients_f32() -> dict[str, list]:
    """float32 tables: degrees sized so that each fit is within 2^-30 of its function's value
    (chebyfit's error times the powers of r in front of it)."""
    with mp.workdps(60):
        ln2 = mp.log(2)
        ln2_hi = float(np.float32(float(ln2)))
        return {
            "EXP_POLY_F32": _float32(_fit(_exp_tail, EXP_R_MAX_F32, 6, lo=-EXP_R_MAX_F32)),
            "LOG_POLY_F32": _float32(_fit(_log_tail, LOG_S_MAX ** 2, 4)),
            "TANH_POLY_F32": _float32(_fit(_odd_tail(mp.tanh, mp.mpf(-1) / 3),
                                           TANH_POLY_MAX_F32 ** 2, 6)),
            "SIN_POLY_F32": _float32(_fit(_odd_tail(mp.sin, mp.mpf(-1) / 6),
                                          SIN_COS_R_MAX ** 2, 4)),
            "COS_POLY_F32": _float32(_fit(_cos_tail, SIN_COS_R_MAX ** 2, 3)),
            # pi/2 as three float32 (76 bits): x - k PIO2_F32[0] is exact in one fma
            "PIO2_F32": _float32_parts(mp.pi / 2, 3),
            "TWO_OVER_PI_F32": _float32([2 / mp.pi]),
            # ln2 = LN2_HI + LN2_LO: x - k LN2_HI is exact in one fma (|k| <= 150)
            "LN2_F32": [ln2_hi, float(np.float32(float(ln2 - ln2_hi)))],
            # ln2 = hi + lo, hi of 16 bits: e * hi is exact in float32 (|e| <= 152)
            "LOG_LN2_F32": _float32(_split(ln2, 2, 16)),
            "INV_LN2_F32": _float32([1 / ln2]),
        }


if __name__ == "__main__":
    for name, values in {**coefficients(), **coefficients_f32()}.items():
        print(f"{name} = [" + ", ".join(repr(v) for v in values) + "]")
