"""A graph as mathematics: IR -> sympy expressions (and LaTeX).

Every node becomes a NumPy object array of sympy expressions, one per element (a scalar node is
a 0-d array), through one table keyed by op (:data:`SYMPY_RULES`). Scalar arguments are real
``Symbol``\\ s named like the parameters; array arguments are arrays of element symbols ``x_0,
x_1, ...`` (1-d) or ``x_{i,j}`` (2-d and up). Shape ops (reshape, transpose, indexing, stacking,
``@``, updates) need no rule of their own: the op table's NumPy reference runs them on the object
arrays. A result becomes a sympy expression (0-d), a ``sympy.Matrix`` (2-d) or a ``sympy.Array``.

Shapes are concrete in the IR, so a reduction is an ``Add`` (``Max``, ...) of its elements: the
element form is for small arrays (:data:`MAX_ELEMENTS`); larger ones raise a clear ``ValueError``.
What has no closed form raises ``NotImplementedError`` naming it (a gather with traced indices).
``stop_gradient`` is kept as an unevaluated function whose derivative is zero, so ``sympy.diff``
of a function's form agrees with symgrad's derivative of it.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import sympy

from .ir import OPS, Graph, Node, toposort

MAX_ELEMENTS = 256   # beyond this an element-by-element form is no longer readable mathematics


class stop_gradient(sympy.Function):
    """``stop_gradient(e)``: the value ``e``, derivative zero (TensorFlow's semantics)."""

    def fdiff(self, argindex=1):
        return sympy.S.Zero

    def _latex(self, printer):
        return r"\operatorname{stop\_gradient}\left(%s\right)" % printer._print(self.args[0])


def number(value, dtype: str = "float64"):
    """A constant as sympy: integers and short binary fractions exactly (1.0 -> 1, 0.5 -> 1/2),
    others as floats, inf/nan as sympy's."""
    if isinstance(value, (bool, np.bool_)) or dtype == "bool":
        return sympy.true if value else sympy.false
    value = float(value) if dtype.startswith("float") else int(value)
    if isinstance(value, int):
        return sympy.Integer(value)
    if math.isnan(value):
        return sympy.nan
    if math.isinf(value):
        return sympy.oo if value > 0 else -sympy.oo
    exact = Fraction(value)
    if exact.denominator <= 1024:
        return sympy.Rational(exact.numerator, exact.denominator)
    return sympy.Float(value)


def _map(fn):
    """An elementwise rule from a function of sympy scalars (NumPy broadcasts the operands)."""
    ufunc = np.frompyfunc(fn, 1, 1)
    binary = np.frompyfunc(fn, 2, 1)
    ternary = np.frompyfunc(fn, 3, 1)

    def rule(n: Node, *values):
        f = {1: ufunc, 2: binary, 3: ternary}[len(values)]
        return np.asarray(f(*values), dtype=object)
    return rule


def _truth(x):
    """A condition as sympy: relationals stay symbolic; numbers become true/false."""
    if isinstance(x, sympy.logic.boolalg.Boolean):
        return x
    return sympy.true if x != 0 else sympy.false


def _where(c, a, b):
    c = _truth(c)
    if c is sympy.true:
        return a
    if c is sympy.false:
        return b
    return sympy.Piecewise((a, c), (b, True))


def _cast_rule(n: Node, x):
    source, target = n.inputs[0].dtype, n.dtype
    if source == "bool" and target != "bool":
        return _map(lambda c: _where(c, sympy.Integer(1), sympy.Integer(0)))(n, x)
    if target == "bool":
        return _map(lambda v: _truth(sympy.Ne(v, 0)))(n, x)
    if target.startswith(("int", "uint")) and source.startswith("float"):
        return _map(lambda v: sympy.Integer(int(v)) if v.is_number else sympy.floor(v)
                    if v.is_nonnegative else sympy.sign(v) * sympy.floor(abs(v)))(n, x)
    return x   # float <-> float and int -> float keep the mathematical value


def _reduction(combine):
    def rule(n: Node, x):
        axes, keepdims = n.attrs
        moved = np.moveaxis(x, axes, tuple(range(-len(axes), 0)))
        flat = moved.reshape(moved.shape[:moved.ndim - len(axes)] + (-1,))
        out = np.empty(flat.shape[:-1], dtype=object)
        for index in np.ndindex(out.shape):
            out[index] = combine(*flat[index])
        if keepdims:
            out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
        return out
    return rule


def _constant_indices(n: Node, idx) -> np.ndarray:
    if not all(isinstance(v, (sympy.Integer, int)) for v in np.ravel(idx)):
        what = "a gather" if n.op == "take" else "the gradient of a gather"
        raise NotImplementedError(f"sympy form: {n.op} ({what}) with traced integer indices "
                                  "has no closed form; pass the indices as a constant")
    return np.asarray(idx, dtype=np.int64)


def _take_rule(n: Node, x, idx):
    return np.take(x, _constant_indices(n, idx), axis=n.attrs[0])


def _scatter_rule(n: Node, g, idx):
    return OPS["scatter_add"].numpy(g, _constant_indices(n, idx), n.attrs)


def _reference(n: Node, *values):
    """Shape ops: the op table's NumPy reference on object arrays moves the expressions."""
    return np.asarray(OPS[n.op].numpy(*values, n.attrs), dtype=object)


def _pow(a, b):
    return a ** b


# One entry per op. ``leaf`` ops are handled by the converter (they need the graph's symbols).
SYMPY_RULES = {
    "neg": _map(lambda a: -a),
    "exp": _map(sympy.exp),
    "log": _map(sympy.log),
    "log1p": _map(lambda a: sympy.log(1 + a)),
    "expm1": _map(lambda a: sympy.exp(a) - 1),
    "sqrt": _map(sympy.sqrt),
    "sin": _map(sympy.sin),
    "cos": _map(sympy.cos),
    "tan": _map(sympy.tan),
    "arcsin": _map(sympy.asin),
    "arccos": _map(sympy.acos),
    "arctan": _map(sympy.atan),
    "sinh": _map(sympy.sinh),
    "cosh": _map(sympy.cosh),
    "tanh": _map(sympy.tanh),
    "abs": _map(sympy.Abs),
    "sign": _map(sympy.sign),
    "logical_not": _map(lambda a: sympy.Not(_truth(a))),
    "cast": _cast_rule,
    "stop_gradient": _map(stop_gradient),
    "add": _map(lambda a, b: a + b),
    "sub": _map(lambda a, b: a - b),
    "mul": _map(lambda a, b: a * b),
    "div": _map(lambda a, b: a / b),
    "pow": _map(_pow),
    "arctan2": _map(sympy.atan2),
    # np.maximum gives ties to the first operand (and so does its derivative rule)
    "maximum": _map(lambda a, b: _where(sympy.Ge(a, b), a, b)),
    "minimum": _map(lambda a, b: _where(sympy.Le(a, b), a, b)),
    "lt": _map(sympy.Lt),
    "le": _map(sympy.Le),
    "gt": _map(sympy.Gt),
    "ge": _map(sympy.Ge),
    "eq": _map(sympy.Eq),
    "ne": _map(sympy.Ne),
    "logical_and": _map(lambda a, b: sympy.And(_truth(a), _truth(b))),
    "logical_or": _map(lambda a, b: sympy.Or(_truth(a), _truth(b))),
    "where": _map(_where),
    "sum": _reduction(lambda *xs: sympy.Add(*xs)),
    "prod": _reduction(lambda *xs: sympy.Mul(*xs)),
    "max": _reduction(sympy.Max),
    "min": _reduction(sympy.Min),
    "reshape": _reference,
    "transpose": _reference,
    "broadcast_to": lambda n, x: np.array(np.broadcast_to(x, n.shape), dtype=object),
    "getitem": _reference,
    "setitem": _reference,
    "index_add": _reference,
    "concatenate": _reference,
    "stack": _reference,
    "matmul": lambda n, a, b: _matmul(a, b),
    "take": _take_rule,
    "scatter_add": _scatter_rule,
}
LEAVES = ("arg", "const", "full", "array", "arange")


def _matmul(a, b):
    out = np.matmul(a, b)   # object matmul: sums of products, in NumPy's order
    return np.asarray(out, dtype=object)


def element_symbols(name: str, shape: tuple) -> np.ndarray:
    """``x`` (0-d), ``x_0, x_1, ...`` (1-d) or ``x_{i,j}`` (n-d): real symbols."""
    if shape == ():
        return np.array(sympy.Symbol(name, real=True), dtype=object)
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(shape):
        label = str(index[0]) if len(shape) == 1 else "{" + ",".join(map(str, index)) + "}"
        out[index] = sympy.Symbol(f"{name}_{label}", real=True)
    return out


def _leaf(n: Node, graph: Graph) -> np.ndarray:
    if n.op == "arg":
        return element_symbols(graph.params[n.attrs[0]], n.shape)
    if n.op == "const":
        return np.array(number(n.attrs[0], n.dtype), dtype=object)
    if n.op == "full":
        return np.full(n.shape, number(n.attrs[0], n.dtype), dtype=object)
    value = OPS[n.op].numpy(n.attrs)   # array constants and aranges: their elements
    return np.vectorize(lambda v: number(v, n.dtype), otypes=[object])(np.asarray(value))


def _check_size(n: Node, graph: Graph):
    if n.size > MAX_ELEMENTS:
        raise ValueError(f"sympy form of {graph.name}: a value of shape {n.shape} ({n.size} "
                         f"elements) is too large for an element-by-element form (at most "
                         f"{MAX_ELEMENTS}); call .sympy() with smaller example arrays")


def node_values(graph: Graph) -> dict:
    """Every node of the graph as an object array of sympy expressions."""
    values: dict[Node, np.ndarray] = {}
    for n in toposort(graph.outputs):
        _check_size(n, graph)
        if n.op in LEAVES:
            values[n] = _leaf(n, graph)
            continue
        rule = SYMPY_RULES.get(n.op)
        if rule is None:
            raise NotImplementedError(f"sympy form: no rule for the op {n.op!r} "
                                      "(symgrad.sympy_form.SYMPY_RULES)")
        values[n] = np.asarray(rule(n, *[values[i] for i in n.inputs]), dtype=object)
    return values


def as_sympy(value: np.ndarray):
    """0-d -> expression, 2-d -> ``sympy.Matrix``, else ``sympy.Array``."""
    value = np.asarray(value, dtype=object)
    if value.ndim == 0:
        return sympy.sympify(value[()])
    if value.ndim == 2:
        return sympy.Matrix(value.tolist())
    return sympy.Array(value.tolist(), value.shape)


def to_sympy(graph: Graph):
    """The graph's outputs as sympy, structured like its return value (tuples stay tuples)."""
    values = node_values(graph)
    outputs = [as_sympy(values[o]) for o in graph.outputs]

    def build(tree):
        if isinstance(tree, int):
            return outputs[tree]
        return tuple(build(t) for t in tree)
    return build(graph.out_tree)


def to_latex(graph: Graph) -> str:
    """LaTeX of :func:`to_sympy`; a tuple of results is a comma-separated list."""
    form = to_sympy(graph)
    if isinstance(form, tuple):
        return ",\\quad ".join(sympy.latex(f) for f in _flat(form))
    return sympy.latex(form)


def _flat(tree):
    out, stack = [], [tree]
    while stack:
        t = stack.pop()
        if isinstance(t, tuple):
            stack.extend(reversed(t))
        else:
            out.append(t)
    return out
