"""NumPy's shape and layout functions as compositions of reshape, transpose, getitem,
concatenate, broadcast_to, where and take: moveaxis ... pad, atleast_*d, the stacks and splits,
diag/diagonal/trace, tril/triu; and the differences diff and gradient."""
from __future__ import annotations

import numbers

import numpy as np

from . import ops
from .ir import Node
from .numpy_base import _as_array, _axis, _slice_along, unsupported


def moveaxis(x, source, destination):
    x = ops.lift(x)
    src = [a % x.ndim for a in (source if isinstance(source, (list, tuple)) else (source,))]
    dst = [a % x.ndim for a in (destination if isinstance(destination, (list, tuple)) else (destination,))]
    if len(src) != len(dst):
        raise ValueError("`source` and `destination` arguments must have the same number of elements")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return ops.transpose(x, order)


def swapaxes(x, axis1, axis2):
    x = ops.lift(x)
    perm = list(range(x.ndim))
    a, b = _axis(axis1, x.ndim), _axis(axis2, x.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return ops.transpose(x, perm)


def rollaxis(x, axis, start=0):
    x = ops.lift(x)
    axis = _axis(axis, x.ndim)
    if not -x.ndim <= start <= x.ndim:
        raise ValueError(f"start arg {start} out of bounds for array of dimension {x.ndim}")
    start %= x.ndim + 1
    if axis < start:
        start -= 1
    if axis == start:
        return x
    perm = [a for a in range(x.ndim) if a != axis]
    perm.insert(start, axis)
    return ops.transpose(x, perm)


def expand_dims(x, axis):
    x = ops.lift(x)
    axes = axis if isinstance(axis, (list, tuple)) else (axis,)
    ndim = x.ndim + len(axes)
    new = ops.normalize_axes(axes, ndim)
    dims = iter(x.shape)
    return ops.reshape(x, tuple(1 if i in new else next(dims) for i in range(ndim)))


def squeeze(x, axis=None):
    x = ops.lift(x)
    axes = ops.normalize_axes(axis, x.ndim) if axis is not None else \
        tuple(i for i, d in enumerate(x.shape) if d == 1)
    if any(x.shape[a] != 1 for a in axes):
        raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return ops.reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def ravel(x, order="C"):
    if order not in ("C", "A", "K"):
        raise unsupported(f"np.ravel(..., order={order!r})", "only C order is supported")
    return ops.reshape(_as_array(x), (-1,))


def flip(x, axis=None):
    x = _as_array(x)
    axes = ops.normalize_axes(axis, x.ndim)
    key = tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(x.ndim))
    return ops.getitem(x, key) if axes else x


def fliplr(x):
    x = ops.lift(x)
    if x.ndim < 2:
        raise ValueError("Input must be >= 2-d.")
    return flip(x, 1)


def flipud(x):
    x = ops.lift(x)
    if x.ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return flip(x, 0)


def roll(x, shift, axis=None):
    x = _as_array(x)
    if axis is None:
        return ops.reshape(roll(ops.reshape(x, (-1,)), shift, 0), x.shape)
    shifts = shift if isinstance(shift, (list, tuple)) else (shift,)
    axes = axis if isinstance(axis, (list, tuple)) else (axis,)
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) == 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise ValueError("'shift' and 'axis' should be scalars or 1D sequences")
    total: dict = {}
    for s, a in zip(shifts, axes):
        a = _axis(a, x.ndim)
        total[a] = total.get(a, 0) + int(s)
    for a, s in sorted(total.items()):
        n = x.shape[a]
        s = s % n if n else 0
        if s:
            x = ops.concatenate([_slice_along(x, a, slice(n - s, None)),
                                 _slice_along(x, a, slice(0, n - s))], a)
    return x


def rot90(m, k=1, axes=(0, 1)):
    m = ops.lift(m)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    a0, a1 = (_axis(a, m.ndim) for a in axes)
    if a0 == a1:
        raise ValueError("Axes must be different.")
    k %= 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, a0), a1)
    perm = list(range(m.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return ops.transpose(flip(m, a1), perm)
    return flip(ops.transpose(m, perm), a1)


def tile(x, reps):
    """Each axis of length d repeated r times: a new axis of length r before it, broadcast,
    then the two merged."""
    x = _as_array(x)
    reps = tuple(reps) if isinstance(reps, (list, tuple)) else (reps,)
    ndim = max(x.ndim, len(reps))
    shape = (1,) * (ndim - x.ndim) + x.shape
    reps = (1,) * (ndim - len(reps)) + reps
    spread = ops.reshape(x, tuple(v for d in shape for v in (1, d)))
    big = ops.broadcast_to(spread, tuple(v for r, d in zip(reps, shape) for v in (r, d)))
    return ops.reshape(big, tuple(r * d for r, d in zip(reps, shape)))


def repeat(x, repeats, axis=None):
    x = _as_array(x)
    if isinstance(repeats, Node):
        raise unsupported("np.repeat with traced repeat counts",
                          "the result's length would depend on the data")
    if axis is None:
        x, axis = ops.reshape(x, (-1,)), 0
    axis = _axis(axis, x.ndim)
    counts = np.asarray(repeats)
    if counts.ndim == 0:
        r = int(counts)
        spread = ops.reshape(x, x.shape[:axis + 1] + (1,) + x.shape[axis + 1:])
        big = ops.broadcast_to(spread, x.shape[:axis + 1] + (r,) + x.shape[axis + 1:])
        return ops.reshape(big, x.shape[:axis] + (x.shape[axis] * r,) + x.shape[axis + 1:])
    return ops.take(x, np.repeat(np.arange(x.shape[axis]), counts), axis)


def _pad_widths(pad_width, ndim):
    return [tuple(int(v) for v in row) for row in np.broadcast_to(np.asarray(pad_width), (ndim, 2))]


def pad(array, pad_width, mode="constant", **kwargs):
    """'constant': blocks of the fill value concatenated on each side. The index modes
    ('edge', 'reflect', 'symmetric', 'wrap'): a gather along each axis at the positions NumPy's
    own np.pad gives for np.arange of that axis."""
    x = _as_array(array)
    widths = _pad_widths(pad_width, x.ndim)
    if mode == "constant":
        fill = kwargs.pop("constant_values", 0)
        if kwargs:
            raise TypeError(f"unsupported keyword arguments for mode 'constant': {set(kwargs)}")
        fills = np.broadcast_to(np.asarray(fill, dtype=object), (x.ndim, 2))
        for a, (before, after) in enumerate(widths):
            parts = []
            for width, value in ((before, fills[a][0]), (None, None), (after, fills[a][1])):
                if width is None:
                    parts.append(x)
                elif width:
                    block = x.shape[:a] + (width,) + x.shape[a + 1:]
                    parts.append(ops.broadcast_to(ops.cast(value, x.dtype), block))
            x = ops.concatenate(parts, a)
        return x
    if mode in ("edge", "reflect", "symmetric", "wrap"):
        if kwargs:
            raise unsupported(f"np.pad(..., mode={mode!r}, {', '.join(kwargs)}=...)",
                              "only the default options of the index modes are supported")
        for a, (before, after) in enumerate(widths):
            if before or after:
                index = np.pad(np.arange(x.shape[a]), (before, after), mode=mode)
                x = ops.take(x, index, a)
        return x
    raise unsupported(f"np.pad(..., mode={mode!r})", "supported modes: constant, edge, reflect, "
                      "symmetric, wrap")


def _atleast(ndim_wanted, place):
    def fn(*arys):
        out = []
        for a in arys:
            a = _as_array(a)
            if a.ndim < ndim_wanted:
                a = ops.reshape(a, place(a.shape))
            out.append(a)
        return out[0] if len(out) == 1 else out
    return fn


atleast_1d = _atleast(1, lambda s: (1,))
atleast_2d = _atleast(2, lambda s: (1,) + s if len(s) == 1 else (1, 1))
atleast_3d = _atleast(3, lambda s: (1, s[0], 1) if len(s) == 1 else s + (1,) if len(s) == 2 else (1, 1, 1))


def _tuple_of_arrays(tup):
    if isinstance(tup, Node):
        return list(tup)     # rows of an array, as NumPy iterates it
    return list(tup)


def vstack(tup):
    return ops.concatenate([atleast_2d(a) for a in _tuple_of_arrays(tup)], 0)


def hstack(tup):
    arrs = [atleast_1d(a) for a in _tuple_of_arrays(tup)]
    return ops.concatenate(arrs, 0 if arrs and arrs[0].ndim == 1 else 1)


def dstack(tup):
    return ops.concatenate([atleast_3d(a) for a in _tuple_of_arrays(tup)], 2)


def column_stack(tup):
    arrs = []
    for a in _tuple_of_arrays(tup):
        a = _as_array(a)
        arrs.append(ops.reshape(a, (-1, 1)) if a.ndim < 2 else a)
    return ops.concatenate(arrs, 1)


def _split_points(n, indices_or_sections, even):
    if isinstance(indices_or_sections, numbers.Integral):
        sections = int(indices_or_sections)
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        if even and n % sections:
            raise ValueError("array split does not result in an equal division")
        each, extra = divmod(n, sections)
        sizes = [each + 1] * extra + [each] * (sections - extra)
        return [0] + list(np.cumsum(sizes))
    return [0] + [int(i) for i in indices_or_sections] + [n]


def _splitter(even, fixed_axis=None, min_ndim=1):
    def fn(ary, indices_or_sections, axis=0):
        x = _as_array(ary)
        a = axis if fixed_axis is None else fixed_axis(x)
        if x.ndim < min_ndim:
            raise ValueError(f"split only works on arrays of {min_ndim} or more dimensions")
        a = _axis(a, x.ndim)
        n = x.shape[a]
        points = _split_points(n, indices_or_sections, even)
        out = []
        for start, stop in zip(points[:-1], points[1:]):
            start, stop = min(max(start, 0), n), min(max(stop, 0), n)
            out.append(_slice_along(x, a, slice(start, max(start, stop))))
        return out
    return fn


split = _splitter(True)
array_split = _splitter(False)
_vsplit, _dsplit = _splitter(True, lambda x: 0, 2), _splitter(True, lambda x: 2, 3)
_hsplit = _splitter(True, lambda x: 1 if x.ndim > 1 else 0, 1)


def vsplit(ary, indices_or_sections):
    return _vsplit(ary, indices_or_sections)


def hsplit(ary, indices_or_sections):
    return _hsplit(ary, indices_or_sections)


def dsplit(ary, indices_or_sections):
    return _dsplit(ary, indices_or_sections)


def append(arr, values, axis=None):
    arr, values = _as_array(arr), _as_array(values)
    if axis is None:
        return ops.concatenate([ops.reshape(arr, (-1,)), ops.reshape(values, (-1,))], 0)
    return ops.concatenate([arr, values], axis)


def broadcast_arrays(*args, subok=False):
    """Each array broadcast to the common shape (NumPy returns read-only views; so these are)."""
    xs = [_as_array(a) for a in args]
    shape = np.broadcast_shapes(*(x.shape for x in xs))
    return tuple(ops.broadcast_to(x, shape) for x in xs)


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays: each 1-d input along its own axis ('xy': the first two swapped)."""
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    xs = [ops.reshape(_as_array(x), (-1,)) for x in xi]
    ndim = len(xs)
    out = []
    for i, x in enumerate(xs):
        place = i
        if indexing == "xy" and ndim > 1 and i < 2:
            place = 1 - i
        out.append(ops.reshape(x, tuple(-1 if k == place else 1 for k in range(ndim))))
    if not sparse:
        out = list(broadcast_arrays(*out))
    return tuple(out)


def diag(v, k=0):
    """1-d -> a matrix with v on diagonal k (a select between v spread over rows and zero,
    then zero blocks for the offset); 2-d -> its k-th diagonal."""
    v = _as_array(v)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    n = v.shape[0]
    on = np.eye(n, dtype=bool)
    square = ops.where(on, ops.broadcast_to(ops.reshape(v, (n, 1)), (n, n)), ops.zeros_like(
        ops.broadcast_to(v, (n, n))))
    if k == 0:
        return square
    return pad(square, ((0, k), (k, 0)) if k > 0 else ((-k, 0), (0, -k)))


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The k-th diagonal of the (axis1, axis2) planes, as the last axis: those axes moved to
    the end and merged, then one strided slice (element (i, i + k) is at i (c + 1) + k)."""
    a = _as_array(a)
    if a.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    a1, a2 = _axis(axis1, a.ndim), _axis(axis2, a.ndim)
    if a1 == a2:
        raise ValueError("axis1 and axis2 cannot be the same")
    rest = [i for i in range(a.ndim) if i not in (a1, a2)]
    x = ops.transpose(a, rest + [a1, a2])
    r, c = a.shape[a1], a.shape[a2]
    count = max(0, min(r, c - offset) if offset >= 0 else min(r + offset, c))
    start = offset if offset >= 0 else -offset * c
    flat = ops.reshape(x, x.shape[:-2] + (r * c,))
    if count == 0:
        return _slice_along(flat, flat.ndim - 1, slice(0, 0))
    return _slice_along(flat, flat.ndim - 1, slice(start, start + (count - 1) * (c + 1) + 1, c + 1))


def trace(a, offset=0, axis1=0, axis2=1):
    return ops.reduce("sum", diagonal(a, offset, axis1, axis2), -1)


def _triangle(keep):
    def fn(m, k=0):
        m = _as_array(m)
        if m.ndim < 2:
            raise unsupported("np.tril/np.triu of a 1-d array", "pass a matrix")
        r, c = m.shape[-2:]
        mask = keep(np.arange(r)[:, None] + k, np.arange(c)[None, :])
        return ops.where(mask, m, ops.zeros_like(m))
    return fn


tril = _triangle(lambda i, j: j <= i)
triu = _triangle(lambda i, j: j >= i)


# ----------------------------------------------------------------------------------------------
# Differences

def diff(a, n=1, axis=-1, prepend=None, append=None):
    x = _as_array(a)
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    if n == 0:
        return x
    if x.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = _axis(axis, x.ndim)
    def edge(extra):
        e = ops.lift(extra if isinstance(extra, Node) else np.asarray(extra))
        return ops.broadcast_to(e, x.shape[:axis] + (1,) + x.shape[axis + 1:]) if e.ndim == 0 else e

    parts = ([edge(prepend)] if prepend is not None else []) + [x] + (
        [edge(append)] if append is not None else [])
    x = ops.concatenate(parts, axis) if len(parts) > 1 else x
    for _ in range(n):
        m = x.shape[axis]
        x = _slice_along(x, axis, slice(1, None)) - _slice_along(x, axis, slice(0, max(m - 1, 0)))
    return x



def trapezoid(y, x=None, dx=1.0, axis=-1):
    """NumPy's trapezoidal rule, in its order of operations: ``sum(d * (y[1:] + y[:-1]) / 2)``
    along ``axis``, with ``d`` the spacing ``dx`` or ``diff(x)`` (a 1-d ``x`` along the axis)."""
    y = _as_array(y)
    axis = _axis(axis, y.ndim)
    if x is None:
        d = dx
    else:
        x = _as_array(x)
        if x.ndim == 1:
            d = diff(x)
            d = ops.reshape(d, tuple(d.shape[0] if k == axis else 1 for k in range(y.ndim)))
        else:
            d = diff(x, axis=axis)
    n = y.shape[axis]
    pairs = _slice_along(y, axis, slice(1, None)) + _slice_along(y, axis, slice(0, max(n - 1, 0)))
    return ops.reduce("sum", d * pairs / 2.0, axis)

def _gradient_axis(f, axis, h, edge_order):
    n = f.shape[axis]
    if n < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, "
                         "at least (edge_order + 1) elements are required.")
    at = lambda s: _slice_along(f, axis, s)   # noqa: E731 - local shorthand
    interior = (at(slice(2, None)) - at(slice(0, n - 2))) / (2.0 * h)
    if edge_order == 1:
        first = (at(slice(1, 2)) - at(slice(0, 1))) / h
        last = (at(slice(n - 1, n)) - at(slice(n - 2, n - 1))) / h
    else:
        first = (-1.5 * at(slice(0, 1)) + 2.0 * at(slice(1, 2)) - 0.5 * at(slice(2, 3))) / h
        last = (0.5 * at(slice(n - 3, n - 2)) - 2.0 * at(slice(n - 2, n - 1))
                + 1.5 * at(slice(n - 1, n))) / h
    return ops.concatenate([first, interior, last], axis)


def gradient(f, *varargs, axis=None, edge_order=1):
    """Central differences inside, one-sided at the edges, for uniform (scalar) spacings."""
    f = ops.to_float(_as_array(f))
    axes = ops.normalize_axes(axis, f.ndim) if axis is not None else tuple(range(f.ndim))
    if isinstance(axis, numbers.Integral):
        axes = (axes[0],)
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    if len(varargs) == 0:
        spacing = [1.0] * len(axes)
    elif len(varargs) == 1:
        spacing = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacing = list(varargs)
    else:
        raise TypeError("invalid number of arguments")
    for h in spacing:
        if np.ndim(h) != 0:
            raise unsupported("np.gradient with coordinate arrays", "only uniform (scalar) "
                              "spacings are supported")
    out = [_gradient_axis(f, a, h, edge_order) for a, h in zip(axes, spacing)]
    return out[0] if len(out) == 1 else out
