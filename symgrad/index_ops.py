"""The op table, indexing: basic indexing (``getitem``, ``setitem``, ``index_add``),
``concatenate``/``stack`` (whose derivatives slice) and gather/scatter with index arrays.
Same conventions as the other op modules.
"""
from __future__ import annotations

import numbers

import numpy as np

from . import spelling as sp
from .ir import NEWAXIS, NewAxis, Node, OpDef, Slice, make, register
from .op_base import (_promote, _same_dtype, array_const, broadcast_shapes, cast, full, lift,
                      normalize_axes, zeros_like)
from .shape_ops import reshape, unbroadcast

# Basic indexing. The index is a normalised tuple with one item per input axis consumed:
#   int k >= 0          -> the axis is dropped
#   Slice(start, stop, step) with concrete bounds (as range() would give them)
#   NEWAXIS             -> a new axis of length 1 (np.newaxis)
def _index_shape(shape, index):
    out, axis = [], 0
    for item in index:
        if isinstance(item, NewAxis):
            out.append(1)
            continue
        if isinstance(item, Slice):
            out.append(len(range(item.start, item.stop, item.step)))
        axis += 1
    return tuple(out) + tuple(shape[axis:])


def _numpy_index(index):
    return tuple(None if isinstance(it, NewAxis) else
                 slice(it.start, it.stop if it.stop >= 0 else None, it.step)
                 if isinstance(it, Slice) else it for it in index)


def _index_text(index, shape) -> str:
    """NumPy spelling of a normalised index on an array of ``shape``: full slices are ``:``,
    trailing ones are dropped and a leading run of them becomes ``...``."""
    parts, axis = [], 0
    for it in index:
        if isinstance(it, NewAxis):
            parts.append("None")
            continue
        if isinstance(it, Slice):
            start, stop, step = it.start, it.stop, it.step
            if (start, stop, step) == (0, shape[axis], 1):
                parts.append(":")
            else:
                s = "" if (start == 0 and step > 0) else str(start)
                e = "" if stop < 0 or (step > 0 and stop == shape[axis]) else str(stop)
                parts.append(f"{s}:{e}" + (f":{step}" if step != 1 else ""))
        else:
            parts.append(str(it))
        axis += 1
    while len(parts) > 1 and parts[-1] == ":":
        parts.pop()
    lead = next((i for i, p in enumerate(parts) if p != ":"), len(parts))
    if lead >= 2:
        parts = ["..."] + parts[lead:]
    return ", ".join(parts) if parts else "..."


def _getitem_spell(args, node):
    a = sp.paren(args[0], args[0][1] < sp.ATOM)
    return f"{a}[{_index_text(node.attrs[0], node.inputs[0].shape)}]", sp.ATOM


register(OpDef("getitem", "shape",
               lambda inputs, attrs: (inputs[0].dtype, _index_shape(inputs[0].shape, attrs[0])),
               lambda x, attrs: np.asarray(x)[_numpy_index(attrs[0])], _getitem_spell,
               lambda g, n: (index_add(zeros_like(n.inputs[0]), g, n.attrs[0]),),
               jvp=lambda t, n: None if t[0] is None else getitem(t[0], n.attrs[0])))


def _update_infer(inputs, attrs):
    base, value = inputs
    target = _index_shape(base.shape, attrs[0])
    if broadcast_shapes(value.shape, target) != target:
        raise ValueError(f"could not broadcast input array from shape {value.shape} into shape {target}")
    return _same_dtype(inputs), base.shape


def _update_numpy(accumulate):
    def run(base, value, attrs):
        out = np.array(base, copy=True)  # functional update: never touch the operand
        idx = _numpy_index(attrs[0])
        if accumulate:
            out[idx] += value
        else:
            out[idx] = value
        return out[()] if out.ndim == 0 else out
    return run


# Spelled by the emitter as statements (``y = np.array(b); y[i] = v`` / ``y[i] += v``).
def _update_jvp(update, adds: bool):
    """An update is linear in (base, value): the same update of the tangents, a zero base
    tangent as zeros and a zero value tangent as a written zero (setitem) or nothing added
    (index_add)."""
    def jvp(tangents, n):
        (base, value), (t_base, t_value) = n.inputs, tangents
        if t_value is None:
            return t_base if t_base is None or adds else \
                update(t_base, zeros_like(value), n.attrs[0])
        return update(zeros_like(base) if t_base is None else t_base, t_value, n.attrs[0])
    return jvp


register(OpDef("setitem", "shape", _update_infer, _update_numpy(False), None,
               lambda g, n: (setitem(g, zeros_like(n.inputs[1]), n.attrs[0]),
                             unbroadcast(getitem(g, n.attrs[0]), n.inputs[1].shape)),
               jvp=_update_jvp(lambda *a: setitem(*a), adds=False)))
register(OpDef("index_add", "shape", _update_infer, _update_numpy(True), None,
               lambda g, n: (g, unbroadcast(getitem(g, n.attrs[0]), n.inputs[1].shape)),
               jvp=_update_jvp(lambda *a: index_add(*a), adds=True)))


def normalize_index(shape, key) -> tuple:
    """A NumPy basic index -> the normalised tuple above (raises IndexError like NumPy)."""
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if consumed > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, "
                         f"but {consumed} were indexed")
    out, axis = [], 0
    for k in key:
        if k is Ellipsis:
            for _ in range(len(shape) - consumed):
                out.append(Slice(0, shape[axis], 1))
                axis += 1
        elif k is None:
            out.append(NEWAXIS)
        elif isinstance(k, slice):
            start, stop, step = k.indices(shape[axis])
            if step < 0 and stop < 0:
                stop = -1  # a negative stop from slice.indices means "before index 0"
            out.append(Slice(start, stop, step))
            axis += 1
        elif isinstance(k, numbers.Integral) and not isinstance(k, bool):
            if not -shape[axis] <= k < shape[axis]:
                raise IndexError(f"index {k} is out of bounds for axis {axis} with size {shape[axis]}")
            out.append(int(k) % shape[axis])
            axis += 1
        else:
            raise IndexError(f"unsupported index {k!r}: only integers, slices, None and ... "
                             "(basic indexing) are supported")
    return tuple(out)


def _is_full_index(shape, index) -> bool:
    return len(index) <= len(shape) and all(
        isinstance(it, Slice) and it == Slice(0, d, 1)
        for it, d in zip(index, shape))


def _only_reshapes(shape, index) -> bool:
    """Full slices, new axes and 0 on length-1 axes: the index only changes the shape."""
    axis = 0
    for it in index:
        if isinstance(it, NewAxis):
            continue
        full = it == Slice(0, shape[axis], 1)
        if not (full or (it == 0 and shape[axis] == 1)):
            return False
        axis += 1
    return True


def getitem(x, key) -> Node:
    x = lift(x)
    index = key if _is_normalized(key) else normalize_index(x.shape, key)
    if _is_full_index(x.shape, index):
        return x
    if _only_reshapes(x.shape, index):   # x[:, None], y[..., 0] on a length-1 axis
        return reshape(x, _index_shape(x.shape, index))
    return make("getitem", (x,), (index,))


def _is_normalized(key) -> bool:
    return isinstance(key, tuple) and all(
        isinstance(k, (Slice, NewAxis)) or
        (isinstance(k, int) and not isinstance(k, bool) and k >= 0) for k in key) and any(
        isinstance(k, (Slice, NewAxis)) for k in key) or key == ()


def setitem(base, value, key) -> Node:
    base = lift(base)
    index = key if _is_normalized(key) else normalize_index(base.shape, key)
    return make("setitem", (base, cast(value, base.dtype)), (index,))


def index_add(base, value, key) -> Node:
    base = lift(base)
    index = key if _is_normalized(key) else normalize_index(base.shape, key)
    return make("index_add", (base, cast(value, base.dtype)), (index,))


def _concat_infer(inputs, attrs):
    (axis,) = attrs
    dtype = _same_dtype(inputs)
    first = inputs[0].shape
    for x in inputs[1:]:
        if x.ndim != len(first) or any(a != b for i, (a, b) in enumerate(zip(x.shape, first)) if i != axis):
            raise ValueError("all the input array dimensions except for the concatenation axis "
                             f"must match exactly, got {first} and {x.shape}")
    size = sum(x.shape[axis] for x in inputs)
    return dtype, first[:axis] + (size,) + first[axis + 1:]


def _concat_vjp(g, n):
    (axis,), start, out = n.attrs, 0, []
    for x in n.inputs:
        index = tuple(Slice(0, d, 1) for d in g.shape[:axis]) + (Slice(start, start + x.shape[axis], 1),)
        out.append(getitem(g, index))
        start += x.shape[axis]
    return tuple(out)


def _list_spell(fn):
    def spell(args, node):
        (axis,) = node.attrs
        tail = f", axis={axis}" if axis else ""
        return f"np.{fn}([{', '.join(a[0] for a in args)}]{tail})", sp.ATOM
    return spell


register(OpDef("concatenate", "shape", _concat_infer,
               lambda *xs_attrs: np.concatenate(xs_attrs[:-1], axis=xs_attrs[-1][0]),
               _list_spell("concatenate"), _concat_vjp, jvp=lambda t, n: _joined_jvp(concatenate, t, n)))


def _joined_jvp(join, tangents, n):
    """concatenate/stack are linear: the same join of the tangents, zeros for zero ones."""
    if all(t is None for t in tangents):
        return None
    return join([zeros_like(x) if t is None else t for x, t in zip(n.inputs, tangents)], n.attrs[0])


def _stack_infer(inputs, attrs):
    (axis,) = attrs
    dtype = _same_dtype(inputs)
    if len({x.shape for x in inputs}) != 1:
        raise ValueError("all input arrays must have the same shape")
    s = inputs[0].shape
    return dtype, s[:axis] + (len(inputs),) + s[axis:]


register(OpDef("stack", "shape", _stack_infer,
               lambda *xs_attrs: np.stack(xs_attrs[:-1], axis=xs_attrs[-1][0]),
               _list_spell("stack"),
               lambda g, n: tuple(getitem(g, tuple(Slice(0, d, 1) for d in g.shape[:n.attrs[0]]) + (i,))
                                  for i in range(len(n.inputs))),
               jvp=lambda t, n: _joined_jvp(stack, t, n)))


def concatenate(xs, axis=0) -> Node:
    xs = _promote(list(xs))
    if not xs:
        raise ValueError("need at least one array to concatenate")
    if xs[0].ndim == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = normalize_axes(axis, xs[0].ndim)[0]
    if len(xs) == 1:
        return xs[0]
    return _static_gather(make("concatenate", tuple(xs), (axis,)))


# An array assembled by a static loop from many small pieces of one array, such as ADBench
# GMM's triangle ``np.stack([np.concatenate([np.zeros((k, i + 1)), icf[:, a:b]], axis=1) for i
# in range(d)], axis=2)``, is one gather from that array (zeros from a padding element) with a
# constant index table: one loop in the back ends, and one scatter-add in its gradient,
# instead of a loop per piece and a slice per piece in the gradient (2d + 2 stages for the
# GMM triangle, each with LLVM's per-loop compile time). Applied from GATHER_MIN_PIECES
# pieces up, while the table stays small.
GATHER_MIN_PIECES = 8
GATHER_MAX_TABLE = 1 << 16
# The walk looks at most this many joins and pieces: a join built step by step in a loop
# (acc = np.concatenate([acc, piece])) that never qualifies is walked again at every step, and
# the bound keeps that linear in the steps.
GATHER_MAX_NODES = 1024


def _is_zeros(n: Node) -> bool:
    """np.zeros traced (``full``) or evaluated while tracing (an ``array`` constant)."""
    if n.op == "full":
        return n.attrs[0] == 0
    return n.op == "array" and not np.any(n.attrs[0].value)


def _pieces(x: Node):
    """(the one array the pieces of ``x`` read, the number of pieces (a piece used twice counts
    twice), the joins and pieces in an order that puts every input before its user) when ``x``
    is made only of basic-index pieces of one array, zeros and joins of those; else None. No
    arrays are built here."""
    base, count, order, seen = None, 0, [], set()
    stack = [(x, False)]
    while stack:                          # iterative: the joins may nest deeply
        n, ready = stack.pop()
        if ready:
            order.append(n)
            continue
        if n in seen:
            count += n.op not in ("concatenate", "stack")
            continue
        seen.add(n)
        if len(seen) > GATHER_MAX_NODES:
            return None
        if n.op in ("concatenate", "stack"):
            stack.append((n, True))
            stack.extend((p, False) for p in n.inputs)
            continue
        if n.op == "getitem" and n.inputs[0].ndim and not any(
                isinstance(it, NewAxis) for it in n.attrs[0]):
            if base is None:
                base = n.inputs[0]
            if n.inputs[0] is not base:
                return None
        elif not _is_zeros(n):
            return None
        count += 1
        order.append(n)
    return (base, count, order) if base is not None else None


def _piece_map(order: list, base: Node) -> np.ndarray:
    """For each element of the last node of ``order``, 1 + its flat position in ``base``, or
    0 where it is a zero."""
    positions = np.arange(1, base.size + 1, dtype=np.int64).reshape(base.shape)
    maps: dict = {}
    for n in order:
        if n.op == "concatenate":
            maps[n] = np.concatenate([maps[p] for p in n.inputs], axis=n.attrs[0])
        elif n.op == "stack":
            maps[n] = np.stack([maps[p] for p in n.inputs], axis=n.attrs[0])
        elif n.op in ("full", "array"):
            maps[n] = np.zeros(n.shape, dtype=np.int64)
        else:
            maps[n] = positions[_numpy_index(n.attrs[0])]
    return maps[order[-1]]


def _row_map(order: list, base: Node) -> np.ndarray | None:
    """_rows_table's one-row table read off the structure, without the whole table: when every
    piece takes all rows of ``base`` (its index starts with a full slice), every zero block
    has as many rows and no join is along axis 0, row r of the result is row r of ``base``
    throughout, so the map of a one-row ``base`` is the table (GMM at d = 64: 200 rows of
    the whole table were 20 ms of its trace). None where that does not hold."""
    k = base.shape[0]
    if base.ndim < 2:
        return None
    positions = np.arange(1, base.size // k + 1, dtype=np.int64).reshape((1,) + base.shape[1:])
    maps: dict = {}
    for n in order:
        if n.shape[:1] != (k,):
            return None
        if n.op in ("concatenate", "stack"):
            if n.attrs[0] == 0:
                return None
            join = np.concatenate if n.op == "concatenate" else np.stack
            maps[n] = join([maps[p] for p in n.inputs], axis=n.attrs[0])
        elif n.op in ("full", "array"):
            maps[n] = np.zeros((1,) + n.shape[1:], dtype=np.int64)
        else:
            first = n.attrs[0][0] if n.attrs[0] else None
            if not (isinstance(first, Slice) and first.start == 0 and first.step == 1
                    and first.stop >= k):
                return None
            maps[n] = positions[_numpy_index(n.attrs[0])]
    return maps[order[-1]][0]


def _rows_table(table: np.ndarray, base: Node):
    """``table`` as one row's table when every element of output row r comes from row r of
    ``base`` at the same place (the GMM's components): the gather then runs along axis 1 of
    ``base`` with rows as they are, and the table is one row's. None otherwise."""
    k = base.shape[0]
    if base.ndim < 2 or table.ndim < 2 or table.shape[0] != k:
        return None
    row = base.size // k
    first = table[0]
    if np.any(first > row):
        return None
    shifted = np.where(first > 0, first[None] + row * np.arange(k).reshape((k,) + (1,) * first.ndim), 0)
    return first if np.array_equal(shifted, table) else None


def _static_gather(joined: Node) -> Node:
    """``joined`` (a concatenate or stack) as one gather when it qualifies (see above)."""
    found = _pieces(joined)
    if found is None:
        return joined
    src, count, order = found
    dtype = joined.dtype
    rows = src.shape[0] if src.ndim >= 2 else 1
    if (count < GATHER_MIN_PIECES or src.dtype != dtype or src.size > GATHER_MAX_TABLE * rows
            or joined.size > GATHER_MAX_TABLE * rows):
        return joined
    row_table = _row_map(order, src)
    if row_table is None:
        table = _piece_map(order, src)
        row_table = _rows_table(table, src)
    if row_table is not None and row_table.size <= GATHER_MAX_TABLE:
        k = src.shape[0]
        flat = reshape(src, (k, src.size // k))
        padded = make("concatenate", (full((k, 1), 0, dtype), flat), (1,))
        return reshape(take(padded, row_table.reshape(-1), axis=1), joined.shape)
    if row_table is not None:     # (too large as one row's table: _piece_map's whole one)
        table = _piece_map(order, src)
    if table.size > GATHER_MAX_TABLE:
        return joined
    padded = make("concatenate", (full((1,), 0, dtype), reshape(src, (src.size,))), (0,))
    return reshape(take(padded, table.reshape(-1), axis=0), joined.shape)


def _rows_of(xs):
    """The array whose rows 0, 1, ... ``xs`` are, or None."""
    base = xs[0].inputs[0] if xs[0].op == "getitem" else None
    if base is None or base.ndim == 0 or base.shape[0] != len(xs):
        return None
    for j, x in enumerate(xs):
        if x.op != "getitem" or x.inputs[0] is not base or x.attrs[0] != (j,):
            return None
    return base


def stack(xs, axis=0) -> Node:
    xs = _promote(list(xs))
    if not xs:
        raise ValueError("need at least one array to stack")
    axis = normalize_axes(axis, xs[0].ndim + 1)[0]
    base = _rows_of(xs) if axis == 0 else None
    if base is not None:   # the rows of one array, in order (a loop's stacked output)
        return base
    return _static_gather(make("stack", tuple(xs), (axis,)))


# Gather/scatter with an integer index array (a constant, or traced integer data such as
# labels) along one axis: ``x[idx]``, ``x[:, idx]``, ``np.take(x, idx, axis)``. The gradient of
# a gather is a scatter-add (``np.add.at``), and the gradient of that is the gather again.

def _take_infer(inputs, attrs):
    x, idx = inputs
    (axis,) = attrs
    if idx.dtype not in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        raise IndexError("arrays used as indices must be of integer type")
    return x.dtype, x.shape[:axis] + idx.shape + x.shape[axis + 1:]


def _scatter_infer(inputs, attrs):
    g, idx = inputs
    axis, size = attrs
    return g.dtype, g.shape[:axis] + (size,) + g.shape[axis + idx.ndim:]


def _scatter_numpy(g, idx, attrs):
    axis, size = attrs
    out = np.zeros(g.shape[:axis] + (size,) + g.shape[axis + np.ndim(idx):], dtype=g.dtype)
    np.add.at(out, (slice(None),) * axis + (idx,), g)
    return out


def _take_spell(args, node):   # np.take without axis= would flatten: always spell it
    return f"np.take({args[0][0]}, {args[1][0]}, axis={node.attrs[0]})", sp.ATOM


register(OpDef("take", "shape", _take_infer,
               lambda x, idx, attrs: np.take(x, idx, axis=attrs[0]), _take_spell,
               lambda g, n: (scatter_add(g, n.inputs[1], n.attrs[0], n.inputs[0].shape[n.attrs[0]]), None),
               jvp=lambda t, n: None if t[0] is None else take(t[0], n.inputs[1], n.attrs[0])))
# Spelled by the emitter as statements (``t = np.zeros(...); np.add.at(t, (..., idx), g)``).
register(OpDef("scatter_add", "shape", _scatter_infer, _scatter_numpy, None,
               lambda g, n: (take(g, n.inputs[1], n.attrs[0]), None),
               jvp=lambda t, n: None if t[0] is None else scatter_add(t[0], n.inputs[1], *n.attrs)))


def take(x, indices, axis=0) -> Node:
    x = lift(x)
    if x.ndim == 0:
        raise IndexError("cannot index a 0-d array with an index array")
    axis = normalize_axes(axis, x.ndim)[0]
    if not isinstance(indices, Node):
        indices = np.asarray(indices)
        if indices.dtype.kind not in "iu":
            raise IndexError("arrays used as indices must be of integer type")
        size = x.shape[axis]
        if indices.size and (indices.min() < -size or indices.max() >= size):
            bad = indices.min() if indices.min() < -size else indices.max()
            raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {size}")
        indices = array_const(np.where(indices < 0, indices + size, indices).astype(np.int64))
    return make("take", (x, indices), (axis,))


def scatter_add(g, indices: Node, axis: int, size: int) -> Node:
    return make("scatter_add", (lift(g), indices), (axis, size))


def row_update(base, index: Node, value, from_end: bool = True) -> Node:
    """``base[index] = value`` for an integer scalar ``index`` known to be in bounds (a loop
    index): a select of the rows, so that it needs no dynamic-offset store in any back end
    (each iteration costs one pass over ``base``; the derivative is the same select).
    ``from_end``: whether ``index`` may be negative (counted from the end)."""
    from .elementwise import add, eq, lt, where   # elementwise sits beside this module
    from .op_base import arange
    from .shape_ops import broadcast_to
    base = lift(base)
    n = base.shape[0]
    if from_end:
        index = where(lt(index, 0), add(index, n), index)
    rows = reshape(arange(0, n, 1, index.dtype), (n,) + (1,) * (base.ndim - 1))
    value = broadcast_to(cast(lift(value), base.dtype), base.shape[1:])
    return where(eq(rows, index), value, base)
