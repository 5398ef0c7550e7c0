"""The functions a user may call: ``sg.exp``, ``np.exp``, ``math.exp`` ... and the table that
maps each Python callable to one of them.

Every function here is *dual*: given IR nodes (while tracing) it builds IR; given floats or
NumPy arrays it simply runs NumPy, so an undecorated function using ``sg.*`` still runs as
ordinary Python. The front end looks callables up in :data:`CALLABLES`.
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from . import ops
from .ir import Node


def _traced(values) -> bool:
    for v in values:
        if isinstance(v, Node):
            return True
        if isinstance(v, (list, tuple)) and _traced(v):
            return True
    return False


def _dual(eager, build, name):
    def fn(*args, **kwargs):
        if _traced(args) or _traced(kwargs.values()):
            return build(*args, **kwargs)
        return eager(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``np.{getattr(eager, '__name__', name)}`` that also traces into symgrad IR."
    return fn


def _as_node_list(xs):
    return [x if isinstance(x, Node) else ops.lift(np.asarray(x)) for x in xs]


def _reduce(op):
    def build(x, axis=None, keepdims=False):
        if isinstance(x, (list, tuple)):
            x = ops.stack(_as_node_list(x))
        return ops.reduce(op, x, axis, keepdims)
    return build


def _mean(x, axis=None, keepdims=False):
    if isinstance(x, (list, tuple)):
        x = ops.stack(_as_node_list(x))
    return ops.mean(x, axis, keepdims)


def _clip(x, lo, hi):
    out = ops.lift(x)
    if lo is not None:
        out = ops.maximum(out, lo)
    if hi is not None:
        out = ops.minimum(out, hi)
    return out


def _array(x, dtype=None):
    if isinstance(x, (list, tuple)):
        x = ops.stack(_as_node_list([_array(v) if isinstance(v, (list, tuple)) else v for v in x]))
    x = ops.lift(x)
    return ops.cast(x, np.dtype(dtype).name) if dtype is not None else x


def _zeros(shape, dtype=float):
    return ops.full(shape if isinstance(shape, tuple) else (shape,), 0, np.dtype(dtype).name)


def _ones(shape, dtype=float):
    return ops.full(shape if isinstance(shape, tuple) else (shape,), 1, np.dtype(dtype).name)


def _like(value):
    def build(x, dtype=None):
        x = ops.lift(x)
        return ops.full(x.shape, value, np.dtype(dtype).name if dtype else x.dtype)
    return build


def _full_like(x, fill, dtype=None):
    x = ops.lift(x)
    return ops.full(x.shape, fill, np.dtype(dtype).name if dtype else x.dtype)


def _pow(a, b):
    return ops.pow_(a, b)


def _square(x):
    x = ops.lift(x)
    return x * x


def _logaddexp(a, b):
    """NumPy's formula, ``larger + log1p(exp(smaller - larger))``, the sides chosen by one
    select (a tie takes a's): each side is analytic, so every derivative order is right at a
    tie (1/2 to each argument, 1/4 second order; an |a - b| form had abs'(0) = 0 inside), and
    the exp never overflows. Equal infinities give that infinity, as NumPy (their difference
    is nan)."""
    a, b = ops.lift(a), ops.lift(b)
    a_larger = ops.ge(a, b)
    larger = ops.where(a_larger, a, b)
    gap = ops.where(a_larger, ops.sub(b, a), ops.sub(a, b))   # <= 0
    d = ops.sub(a, b)
    infinite_tie = ops.logical_and(ops.eq(a, b), ops.ne(d, d))
    return ops.where(infinite_tie, ops.stop_gradient(a), larger + ops.log1p(ops.exp(gap)))


def _sqrt_of_square_sum(s):
    """sqrt(s) for a sum of squares (std, norm), whose gradient at s == 0 is 0 rather than
    0 / 0 (the convention of abs'(0) = 0: the norm of one number is its absolute value)."""
    return ops.where(ops.eq(s, 0), 0.0, ops.sqrt(s))


def _squeeze(x, axis=None):
    x = ops.lift(x)
    shape = tuple(d for i, d in enumerate(x.shape)
                  if not (d == 1 and (axis is None or i in ops.normalize_axes(axis, x.ndim))))
    return ops.reshape(x, shape)


def _expand_dims(x, axis):
    x = ops.lift(x)
    shape = list(x.shape)
    shape.insert(axis % (x.ndim + 1), 1)
    return ops.reshape(x, shape)


def _outer(a, b):
    a, b = ops.reshape(a, (-1, 1)), ops.reshape(b, (1, -1))
    return a * b


def _stack(xs, axis=0):
    return ops.stack(_as_node_list(xs), axis)


def _concatenate(xs, axis=0):
    return ops.concatenate(_as_node_list(xs), axis)


def _abs(x):
    return ops.abs_(x)


def _norm(x, ord=None, axis=None, keepdims=False):
    """The 2-norm of vectors and Frobenius norm of matrices (np.linalg.norm's default)."""
    if ord not in (None, 2, "fro") or (ord == 2 and ops.lift(x).ndim != 1 and axis is None):
        raise NotImplementedError(f"np.linalg.norm with ord={ord!r}: only the 2-norm of vectors "
                                  "and the Frobenius norm are supported")
    x = ops.to_float(x)
    return _sqrt_of_square_sum(ops.reduce("sum", x * x, axis, keepdims))


def _var(x, axis=None, keepdims=False, ddof=0):
    x = ops.to_float(x)
    centered = x - ops.mean(x, axis, keepdims=True)
    axes = ops.normalize_axes(axis, x.ndim)
    count = 1
    for a in axes:
        count *= x.shape[a]
    return ops.reduce("sum", centered * centered, axis, keepdims) / (count - ddof)


def _std(x, axis=None, keepdims=False, ddof=0):
    return _sqrt_of_square_sum(_var(x, axis, keepdims, ddof))


def _stop_gradient_eager(x):
    return x


# name -> (eager implementation, builder). ``sg.<name>`` is the dual of the two. Every
# elementwise primitive comes under its NumPy name from the op table (ops.NUMPY_FUNCTIONS);
# the entries below are the composites and the ones whose user-facing form differs.
FUNCTIONS = {
    **ops.NUMPY_FUNCTIONS,
    "abs": (np.abs, _abs), "where": (np.where, ops.where),
    "clip": (np.clip, _clip), "sum": (np.sum, _reduce("sum")), "prod": (np.prod, _reduce("prod")),
    "max": (np.max, _reduce("max")), "min": (np.min, _reduce("min")), "mean": (np.mean, _mean),
    "dot": (np.dot, ops.dot), "matmul": (np.matmul, ops.matmul),
    "transpose": (np.transpose, ops.transpose), "reshape": (np.reshape, ops.reshape),
    "stack": (np.stack, _stack), "concatenate": (np.concatenate, _concatenate),
    "zeros": (np.zeros, _zeros), "ones": (np.ones, _ones),
    "zeros_like": (np.zeros_like, _like(0)), "ones_like": (np.ones_like, _like(1)),
    "full_like": (np.full_like, _full_like), "arange": (np.arange, ops.arange),
    "power": (np.power, _pow), "square": (np.square, _square),
    "logaddexp": (np.logaddexp, _logaddexp), "squeeze": (np.squeeze, _squeeze),
    "expand_dims": (np.expand_dims, _expand_dims), "outer": (np.outer, _outer),
    "array": (np.array, _array), "asarray": (np.asarray, _array),
    "take": (np.take, ops.take),
    "norm": (np.linalg.norm, _norm), "var": (np.var, _var), "std": (np.std, _std),
    "log2": (np.log2, lambda x: ops.log(x) / math.log(2.0)),
    "log10": (np.log10, lambda x: ops.log(x) / math.log(10.0)),
    "exp2": (np.exp2, lambda x: ops.exp(ops.to_float(x) * math.log(2.0))),
    "hypot": (np.hypot, lambda a, b: ops.sqrt(ops.to_float(a) * a + ops.to_float(b) * b)),
    "reciprocal": (np.reciprocal, lambda x: 1.0 / ops.to_float(x)),
    "stop_gradient": (_stop_gradient_eager, ops.stop_gradient),
}
ALIASES = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "atan2": "arctan2",
           "fabs": "abs", "pow": "power", "amax": "max", "amin": "min", "absolute": "abs",
           "reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min",
           "reduce_mean": "mean", "reduce_prod": "prod", "concat": "concatenate",
           "true_divide": "divide"}

DUALS = {name: _dual(eager, build, name) for name, (eager, build) in FUNCTIONS.items()}
DUALS.update({alias: DUALS[name] for alias, name in ALIASES.items()})

# Python callables the front end recognises -> the dual that handles them.
CALLABLES: dict = {}
for _name, _dual_fn in DUALS.items():
    CALLABLES[_dual_fn] = _dual_fn
    for _module in (np, math):
        _obj = getattr(_module, _name, None)
        if _obj is not None and callable(_obj):
            CALLABLES.setdefault(_obj, _dual_fn)
CALLABLES[builtins.abs] = DUALS["abs"]
CALLABLES[np.linalg.norm] = DUALS["norm"]
CALLABLES[np.float64] = _dual(np.float64, lambda x: ops.cast(x, "float64"), "float64")
CALLABLES[np.float32] = _dual(np.float32, lambda x: ops.cast(x, "float32"), "float32")


def builtin_extremum(build):
    """``min``/``max`` on scalars: elementwise ``minimum``/``maximum`` when traced."""
    pick = builtins.min if build is ops.minimum else builtins.max

    def fn(*args, **kwargs):
        items = list(args[0]) if len(args) == 1 else list(args)
        if not _traced(items):
            return pick(*args, **kwargs)
        if kwargs:
            raise TypeError(f"{pick.__name__}() with keyword arguments on traced values is not supported")
        out = items[0]
        for item in items[1:]:
            out = build(out, item)
        return out
    return fn


CALLABLES[builtins.min] = builtin_extremum(ops.minimum)
CALLABLES[builtins.max] = builtin_extremum(ops.maximum)
