"""The op table's base: what every op module builds on. Shape/dtype rules shared by
elementwise ops, the leaves (arguments and constants), lifting Python values into nodes, NumPy's
dtype promotion (Python scalars weakly typed, as NEP 50) by explicit ``cast`` nodes, and axis
normalisation. Callers import all of it from ``symgrad.ops``.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import numbers

import numpy as np

from . import spelling as sp
from .errors import UnsupportedSyntaxError
from .ir import ArrayConst, Node, OpDef, is_float, make, register

# ----------------------------------------------------------------------------------------------
# Shape/dtype rules


def broadcast_shapes(*shapes) -> tuple:
    # Operands of one shape, or of one shape and scalars, are most calls (each node an
    # elementwise op builds): answered here, as NumPy would, without its ~3.5 us a call
    # (a fifth of tracing and simplifying straight-line code on a vector).
    distinct = {tuple(s) for s in shapes if len(s)}
    if len(distinct) < 2:
        return distinct.pop() if distinct else ()
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError("operands could not be broadcast together with shapes "
                         + " ".join(str(tuple(s)) for s in shapes)) from None


def _same_dtype(inputs):
    dtypes = {x.dtype for x in inputs}
    if len(dtypes) != 1:
        raise TypeError(f"internal: mixed operand dtypes {sorted(dtypes)} (missing cast)")
    return dtypes.pop()


def _elementwise(out_dtype=None, float_only=False):
    def infer(inputs, attrs):
        dtype = _same_dtype(inputs)
        if float_only and not is_float(dtype):
            raise TypeError(f"internal: float op applied to {dtype}")
        return (out_dtype or dtype), broadcast_shapes(*(x.shape for x in inputs))
    return infer


# ----------------------------------------------------------------------------------------------
# Leaves


register(OpDef("arg", "leaf",
               infer=lambda inputs, attrs: (attrs[2], attrs[3]),   # (index, name, dtype, shape)
               numpy=None,
               python=lambda args, node: (node.attrs[1], sp.ATOM)))
register(OpDef("const", "leaf",                                    # (value, dtype): a scalar
               infer=lambda inputs, attrs: (attrs[1], ()),
               numpy=lambda attrs: np.array(attrs[0], dtype=attrs[1])[()],
               python=lambda args, node: sp.number(node.attrs[0])))
register(OpDef("full", "leaf",                                     # (value, dtype, shape)
               infer=lambda inputs, attrs: (attrs[1], attrs[2]),
               numpy=lambda attrs: np.full(attrs[2], attrs[0], dtype=attrs[1]),
               python=lambda args, node: (
                   f"np.full({sp.shape_text(node.shape)}, {sp.number(node.attrs[0])[0]}, "
                   f"dtype={sp.dtype_name(node.dtype)})", sp.ATOM)))
register(OpDef("array", "leaf",                                    # (ArrayConst,)
               infer=lambda inputs, attrs: (attrs[0].value.dtype.name, attrs[0].value.shape),
               numpy=lambda attrs: attrs[0].value,
               python=None))  # spelled by the emitter as a name bound in the namespace
register(OpDef("arange", "leaf",                                   # (start, step, dtype, n)
               infer=lambda inputs, attrs: (attrs[2], (attrs[3],)),
               numpy=lambda attrs: (attrs[0] + attrs[1] * np.arange(attrs[3])).astype(attrs[2]),
               python=lambda args, node: (
                   f"np.arange({node.attrs[0]!r}, {node.attrs[0] + node.attrs[1] * node.attrs[3]!r}, "
                   f"{node.attrs[1]!r}, dtype={sp.dtype_name(node.dtype)})", sp.ATOM)))


def const(value, dtype: str) -> Node:
    value = np.array(value, dtype=dtype)[()].item()
    return make("const", (), (value, dtype))


def full(shape, value, dtype: str) -> Node:
    if any(isinstance(d, Node) for d in shape):   # int(x.item()), n = x.sum().item(): data
        raise UnsupportedSyntaxError(
            "an array shape that depends on traced data", "", 0, 0, "",
            "shapes must be static (x.shape, len(x), Python ints): a traced value's int is known "
            "only at run time")
    shape = tuple(int(d) for d in shape)
    if shape == ():
        return const(value, dtype)
    return make("full", (), (np.array(value, dtype=dtype).item(), dtype, shape))


def zeros_like(x: Node) -> Node:
    return full(x.shape, 0, x.dtype)


def array_const(value) -> Node:
    value = np.asarray(value)
    if value.dtype.name not in ("float32", "float64", "bool") and value.dtype.kind in "iu":
        value = value.astype(value.dtype.name)
    if value.ndim == 0:
        return const(value.item(), value.dtype.name)
    if value.dtype.name not in ("float32", "float64", "bool", "int8", "int16", "int32",
                                "int64", "uint8", "uint16", "uint32", "uint64"):
        raise TypeError(f"unsupported array dtype {value.dtype}")
    return make("array", (), (ArrayConst(value),))


def arange(start, stop=None, step=1, dtype=None) -> Node:
    if stop is None:
        start, stop = 0, start
    n = max(0, math.ceil((stop - start) / step))
    if dtype is None:
        dtype = "float64" if any(isinstance(v, float) for v in (start, stop, step)) else "int64"
    return make("arange", (), (start, step, dtype, n))


# ----------------------------------------------------------------------------------------------
# Lifting Python values and dtype promotion (NumPy rules; Python scalars are weak)

Operand = "Node | float | int | bool | np.ndarray"


def lift(x, dtype: str | None = None) -> Node:
    """Turn a NumPy array or scalar into a node; Python scalars take ``dtype``."""
    if isinstance(x, Node):
        return x
    if isinstance(x, (np.ndarray, np.generic)):
        return array_const(x)
    if isinstance(x, bool):
        return const(x, dtype or "bool")
    if isinstance(x, numbers.Integral):
        return const(int(x), dtype or "int64")
    if isinstance(x, numbers.Real):
        return const(float(x), dtype if dtype and is_float(dtype) else "float64")
    raise TypeError(f"expected a number or an array, got {type(x).__name__}")


def _weak_kind(x) -> int:
    """0 bool, 1 int, 2 float for Python scalars."""
    return 0 if isinstance(x, bool) else 1 if isinstance(x, numbers.Integral) else 2


# Traced values that stand for Python numbers: a loop region's index (``range`` gives Python
# ints), a Python number carried through the loop, and what Python arithmetic makes of them
# with other Python numbers (``t + 1``, ``t * dt``). NumPy promotes a Python number weakly (a
# float32 array times it stays float32), so these promote as one: node -> weak kind (0 bool,
# 1 int, 2 float), recorded while a loop body is traced (their nodes exist only there).
_weak_values: contextvars.ContextVar[dict] = contextvars.ContextVar("symgrad_weak_values")
_WEAK_DTYPES = ("bool", "int64", "float64")   # a Python number's dtype by its weak kind


@contextlib.contextmanager
def weak_scope():
    """A scope (a loop body being traced) in which :func:`mark_weak` records weak values; the
    marks of enclosing scopes stay visible, the scope's own end with it."""
    token = _weak_values.set(dict(_weak_values.get({})))
    try:
        yield
    finally:
        _weak_values.reset(token)


def in_weak_scope() -> bool:
    return _weak_values.get(None) is not None


def mark_weak(node: Node) -> Node:
    """Record ``node`` (a 0-d bool / int64 / float64 node in a :func:`weak_scope`) as standing
    for a Python number; returns it."""
    marks = _weak_values.get(None)
    if marks is None or node.ndim or node.dtype not in _WEAK_DTYPES:
        raise ValueError(f"internal: {node!r} cannot stand for a Python number here")
    marks[node] = _WEAK_DTYPES.index(node.dtype)
    return node


def weak_kind(x) -> int | None:
    """The weak kind of a Python number or of a node standing for one; None for a value NumPy
    types strongly (an array, a NumPy scalar, any other node)."""
    if isinstance(x, Node):
        return _weak_values.get({}).get(x)
    if isinstance(x, numbers.Number) and not isinstance(x, np.generic):
        return _weak_kind(x)
    return None


def weak_result(result, *operands):
    """``result`` of Python arithmetic on ``operands``: a Python number when every operand is
    one (traced ones included: a loop index), so it is marked as one (``t * dt`` is a float)."""
    if isinstance(result, Node) and not result.ndim and result.dtype in _WEAK_DTYPES and \
            all(weak_kind(v) is not None for v in operands):
        return mark_weak(result)
    return result


def result_dtype(*operands) -> str:
    strong, kind = [], -1
    for x in operands:
        weak = weak_kind(x) if isinstance(x, Node) else None
        if weak is not None:
            kind = max(kind, weak)
        elif isinstance(x, Node):
            strong.append(x.dtype)
        elif isinstance(x, (np.ndarray, np.generic)):
            strong.append(x.dtype.name)
        else:
            kind = max(kind, _weak_kind(x))
    if not strong:
        return ("bool", "int64", "float64")[kind]
    dtype = strong[0]
    if any(d != dtype for d in strong):   # the common case (one dtype) skips NumPy
        dtype = np.result_type(*strong).name
    if kind == 2 and not is_float(dtype):
        return "float64"
    if kind == 1 and dtype == "bool":
        return "int64"
    return dtype


def cast(x: Node, dtype: str) -> Node:
    x = lift(x, dtype)
    return x if x.dtype == dtype else make("cast", (x,), (dtype,))


def _promote(operands, float_only=False):
    dtype = result_dtype(*operands)
    if float_only and not is_float(dtype):
        dtype = "float64"
    return [cast(lift(x, dtype), dtype) for x in operands]


def to_float(x) -> Node:
    x = lift(x)
    return x if is_float(x.dtype) else cast(x, "float64")


def _cast_vjp(g, n):
    x = n.inputs[0]
    return (cast(g, x.dtype) if is_float(x.dtype) and is_float(n.dtype) else None,)


def _cast_jvp(tangents, n):
    (t,) = tangents
    return cast(t, n.dtype) if t is not None and is_float(n.dtype) else None


register(OpDef("cast", "elementwise",
               infer=lambda inputs, attrs: (attrs[0], inputs[0].shape),
               numpy=lambda x, attrs: np.asarray(x).astype(attrs[0])[()],
               vjp=_cast_vjp, jvp=_cast_jvp,
               python=lambda args, node: (
                   f"{sp.paren(args[0], args[0][1] < sp.ATOM)}.astype({sp.dtype_name(node.dtype)})"
                   if node.inputs[0].ndim else f"{sp.dtype_name(node.dtype)}({args[0][0]})", sp.ATOM)))


# ----------------------------------------------------------------------------------------------
# Axes

def normalize_axes(axis, ndim: int) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of bounds for array of dimension {ndim}")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError("duplicate value in 'axis'")
    return tuple(sorted(out))
