"""The op table, part three: elementwise primitives that map one-to-one onto a C math
function (inverse hyperbolics, exp2/log2/log10, cbrt, erf/erfc, lgamma/gamma, hypot, fmod) or a
rounding instruction (floor, ceil, rint, trunc); and digamma, the derivative of lgamma, as a
composition of them (no libm has it), so its own derivatives come from autodiff.

Same conventions as ``symgrad.elementwise`` (``symgrad.ops`` imports this module and
re-exports its builders): one
line per primitive with its NumPy reference, VJP and spelling. Compositions of these (``%``,
``//``, ``fmax``, ``sinc``, ``round`` with decimals, ...) live in ``symgrad.numpy_extra``.
"""
from __future__ import annotations

import math
import types

import numpy as np

from . import spelling as sp
from .elementwise import NUMPY_FUNCTIONS, _b, _u, eq, exp, log, logical_and, lt, sqrt, tan, where
from .op_base import to_float

LN2, LN10 = math.log(2.0), math.log(10.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _vectorized(name: str):
    """Spelling of a function NumPy lacks (erf): the ``math`` module's, applied per element,
    so the generated code still needs nothing but NumPy (``math`` is reached by __import__)."""
    def spell(args, node):
        return (f"np.vectorize(__import__('math').{name}, otypes=[{sp.dtype_name(node.dtype)}])"
                f"({args[0][0]})[()]", sp.ATOM)
    return spell


def _erf_numpy(fn):
    """NumPy has no erf: ``math``'s per element, in the operand's dtype."""
    each = np.vectorize(fn, otypes=[np.float64])

    def run(x):
        return each(x).astype(np.asarray(x).dtype)[()]
    run.__name__ = fn.__name__    # the op table's NUMPY_FUNCTIONS names it by this
    return run


# lgamma and gamma per element, C99's lgamma/tgamma where Python's math raises: lgamma is +inf
# at the poles (0 and the negative integers); gamma is +-inf at +-0, NaN at the negative
# integers and -inf, and overflows to inf (1/x overflows below TINY). One text, so the NumPy
# reference and the generated source (which needs nothing but NumPy) are the same function.
LGAMMA_FINITE_BELOW = 2.5599833278516387e+305   # the first x whose lgamma overflows
GAMMA_MAX, GAMMA_TINY = 171.6243769563027, 5.56268464626801e-309   # finite on [TINY, MAX]
_EACH = {
    "lgamma": f"lambda v, m=__import__('math'): m.inf if v <= 0 and v == np.floor(v) "
              f"or v >= {LGAMMA_FINITE_BELOW!r} else m.lgamma(v)",
    "gamma": f"lambda v, m=__import__('math'): np.nan if v < 0 and v == np.floor(v) else "
             f"m.copysign(m.inf, v) if abs(v) < {GAMMA_TINY!r} else m.inf if v > {GAMMA_MAX!r} "
             "else m.gamma(v)",
}


def _each_spelling(name: str):
    def spell(args, node):
        # float64 elements: a float32 compared with a bound beyond its range would overflow
        return (f"np.vectorize({_EACH[name]}, otypes=[{sp.dtype_name(node.dtype)}])"
                f"(np.asarray({args[0][0]}, np.float64))[()]", sp.ATOM)
    return spell


def _each_numpy(name: str):
    """The NumPy reference of ``_EACH[name]``: float64 per element, rounded once to the
    operand's dtype (float32's gamma overflows past 35.04, as C's tgammaf)."""
    each = np.vectorize(eval(_EACH[name], {"np": np}), otypes=[np.float64])

    def run(x):
        with np.errstate(over="ignore"):
            out = each(np.asarray(x, np.float64))
            return out.astype(np.float32 if np.asarray(x).dtype == np.float32 else np.float64)[()]
    run.__name__ = name       # the op table's NUMPY_FUNCTIONS names it by this
    return run


# digamma(x) = d lgamma / dx, for x >= 10 by the asymptotic series log x - 1/(2x) -
# sum_k B_2k / (2k x^2k), k = 1..7 (B_2k the Bernoulli numbers; the next term is below 5e-17 of
# psi(10)), below 10 shifted up by the recurrence psi(x) = psi(x + 10) - sum_{k<10} 1/(x + k),
# below 1/2 reflected: psi(x) = psi(1 - x) - pi / tan(pi x).
PSI_SHIFT = 10
PSI_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)


def _digamma_from(x, on):
    """digamma of ``x`` from the functions of ``on`` (IR builders or NumPy's: one formula for
    the traced and the eager version). scipy's values at the poles: -inf at +0, +inf at -0,
    NaN at the negative integers and -inf."""
    reflect = on.lt(x, 0.5)
    z = on.where(reflect, 1 - x, x)            # >= 1/2 (or NaN)
    small = on.lt(z, PSI_SHIFT)
    shift = 1 / z
    for k in range(1, PSI_SHIFT):
        shift = shift + 1 / (z + k)
    y = on.where(small, z + PSI_SHIFT, z)
    w = 1 / y
    u = w * w        # (not 1 / y^2: y^2 overflows past 1e154, and its derivatives with it)
    series = PSI_SERIES[-1]
    for c in PSI_SERIES[-2::-1]:
        series = c + u * series
    core = on.log(y) - 0.5 * w - u * series - on.where(small, shift, 0.0)
    # tan(pi x) = tan(pi r), r = x - rint(x) exact: no rounding of pi x for large |x|; -0
    # keeps its sign (pi / tan(-0) = -inf). The side not taken divides by tan(pi / 4).
    r = on.where(on.eq(x, 0), x, x - on.rint(x))
    reflected = core - math.pi / on.tan(math.pi * on.where(reflect, r, 0.25))
    out = on.where(reflect, reflected, core)
    return on.where(on.logical_and(on.lt(x, 0), on.eq(r, 0)), math.nan, out)


def _hypot_vjp(g, n):
    """d hypot(a, b) = (a, b) / hypot; at the origin (no direction) the gradient is 0, the
    convention of abs'(0) = 0, with the division kept finite there (a safe denominator, so
    a second derivative does not meet 0 / 0 either)."""
    a, b = n.inputs
    origin = eq(n, 0)
    safe = where(origin, 1, n)
    return where(origin, 0, g * a / safe), where(origin, 0, g * b / safe)


def _fmod_vjp(g, n):
    """fmod(a, b) = a - trunc(a / b) b: d/da = 1, d/db = -trunc(a / b) (piecewise)."""
    a, b = n.inputs
    return g, -g * trunc(a / b)


arcsinh = _u("arcsinh", np.arcsinh, lambda g, n: (g / hypot(n.inputs[0], 1.0),))
# sqrt(x - 1) sqrt(x + 1) rather than sqrt(x^2 - 1): no overflow of x^2, no cancellation at 1
arccosh = _u("arccosh", np.arccosh,
             lambda g, n: (g / (sqrt(n.inputs[0] - 1) * sqrt(n.inputs[0] + 1)),))
arctanh = _u("arctanh", np.arctanh, lambda g, n: (g / ((1 - n.inputs[0]) * (1 + n.inputs[0])),))
exp2 = _u("exp2", np.exp2, lambda g, n: (g * n * LN2,))
log2 = _u("log2", np.log2, lambda g, n: (g / (n.inputs[0] * LN2),))
log10 = _u("log10", np.log10, lambda g, n: (g / (n.inputs[0] * LN10),))
cbrt = _u("cbrt", np.cbrt, lambda g, n: (g / (3 * n * n),))   # inf at 0, as the math
erf = _u("erf", _erf_numpy(math.erf),
         lambda g, n: (g * TWO_OVER_SQRT_PI * exp(-n.inputs[0] * n.inputs[0]),), _vectorized("erf"))
erfc = _u("erfc", _erf_numpy(math.erfc),
          lambda g, n: (-g * TWO_OVER_SQRT_PI * exp(-n.inputs[0] * n.inputs[0]),), _vectorized("erfc"))
# Rounding: piecewise constant, so not differentiable (a structural zero, as sign).
floor = _u("floor", np.floor, None)
ceil = _u("ceil", np.ceil, None)
rint = _u("rint", np.rint, None)       # round half to even, as np.round / np.rint
trunc = _u("trunc", np.trunc, None)
lgamma = _u("lgamma", _each_numpy("lgamma"), lambda g, n: (g * digamma(n.inputs[0]),),
            _each_spelling("lgamma"))
# gamma' = gamma psi: NaN at the negative integers (gamma's own NaN), -inf * g at +0
gamma = _u("gamma", _each_numpy("gamma"), lambda g, n: (g * n * digamma(n.inputs[0]),),
           _each_spelling("gamma"))
hypot = _b("hypot", np.hypot, _hypot_vjp, sp.call("np.hypot"), float_only=True)
fmod = _b("fmod", np.fmod, _fmod_vjp, sp.call("np.fmod"), float_only=True)

_BUILDERS = types.SimpleNamespace(lt=lt, eq=eq, where=where, log=log, tan=tan, rint=rint,
                                  logical_and=logical_and)
_NUMPY = types.SimpleNamespace(lt=np.less, eq=np.equal, where=np.where, log=np.log, tan=np.tan,
                               rint=np.rint, logical_and=np.logical_and)


def digamma(x):
    """psi(x) = d lgamma(x) / dx (scipy.special.digamma), traced: a composition (see
    :func:`_digamma_from`), so trigamma and higher come from autodiff on every back end."""
    return _digamma_from(to_float(x), _BUILDERS)


def _digamma_numpy(x):
    """digamma on NumPy values: the same formula, in the operand's float dtype."""
    x = np.asarray(x)
    x = x if x.dtype in (np.float32, np.float64) else x.astype(np.float64)
    with np.errstate(all="ignore"):
        return np.asarray(_digamma_from(x, _NUMPY))[()]


_digamma_numpy.__name__ = "digamma"
NUMPY_FUNCTIONS["digamma"] = (_digamma_numpy, digamma)   # a composition, not an op

# the builders (symgrad.ops re-exports these: their factory is symgrad.elementwise's)
__all__ = ["arcsinh", "arccosh", "arctanh", "exp2", "log2", "log10", "cbrt", "erf", "erfc",
           "lgamma", "gamma", "digamma", "floor", "ceil", "rint", "trunc", "hypot", "fmod"]
