"""The op table: every primitive's shape/dtype rule, NumPy reference, VJP and Python spelling.
(Leaves, promotion, elementwise ops and reductions here; shape ops, indexing, gather/scatter and
matmul in ``symgrad.shape_ops``, re-exported below.)

Each primitive is one ``register(OpDef(...))`` entry below. Derivative rules are written with
the same builders users' code is traced into (``mul``, ``cos``, ...), so they return IR nodes,
higher derivatives come for free, and ``None`` is a structural zero that autodiff skips.

The builders at the bottom of each section are what the front end and the VJP rules call:
they apply NumPy's dtype promotion (with Python scalars weakly typed, as NEP 50) by inserting
explicit ``cast`` nodes, so every elementwise primitive sees operands of a single dtype.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import spelling as sp
from .ir import INT_DTYPES, ArrayConst, Node, OpDef, is_float, make, register

# ----------------------------------------------------------------------------------------------
# Shape/dtype rules


def broadcast_shapes(*shapes) -> tuple:
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


def _where_infer(inputs, attrs):
    cond, a, b = inputs
    if cond.dtype != "bool":
        raise TypeError("internal: where condition must be bool")
    return _same_dtype((a, b)), broadcast_shapes(cond.shape, a.shape, b.shape)


def _reduce_infer(inputs, attrs):
    (x,) = inputs
    axes, keepdims = attrs
    shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keepdims else \
        [d for i, d in enumerate(x.shape) if i not in axes]
    return x.dtype, tuple(shape)


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


def result_dtype(*operands) -> str:
    strong, kind = [], -1
    for x in operands:
        if isinstance(x, Node):
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


# ----------------------------------------------------------------------------------------------
# Elementwise ops. One line each: name, NumPy function, VJP, spelling.

def _u(name, fn, vjp, spell=None, float_only=True):
    register(OpDef(name, "elementwise", infer=_elementwise(float_only=float_only),
                   numpy=lambda x, attrs: fn(x), vjp=vjp,
                   python=spell or sp.call(f"np.{name}")))

    def build(x):
        return make(name, (to_float(x) if float_only else lift(x),))
    build.__name__ = name
    return build


def _neg_spell(args, node):
    # -(a * b) is spelled -a * b: the sign flip commutes exactly with * / @ in IEEE arithmetic.
    (text, prec), = args
    if prec >= sp.MUL and node.inputs[0].op in ("mul", "div", "matmul"):
        return f"-{text}", sp.MUL
    return sp.prefix("-")(args, node)


neg = _u("neg", np.negative, lambda g, n: (neg(g),), _neg_spell, float_only=False)
exp = _u("exp", np.exp, lambda g, n: (g * n,))
log = _u("log", np.log, lambda g, n: (g / n.inputs[0],))
log1p = _u("log1p", np.log1p, lambda g, n: (g / (1 + n.inputs[0]),))
expm1 = _u("expm1", np.expm1, lambda g, n: (g * (n + 1),))
sqrt = _u("sqrt", np.sqrt, lambda g, n: (g / (2 * n),))
sin = _u("sin", np.sin, lambda g, n: (g * cos(n.inputs[0]),))
cos = _u("cos", np.cos, lambda g, n: (-g * sin(n.inputs[0]),))
tan = _u("tan", np.tan, lambda g, n: (g * (1 + n * n),))
arcsin = _u("arcsin", np.arcsin, lambda g, n: (g / sqrt(1 - n.inputs[0] * n.inputs[0]),))
arccos = _u("arccos", np.arccos, lambda g, n: (-g / sqrt(1 - n.inputs[0] * n.inputs[0]),))
arctan = _u("arctan", np.arctan, lambda g, n: (g / (1 + n.inputs[0] * n.inputs[0]),))
sinh = _u("sinh", np.sinh, lambda g, n: (g * cosh(n.inputs[0]),))
cosh = _u("cosh", np.cosh, lambda g, n: (g * sinh(n.inputs[0]),))
tanh = _u("tanh", np.tanh, lambda g, n: (g * (1 - n * n),))
abs_ = _u("abs", np.abs, lambda g, n: (g * sign(n.inputs[0]),), float_only=False)
sign = _u("sign", np.sign, None, float_only=False)        # derivative 0 almost everywhere
logical_not = _u("logical_not", np.logical_not, None, sp.call("np.logical_not"), float_only=False)


def _cast_vjp(g, n):
    x = n.inputs[0]
    return (cast(g, x.dtype) if is_float(x.dtype) and is_float(n.dtype) else None,)


register(OpDef("cast", "elementwise",
               infer=lambda inputs, attrs: (attrs[0], inputs[0].shape),
               numpy=lambda x, attrs: np.asarray(x).astype(attrs[0])[()],
               vjp=_cast_vjp,
               python=lambda args, node: (
                   f"{sp.paren(args[0], args[0][1] < sp.ATOM)}.astype({sp.dtype_name(node.dtype)})"
                   if node.inputs[0].ndim else f"{sp.dtype_name(node.dtype)}({args[0][0]})", sp.ATOM)))


def stop_gradient(x):
    x = lift(x)
    return x if x.op in ("const", "full", "array", "arange") else make("stop_gradient", (x,))


# Identity forward, structural zero backward (TensorFlow's semantics). Spelled as its input:
# in generated code it is just the value.
register(OpDef("stop_gradient", "elementwise", infer=_elementwise(),
               numpy=lambda x, attrs: x, vjp=lambda g, n: (None,),
               python=lambda args, node: args[0]))


def _b(name, fn, vjp, spell, out_dtype=None, float_only=False):
    register(OpDef(name, "elementwise", infer=_elementwise(out_dtype),
                   numpy=lambda a, b, attrs: fn(a, b), vjp=vjp, python=spell))

    def build(a, b):
        return make(name, _promote((a, b), float_only))
    build.__name__ = name
    return build


def power(a, b) -> Node:
    """``a ** b``; like NumPy, integers to negative integer powers are an error."""
    if isinstance(b, numbers.Integral) and not isinstance(b, bool) and b < 0 and \
            not is_float(result_dtype(a, b)):
        raise ValueError("Integers to negative integer powers are not allowed.")
    return _pow_build(a, b)


def _pow_vjp(g, n):
    """d/da = b a^(b-1), 0 where b == 0 (0 * a^-1 would be nan at a == 0); d/db = a^b log(a),
    0 at a == 0 (log(0) * 0 would be nan; JAX's and autograd's convention): a select on the
    operand, so the rule stays finite there at every order."""
    a, b = n.inputs
    known = b.attrs[0] if b.op in ("const", "full") else None   # an exponent of one value
    if known == 0:
        ga = None
    elif known is not None:
        ga = g * b * (a ** (b - 1))
    else:
        ga = g * where(eq(b, 0), 0, b * a ** (b - 1))
    gb = None if b.op in ("const", "full", "array") else g * n * log(where(eq(a, 0), 1, a))
    return ga, gb


def _atan2_vjp(g, n):
    y, x = n.inputs
    r2 = x * x + y * y
    return g * x / r2, -g * y / r2


add = _b("add", np.add, lambda g, n: (g, g), sp.infix("+", sp.ADD))
sub = _b("sub", np.subtract, lambda g, n: (g, -g), sp.infix("-", sp.ADD))
mul = _b("mul", np.multiply, lambda g, n: (g * n.inputs[1], g * n.inputs[0]), sp.infix("*", sp.MUL))
div = _b("div", np.true_divide,
         lambda g, n: (g / n.inputs[1], -g * n.inputs[0] / (n.inputs[1] * n.inputs[1])),
         sp.infix("/", sp.MUL), float_only=True)
_pow_build = _b("pow", np.power, _pow_vjp, sp.infix("**", sp.POW, right_assoc=True))
pow_ = power
arctan2 = _b("arctan2", np.arctan2, _atan2_vjp, sp.call("np.arctan2"), float_only=True)
# Kinks: maximum/minimum give the whole cotangent to the first operand on ties (documented).
maximum = _b("maximum", np.maximum, lambda g, n: (
    where(n.inputs[0] >= n.inputs[1], g, 0), where(n.inputs[0] >= n.inputs[1], 0, g)),
    sp.call("np.maximum"))
minimum = _b("minimum", np.minimum, lambda g, n: (
    where(n.inputs[0] <= n.inputs[1], g, 0), where(n.inputs[0] <= n.inputs[1], 0, g)),
    sp.call("np.minimum"))
lt = _b("lt", np.less, None, sp.infix("<", sp.COMPARE), "bool")
le = _b("le", np.less_equal, None, sp.infix("<=", sp.COMPARE), "bool")
gt = _b("gt", np.greater, None, sp.infix(">", sp.COMPARE), "bool")
ge = _b("ge", np.greater_equal, None, sp.infix(">=", sp.COMPARE), "bool")
eq = _b("eq", np.equal, None, sp.infix("==", sp.COMPARE), "bool")
ne = _b("ne", np.not_equal, None, sp.infix("!=", sp.COMPARE), "bool")
logical_and = _b("logical_and", np.logical_and, None, sp.call("np.logical_and"), "bool")
logical_or = _b("logical_or", np.logical_or, None, sp.call("np.logical_or"), "bool")


def _where_spell(args, node):
    # np.where is not a ufunc: a Python float operand would promote float32 to float64.
    texts = [f"np.float32({a[0]})" if i.op == "const" and i.dtype == "float32" else a[0]
             for a, i in zip(args, node.inputs)]
    return f"np.where({', '.join(texts)})", sp.ATOM


register(OpDef("where", "elementwise", infer=_where_infer,
               numpy=lambda c, a, b, attrs: np.where(c, a, b),
               vjp=lambda g, n: (None, where(n.inputs[0], g, 0), where(n.inputs[0], 0, g)),
               python=_where_spell))


def where(cond, a, b) -> Node:
    cond = lift(cond)
    if cond.dtype != "bool":
        cond = ne(cond, 0)
    a, b = _promote((a, b))
    return make("where", (cond, a, b))


# ----------------------------------------------------------------------------------------------
# Reductions: attrs (axes, keepdims) with axes sorted and non-negative.

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


def _keepdims_shape(x: Node, axes) -> tuple:
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape))


def _expand(g: Node, n: Node) -> Node:
    """A reduction's cotangent broadcast back to the input's shape."""
    x = n.inputs[0]
    axes, keepdims = n.attrs
    return broadcast_to(reshape(g, _keepdims_shape(x, axes)), x.shape)


def _extremum_vjp(g, n):
    x = n.inputs[0]
    axes, _ = n.attrs
    m = broadcast_to(reshape(n, _keepdims_shape(x, axes)), x.shape)
    hit = eq(x, m)
    count = reduce("sum", cast(hit, x.dtype), axes, True)  # ties share the cotangent evenly
    return (where(hit, _expand(g, n) / count, 0),)


def _reduce_spell(fn):
    def spell(args, node):
        x = node.inputs[0]
        axes, keepdims = node.attrs
        parts = [args[0][0]]
        if axes != tuple(range(x.ndim)):
            parts.append(f"axis={axes[0] if len(axes) == 1 else axes}")
        if keepdims:
            parts.append("keepdims=True")
        return f"np.{fn}({', '.join(parts)})", sp.ATOM
    return spell


def _reduce_numpy(fn):
    return lambda x, attrs: fn(x, axis=attrs[0], keepdims=attrs[1])


def _check_nonempty(fn):
    def infer(inputs, attrs):
        x = inputs[0]
        if any(x.shape[a] == 0 for a in attrs[0]):
            raise ValueError(f"zero-size array to reduction operation {fn} which has no identity")
        return _reduce_infer(inputs, attrs)
    return infer


register(OpDef("sum", "reduction", _reduce_infer, _reduce_numpy(np.sum),
               _reduce_spell("sum"), lambda g, n: (_expand(g, n),)))
register(OpDef("prod", "reduction", _reduce_infer, _reduce_numpy(np.prod),
               _reduce_spell("prod"),
               lambda g, n: (_expand(g, n) * _expand(n, n) / n.inputs[0],)))  # x != 0 assumed
register(OpDef("max", "reduction", _check_nonempty("maximum"), _reduce_numpy(np.max),
               _reduce_spell("max"), _extremum_vjp))
register(OpDef("min", "reduction", _check_nonempty("minimum"), _reduce_numpy(np.min),
               _reduce_spell("min"), _extremum_vjp))


def reduce(op: str, x, axis=None, keepdims=False) -> Node:
    x = lift(x)
    if op in ("sum", "prod") and (x.dtype == "bool" or x.dtype in INT_DTYPES):
        # NumPy accumulates small integers (and bools) in the platform's 64-bit integer
        x = cast(x, "uint64" if x.dtype.startswith("uint") else "int64")
    axes = normalize_axes(axis, x.ndim)
    if not axes and not keepdims:
        return x
    return make(op, (x,), (axes, bool(keepdims)))


def mean(x, axis=None, keepdims=False) -> Node:
    x = to_float(x)
    axes = normalize_axes(axis, x.ndim)
    count = math.prod(x.shape[a] for a in axes)
    return reduce("sum", x, axes, keepdims) / count


# The second half of the table (defined after everything above, which it builds on).
from .shape_ops import (  # noqa: E402,F401 - re-exported
    reshape, transpose, broadcast_to, unbroadcast, normalize_index, getitem, setitem,
    index_add, concatenate, stack, take, scatter_add, matmul, dot, _index_shape, _index_text)


# ----------------------------------------------------------------------------------------------
# Operators on nodes, so derivative rules read as math (``g * cos(x)``). ``==`` stays identity
# (nodes are dict keys); use ``eq``/``ne`` for elementwise comparison.


def _rev(fn):
    return lambda self, other: fn(other, self)


for _name, _fn in (("add", add), ("sub", sub), ("mul", mul), ("truediv", div), ("pow", pow_),
                   ("matmul", matmul)):
    setattr(Node, f"__{_name}__", _fn)
    setattr(Node, f"__r{_name}__", _rev(_fn))
Node.__neg__ = neg


def _iter_rows(x: Node):
    """Iterating a traced array gives its rows (so for loops, zip, enumerate, sum work)."""
    if x.ndim == 0:
        raise TypeError("iteration over a 0-d array")
    return iter([getitem(x, i) for i in range(x.shape[0])])


def _length(x: Node) -> int:
    if x.ndim == 0:
        raise TypeError("len() of unsized object")
    return x.shape[0]


Node.__iter__, Node.__len__ = _iter_rows, _length
Node.__lt__, Node.__le__, Node.__gt__, Node.__ge__ = lt, le, gt, ge
Node.__array_ufunc__ = None  # numpy arrays defer to the node's reflected operators
Node.__bool__ = lambda self: (_ for _ in ()).throw(TypeError(
    "the truth value of a traced array is data-dependent; use np.where"))
