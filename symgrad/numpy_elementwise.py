"""NumPy's elementwise functions that are compositions of primitives: ``%`` and ``//`` with
NumPy's signs, divmod, fmax/fmin (NaN ignored), logaddexp2, degrees/radians, sinc (a series
near 0), isnan/isinf/isfinite/signbit/copysign, nan_to_num, round with decimals, real/imag."""
from __future__ import annotations

import math

import numpy as np

from . import ops
from .op_base import _promote
from .ir import Node, is_float
from .numpy_base import _float_pair, unsupported


def _int_pair_dtype(a, b):
    dtype = ops.result_dtype(a, b)
    return None if is_float(dtype) else dtype


def _on_floats(build):
    """An integer version of a float composition: computed in float64 (exact for |values| <
    2**53) and cast back, as NumPy's integer % and // give integers."""
    def fn(a, b):
        int_dtype = _int_pair_dtype(a, b)
        if int_dtype is None:
            return build(*_float_pair(a, b))
        a, b = (ops.cast(ops.lift(v, int_dtype), "float64") for v in (a, b))
        zero_divisor = ops.eq(b, 0)   # NumPy: 0 for an integer division by zero
        out = build(a, ops.where(zero_divisor, 1.0, b))
        return ops.cast(ops.where(zero_divisor, 0.0, out), int_dtype)
    fn.__name__ = build.__name__
    return fn


def _remainder_float(a, b):
    """NumPy's remainder (Python's %): the sign of the divisor. fmod's result moved by one
    divisor when the signs differ (npy_divmod), so d/da = 1 and d/db = -floor(a / b) follow
    from fmod's rule (-trunc(a / b), shifted by one where the quotient was moved)."""
    mod = ops.fmod(a, b)
    shift = ops.logical_and(ops.ne(mod, 0), ops.ne(ops.lt(b, 0), ops.lt(mod, 0)))
    # a zero result takes the divisor's sign; it still carries fmod's derivative: z - (+0)
    # keeps the sign of z, and stop_gradient(mod) - mod is +0 whose derivative is fmod's
    zero = _signed_zero(b) - (ops.stop_gradient(mod) - mod)
    return ops.where(shift, mod + b, ops.where(ops.eq(mod, 0), zero, mod))


def _floor_divide_float(a, b):
    """NumPy's floor_divide on floats (npy_divmod): (a - fmod(a, b)) / b, moved down by one
    when the signs differ, then rounded; a / b for a zero divisor. Piecewise constant."""
    a, b = ops.stop_gradient(a), ops.stop_gradient(b)
    mod = ops.fmod(a, b)
    div = (a - mod) / b
    shift = ops.logical_and(ops.ne(mod, 0), ops.ne(ops.lt(b, 0), ops.lt(mod, 0)))
    div = ops.where(shift, div - 1, div)
    floor = ops.floor(div)
    floor = ops.where(ops.gt(div - floor, 0.5), floor + 1, floor)
    quotient = a / b
    out = ops.where(ops.eq(div, 0), _signed_zero(quotient), floor)
    return ops.where(ops.eq(b, 0), quotient, out)


def _signed_zero(sign_of: Node) -> Node:
    """-0.0 or +0.0 with the sign of ``sign_of``, in its dtype."""
    return ops.where(signbit(sign_of), ops.const(-0.0, sign_of.dtype), ops.const(0.0, sign_of.dtype))


remainder = _on_floats(_remainder_float)
floor_divide = _on_floats(_floor_divide_float)


def divmod_(a, b):
    return floor_divide(a, b), remainder(a, b)


def fmax(a, b):
    """The larger, ignoring NaN (NumPy: fmax(nan, 1) == 1); ties give ``a`` (as maximum)."""
    a, b = _promote((a, b))
    return ops.where(ops.logical_or(ops.ge(a, b), ops.ne(b, b)), a, b)


def fmin(a, b):
    a, b = _promote((a, b))
    return ops.where(ops.logical_or(ops.le(a, b), ops.ne(b, b)), a, b)


def logaddexp2(a, b):
    from .numpy_api import _logaddexp
    a, b = _float_pair(a, b)
    return _logaddexp(a * math.log(2.0), b * math.log(2.0)) / math.log(2.0)


def deg2rad(x):
    return ops.to_float(x) * (math.pi / 180.0)


def rad2deg(x):
    return ops.to_float(x) * (180.0 / math.pi)


SINC_SERIES_BELOW = 1e-3   # |pi x| below this: 1 - t^2/6 + t^4/120 (error < t^6/5040)


def sinc(x):
    """sin(pi x) / (pi x), 1 at 0. Near 0 the Taylor series, so every derivative order is
    right at 0 (0, -pi^2/3, ...) instead of a constant branch's zeros."""
    x = ops.to_float(x)
    t = x * math.pi
    near = ops.lt(ops.abs_(t), SINC_SERIES_BELOW)
    t2 = t * t
    series = 1 - t2 * (1.0 / 6) + t2 * t2 * (1.0 / 120)
    safe = ops.where(near, 1.0, t)   # the unselected division stays finite at every order
    return ops.where(near, series, ops.sin(safe) / safe)


def isnan(x):
    x = ops.lift(x)
    return ops.ne(x, x) if is_float(x.dtype) else ops.full(x.shape, False, "bool")


def isinf(x):
    x = ops.lift(x)
    return ops.eq(ops.abs_(x), math.inf) if is_float(x.dtype) else ops.full(x.shape, False, "bool")


def isfinite(x):
    x = ops.lift(x)
    if not is_float(x.dtype):
        return ops.full(x.shape, True, "bool")
    return ops.lt(ops.abs_(x), math.inf)


def signbit(x):
    """x < 0, or -0.0: arctan2(x, -1) is -pi for both, +pi for +0.0 and x > 0 (IEEE atan2
    reads the sign of a zero; 1 / x would too, but divides by zero: a RuntimeWarning from
    NumPy at every zero, e.g. in ``t // 2`` of a loop index at t = 0). (A NaN's sign bit is
    not read: False.)"""
    x = ops.to_float(x)
    return ops.lt(ops.arctan2(x, -1.0), 0)


def copysign(a, b):
    a, b = _float_pair(a, b)
    return ops.where(signbit(b), -ops.abs_(a), ops.abs_(a))


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = ops.lift(x)
    if not is_float(x.dtype):
        return x
    big = float(np.finfo(x.dtype).max)
    out = ops.where(ops.ne(x, x), nan, x)
    out = ops.where(ops.eq(x, math.inf), big if posinf is None else posinf, out)
    return ops.where(ops.eq(x, -math.inf), -big if neginf is None else neginf, out)


def round_(x, decimals=0, out=None):
    """np.round: rint(x * 10^d) / 10^d (NumPy's own formula); integers are unchanged for
    decimals >= 0. Piecewise constant: a zero derivative."""
    if out is not None:
        raise unsupported("np.round(..., out=...)", "out= is not supported while tracing")
    x = ops.lift(x)
    if not is_float(x.dtype):
        if decimals >= 0:
            return x
        x = ops.to_float(x)
    if decimals == 0:
        return ops.rint(x)
    if decimals > 0:
        scale = 10.0 ** decimals
        return ops.rint(x * scale) / scale
    scale = 10.0 ** -decimals
    return ops.rint(x / scale) * scale


def positive(x):
    return ops.lift(x)


def real(x):
    return ops.lift(x)    # real input: the value itself


def imag(x):
    x = ops.lift(x)
    return ops.full(x.shape, 0, x.dtype)


def heaviside(x1, x2):
    """0 below 0, ``x2`` at 0, 1 above, NaN at NaN (NumPy's); constant pieces: derivative 0
    (and ``x2``'s where ``x1 == 0``)."""
    a, b = _float_pair(x1, x2)
    step = ops.where(ops.lt(a, 0), 0.0, ops.where(ops.gt(a, 0), 1.0, b))
    return ops.where(ops.ne(a, a), a, step)


def float_power(x1, x2):
    """``x1 ** x2`` in float64 at least (NumPy's float_power never computes in float32)."""
    a, b = (ops.lift(v) for v in (x1, x2))
    return ops.power(ops.cast(a, "float64"), ops.cast(b, "float64"))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """NumPy's test: |a - b| <= atol + rtol |b| where b is finite, or a == b (infinities)."""
    x, y = _float_pair(a, b)
    close = ops.logical_and(ops.le(ops.abs_(x - y), atol + rtol * ops.abs_(y)), isfinite(y))
    close = ops.logical_or(close, ops.eq(x, y))
    if equal_nan:
        close = ops.logical_or(close, ops.logical_and(isnan(x), isnan(y)))
    return close
