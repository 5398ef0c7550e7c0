"""The op table, elementwise ops: one ``register(OpDef(...))`` per primitive (name, NumPy
function, VJP, JVP, Python spelling), each with the builder the front end and the VJP rules call.
Builders promote their operands (``symgrad.op_base``), so every primitive sees one dtype.

An elementwise op's derivative is written once, as its VJP: its Jacobian is diagonal (per
operand, before broadcasting), so the JVP is the same rule applied to the tangent
(``J t = J^T t``), summed over the operands that carry one (:func:`_diagonal_jvp`,
:func:`_partials_jvp`). Ops whose tangent reads better written out (selects) give their own.
"""
from __future__ import annotations

import numbers

import numpy as np

from . import spelling as sp
from .ir import Node, OpDef, is_float, make, register
from .op_base import _elementwise, _promote, _same_dtype, broadcast_shapes, lift, result_dtype, to_float

# ----------------------------------------------------------------------------------------------
# Elementwise ops. One line each: name, NumPy function, VJP, spelling.

# NumPy's name of each op below -> (the NumPy function, the builder): what user code may call
# (``np.exp``, ``math.exp``, ``sg.exp``; symgrad.numpy_api reads it), derived from the entries.
NUMPY_FUNCTIONS: dict = {}


def _diagonal_jvp(vjp):
    """The JVP of a unary elementwise op from its VJP: a diagonal Jacobian is its own
    transpose, so the tangent goes through the same rule."""
    def jvp(tangents, n):
        (t,) = tangents
        return None if t is None else vjp(t, n)[0]
    return jvp


def _partials_jvp(vjp):
    """The JVP of a binary elementwise op from its VJP: ``df = d_a f * t_a + d_b f * t_b``,
    each term the VJP's own for that operand (diagonal per operand) applied to its tangent,
    a zero tangent's term left out."""
    def jvp(tangents, n):
        terms = [vjp(t, n)[k] for k, t in enumerate(tangents) if t is not None]
        terms = [t for t in terms if t is not None]
        if not terms:
            return None
        return terms[0] if len(terms) == 1 else add(terms[0], terms[1])
    return jvp


def _u(name, fn, vjp, spell=None, float_only=True, jvp=None):
    register(OpDef(name, "elementwise", infer=_elementwise(float_only=float_only),
                   numpy=lambda x, attrs: fn(x), vjp=vjp,
                   jvp=jvp or (_diagonal_jvp(vjp) if vjp is not None else None),
                   python=spell or sp.call(f"np.{name}")))

    def build(x):
        return make(name, (to_float(x) if float_only else lift(x),))
    build.__name__ = name
    NUMPY_FUNCTIONS[fn.__name__] = (fn, build)
    return build


def _neg_spell(args, node):
    # -(a * b) is spelled -a * b: the sign flip commutes exactly with * / @ in IEEE arithmetic.
    (text, prec), = args
    if prec >= sp.MUL and node.inputs[0].op in ("mul", "div", "matmul"):
        # a product that starts negative (-1.0 / b * c) loses that sign instead of printing --
        return (text[1:] if text.startswith("-") else f"-{text}"), sp.MUL
    return sp.prefix("-")(args, node)


_neg = _u("neg", np.negative, lambda g, n: (neg(g),), _neg_spell, float_only=False)


def neg(x) -> Node:
    """``-x``; NumPy refuses it on booleans."""
    x = lift(x)
    if x.dtype == "bool":
        raise TypeError("The numpy boolean negative, the `-` operator, is not supported, use the "
                        "`~` operator or the logical_not function instead.")
    return _neg(x)


NUMPY_FUNCTIONS["negative"] = (np.negative, neg)
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


def stop_gradient(x):
    x = lift(x)
    return x if x.op in ("const", "full", "array", "arange") else make("stop_gradient", (x,))


# Identity forward, structural zero backward (TensorFlow's semantics). Spelled as its input:
# in generated code it is just the value.
register(OpDef("stop_gradient", "elementwise", infer=_elementwise(),
               numpy=lambda x, attrs: x, vjp=lambda g, n: (None,), jvp=lambda t, n: None,
               python=lambda args, node: args[0]))


def _b(name, fn, vjp, spell, out_dtype=None, float_only=False, jvp=None):
    register(OpDef(name, "elementwise", infer=_elementwise(out_dtype),
                   numpy=lambda a, b, attrs: fn(a, b), vjp=vjp,
                   jvp=jvp or (_partials_jvp(vjp) if vjp is not None else None), python=spell))

    def build(a, b):
        return make(name, _promote((a, b), float_only))
    build.__name__ = name
    NUMPY_FUNCTIONS[fn.__name__] = (fn, build)
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


_add = _b("add", np.add, lambda g, n: (g, g), sp.infix("+", sp.ADD))


def add(a, b) -> Node:
    """``a + b``; on booleans NumPy's ``+`` is logical or (an i1 add in LLVM/PTX wraps:
    True + True would be False)."""
    a, b = _promote((a, b), False)
    return logical_or(a, b) if a.dtype == "bool" else _add(a, b)


NUMPY_FUNCTIONS["add"] = (np.add, add)
_sub = _b("sub", np.subtract, lambda g, n: (g, -g), sp.infix("-", sp.ADD))


def sub(a, b) -> Node:
    """``a - b``; NumPy refuses it on booleans (an i1 subtract would be xor)."""
    a, b = _promote((a, b), False)
    if a.dtype == "bool":
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the "
                        "bitwise_xor, the `^` operator, or the logical_xor function instead.")
    return _sub(a, b)


NUMPY_FUNCTIONS["subtract"] = (np.subtract, sub)
mul = _b("mul", np.multiply, lambda g, n: (g * n.inputs[1], g * n.inputs[0]), sp.infix("*", sp.MUL))
div = _b("div", np.true_divide,
         lambda g, n: (g / n.inputs[1], -g * n.inputs[0] / (n.inputs[1] * n.inputs[1])),
         sp.infix("/", sp.MUL), float_only=True)
_pow_infix = sp.infix("**", sp.POW, right_assoc=True)


def _pow_spell(args, node):
    """``x ** 2`` as the user wrote it, not ``x ** 2.0``: an integral constant exponent of a
    float base is spelled as an int (NumPy computes both in the base's dtype, bit for bit)."""
    base, exponent = node.inputs
    if exponent.op == "const" and is_float(base.dtype) and isinstance(exponent.attrs[0], float) \
            and exponent.attrs[0].is_integer() and abs(exponent.attrs[0]) <= 2 ** 31:
        args = (args[0], sp.number(int(exponent.attrs[0])))
    return _pow_infix(args, node)


_pow_build = _b("pow", np.power, _pow_vjp, _pow_spell)
pow_ = power
arctan2 = _b("arctan2", np.arctan2, _atan2_vjp, sp.call("np.arctan2"), float_only=True)
def _select_jvp(cond, tangents):
    """The tangent of a select: the picked side's tangent, a zero side staying a structural
    zero; the side not picked is never combined with anything (no ``0 * nan``)."""
    t_a, t_b = tangents
    if t_a is None and t_b is None:
        return None
    return where(cond, 0 if t_a is None else t_a, 0 if t_b is None else t_b)


# Kinks (JAX's convention, and what a central difference sees): on a tie maximum/minimum
# split the cotangent evenly between the operands, as the max/min reductions do. Each share is
# a select, so a side that is not the result never multiplies anything into the derivative.
def _extremum_vjp(wins):
    def vjp(g, n):
        a, b = n.inputs
        half = 0.5 * g
        tie = eq(a, b)   # (a Node's == is identity: hash-consing)
        return where(wins(a, b), g, where(tie, half, 0)), where(wins(b, a), g, where(tie, half, 0))
    return vjp


def _extremum_jvp(wins):
    def jvp(tangents, n):
        a, b = n.inputs
        t_a, t_b = tangents
        if t_a is None and t_b is None:
            return None
        tie = 0.5 * (t_a if t_b is None else t_b if t_a is None else t_a + t_b)
        side = _select_jvp(wins(a, b), (t_a, t_b))   # a wins: t_a; else t_b
        return where(eq(a, b), tie, side)
    return jvp


maximum = _b("maximum", np.maximum, _extremum_vjp(lambda a, b: gt(a, b)), sp.call("np.maximum"),
             jvp=_extremum_jvp(lambda a, b: gt(a, b)))
minimum = _b("minimum", np.minimum, _extremum_vjp(lambda a, b: lt(a, b)), sp.call("np.minimum"),
             jvp=_extremum_jvp(lambda a, b: lt(a, b)))
lt = _b("lt", np.less, None, sp.infix("<", sp.COMPARE), "bool")
le = _b("le", np.less_equal, None, sp.infix("<=", sp.COMPARE), "bool")
gt = _b("gt", np.greater, None, sp.infix(">", sp.COMPARE), "bool")
ge = _b("ge", np.greater_equal, None, sp.infix(">=", sp.COMPARE), "bool")
eq = _b("eq", np.equal, None, sp.infix("==", sp.COMPARE), "bool")
ne = _b("ne", np.not_equal, None, sp.infix("!=", sp.COMPARE), "bool")
logical_and = _b("logical_and", np.logical_and, None, sp.call("np.logical_and"), "bool")
logical_or = _b("logical_or", np.logical_or, None, sp.call("np.logical_or"), "bool")


def _where_infer(inputs, attrs):
    cond, a, b = inputs
    if cond.dtype != "bool":
        raise TypeError("internal: where condition must be bool")
    return _same_dtype((a, b)), broadcast_shapes(cond.shape, a.shape, b.shape)


def _where_spell(args, node):
    # np.where is not a ufunc: a Python float operand would promote float32 to float64.
    texts = [f"np.float32({a[0]})" if i.op == "const" and i.dtype == "float32" else a[0]
             for a, i in zip(args, node.inputs)]
    return f"np.where({', '.join(texts)})", sp.ATOM


register(OpDef("where", "elementwise", infer=_where_infer,
               numpy=lambda c, a, b, attrs: np.where(c, a, b),
               vjp=lambda g, n: (None, where(n.inputs[0], g, 0), where(n.inputs[0], 0, g)),
               jvp=lambda t, n: _select_jvp(n.inputs[0], t[1:]), python=_where_spell))


def where(cond, a, b) -> Node:
    cond = lift(cond)
    if cond.dtype != "bool":
        cond = ne(cond, 0)
    a, b = _promote((a, b))
    return make("where", (cond, a, b))
