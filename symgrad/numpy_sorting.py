"""NumPy's order statistics and scans as compositions of existing primitives: ``argmax`` /
``argmin`` / ``argsort`` (integer results, so no derivative), ``sort`` / ``partition`` (a gather
at the positions of NumPy's stable sort, so each output's cotangent goes to the input element
that sort put there, ties included), ``median`` / ``quantile`` / ``percentile`` (NumPy's linear
interpolation between two sorted values), ``cumsum`` / ``cumprod`` (a log-step scan).

Why compositions rather than new primitives: every back end already lowers the pieces, every
derivative order comes from the op table, and the costs are fair ones: argmax is two
reductions, a scan ceil(log2 n) elementwise passes (O(n log n); products only, so cumprod's
derivative is right with zeros in the input, where a ``prod / x`` rule would divide by 0).
Sorting is the exception: its ranks come from all n^2 comparisons along the sorted axis (a
reduction over a broadcast comparison, which the CPU back end fuses; the gather and its
scatter-add derivative are O(n)), so it is meant for axes of up to a few thousand entries.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import ops
from .ir import INT_DTYPES, Node
from .numpy_base import _as_array, _axis, _slice_along, unsupported
from .numpy_layout import moveaxis
from .scans import inclusive_scan, sum_identity


# ----------------------------------------------------------------------------------------------
# argmax / argmin: the first position of the extremum, as NumPy (and NaN wins, as in NumPy)
def _flattened(x: Node, axis):
    """(array, axis) as NumPy's ``axis=None`` means it: the flattened array's only axis."""
    if axis is None:
        return ops.reshape(x, (-1,)), 0
    return x, _axis(axis, x.ndim)


def _arg_extremum(op):
    def build(a, axis=None, out=None, *, keepdims=False):
        if out is not None:
            raise unsupported(f"np.arg{op}(..., out=...)", "symgrad returns new arrays")
        x = _as_array(a)
        ndim, flat_keep = x.ndim, keepdims and axis is None
        x, ax = _flattened(x, axis)
        if x.shape[ax] == 0:
            raise ValueError(f"attempt to get arg{op} of an empty sequence")
        x = ops.stop_gradient(x)
        best = ops.reduce(op, x, ax, keepdims=True)
        hit = ops.eq(x, best)
        if x.dtype not in INT_DTYPES and x.dtype != "bool":
            hit = ops.logical_or(hit, ops.ne(x, x))   # NaN: max/min are NaN, the first NaN wins
        n = x.shape[ax]
        positions = ops.reshape(ops.arange(n), tuple(n if i == ax else 1 for i in range(x.ndim)))
        index = ops.reduce("min", ops.where(hit, positions, n), ax, keepdims=keepdims)
        if flat_keep:
            index = ops.reshape(index, (1,) * ndim)
        return index
    build.__name__ = f"arg{op}"
    return build


argmax = _arg_extremum("max")
argmin = _arg_extremum("min")


# ----------------------------------------------------------------------------------------------
# sort / partition
def _sort_keys_less(xi: Node, xj: Node) -> Node:
    """xj sorts before xi: NumPy's order puts NaN last, after +inf."""
    less = ops.lt(xj, xi)
    if xi.dtype in INT_DTYPES or xi.dtype == "bool":
        return less
    return ops.logical_or(less, ops.logical_and(ops.ne(xi, xi), ops.eq(xj, xj)))


def _sort_keys_equal(xi: Node, xj: Node) -> Node:
    same = ops.eq(xj, xi)
    if xi.dtype in INT_DTYPES or xi.dtype == "bool":
        return same
    return ops.logical_or(same, ops.logical_and(ops.ne(xi, xi), ops.ne(xj, xj)))


def stable_order(x: Node) -> Node:
    """The positions (int64, along the last axis) that a stable sort of ``x`` reads from:
    element i's rank is the number of elements before it in sorted order (smaller ones, and
    equal ones at lower positions), and output slot r reads the element of rank r."""
    n = x.shape[-1]
    key = ops.stop_gradient(x)
    xi, xj = ops.reshape(key, key.shape + (1,)), ops.reshape(key, key.shape[:-1] + (1, n))
    i = ops.reshape(ops.arange(n), (n, 1))
    j = ops.reshape(ops.arange(n), (1, n))
    before = ops.logical_or(_sort_keys_less(xi, xj),
                            ops.logical_and(_sort_keys_equal(xi, xj), ops.lt(j, i)))
    rank = ops.reduce("sum", ops.cast(before, "int64"), -1)                  # (..., n): rank of i
    slot = ops.reshape(ops.arange(n), (n, 1))
    picks = ops.eq(ops.reshape(rank, rank.shape[:-1] + (1, n)), slot)       # [r, i]: rank i == r
    return ops.reduce("sum", ops.where(picks, j, 0), -1)                     # (..., n): i of rank r


def _along_last(x: Node, axis: int, fn) -> Node:
    return moveaxis(fn(moveaxis(x, axis, -1)), -1, axis)


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise unsupported("np.sort(..., order=...)", "structured arrays are not traced")
    x, ax = _flattened(_as_array(a), axis)
    if x.ndim == 0:
        raise ValueError("Cannot sort a 0-d array")   # (NumPy's axis error, in words)
    if x.shape[ax] <= 1:
        return x

    def gather_sorted(v):
        from .numpy_indexing import take_along_axis
        return take_along_axis(v, stable_order(v), -1)
    return _along_last(x, ax, gather_sorted)


def partition(a, kth, axis=-1, kind="introselect", order=None):
    """A valid partition: the fully sorted array (element ``kth`` in its sorted place, the
    smaller before it, the larger after; NumPy leaves the order inside each side
    unspecified, and symgrad's is ascending)."""
    x = _as_array(a)
    xs, ax = _flattened(x, axis)
    n = xs.shape[ax] if xs.ndim else 0
    for k in np.atleast_1d(np.asarray(kth)).tolist():
        if not isinstance(k, numbers.Integral) or not -n <= k < n:
            raise ValueError(f"kth(={k}) out of bounds ({n})")
    return sort(x, axis, order=order)


_ARGSORT_WHY = ("NumPy's default sort is not stable, so its order of equal keys is not "
                "reproducible: pass kind='stable' (np.sort, whose values do not depend on that "
                "order, needs nothing)")


def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """The positions of the stable sort. Only with kind="stable" (or "mergesort", or
    stable=True): NumPy's default kind orders equal keys in no reproducible way, so no result
    could be promised equal to it. Integer positions: no derivative."""
    if order is not None:
        raise unsupported("np.argsort(..., order=...)", "structured arrays are not traced")
    if kind not in ("stable", "mergesort") and stable is not True:
        raise unsupported("np.argsort without kind='stable'", _ARGSORT_WHY)
    x, ax = _flattened(_as_array(a), axis)
    if x.ndim == 0:
        return ops.full((), 0, "int64")   # (NumPy: argsort of a 0-d array is 0)
    if x.shape[ax] <= 1:
        return ops.full(x.shape, 0, "int64")
    return _along_last(x, ax, stable_order)


# ----------------------------------------------------------------------------------------------
# median / quantile / percentile: NumPy's linear interpolation between order statistics
def _quantile_weights(q, n: int):
    """For each q in [0, 1] (static), the two sorted positions around q * (n - 1) and the
    weight of the upper one (NumPy's default method, "linear")."""
    q = np.asarray(q, dtype=np.float64)
    if np.any(q < 0) or np.any(q > 1) or np.any(np.isnan(q)):
        raise ValueError("Quantiles must be in the range [0, 1]")
    virtual = q * (n - 1)
    below = np.clip(np.floor(virtual), 0, n - 1).astype(np.int64)
    above = np.clip(below + 1, 0, n - 1)
    return q.shape, below, above, virtual - below


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    if out is not None:
        raise unsupported("np.quantile(..., out=...)", "symgrad returns new arrays")
    if isinstance(q, Node):
        raise unsupported("np.quantile with a traced q", "pass the quantiles as constants")
    if method != "linear":
        raise unsupported(f"np.quantile(..., method={method!r})", "only the default 'linear' is traced")
    x = ops.to_float(_as_array(a))
    ndim = x.ndim
    x, ax = _flattened(x, axis)
    n = x.shape[ax]
    if n == 0:
        raise ValueError("cannot compute a quantile of an empty array")
    q_shape, below, above, frac = _quantile_weights(q, n)
    ordered = moveaxis(sort(x, ax), ax, -1)
    lo = ops.take(ordered, below.reshape(-1), -1)
    hi = ops.take(ordered, above.reshape(-1), -1)
    weight = ops.array_const(frac.reshape(-1).astype(ordered.dtype))
    # NumPy's lerp: the upper value's side for weights >= 0.5 (exact at both ends)
    value = _nan_if_any(ordered, -1, ops.where(weight < 0.5, lo + (hi - lo) * weight,
                                               hi - (hi - lo) * (1 - weight)))
    value = moveaxis(value, -1, 0)                                  # (len(q), ...rest)
    value = ops.reshape(value, q_shape + value.shape[1:])
    if keepdims:
        kept = tuple(1 for _ in range(ndim)) if axis is None else \
            tuple(1 if i == ax else d for i, d in enumerate(x.shape))
        value = ops.reshape(value, q_shape + kept)
    return value


def _nan_if_any(ordered: Node, ax: int, value: Node) -> Node:
    """NaN where the sorted axis holds a NaN (it sorts last), as NumPy's median/quantile."""
    last = _slice_along(ordered, ax, slice(ordered.shape[ax] - 1, None))   # kept: broadcasts
    nan = ops.ne(last, last)
    return ops.where(nan, ops.full((), math.nan, value.dtype), value)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    if isinstance(q, Node):
        raise unsupported("np.percentile with a traced q", "pass the percentiles as constants")
    return quantile(a, np.asarray(q, dtype=np.float64) / 100.0, axis, out, overwrite_input,
                    method, keepdims)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The middle value, or the mean of the two middle ones ((lo + hi) / 2, as NumPy rounds)."""
    if out is not None:
        raise unsupported("np.median(..., out=...)", "symgrad returns new arrays")
    x = ops.to_float(_as_array(a))
    flat, ax = _flattened(x, axis)
    n = flat.shape[ax]
    if n == 0 or n % 2:
        return quantile(a, 0.5, axis, None, overwrite_input, "linear", keepdims)
    ordered = sort(flat, ax)
    pair = _slice_along(ordered, ax, slice(n // 2 - 1, n // 2 + 1))
    value = _nan_if_any(ordered, ax, ops.reduce("sum", pair, ax, keepdims=True) / 2.0)
    if not keepdims:
        return ops.reshape(value, tuple(d for i, d in enumerate(value.shape) if i != ax))
    return ops.reshape(value, (1,) * x.ndim) if axis is None else value


# ----------------------------------------------------------------------------------------------
# cumsum / cumprod: Hillis-Steele scans, ceil(log2 n) passes of y[i] = y[i] (op) y[i - s]
def _scan_dtype(x: Node, dtype) -> str:
    if dtype is not None:
        return np.dtype(dtype).name
    if x.dtype == "bool" or x.dtype in INT_DTYPES:
        return "uint64" if x.dtype.startswith("uint") else "int64"   # as NumPy's sum/prod
    return x.dtype


def _scan(name, combine, identity):
    def build(a, axis=None, dtype=None, out=None):
        if out is not None:
            raise unsupported(f"np.{name}(..., out=...)", "symgrad returns new arrays")
        x = _as_array(a)
        x, ax = _flattened(x, axis)
        y = ops.cast(x, _scan_dtype(x, dtype))
        return inclusive_scan(y, ax, combine, identity(y.dtype))
    build.__name__ = name
    return build


cumsum = _scan("cumsum", ops.add, sum_identity)
cumprod = _scan("cumprod", ops.mul, lambda dtype: 1)

# name -> (eager NumPy function, builder), merged into symgrad.numpy_api's tables
FUNCTIONS = {
    "argmax": (np.argmax, argmax), "argmin": (np.argmin, argmin),
    "sort": (np.sort, sort), "partition": (np.partition, partition), "argsort": (np.argsort, argsort),
    "median": (np.median, median), "quantile": (np.quantile, quantile),
    "percentile": (np.percentile, percentile),
    "cumsum": (np.cumsum, cumsum), "cumprod": (np.cumprod, cumprod),
}
ALIASES: dict = {}
