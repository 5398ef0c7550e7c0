"""np.polyval (Horner's rule) and np.interp (piecewise linear), as compositions of primitives:
their derivatives and every back end come from the op table.

``np.interp``'s derivative, at the kinks, is one-sided the way JAX's ``jnp.interp`` is: the
segment a point belongs to is found by ``searchsorted(xp, x, side='right')`` clipped to the
knots' interior, so at an interior knot and at ``xp[0]`` the slope is the one to the right,
at ``xp[-1]`` the one to the left; outside ``[xp[0], xp[-1]]`` the value is clamped
(``left``/``right``, NumPy's ``fp[0]``/``fp[-1]`` by default) and the derivative in ``x`` is 0.
The derivative in ``fp`` is the hat weights of the segment. ``xp`` may be traced but is not
differentiated (the knots locate the segment; as in NumPy it must be increasing). The segment
search counts the knots at or below each point (``searchsorted`` without a sort primitive):
work in ``x.size * len(xp)``, fine for the usual tables of a few hundred knots.
"""
from __future__ import annotations

import numpy as np

from . import ops
from .ir import Node
from .numpy_base import _as_array, unsupported
from .numpy_indexing import take


def polyval(p, x):
    """NumPy's loop, ``y = y * x + c`` from the highest coefficient down."""
    p = _as_array(p)
    x = x if isinstance(x, Node) else ops.lift(np.asanyarray(x))
    if p.ndim == 0:
        raise TypeError("np.polyval: the coefficients must be a sequence")
    # NumPy starts from zeros_like(x) * x (nan where x is inf or nan, kept); that product's
    # derivative is 0, stopped so the gradient carries no 0.0 * x terms (0 * inf = nan there)
    if p.shape[0] == 0:
        return ops.zeros_like(x)
    y = ops.stop_gradient(ops.mul(ops.zeros_like(x), x)) + ops.getitem(p, 0)
    for k in range(1, p.shape[0]):
        y = y * x + ops.getitem(p, k)
    return y


def _float64(v) -> Node:
    # np.interp computes in double precision whatever its inputs' dtype (its C loop's type)
    return ops.cast(_as_array(v), "float64")


def interp(x, xp, fp, left=None, right=None, period=None):
    if period is not None:
        raise unsupported("np.interp(..., period=...)", "map x into one period first: "
                          "np.interp(np.mod(x - xp[0], period) + xp[0], xp, fp)")
    x, xp, fp = _float64(x), ops.stop_gradient(_float64(xp)), _float64(fp)
    if xp.ndim != 1 or fp.ndim != 1:
        raise ValueError("object too deep for desired array" if max(xp.ndim, fp.ndim) > 1
                         else "object of too small depth for desired array")
    n = xp.shape[0]
    if fp.shape[0] != n:
        raise ValueError("fp and xp are not of the same length.")
    if n == 0:
        raise ValueError("array of sample points is empty")
    first, last = ops.getitem(xp, 0), ops.getitem(xp, n - 1)
    f_first, f_last = ops.getitem(fp, 0), ops.getitem(fp, n - 1)
    y = ops.broadcast_to(f_first, x.shape) if n == 1 else _segments(x, xp, fp, last, f_last)
    y = ops.where(ops.lt(x, first), f_first if left is None else left, y)
    return ops.where(ops.gt(x, last), f_last if right is None else right, y)


def _segments(x: Node, xp: Node, fp: Node, last: Node, f_last: Node) -> Node:
    """The linear piece of each x (NumPy's ``slope * (x - xp[j]) + fp[j]``), exact at xp[-1]."""
    n = xp.shape[0]
    knots = ops.reshape(xp, (1,) * x.ndim + (n,))
    # searchsorted(xp, x, side='right'): how many knots are <= x (a count: no sort needed)
    above = ops.reduce("sum", ops.cast(ops.le(knots, ops.reshape(x, x.shape + (1,))), "int64"), -1)
    upper = ops.minimum(ops.maximum(above, 1), n - 1)
    lower = upper - 1
    x0, x1 = _gather(xp, lower), _gather(xp, upper)
    f0, f1 = _gather(fp, lower), _gather(fp, upper)
    width = x1 - x0
    slope = (f1 - f0) / ops.where(ops.eq(width, 0), 1.0, width)   # repeated knots: no 0/0
    y = slope * (x - x0) + f0
    # NumPy gives fp[-1] itself at xp[-1] (the formula may round): the correction carries no
    # derivative, so the one there stays the last segment's
    return y + ops.stop_gradient(ops.where(ops.eq(x, last), f_last - y, 0.0))


def _gather(values: Node, index: Node) -> Node:
    """``values[index]`` for an index array of any shape (a flat gather, reshaped)."""
    return ops.reshape(take(values, ops.reshape(index, (-1,))), index.shape)


FUNCTIONS = {"polyval": (np.polyval, polyval), "interp": (np.interp, interp)}
ALIASES: dict = {}
