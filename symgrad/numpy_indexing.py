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
from .numpy_elementwise import floor_divide, remainder
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
    if isinstance(k, (list, range, np.ndarray)):   # (a range is a sequence of integers)
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
    already checked, or a traced int64 node), ``inside`` when every one is known to lie
    inside that axis (no run-time check). A write through the key (symgrad.index_writes)
    walks the same plan back."""
    basic: tuple
    axes: tuple
    adjacent: bool
    dest: int
    positions: object
    inside: bool


def advanced_plan(x: Node, key, ranges=None):
    """The :class:`AdvancedPlan` of ``x[key]`` with advanced items (integer arrays, constant or
    traced integer data; constant boolean masks, taken as their np.nonzero arrays; integers
    beside them) among basic ones. None when the key is basic. ``ranges``: the loop indices'
    ranges (``symgrad.loop_plan``), by which a traced integer's wrap and bounds check fold."""
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
    positions, inside = _flat_positions(components, [shape[a] for a in axes], axes, ranges or {})
    return AdvancedPlan(tuple(basic), tuple(axes), adjacent, axes[0] if adjacent else 0,
                        positions, inside)


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


def advanced_index(x: Node, key, ranges=None):
    """``x[key]`` with advanced items among basic ones (:func:`advanced_plan`): basic indexing
    with every advanced axis kept whole, those axes brought together and merged, then one
    gather at the flat positions. None when the key is basic."""
    plan = advanced_plan(x, key, ranges)
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


def _flat_positions(components, sizes, axes, ranges):
    """sum_j index_j * stride_j over the merged axes, negative indices counted from the end.
    Constant indices are checked here (IndexError as NumPy); a traced one out of range sends
    the position past the end, where the gather's own run-time bounds check raises. A traced
    integer of loop indices whose range (``ranges``, :func:`_value_range`) lies inside the axis
    needs neither (``pos[j]`` in ``for j in range(i + 1, n)``), nor the wrap where it cannot be
    negative: those selects would run every iteration, forward and backward. Returns (the
    positions, whether each is known to be inside the merged axis)."""
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
        return flat, True
    flat, ok = None, None
    for c, n, st in zip(components, sizes, strides):
        bounds = _component_range(c, ranges)
        k = ops.cast(ops.lift(c), "int64")
        if bounds is None or bounds[0] < 0:
            k = ops.where(ops.lt(k, 0), k + n, k)
        if bounds is None or bounds[0] < -n or bounds[1] >= n:
            inside = ops.logical_and(ops.ge(k, 0), ops.lt(k, n))
            ok = inside if ok is None else ops.logical_and(ok, inside)
        term = k * st
        flat = term if flat is None else flat + term
    return ops.broadcast_to(flat if ok is None else ops.where(ok, flat, total), shape), ok is None


def _component_range(c, ranges):
    """(lowest, highest) of an index component: a constant array's extremes, a traced
    integer's range from the loop indices' (None where unknown or empty)."""
    if isinstance(c, Node):
        return _value_range(c, ranges)
    return (int(c.min()), int(c.max())) if c.size else None


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


# ----------------------------------------------------------------------------------------------
# Windows: slices whose bounds are integers made from loop indices (``x[i:i + k]``)
#
# Inside a loop region the loop index is a traced integer, so ``x[i:i + k]`` has traced bounds.
# Such a slice is a gather at ``start + arange(length) * step`` (the traced-index ``take`` that
# ``x[i]`` already is) as long as its length is static (``stop - start`` a number) and every
# iteration's window lies inside the array: Python clamps ``x[8:13]`` of a 10-vector to length
# 2 and reads a negative start from the end, which would make the shape or the meaning depend
# on the index. The range of the index (``symgrad.loop_plan``) decides that; where it cannot,
# the window is refused and the loop unrolls (every iteration's slice then static, NumPy's own).

@dataclass(frozen=True, eq=False)
class Window:
    """A slice with traced integer bounds (``start``, ``stop``: nodes or Python ints; ``step``
    a Python int), as the front end evaluates ``i:i + k`` (symgrad.expressions)."""
    start: object
    stop: object
    step: int


def has_window(key) -> bool:
    return any(isinstance(k, Window) for k in (key if isinstance(key, tuple) else (key,)))


def affine_parts(value):
    """({leaf node: coefficient}, constant) of an integer built from leaves by +, -, unary -
    and products with numbers; None when it is built otherwise."""
    terms, constant = {}, 0
    stack = [(value, 1)]
    while stack:
        n, coef = stack.pop()
        if isinstance(n, numbers.Integral) and not isinstance(n, bool):
            constant += coef * int(n)
        elif not isinstance(n, Node) or n.ndim or n.dtype not in INT_DTYPES:
            return None
        elif n.op == "const" and isinstance(n.attrs[0], numbers.Integral):
            constant += coef * int(n.attrs[0])
        elif n.op == "add":
            stack += [(n.inputs[0], coef), (n.inputs[1], coef)]
        elif n.op == "sub":
            stack += [(n.inputs[0], coef), (n.inputs[1], -coef)]
        elif n.op == "neg":
            stack.append((n.inputs[0], -coef))
        elif n.op == "mul" and any(_static_int(m) is not None for m in n.inputs):
            k = next(_static_int(m) for m in n.inputs if _static_int(m) is not None)
            other = n.inputs[1] if _static_int(n.inputs[0]) is not None else n.inputs[0]
            stack.append((other, coef * k))
        else:
            terms[n] = terms.get(n, 0) + coef
    return {n: c for n, c in terms.items() if c}, constant


def _static_int(n: Node):
    return int(n.attrs[0]) if n.op == "const" and isinstance(n.attrs[0], numbers.Integral) \
        and not isinstance(n.attrs[0], bool) else None


def window_span(window: Window) -> int | None:
    """``stop - start`` of a window when it is a number (the same in every iteration)."""
    start, stop = affine_parts(window.start), affine_parts(window.stop)
    if start is None or stop is None or start[0] != stop[0]:
        return None
    return stop[1] - start[1]


def _value_range(value, ranges):
    from .loop_plan import _static_range   # (loop_plan sits above the op modules)
    return _static_range(value, ranges)


@dataclass(frozen=True)
class _Traced:
    """What a window or traced integer scalar reads along ``axis`` of the basic view:
    ``positions`` (``start + arange(length) * step``, int64; a scalar for an integer)."""
    axis: int
    positions: Node
    start: Node
    step: int

    @property
    def drops(self) -> bool:   # an integer scalar drops its axis, as NumPy's x[i]
        return self.positions.ndim == 0


def _window_positions(window: Window, size: int, ranges):
    """(start, positions) of a window on an axis of ``size``: ``start + arange(length) *
    step``, or None when some iteration's window might not be that: a length that is not
    static, a start or stop that may be negative (read from the end) or a window that may
    reach past the end (clamped)."""
    span, step = window_span(window), window.step
    if span is None or step == 0:
        return None
    length = len(range(0, span, step))
    start, stop = _value_range(window.start, ranges), _value_range(window.stop, ranges)
    if start is None or stop is None or start[0] < 0 or stop[0] < 0:
        return None
    reach = (length - 1) * step if length else 0
    if length and (start[0] + min(0, reach) < 0 or start[1] + max(0, reach) > size - 1):
        return None
    first = ops.cast(ops.lift(window.start), "int64")
    return first, ops.add(first, ops.array_const(np.arange(length, dtype=np.int64) * step))


def _window_items(x: Node, key):
    """(the basic key with every traced item a full slice, [(axis of that view, item)]) for a
    key holding windows and traced integer scalars among basic items."""
    items = list(key) if isinstance(key, tuple) else [key]
    consumed = sum(1 for k in items if k is not None and k is not Ellipsis)
    if consumed > x.ndim:
        raise IndexError(f"too many indices for array: array is {x.ndim}-dimensional, but "
                         f"{consumed} were indexed")
    basic, traced, out_axis = [], [], 0
    for k in items:
        if k is Ellipsis:
            basic += [slice(None)] * (x.ndim - consumed)
            out_axis += x.ndim - consumed
            continue
        if isinstance(k, Window) or (isinstance(k, Node) and k.ndim == 0 and k.dtype in INT_DTYPES):
            traced.append((out_axis, k))
            basic.append(slice(None))
        else:
            basic.append(k)
        if not (isinstance(k, numbers.Integral) and not isinstance(k, bool)):
            out_axis += 1
    return tuple(basic), traced


def _traced_read(axis: int, item, size: int, ranges):
    """The :class:`_Traced` of a window or traced integer scalar on an axis of ``size``, or
    None when its positions are not known to be inside the axis in every iteration."""
    if isinstance(item, Window):
        found = _window_positions(item, size, ranges)
        return None if found is None else _Traced(axis, found[1], found[0], item.step)
    bounds = _value_range(item, ranges)
    if bounds is None or bounds[0] < -size or bounds[1] >= size:
        return None
    k = ops.cast(item, "int64")
    if bounds[0] < 0:   # from the end in some iterations, as NumPy reads it
        k = ops.where(ops.lt(k, 0), ops.add(k, size), k)
    return _Traced(axis, k, k, 1)


WINDOW_WHY = ("the loop index's range could not show that every window lies inside the array "
              "with a static length (stop - start a number, start >= 0, stop within the axis)")


def _window_plan(x: Node, key, ranges):
    """(basic key, basic view of ``x``, [:class:`_Traced`]) of a key with windows."""
    basic, traced = _window_items(x, key)
    view = ops.getitem(x, basic)
    plan = []
    for axis, item in traced:
        read = _traced_read(axis, item, view.shape[axis], ranges)
        if read is None:
            raise unsupported("a slice whose bounds depend on a loop index", WINDOW_WHY)
        plan.append(read)
    return basic, view, plan


def window_read(x: Node, key, ranges) -> Node:
    """``x[key]`` for a key with windows (and traced integer scalars): the basic view with
    those axes whole, then one gather per traced axis, first axis first (a gather by a scalar
    drops its axis, moving the later ones down)."""
    _, view, plan = _window_plan(x, key, ranges)
    dropped = 0
    for read in plan:
        view = ops.take(view, read.positions, read.axis - dropped)
        dropped += read.drops
    return view


def window_write(x: Node, key, value, ranges) -> Node:
    """``x`` with ``x[key] = value`` for a key with windows: along each traced axis, every
    position picks the window's element that lands there (a gather from ``value``: exact)
    and a select keeps ``x`` where none does, as ``x[i] = v`` with a loop index is
    (``ops.row_update``). Each iteration costs one pass over the view."""
    basic, view, plan = _window_plan(x, key, ranges)
    window = [d for d in view.shape]
    for read in plan:
        window[read.axis] = 1 if read.drops else read.positions.shape[0]
    kept = tuple(d for a, d in enumerate(window) if not any(r.axis == a and r.drops for r in plan))
    spread = ops.reshape(ops.broadcast_to(ops.cast(ops.lift(value), x.dtype), kept), tuple(window))
    mask = None
    for read in plan:
        size = view.shape[read.axis]
        pick, hit = _window_picks(ops.arange(0, size, 1, "int64"), read)
        spread = ops.take(spread, pick, read.axis)
        hit = ops.reshape(hit, tuple(size if a == read.axis else 1 for a in range(view.ndim)))
        mask = hit if mask is None else ops.logical_and(mask, hit)
    written = ops.where(mask, spread, view)
    if all(isinstance(k, slice) and k == slice(None) for k in basic):
        return written
    return ops.setitem(x, written, basic)


def _window_picks(rows: Node, read: _Traced):
    """For each position ``rows`` of the axis: which element of the window lands there (0
    where none does) and whether one does."""
    if read.drops:
        return ops.full(rows.shape, 0, "int64"), ops.eq(rows, read.positions)
    length, stride = read.positions.shape[0], abs(read.step)
    moved = ops.sub(rows, read.start) if read.step > 0 else ops.sub(read.start, rows)
    inside = ops.logical_and(ops.ge(moved, 0), ops.lt(moved, length * stride))
    if stride != 1:
        inside = ops.logical_and(inside, ops.eq(remainder(moved, stride), 0))
        moved = floor_divide(moved, stride)
    return ops.where(inside, moved, 0), inside
