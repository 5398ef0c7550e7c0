"""More of NumPy's surface, each function a composition of existing primitives (or one of the
elementwise primitives of ``symgrad.ops_extra``), so derivatives, every back end and higher
orders come from the op table with nothing new to lower.

``FUNCTIONS`` (name -> (eager NumPy function, builder)) and ``ALIASES`` are merged into
``symgrad.numpy_api``'s tables there (one hook), which also makes ``sg.<name>`` and the
``np.<name>`` / ``math.<name>`` callables the front end recognises. Everything that depends on
static information (axes, shapes, split points, masks, repeat counts) is computed here while
tracing, with NumPy's own functions where they exist (``np.pad`` computes the index arrays of
``pad``'s index modes; ``np.flatnonzero`` a constant boolean mask's positions).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import ops
from .errors import UnsupportedSyntaxError
from .ir import INT_DTYPES, Node, is_float


def _nodes(xs):
    return [ops.lift(x if isinstance(x, Node) else np.asarray(x)) for x in xs]


def _as_array(x) -> Node:
    """A node for an array argument: Python lists (of nodes or numbers) are stacked, as
    ``np.asarray`` does."""
    if isinstance(x, (list, tuple)):
        items = [_as_array(v) for v in x]
        return ops.stack(items) if items else ops.lift(np.asarray(x, dtype=float))
    return ops.lift(x if isinstance(x, Node) else np.asarray(x))


def unsupported(what: str, why: str):
    """An UnsupportedSyntaxError without a location: the front end re-raises it at the
    user's line (symgrad.expressions)."""
    return UnsupportedSyntaxError(what, "", 0, 0, "", why)


def _axis(axis, ndim) -> int:
    return ops.normalize_axes(axis, ndim)[0]


def _full_slices(ndim):
    return [slice(None)] * ndim


def _slice_along(x: Node, axis: int, s: slice) -> Node:
    key = _full_slices(x.ndim)
    key[axis] = s
    return ops.getitem(x, tuple(key))


# ----------------------------------------------------------------------------------------------
# Elementwise compositions

def _float_pair(a, b):
    return ops._promote((a, b), float_only=True)


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
    a, b = ops._promote((a, b))
    return ops.where(ops.logical_or(ops.ge(a, b), ops.ne(b, b)), a, b)


def fmin(a, b):
    a, b = ops._promote((a, b))
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
    """x < 0, or -0.0 (1 / -0.0 is -inf). (A NaN's sign bit is not read: False.)"""
    x = ops.to_float(x)
    return ops.logical_or(ops.lt(x, 0), ops.logical_and(ops.eq(x, 0), ops.lt(1 / ops.where(
        ops.eq(x, 0), x, 1.0), 0)))


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


# ----------------------------------------------------------------------------------------------
# Shape and layout

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


# ----------------------------------------------------------------------------------------------
# Reductions and friends

def _count(x: Node, axis) -> int:
    return math.prod(x.shape[a] for a in ops.normalize_axes(axis, x.ndim))


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    x = ops.to_float(_as_array(a))
    if dtype is not None:
        x = ops.cast(x, np.dtype(dtype).name)
    centered = x - ops.mean(x, axis, keepdims=True)
    return ops.reduce("sum", centered * centered, axis, keepdims) / (_count(x, axis) - ddof)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    from .numpy_api import _sqrt_of_square_sum
    return _sqrt_of_square_sum(var(a, axis, dtype, out, ddof, keepdims))


def mean(a, axis=None, dtype=None, out=None, keepdims=False):
    x = _as_array(a)
    if dtype is not None:
        x = ops.cast(x, np.dtype(dtype).name)
    return ops.mean(x, axis, keepdims)


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    x = ops.to_float(_as_array(a))
    if weights is None:
        avg = ops.mean(x, axis, keepdims)
        total = ops.full(avg.shape, _count(x, axis), avg.dtype)
    else:
        w = _as_array(weights)
        if w.shape != x.shape:
            if axis is None or w.ndim != 1:
                raise TypeError("Axis must be specified when shapes of a and weights differ.")
            ax = _axis(axis, x.ndim)
            if w.shape[0] != x.shape[ax]:
                raise ValueError("Length of weights not compatible with specified axis.")
            w = ops.reshape(w, tuple(x.shape[ax] if i == ax else 1 for i in range(x.ndim)))
            w = ops.broadcast_to(w, x.shape)
        total = ops.reduce("sum", w, axis, keepdims)
        avg = ops.reduce("sum", x * w, axis, keepdims) / total
    return (avg, ops.broadcast_to(ops.cast(total, avg.dtype), avg.shape)) if returned else avg


def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None):
    if out is not None:
        raise unsupported("np.clip(..., out=...)", "out= is not supported while tracing")
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    result = ops.lift(a)
    if lo is not None:
        result = ops.maximum(result, lo)
    if hi is not None:
        result = ops.minimum(result, hi)
    return result


def select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    out = default
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        cond = ops.lift(cond if isinstance(cond, Node) else np.asarray(cond))
        if cond.dtype != "bool":
            raise TypeError("invalid entry in condlist: should be boolean ndarray")
        out = ops.where(cond, choice, out)
    shape = np.broadcast_shapes(*(np.shape(v) for v in list(condlist) + list(choicelist)))
    return ops.broadcast_to(ops.lift(out), shape)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """start + step * arange(num), the last sample exactly ``stop`` (as NumPy); start and stop
    may be traced (scalars or arrays: samples along ``axis``)."""
    if isinstance(num, Node) or num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    start, stop = ops._promote((start, stop), float_only=True)
    div = (num - 1) if endpoint else num
    shape = ops.broadcast_shapes(start.shape, stop.shape)
    delta = stop - start
    steps = ops.reshape(ops.arange(0, num, 1, start.dtype), (num,) + (1,) * len(shape))
    step = delta / div if div > 0 else delta * math.nan
    y = start + steps * step if div > 0 else start + steps * delta
    y = ops.broadcast_to(y, (num,) + shape)
    if endpoint and num > 1:
        y = ops.setitem(y, ops.broadcast_to(stop, shape), (num - 1,))
    if axis != 0:
        y = moveaxis(y, 0, axis)
    if dtype is not None:
        y = ops.cast(y, np.dtype(dtype).name)
    return (y, step) if retstep else y


def _vector_norm(x, ord, axis, keepdims):
    from .numpy_api import _sqrt_of_square_sum
    a = ops.abs_(x)
    if ord is None or ord == 2:
        return _sqrt_of_square_sum(ops.reduce("sum", x * x, axis, keepdims))
    if ord == math.inf:
        return ops.reduce("max", a, axis, keepdims)
    if ord == -math.inf:
        return ops.reduce("min", a, axis, keepdims)
    if ord == 0:
        return ops.reduce("sum", ops.cast(ops.ne(x, 0), x.dtype), axis, keepdims)
    if ord == 1:
        return ops.reduce("sum", a, axis, keepdims)
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    p = float(ord)
    # (sum |x|^p)^(1/p), with 0 where every element is 0 (the gradient there is 0, as the 2-norm)
    s = ops.reduce("sum", a ** p, axis, keepdims)
    zero = ops.eq(s, 0)
    return ops.where(zero, 0.0, ops.where(zero, 1.0, s) ** (1.0 / p))


def _matrix_norm(x, ord, axes, keepdims):
    from .numpy_api import _sqrt_of_square_sum
    r, c = axes
    if ord in (None, "fro"):
        return _sqrt_of_square_sum(ops.reduce("sum", x * x, axes, keepdims))
    if ord in (2, -2, "nuc"):
        raise unsupported(f"np.linalg.norm(..., ord={ord!r}) of a matrix",
                          "it needs the singular values (an SVD), which symgrad does not have yet")
    a = ops.abs_(x)
    if ord in (1, -1):        # max/min over columns of the column sums
        sums, other = ops.reduce("sum", a, r, True), c
    elif ord in (math.inf, -math.inf):
        sums, other = ops.reduce("sum", a, c, True), r
    else:
        raise ValueError("Invalid norm order for matrices.")
    pick = "max" if ord in (1, math.inf) else "min"
    out = ops.reduce(pick, sums, other, True)
    return out if keepdims else ops.reshape(out, tuple(d for i, d in enumerate(out.shape) if i not in axes))


def norm(x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm: vector norms of every order, matrix norms 1, -1, inf, -inf and 'fro'."""
    x = ops.to_float(_as_array(x))
    if axis is None and ord is None:
        return _vector_norm(ops.reshape(x, (-1,)) if not keepdims else x, None,
                            None, keepdims)
    if axis is None:
        axis = tuple(range(x.ndim))
    axes = ops.normalize_axes(axis, x.ndim)
    if isinstance(axis, numbers.Integral):
        axes = (axes[0],)
    else:
        axes = tuple(a % x.ndim for a in axis)
    if len(axes) == 1:
        return _vector_norm(x, ord, axes[0], keepdims)
    if len(axes) == 2:
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError("Improper number of dimensions to norm.")


# ----------------------------------------------------------------------------------------------
# Indexing helpers

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


def _erf_eager(fn):
    """erf run eagerly (NumPy has none): math.erf on a number, per element on an array."""
    vector = np.vectorize(fn, otypes=[np.float64])

    def run(x):
        if isinstance(x, numbers.Real) and not isinstance(x, np.generic):
            return fn(x)
        return vector(x).astype(np.result_type(np.asarray(x).dtype, np.float32))[()]
    run.__name__ = fn.__name__
    return run


# name -> (eager NumPy function, builder)
FUNCTIONS = {
    "arcsinh": (np.arcsinh, ops.arcsinh), "arccosh": (np.arccosh, ops.arccosh),
    "arctanh": (np.arctanh, ops.arctanh), "exp2": (np.exp2, ops.exp2),
    "log2": (np.log2, ops.log2), "log10": (np.log10, ops.log10), "cbrt": (np.cbrt, ops.cbrt),
    "erf": (_erf_eager(math.erf), ops.erf), "erfc": (_erf_eager(math.erfc), ops.erfc),
    "floor": (np.floor, ops.floor), "ceil": (np.ceil, ops.ceil), "rint": (np.rint, ops.rint),
    "trunc": (np.trunc, ops.trunc), "fix": (np.fix, ops.trunc),
    "hypot": (np.hypot, ops.hypot), "fmod": (np.fmod, ops.fmod),
    "remainder": (np.remainder, remainder), "floor_divide": (np.floor_divide, floor_divide),
    "divmod": (np.divmod, divmod_),
    "fmax": (np.fmax, fmax), "fmin": (np.fmin, fmin), "logaddexp2": (np.logaddexp2, logaddexp2),
    "deg2rad": (np.deg2rad, deg2rad), "rad2deg": (np.rad2deg, rad2deg), "sinc": (np.sinc, sinc),
    "isnan": (np.isnan, isnan), "isinf": (np.isinf, isinf), "isfinite": (np.isfinite, isfinite),
    "signbit": (np.signbit, signbit), "copysign": (np.copysign, copysign),
    "nan_to_num": (np.nan_to_num, nan_to_num), "round": (np.round, round_),
    "positive": (np.positive, positive), "real": (np.real, real), "imag": (np.imag, imag),
    "conj": (np.conj, real),
    "moveaxis": (np.moveaxis, moveaxis), "swapaxes": (np.swapaxes, swapaxes),
    "rollaxis": (np.rollaxis, rollaxis), "expand_dims": (np.expand_dims, expand_dims),
    "squeeze": (np.squeeze, squeeze), "ravel": (np.ravel, ravel), "flip": (np.flip, flip),
    "fliplr": (np.fliplr, fliplr), "flipud": (np.flipud, flipud), "roll": (np.roll, roll),
    "rot90": (np.rot90, rot90), "tile": (np.tile, tile), "repeat": (np.repeat, repeat),
    "pad": (np.pad, pad), "atleast_1d": (np.atleast_1d, atleast_1d),
    "atleast_2d": (np.atleast_2d, atleast_2d), "atleast_3d": (np.atleast_3d, atleast_3d),
    "diag": (np.diag, diag), "diagonal": (np.diagonal, diagonal), "trace": (np.trace, trace),
    "tril": (np.tril, tril), "triu": (np.triu, triu), "vstack": (np.vstack, vstack),
    "hstack": (np.hstack, hstack), "dstack": (np.dstack, dstack),
    "column_stack": (np.column_stack, column_stack), "split": (np.split, split),
    "array_split": (np.array_split, array_split), "vsplit": (np.vsplit, vsplit),
    "hsplit": (np.hsplit, hsplit), "dsplit": (np.dsplit, dsplit), "append": (np.append, append),
    "diff": (np.diff, diff), "gradient": (np.gradient, gradient),
    "var": (np.var, var), "std": (np.std, std), "mean": (np.mean, mean),
    "average": (np.average, average), "clip": (np.clip, clip), "select": (np.select, select),
    "linspace": (np.linspace, linspace), "norm": (np.linalg.norm, norm),
    "take_along_axis": (np.take_along_axis, take_along_axis),
}
# alias -> name (as symgrad.numpy_api.ALIASES)
ALIASES = {"asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh", "mod": "remainder",
           "around": "round", "round_": "round", "degrees": "rad2deg", "radians": "deg2rad",
           "conjugate": "conj", "row_stack": "vstack"}


# ----------------------------------------------------------------------------------------------
# Advanced indexing that reduces to basic indexing and one gather

def _advanced_kind(k):
    """'mask' (a constant boolean array), 'array' (integer indices), 'traced mask' or None."""
    if isinstance(k, Node):
        if k.ndim == 0:
            return None
        return "traced mask" if k.dtype == "bool" else "array" if k.dtype in INT_DTYPES else None
    if isinstance(k, (list, np.ndarray)):
        a = np.asarray(k)
        if a.dtype == bool:
            return "mask"
        if a.dtype.kind in "iu" or a.size == 0:
            return "array"
    return None


def is_advanced(key) -> bool:
    return any(_advanced_kind(k) for k in (key if isinstance(key, tuple) else (key,)))


def advanced_index(x: Node, key):
    """``x[key]`` with advanced items (integer arrays, constant or traced integer data; constant
    boolean masks, taken as their np.nonzero arrays; integers beside them) among basic ones:
    basic indexing with every advanced axis kept whole, those axes brought together (in
    place when the advanced items are adjacent in the key, else first: NumPy's rule) and
    merged, then one gather at the flat positions. None when the key is basic."""
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
    y = ops.getitem(x, tuple(basic))
    axes, axis = [], 0           # the axes of y that the components index
    for item, was in zip(basic, _origins(items, kinds)):
        if item is not None and was:
            axes.append(axis)
        axis += 1
    adjacent = advanced_items == list(range(advanced_items[0], advanced_items[-1] + 1))
    sizes = [y.shape[a] for a in axes]
    rest = [a for a in range(y.ndim) if a not in axes]
    if not adjacent:
        y = ops.transpose(y, axes + rest)
    dest = axes[0] if adjacent else 0
    merged = ops.reshape(y, y.shape[:dest] + (math.prod(sizes),) + y.shape[dest + len(axes):])
    return ops.take(merged, _flat_positions(components, sizes, axes), dest)


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
    items = [atleast_1d(a) for a in ops._promote(items)]
    if not columns:
        return ops.concatenate(items, 0)
    cols = [ops.reshape(a, (-1, 1)) if a.ndim == 1 else a for a in items]
    return ops.concatenate(cols, -1)
