"""Writes through advanced indices, as compositions of the gather (``take``) and the
scatter-add (``scatter_add``) that reading ``y[idx]`` and its gradient already use:

* ``y[key] = v`` (:func:`assign`): NumPy's semantics, a repeated index written by its last
  occurrence (in the C order of the broadcast index arrays);
* ``y[key] += v`` is Python's ``y[key] = y[key] + v`` (NumPy's buffered update: a repeated
  index adds once, its last value), so it is :func:`assign` of the gathered sum;
* ``np.add.at(y, key, v)`` (:func:`accumulate`): the unbuffered scatter-add, every occurrence
  of a repeated index adding.

``key`` is any advanced key the gather takes (symgrad.numpy_indexing.advanced_plan): integer
arrays, constant or traced, with integers and slices, and constant boolean masks. The write
goes through the same plan as the read: the basic view, its indexed axes merged into one, a
write along that axis at the flat positions, and the view put back.

Why the last writer is found by bit passes, not a new scatter op: a scatter that stores would
need an order on the GPU (atomic stores race), and a sort here is O(n^2) (symgrad.numpy_sorting).
Instead the winners of a traced index array are found exactly with integer counts, which every
back end sums in any order to the same result: for each bit of the occurrence number, from the
top, the candidates of each position that have the bit set are counted (a scatter-add), and
where any has it, those without it drop out (a gather of the count). After ceil(log2 m) passes
one candidate per position is left, the last occurrence. The write itself is then a gather of
the winners' values (``where(hit, take(v, winner), y)``), so its derivative is the one of a
select and a gather: zero for ``y`` at the written positions, the cotangent gathered at the
positions for the winners of ``v`` and zero for the others. For a constant index array the
winners are computed here, with NumPy.
"""
from __future__ import annotations

import numpy as np

from . import ops
from .ir import Node
from .numpy_base import unsupported
from .numpy_indexing import advanced_plan, merged_view, unmerged_view


# The ufuncs whose unbuffered ``.at`` update is traced: the sign the values are added with.
UFUNC_AT = {"add": 1.0, "subtract": -1.0}
UFUNC_AT_WHY = ("an unbuffered update other than a sum would need a scatter of that operation: "
                "use np.add.at / np.subtract.at, or a loop of y[i] = ... writes")


def assign(y: Node, key, value, ranges=None) -> Node:
    """``y`` with ``y[key] = value`` done (functionally), NumPy's semantics. ``ranges``: the
    loop indices' (an index they show inside the array is not checked at run time)."""
    return _through(y, key, value, _assign_merged, ranges)


def accumulate(y: Node, key, value, ranges=None) -> Node:
    """``y`` after ``np.add.at(y, key, value)``: every occurrence of an index adds."""
    if y.dtype == "bool":
        raise unsupported("np.add.at into a bool array", "add into a numeric array")
    return _through(y, key, value, _add_merged, ranges)



def diagonal_filled(a, val, wrap=False) -> Node:
    """``a`` after ``np.fill_diagonal(a, val, wrap)``: NumPy's ``a.flat[:end:step] = val``
    (``val`` repeated cyclically when shorter than the diagonal; a tall 2-d array's diagonal
    starts again past each square block only with ``wrap``)."""
    a = ops.lift(a)
    if a.ndim < 2:
        raise ValueError("array must be at least 2-d")
    if a.ndim == 2:
        step, end = a.shape[1] + 1, None if wrap else a.shape[1] * a.shape[1]
    elif any(s != a.shape[0] for s in a.shape):
        raise ValueError("All dimensions of input must be of equal length")
    else:
        step, end = 1 + int(np.cumprod(a.shape[:-1]).sum()), None
    positions = np.arange(a.size)[:end:step]
    values = ops.reshape(ops.lift(val), (-1,))
    if values.shape[0] == 0 or not positions.size:
        return a
    if values.shape[0] not in (1, positions.size):      # cyclic, as a flat assignment
        values = ops.take(values, np.arange(positions.size) % values.shape[0], 0)
    values = ops.broadcast_to(ops.cast(values, a.dtype), (positions.size,))
    return ops.reshape(assign(ops.reshape(a, (a.size,)), positions, values), a.shape)

def _through(y: Node, key, value, write, ranges) -> Node:
    """The write ``write(merged, flat positions, values, axis, inside)`` through ``key``'s
    plan (``inside``: the positions are known to be in bounds)."""
    plan = advanced_plan(y, key, ranges)
    if any(item is None for item in plan.basic):
        raise unsupported("np.newaxis in the index of an assignment", "index without None")
    view = ops.getitem(y, plan.basic)
    merged = merged_view(view, plan)
    positions = plan.positions
    dest = plan.dest
    target = merged.shape[:dest] + tuple(np.shape(positions)) + merged.shape[dest + 1:]
    values = _broadcast_value(value, target, y.dtype)
    m = int(np.prod(np.shape(positions), dtype=np.int64))
    if m == 0:
        return y
    flat = ops.reshape(positions, (m,)) if isinstance(positions, Node) else \
        np.asarray(positions).reshape(m)
    values = ops.reshape(values, merged.shape[:dest] + (m,) + merged.shape[dest + 1:])
    written = unmerged_view(write(merged, flat, values, dest, plan.inside), view.shape, plan)
    return written if view is y else ops.setitem(y, written, plan.basic)


def _broadcast_value(value, target: tuple, dtype: str) -> Node:
    """``value`` as NumPy assigns it to a selection of shape ``target``: cast to the array's
    dtype, leading length-1 axes beyond ``target``'s rank dropped, then broadcast."""
    v = ops.lift(value)
    while v.ndim > len(target) and v.shape[0] == 1:
        v = ops.reshape(v, v.shape[1:])
    try:
        shape = tuple(np.broadcast_shapes(v.shape, target))
    except ValueError:
        shape = None
    if shape != tuple(target):
        raise ValueError(f"shape mismatch: value array of shape {v.shape} could not be broadcast "
                         f"to indexing result of shape {tuple(target)}")
    return ops.broadcast_to(ops.cast(v, dtype), tuple(target))


def _assign_merged(merged: Node, flat, values: Node, axis: int, inside: bool) -> Node:
    """``merged`` with position ``flat[k]`` along ``axis`` set to ``values``' slice k, the last
    k winning for a repeated position."""
    size = merged.shape[axis]
    if isinstance(flat, Node) and flat.shape[0] == 1:
        return _assign_one(merged, flat, values, axis, inside)
    if isinstance(flat, Node):
        hit, source = _traced_winners(flat, size)
    else:
        hit, source = _constant_winners(flat, size)
    picked = ops.take(values, source, axis)
    if not isinstance(hit, Node) and hit.all():
        return picked                 # every position written (a permutation, say)
    hit = ops.reshape(ops.lift(hit), (size,) + (1,) * (merged.ndim - axis - 1))
    return ops.where(hit, picked, merged)


def _assign_one(merged: Node, flat: Node, values: Node, axis: int, inside: bool) -> Node:
    """One traced position (``y[i] = v`` with ``i`` data, a loop body's usual write): a select
    of the row, no scatter. The position goes through a gather of the positions themselves,
    whose bounds check is the write's IndexError (unless it is known ``inside``: ``L[i, j] = v``
    with loop indices)."""
    size = merged.shape[axis]
    positions = ops.arange(size)
    position = ops.reshape(flat if inside else ops.take(positions, flat, 0), ())
    hit = ops.reshape(ops.eq(positions, position), (size,) + (1,) * (merged.ndim - axis - 1))
    return ops.where(hit, values, merged)


def _add_merged(merged: Node, flat, values: Node, axis: int, inside: bool) -> Node:
    index = flat if isinstance(flat, Node) else ops.array_const(flat.astype(np.int64))
    if not merged.dtype.startswith("float"):
        return merged + ops.scatter_add(values, index, axis, merged.shape[axis])
    # y - scatter(-v), not y + scatter(v): the scatter is +0 where nothing lands, and -0 + +0
    # is +0 where NumPy leaves an untouched -0 as it is (x - +0 is x for every x)
    return merged - ops.scatter_add(ops.neg(values), index, axis, merged.shape[axis])


def _constant_winners(flat: np.ndarray, size: int):
    """(written, the last k writing each position (0 where none)) of constant positions."""
    last = np.full(size, -1, np.int64)
    np.maximum.at(last, flat, np.arange(flat.size, dtype=np.int64))
    hit = last >= 0
    return hit, ops.array_const(np.where(hit, last, 0))


def _traced_winners(flat: Node, size: int):
    """(written, the last k writing each position (0 where none)) of traced positions, by the
    bit passes of the module docstring."""
    m = flat.shape[0]
    alive = None                                  # every occurrence is a candidate
    for bit in reversed(range((m - 1).bit_length())):
        has = _bit_set(m, bit)
        candidates = has if alive is None else ops.logical_and(alive, has)
        counts = ops.scatter_add(ops.cast(candidates, "int64"), flat, 0, size)
        beaten = ops.gt(ops.take(counts, flat, 0), 0)     # some candidate here has the bit
        keep = ops.logical_or(has, ops.logical_not(beaten))
        alive = keep if alive is None else ops.logical_and(alive, keep)
    numbered = ops.arange(1, m + 1)
    if alive is not None:
        numbered = ops.where(alive, numbered, 0)
    winner = ops.scatter_add(numbered, flat, 0, size)     # the winner's k + 1, or 0
    hit = ops.gt(winner, 0)
    return hit, ops.where(hit, winner - 1, 0)


def _bit_set(m: int, bit: int) -> Node:
    """Whether ``bit`` is set in k, for k = 0 .. m-1: a periodic pattern (2**bit clear, then
    2**bit set), built as a view of a two-element constant rather than a table of m."""
    period = 2 << bit
    repeats = -(-m // period)
    pair = ops.reshape(ops.array_const(np.array([False, True])), (1, 2, 1))
    grid = ops.reshape(ops.broadcast_to(pair, (repeats, 2, period // 2)), (repeats * period,))
    return ops.getitem(grid, slice(0, m))
