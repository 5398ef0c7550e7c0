"""NumPy indexing beyond basic slicing: take and take_along_axis, advanced indexing (integer arrays,
constant or traced; constant boolean masks) reduced to basic indexing and one gather, and
np.r_/np.c_ with traced items."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from . import ops
from .op_base import _promote
from .ir import INT_DTYPES, Node
from .numpy_base import _as_array, _axis, unsupported
from .numpy_layout import atleast_1d


def take(a, indices, axis=None):
    """``np.take``: without ``axis``, from the flattened array (``np.take(x, np.argmax(x))``)."""
    x = _as_array(a)
    if axis is None:
        x, axis = ops.reshape(x, (-1,)), 0
    return ops.take(x, indices, axis)


def take_along_axis(arr, indices, axis):
    """A gather on the flattened array at flat positions: the index's own position on every
    other axis (a constant), plus its value times the axis' stride."""
    x = _as_array(arr)
    if axis is None:
        x, axis = ops.reshape(x, (-1,)), 0
    axis = _axis(axis, x.ndim)
    idx = indices if isinstance(indices, Node) else np.asarray(indices)
    if idx.ndim != x.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    shape = tuple(np.broadcast_shapes(tuple(d if i != axis else 1 for i, d in enumerate(x.shape)),
                                      tuple(d if i != axis else 1 for i, d in enumerate(idx.shape))))
    shape = shape[:axis] + (idx.shape[axis],) + shape[axis + 1:]
    strides = np.array([math.prod(x.shape[i + 1:]) for i in range(x.ndim)], dtype=np.int64)
    grid = np.indices(shape, dtype=np.int64)
    base = sum(grid[i] * strides[i] for i in range(x.ndim) if i != axis) \
        if x.ndim > 1 else np.zeros(shape, np.int64)
    size = x.shape[axis]
    flat = ops.reshape(x, (-1,))
    if isinstance(idx, Node):
        if idx.dtype not in INT_DTYPES:
            raise IndexError("`indices` must be an integer array")
        k = ops.broadcast_to(ops.cast(idx, "int64"), shape)
        k = ops.where(ops.lt(k, 0), k + size, k)
        return ops.take(flat, ops.array_const(base) + k * int(strides[axis]), 0)
    if idx.dtype.kind not in "iu":
        raise IndexError("`indices` must be an integer array")
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise IndexError(f"index {idx.max() if idx.max() >= size else idx.min()} is out of "
                         f"bounds for axis {axis} with size {size}")
    k = np.broadcast_to(np.where(idx < 0, idx + size, idx), shape)
    return ops.take(flat, base + k * strides[axis], 0)


def _advanced_kind(k):
    """'mask' (a constant boolean array), 'array' (integer indices, a traced integer scalar
    among them: a gather of one position), 'traced mask' or None."""
    if isinstance(k, Node):
        if k.dtype in INT_DTYPES:
            return "array"
        return "traced mask" if k.dtype == "bool" and k.ndim else None
    if isinstance(k, (list, np.ndarray)):
        a = np.asarray(k)
        if a.dtype == bool:
            return "mask"
        if a.dtype.kind in "iu" or a.size == 0:
            return "array"
    return None


def is_advanced(key) -> bool:
    return any(_advanced_kind(k) for k in (key if isinstance(key, tuple) else (key,)))


@dataclass(frozen=True)
class AdvancedPlan:
    """How ``x[key]`` with advanced items reduces to one gather: the basic key that keeps every
    advanced axis whole (``basic``), the axes of that view the advanced items index
    (``axes``), whether they stay in place (``adjacent``: NumPy's rule, else they go first),
    where the merged axis lands (``dest``) and the flat positions along it (a constant array,
    already checked, or a traced int64 node). A write through the key (symgrad.index_writes)
    walks the same plan back."""
    basic: tuple
    axes: tuple
    adjacent: bool
    dest: int
    positions: object


def advanced_plan(x: Node, key):
    """The :class:`AdvancedPlan` of ``x[key]`` with advanced items (integer arrays, constant or
    traced integer data; constant boolean masks, taken as their np.nonzero arrays; integers
    beside them) among basic ones. None when the key is basic."""
    items = list(key) if isinstance(key, tuple) else [key]
    kinds = [_advanced_kind(k) for k in items]
    if not any(kinds):
        return None
    if "traced mask" in kinds:
        raise unsupported("indexing with a boolean mask computed from traced data",
                          "the result's length would depend on the data; select with np.where "
                          "(or multiply by the mask) instead")
    items, kinds = _spell_out(x, items, kinds)
    components, basic, advanced_items = [], [], []
    for i, (item, kind) in enumerate(zip(items, kinds)):
        if kind == "mask":
            mask = np.asarray(item)
            if mask.ndim == 0:
                raise unsupported("a 0-d boolean index", "index with arrays of at least one dimension")
            components += list(np.nonzero(mask))
            basic += [slice(None)] * mask.ndim
        elif kind == "array" or (isinstance(item, numbers.Integral) and not isinstance(item, bool)):
            components.append(item if isinstance(item, Node) else np.asarray(item, dtype=np.int64))
            basic.append(slice(None))
        else:
            basic.append(item)
            continue
        advanced_items.append(i)
    shape = ops.getitem(x, tuple(basic)).shape
    axes, axis = [], 0           # the axes of the basic view that the components index
    for item, was in zip(basic, _origins(items, kinds)):
        if item is not None and was:
            axes.append(axis)
        axis += 1
    adjacent = advanced_items == list(range(advanced_items[0], advanced_items[-1] + 1))
    positions = _flat_positions(components, [shape[a] for a in axes], axes)
    return AdvancedPlan(tuple(basic), tuple(axes), adjacent, axes[0] if adjacent else 0, positions)


def merged_view(y: Node, plan: AdvancedPlan) -> Node:
    """The basic view ``y`` (``x[plan.basic]``) with the indexed axes brought together and
    merged into one, at ``plan.dest``: the array the gather reads."""
    axes = list(plan.axes)
    rest = [a for a in range(y.ndim) if a not in axes]
    if not plan.adjacent:
        y = ops.transpose(y, tuple(axes + rest))
    size = math.prod(y.shape[plan.dest:plan.dest + len(axes)])
    return ops.reshape(y, y.shape[:plan.dest] + (size,) + y.shape[plan.dest + len(axes):])


def unmerged_view(merged: Node, shape: tuple, plan: AdvancedPlan) -> Node:
    """:func:`merged_view` undone: the merged array back in the basic view's ``shape``."""
    axes = list(plan.axes)
    order = axes + [a for a in range(len(shape)) if a not in axes] if not plan.adjacent \
        else list(range(len(shape)))
    y = ops.reshape(merged, tuple(shape[a] for a in order))
    return y if plan.adjacent else ops.transpose(y, tuple(int(i) for i in np.argsort(order)))


def advanced_index(x: Node, key):
    """``x[key]`` with advanced items among basic ones (:func:`advanced_plan`): basic indexing
    with every advanced axis kept whole, those axes brought together and merged, then one
    gather at the flat positions. None when the key is basic."""
    plan = advanced_plan(x, key)
    if plan is None:
        return None
    return ops.take(merged_view(ops.getitem(x, plan.basic), plan), plan.positions, plan.dest)


def _spell_out(x: Node, items, kinds):
    """The key with its ellipsis (and the trailing axes) as full slices."""
    width = [np.ndim(k) if kind == "mask" else 0 if (k is None or k is Ellipsis and not kind) else 1
             for k, kind in zip(items, kinds)]
    ellipses = [i for i, (k, kind) in enumerate(zip(items, kinds)) if not kind and k is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if sum(width) > x.ndim:
        raise IndexError(f"too many indices for array: array is {x.ndim}-dimensional, but "
                         f"{sum(width)} were indexed")
    fill = [slice(None)] * (x.ndim - sum(width))
    if ellipses:
        e = ellipses[0]
        items = items[:e] + fill + items[e + 1:]
    else:
        items = items + fill
    return items, [_advanced_kind(k) for k in items]


def _origins(items, kinds):
    """Per item of the basic key: whether it stands for an advanced axis."""
    out = []
    for item, kind in zip(items, kinds):
        if kind == "mask":
            out += [True] * np.ndim(item)
        else:
            out.append(bool(kind) or (isinstance(item, numbers.Integral) and not isinstance(item, bool)))
    return out


def _flat_positions(components, sizes, axes):
    """sum_j index_j * stride_j over the merged axes, negative indices counted from the end.
    Constant indices are checked here (IndexError as NumPy); a traced one out of range sends
    the position past the end, where the gather's own run-time bounds check raises."""
    strides = [math.prod(sizes[j + 1:]) for j in range(len(sizes))]
    total = math.prod(sizes)
    shape = tuple(np.broadcast_shapes(*(c.shape for c in components)))
    if not any(isinstance(c, Node) for c in components):
        flat = np.zeros(shape, np.int64)
        for c, n, st, a in zip(components, sizes, strides, axes):
            if c.size and (c.min() < -n or c.max() >= n):
                bad = c.max() if c.max() >= n else c.min()
                raise IndexError(f"index {bad} is out of bounds for axis {a} with size {n}")
            flat = flat + np.where(c < 0, c + n, c) * st
        return flat
    flat, ok = None, None
    for c, n, st in zip(components, sizes, strides):
        k = ops.cast(ops.lift(c), "int64")
        k = ops.where(ops.lt(k, 0), k + n, k)
        inside = ops.logical_and(ops.ge(k, 0), ops.lt(k, n))
        term = k * st
        flat = term if flat is None else flat + term
        ok = inside if ok is None else ops.logical_and(ok, inside)
    return ops.broadcast_to(ops.where(ok, flat, total), shape)


# ----------------------------------------------------------------------------------------------
# np.r_ / np.c_ with traced items

def _trick_item(item):
    """One item of np.r_[...]: a slice is its static range (a complex step: a linspace with
    that many points, as NumPy), a number or array at least 1-d."""
    if isinstance(item, slice):
        return ops.lift(np.r_[item])
    if isinstance(item, str):
        raise unsupported("np.r_ / np.c_ with a directive string",
                          "use np.concatenate or np.stack with an explicit axis")
    if isinstance(item, numbers.Number):
        return item            # a Python number stays weakly typed until promotion
    return _as_array(item)


def index_trick(columns: bool, key):
    """``np.r_[a, b, 1:4]`` (concatenated along the first axis) or ``np.c_[a, b]`` (1-d items
    as columns, concatenated along the last axis), for items that include traced arrays."""
    items = [_trick_item(k) for k in (key if isinstance(key, tuple) else (key,))]
    items = [atleast_1d(a) for a in _promote(items)]
    if not columns:
        return ops.concatenate(items, 0)
    cols = [ops.reshape(a, (-1, 1)) if a.ndim == 1 else a for a in items]
    return ops.concatenate(cols, -1)
