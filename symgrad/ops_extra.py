"""The op table, part three: elementwise primitives that map one-to-one onto a C math
function (inverse hyperbolics, exp2/log2/log10, cbrt, erf/erfc, hypot, fmod) or a rounding
instruction (floor, ceil, rint, trunc).

Same conventions as ``symgrad.elementwise`` (``symgrad.ops`` imports this module and
re-exports its builders): one
line per primitive with its NumPy reference, VJP and spelling. Compositions of these (``%``,
``//``, ``fmax``, ``sinc``, ``round`` with decimals, ...) live in ``symgrad.numpy_extra``.
"""
from __future__ import annotations

import math

import numpy as np

from . import spelling as sp
from .elementwise import _b, _u, eq, exp, sqrt, where

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
hypot = _b("hypot", np.hypot, _hypot_vjp, sp.call("np.hypot"), float_only=True)
fmod = _b("fmod", np.fmod, _fmod_vjp, sp.call("np.fmod"), float_only=True)

# the builders (symgrad.ops re-exports these: their factory is symgrad.elementwise's)
__all__ = ["arcsinh", "arccosh", "arctanh", "exp2", "log2", "log10", "cbrt", "erf", "erfc",
           "floor", "ceil", "rint", "trunc", "hypot", "fmod"]
