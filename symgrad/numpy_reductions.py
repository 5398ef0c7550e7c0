"""NumPy's reductions and friends as compositions: var/std (ddof, lists), mean with dtype,
average with weights, ptp, cov/corrcoef, clip with keywords, select, linspace with traced ends,
linalg.norm."""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import ops
from .op_base import _promote
from .ir import Node
from .numpy_base import _as_array, _axis, unsupported
from .numpy_layout import diagonal, moveaxis, squeeze
from .numpy_sorting import inclusive_scan
from .scans import sum_identity


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


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    x = _as_array(a)
    if dtype is not None:
        x = ops.cast(x, np.dtype(dtype).name)
    mask = _reduction_mask(x, where)
    if mask is None:
        return ops.mean(x, axis, keepdims)
    x = ops.to_float(x)
    count = ops.reduce("sum", ops.cast(ops.broadcast_to(mask, x.shape), x.dtype), axis, keepdims)
    return ops.reduce("sum", ops.where(mask, x, ops.full((), 0, x.dtype)), axis, keepdims) / count



def ptp(a, axis=None, out=None, keepdims=False):
    if out is not None:
        raise unsupported("np.ptp(..., out=...)", "out= is not supported while tracing")
    x = _as_array(a)
    return ops.reduce("max", x, axis, keepdims) - ops.reduce("min", x, axis, keepdims)


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
        dtype=None):
    """NumPy's covariance, in its order of operations (the mean, ``X @ X.T`` of the centred
    rows, times 1 / fact) and its float64 default dtype (a float32 input gives float64, as
    there). Weights must be constants: NumPy's checks of them (integral, non-negative) are
    made here."""
    if ddof is not None and ddof != int(ddof):
        raise ValueError("ddof must be integer")
    dtype = np.dtype(dtype if dtype is not None else np.result_type(
        *(_as_array(v).dtype for v in (m, y) if v is not None), np.float64)).name

    def rows(v):
        v = ops.cast(_as_array(v), dtype)
        v = ops.reshape(v, (1,) * (2 - v.ndim) + v.shape) if v.ndim < 2 else v
        if v.ndim > 2:
            raise ValueError("m has more than 2 dimensions")
        return ops.transpose(v) if not rowvar and v.shape[0] != 1 else v
    X = rows(m)
    if y is not None:
        X = ops.concatenate([X, rows(y)], 0)
    if X.shape[0] == 0:
        return ops.lift(np.array([], dtype=dtype).reshape(0, 0))
    ddof = (0 if bias else 1) if ddof is None else int(ddof)
    w = _cov_weights(fweights, aweights, X.shape[1])
    if w is None:
        avg, fact = ops.mean(X, 1), X.shape[1] - ddof
    else:
        w_sum = float(w.sum())
        avg = ops.reduce("sum", X * w, 1) / w_sum
        fact = (w_sum if ddof == 0 else w_sum - ddof if aweights is None else
                w_sum - ddof * float(np.sum(w * np.asarray(aweights, float))) / w_sum)
    fact = max(fact, 0.0)        # NumPy: "Degrees of freedom <= 0": divides by zero then
    X = X - ops.reshape(avg, (X.shape[0], 1))
    c = ops.matmul(X, ops.transpose(X if w is None else X * w))
    with np.errstate(divide="ignore"):
        inverse = np.true_divide(1, np.float64(fact))
    return squeeze(c * ops.full((), float(inverse), dtype))


def _cov_weights(fweights, aweights, n: int):
    """The product of np.cov's frequency and analytic weights (constants, checked as NumPy
    checks them), or None."""
    w = None
    for name, v in (("fweights", fweights), ("aweights", aweights)):
        if v is None:
            continue
        if isinstance(v, Node):
            raise unsupported(f"traced {name} in np.cov", f"pass {name} as a constant array")
        v = np.asarray(v, dtype=float)
        if name == "fweights" and not np.all(v == np.around(v)):
            raise TypeError("fweights must be integer")
        if v.ndim > 1:
            raise RuntimeError(f"cannot handle multidimensional {name}")
        if v.shape[0] != n:
            raise RuntimeError(f"incompatible numbers of samples and {name}")
        if np.any(v < 0):
            raise ValueError(f"{name} cannot be negative")
        w = v if w is None else w * v
    return w


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    """NumPy's: the covariance divided by the standard deviations of its rows and columns,
    clipped to [-1, 1]; c / c for one variable (1, or nan where the variance is 0 or not
    finite)."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c
    d = ops.sqrt(diagonal(c))
    c = c / ops.reshape(d, (d.shape[0], 1))
    c = c / ops.reshape(d, (1, d.shape[0]))
    return clip(c, -1, 1)

# -- where= and initial= of sum/prod/max/min (np.sum(x, where=mask), np.max(x, where=m, initial=0))
_IDENTITIES = {"sum": lambda dtype: 0, "prod": lambda dtype: 1,
               "max": lambda dtype: _lowest(dtype), "min": lambda dtype: _highest(dtype)}
# how the initial value joins the reduction of the rest
_WITH_INITIAL = {"sum": ops.add, "prod": ops.mul, "max": ops.maximum, "min": ops.minimum}
_UFUNC_NAMES = {"sum": "add", "prod": "multiply", "max": "maximum", "min": "minimum"}


def _reduction_mask(x: Node, where):
    """The ``where=`` mask as a bool node of a shape that broadcasts to ``x``'s, or None for
    the default (every element)."""
    if where is True or (isinstance(where, np.ndarray) and where.dtype == bool and where.all()):
        return None
    mask = ops.lift(where)
    if mask.dtype != "bool":
        raise TypeError("the where= mask of a reduction must be boolean")
    if np.broadcast_shapes(mask.shape, x.shape) != x.shape:
        raise ValueError(f"where= mask of shape {mask.shape} does not broadcast to the operand's "
                         f"shape {x.shape}")
    return mask


def masked_reduce(op: str, x, axis=None, keepdims=False, where=True, initial=None) -> Node:
    """``np.<op>(x, axis, keepdims=..., where=..., initial=...)``: the masked-out elements are
    the reduction's identity; ``initial`` joins the result as one more element (a tie with it
    shares the gradient as np.maximum does). max/min over a mask need an initial value, as in
    NumPy (an empty selection has no maximum)."""
    x = _as_array(x)
    mask = _reduction_mask(x, where)
    if mask is not None and initial is None and op in ("max", "min"):
        raise ValueError(f"reduction operation '{_UFUNC_NAMES[op]}' does not have an identity, so "
                         "to use a where mask one has to specify 'initial'")
    if mask is not None:
        x = ops.where(mask, x, ops.full((), _IDENTITIES[op](x.dtype), x.dtype))
    out = ops.reduce(op, x, axis, keepdims)
    return out if initial is None else _WITH_INITIAL[op](out, initial)


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
    start, stop = _promote((start, stop), float_only=True)
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
# count_nonzero and the NaN-ignoring reductions: NaN entries replaced by the reduction's
# identity (a select, so their derivative is exactly 0 and never 0 * nan)
def count_nonzero(a, axis=None, *, keepdims=False):
    x = _as_array(a)
    return ops.reduce("sum", ops.cast(ops.ne(x, 0), "int64"), axis, keepdims)


def _without_nan(a, identity):
    x = _as_array(a)
    if x.dtype not in ("float32", "float64"):
        return x, None
    nan = ops.ne(x, x)
    return ops.where(nan, ops.full((), identity, x.dtype), x), nan


def _nan_reduction(name, op, identity):
    def build(a, axis=None, dtype=None, out=None, keepdims=False):
        if out is not None:
            raise unsupported(f"np.{name}(..., out=...)", "symgrad returns new arrays")
        x, _ = _without_nan(a, identity)
        if dtype is not None:
            x = ops.cast(x, np.dtype(dtype).name)
        return ops.reduce(op, x, axis, keepdims)
    build.__name__ = name
    return build


nansum = _nan_reduction("nansum", "sum", 0)
nanprod = _nan_reduction("nanprod", "prod", 1)


def _nan_extremum(name, op):
    def build(a, axis=None, out=None, keepdims=False):
        if out is not None:
            raise unsupported(f"np.{name}(..., out=...)", "symgrad returns new arrays")
        x, nan = _without_nan(a, -math.inf if op == "max" else math.inf)
        best = ops.reduce(op, x, axis, keepdims)
        if nan is None:
            return best
        all_nan = ops.reduce("min", ops.cast(nan, "int64"), axis, keepdims)   # NumPy: NaN
        return ops.where(ops.eq(all_nan, 1), ops.full((), math.nan, best.dtype), best)
    build.__name__ = name
    return build


nanmax = _nan_extremum("nanmax", "max")
nanmin = _nan_extremum("nanmin", "min")


def _nan_count(x: Node, nan, axis, keepdims) -> Node:
    if nan is None:
        return ops.full(ops.reduce("sum", x, axis, keepdims).shape, _count(x, axis), x.dtype)
    return ops.reduce("sum", ops.cast(ops.logical_not(nan), x.dtype), axis, keepdims)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False):
    x = ops.to_float(_as_array(a))
    if dtype is not None:
        x = ops.cast(x, np.dtype(dtype).name)
    clean, nan = _without_nan(x, 0)
    return ops.reduce("sum", clean, axis, keepdims) / _nan_count(x, nan, axis, keepdims)


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    x = ops.to_float(_as_array(a))
    if dtype is not None:
        x = ops.cast(x, np.dtype(dtype).name)
    clean, nan = _without_nan(x, 0)
    count = _nan_count(x, nan, axis, True)
    centered = clean - ops.reduce("sum", clean, axis, True) / count
    if nan is not None:
        centered = ops.where(nan, ops.full((), 0, x.dtype), centered)
    total = ops.reduce("sum", centered * centered, axis, keepdims)
    return total / (_nan_count(x, nan, axis, keepdims) - ddof)


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    from .numpy_api import _sqrt_of_square_sum
    return _sqrt_of_square_sum(nanvar(a, axis, dtype, out, ddof, keepdims))


def _truth_reduction(name, every):
    """np.any / np.all: whether any / every entry is nonzero (NaN is nonzero, as in NumPy), as
    a count of the entries that decide (a sum: 0 over an empty axis, where min/max refuse)."""
    def build(a, axis=None, out=None, keepdims=False):
        if out is not None:
            raise unsupported(f"np.{name}(..., out=...)", "symgrad returns new arrays")
        x = _as_array(a)
        deciding = ops.eq(x, 0) if every else ops.ne(x, 0)
        count = ops.reduce("sum", ops.cast(deciding, "int64"), axis, keepdims)
        return ops.eq(count, 0) if every else ops.gt(count, 0)
    build.__name__ = name
    return build


any_ = _truth_reduction("any", every=False)
all_ = _truth_reduction("all", every=True)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    from .numpy_elementwise import isclose
    return all_(isclose(a, b, rtol, atol, equal_nan))


# ----------------------------------------------------------------------------------------------
# ufunc methods: np.add.reduce(x) is np.sum(x, axis=0), np.maximum.accumulate(x) a running max
def _ufunc_reduce(name, op):
    def build(a, axis=0, dtype=None, out=None, keepdims=False):
        if out is not None:
            raise unsupported(f"np.{name}(..., out=...)", "symgrad returns new arrays")
        x = _as_array(a)
        if dtype is not None:
            x = ops.cast(x, np.dtype(dtype).name)
        return ops.reduce(op, x, axis, keepdims)
    build.__name__ = name
    return build


def _ufunc_accumulate(name, combine, identity_of):
    def build(a, axis=0, dtype=None, out=None):
        if out is not None:
            raise unsupported(f"np.{name}(..., out=...)", "symgrad returns new arrays")
        y = _as_array(a)
        if dtype is not None:
            y = ops.cast(y, np.dtype(dtype).name)
        if y.ndim == 0:
            raise ValueError("cannot accumulate on a scalar")
        return inclusive_scan(y, _axis(axis, y.ndim), combine, identity_of(y.dtype))
    build.__name__ = name
    return build


def _lowest(dtype):
    return -math.inf if dtype in ("float32", "float64") else \
        (False if dtype == "bool" else int(np.iinfo(dtype).min))


def _highest(dtype):
    return math.inf if dtype in ("float32", "float64") else \
        (True if dtype == "bool" else int(np.iinfo(dtype).max))


def logaddexp_reduce(a, axis=0, dtype=None, out=None, keepdims=False):
    """``np.logaddexp.reduce``: log(sum(exp(x))) as max + log(sum(exp(x - max))), the max out
    of the derivative (it cancels: the gradient is the softmax) and 0 where it is not finite
    (all -inf gives -inf, a +inf gives +inf, as NumPy's pairwise logaddexp does)."""
    if out is not None:
        raise unsupported("np.logaddexp.reduce(..., out=...)", "symgrad returns new arrays")
    x = ops.to_float(_as_array(a))
    if dtype is not None:
        x = ops.cast(x, np.dtype(dtype).name)
    if x.ndim == 0:
        raise ValueError("cannot reduce on a scalar")   # (NumPy: axis 0 is out of bounds)
    top = ops.stop_gradient(ops.reduce("max", x, axis, True))
    top = ops.where(ops.logical_and(ops.gt(top, -math.inf), ops.lt(top, math.inf)), top,
                    ops.full((), 0, x.dtype))
    total = ops.log(ops.reduce("sum", ops.exp(x - top), axis, True)) + top
    return total if keepdims else ops.reshape(total, ops.reduce("sum", x, axis, False).shape)


# (NumPy's bound method, builder); symgrad.numpy_api adds them to what the front end recognises
UFUNC_METHODS = {
    "logaddexp.reduce": (np.logaddexp.reduce, logaddexp_reduce),
    "add.reduce": (np.add.reduce, _ufunc_reduce("add.reduce", "sum")),
    "multiply.reduce": (np.multiply.reduce, _ufunc_reduce("multiply.reduce", "prod")),
    "maximum.reduce": (np.maximum.reduce, _ufunc_reduce("maximum.reduce", "max")),
    "minimum.reduce": (np.minimum.reduce, _ufunc_reduce("minimum.reduce", "min")),
    "add.accumulate": (np.add.accumulate, _ufunc_accumulate("add.accumulate", ops.add, sum_identity)),
    "multiply.accumulate": (np.multiply.accumulate,
                            _ufunc_accumulate("multiply.accumulate", ops.mul, lambda d: 1)),
    "maximum.accumulate": (np.maximum.accumulate,
                           _ufunc_accumulate("maximum.accumulate", ops.maximum, _lowest)),
    "minimum.accumulate": (np.minimum.accumulate,
                           _ufunc_accumulate("minimum.accumulate", ops.minimum, _highest)),
}
