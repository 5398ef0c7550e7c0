"""A graph as mathematics: IR -> sympy expressions (and LaTeX).

Every node becomes a NumPy object array of sympy expressions, one per element (a scalar node is
a 0-d array), through one table keyed by op (:data:`SYMPY_RULES`). Scalar arguments are real
``Symbol``\\ s named like the parameters; array arguments are arrays of element symbols ``x_0,
x_1, ...`` (1-d) or ``x_{i,j}`` (2-d and up). Shape ops (reshape, transpose, indexing, stacking,
``@``, updates) need no rule of their own: the op table's NumPy reference runs them on the object
arrays. A result becomes a sympy expression (0-d), a ``sympy.Matrix`` (2-d) or a ``sympy.Array``.

Shapes are concrete in the IR, so in this element form a reduction is an ``Add`` (``Max``, ...) of
its elements; it is for small arrays (:data:`MAX_ELEMENTS`). Larger 1-d arrays of one length get
the symbolic-length form: elements ``x[i]``, ``0 <= i < n``, reductions ``Sum(..., (i, 0, n - 1))``
(see ``_SymbolicLength``). What has no closed form raises ``NotImplementedError`` naming the op
(a gather with traced indices, a max over ``n`` terms, an element shift such as ``x[1:]``).
``stop_gradient`` is kept as an unevaluated function whose derivative is zero, so ``sympy.diff``
of a function's form agrees with symgrad's derivative of it.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import sympy

from . import ops as _ops  # noqa: F401 - every op registered before LEAVES is read
from .ir import OPS, Graph, Node, ops_of_kind, toposort
from .regions import Body, loop_exit, straight_line
from .runtime import unflatten_tree

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


def _truth(x):
    """A condition as sympy: relationals stay symbolic; numbers become true/false; any other
    expression ``e`` is ``e != 0`` (symbolically: Python's ``!=`` would compare structure)."""
    if isinstance(x, sympy.logic.boolalg.Boolean):
        return x
    x = sympy.sympify(x)
    if x.is_number:
        return sympy.true if x != 0 else sympy.false
    return sympy.Ne(x, 0)


def _is_boolean(x) -> bool:
    return isinstance(x, (bool, np.bool_, sympy.logic.boolalg.Boolean))


def _where(c, a, b):
    c = _truth(c)
    if c is sympy.true:
        return a
    if c is sympy.false:
        return b
    if _is_boolean(a) and _is_boolean(b):   # a select of conditions is a condition (ITE)
        return sympy.ITE(c, _truth(a), _truth(b))
    return sympy.Piecewise((a, c), (b, True))


def _cast(n: Node, v):
    source, target = n.inputs[0].dtype, n.dtype
    if source == "bool" and target != "bool":
        return _where(v, sympy.Integer(1), sympy.Integer(0))
    if target == "bool":
        return _truth(sympy.Ne(v, 0))
    if target.startswith(("int", "uint")) and source.startswith("float"):   # truncation
        return sympy.Integer(int(v)) if v.is_number else sympy.sign(v) * sympy.floor(abs(v))
    return v   # float <-> float and int -> float keep the mathematical value


# Per-element meaning of every elementwise op: (node, *operand scalars) -> sympy scalar.
SCALAR = {
    "neg": lambda n, a: -a,
    "exp": lambda n, a: sympy.exp(a),
    "log": lambda n, a: sympy.log(a),
    "log1p": lambda n, a: sympy.log(1 + a),
    "expm1": lambda n, a: sympy.exp(a) - 1,
    "sqrt": lambda n, a: sympy.sqrt(a),
    "sin": lambda n, a: sympy.sin(a),
    "cos": lambda n, a: sympy.cos(a),
    "tan": lambda n, a: sympy.tan(a),
    "arcsin": lambda n, a: sympy.asin(a),
    "arccos": lambda n, a: sympy.acos(a),
    "arctan": lambda n, a: sympy.atan(a),
    "sinh": lambda n, a: sympy.sinh(a),
    "cosh": lambda n, a: sympy.cosh(a),
    "tanh": lambda n, a: sympy.tanh(a),
    "abs": lambda n, a: sympy.Abs(a),
    "sign": lambda n, a: sympy.sign(a),
    "logical_not": lambda n, a: sympy.Not(_truth(a)),
    "cast": _cast,
    "stop_gradient": lambda n, a: stop_gradient(a),
    "add": lambda n, a, b: a + b,
    "sub": lambda n, a, b: a - b,
    "mul": lambda n, a, b: a * b,
    "div": lambda n, a, b: a / b,
    "pow": lambda n, a, b: a ** b,
    "arctan2": lambda n, a, b: sympy.atan2(a, b),
    # sympy's Max/Min differentiate to Heaviside(x - y), which is 1/2 on a tie: the even
    # split symgrad's rule gives.
    "maximum": lambda n, a, b: sympy.Max(a, b),
    "minimum": lambda n, a, b: sympy.Min(a, b),
    "lt": lambda n, a, b: sympy.Lt(a, b),
    "le": lambda n, a, b: sympy.Le(a, b),
    "gt": lambda n, a, b: sympy.Gt(a, b),
    "ge": lambda n, a, b: sympy.Ge(a, b),
    "eq": lambda n, a, b: sympy.Eq(a, b),
    "ne": lambda n, a, b: sympy.Ne(a, b),
    "logical_and": lambda n, a, b: sympy.And(_truth(a), _truth(b)),
    "logical_or": lambda n, a, b: sympy.Or(_truth(a), _truth(b)),
    "where": lambda n, c, a, b: _where(c, a, b),
    "arcsinh": lambda n, a: sympy.asinh(a),
    "arccosh": lambda n, a: sympy.acosh(a),
    "arctanh": lambda n, a: sympy.atanh(a),
    "exp2": lambda n, a: 2 ** a,
    "log2": lambda n, a: sympy.log(a, 2),
    "log10": lambda n, a: sympy.log(a, 10),
    "cbrt": lambda n, a: sympy.real_root(a, 3),
    "erf": lambda n, a: sympy.erf(a),
    "erfc": lambda n, a: sympy.erfc(a),
    "lgamma": lambda n, a: sympy.loggamma(a),   # (symgrad's is log|gamma|: the same for a > 0)
    "gamma": lambda n, a: sympy.gamma(a),
    "floor": lambda n, a: sympy.floor(a),
    "ceil": lambda n, a: sympy.ceiling(a),
    "rint": lambda n, a: sympy.Function("rint")(a),   # round half to even: no sympy builtin
    "trunc": lambda n, a: sympy.sign(a) * sympy.floor(abs(a)),
    "hypot": lambda n, a, b: sympy.sqrt(a * a + b * b),
    "fmod": lambda n, a, b: a - b * sympy.sign(a / b) * sympy.floor(abs(a / b)),
}


def _elementwise(op: str):
    """The rule of an elementwise op on object arrays (NumPy broadcasts the operands)."""
    scalar = SCALAR[op]

    def rule(n: Node, *values):
        each = np.frompyfunc(lambda *xs: scalar(n, *xs), len(values), 1)
        return np.asarray(each(*values), dtype=object)
    return rule


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


# One entry per op. ``leaf`` ops are handled by the converter (they need the graph's symbols).
SYMPY_RULES = {
    **{op: _elementwise(op) for op in SCALAR},
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
    "custom_gradient": lambda n, value, *rest: value,   # the value (its rule is a derivative's)
}
LEAVES = ops_of_kind("leaf")


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


def digamma_argument(n: Node) -> Node | None:
    """``x`` where ``n`` is the node that ends ``ops.digamma(x)`` (a composition: its shift,
    series and reflection would print as a page of Piecewise), else None. Nodes are
    hash-consed, so rebuilding digamma of the candidate gives ``n`` itself exactly when it is
    one."""
    if n.op != "where" or n.inputs[0].op != "logical_and" or n.inputs[0].inputs[0].op != "lt":
        return None
    x = n.inputs[0].inputs[0].inputs[0]
    return x if _ops.digamma(x) is n else None


def node_values(graph: Graph) -> dict:
    """Every node of the graph as an object array of sympy expressions (the element form)."""
    values: dict[Node, np.ndarray] = {}
    for n in toposort(graph.outputs):
        if n.op in LEAVES:
            values[n] = _leaf(n, graph)
            continue
        x = digamma_argument(n)
        if x is not None:   # psi(x) = polygamma(0, x), sympy's derivative of loggamma
            values[n] = np.asarray(np.frompyfunc(lambda v: sympy.polygamma(0, v), 1, 1)(values[x]),
                                   dtype=object)
            continue
        rule = SYMPY_RULES.get(n.op)
        if rule is None:
            raise NotImplementedError(f"sympy form: no rule for the op {n.op!r} "
                                      "(symgrad.sympy_form.SYMPY_RULES)")
        values[n] = np.asarray(rule(n, *[values[i] for i in n.inputs]), dtype=object)
    return values


# ----------------------------------------------------------------------------------------------
# The symbolic-length form: for arrays too large to list, 1-d arrays of one length N become an
# element ``x[i]`` of an ``IndexedBase`` with ``0 <= i < n`` (``n`` a symbol), and reductions
# over them ``Sum``/``Product`` over ``i``. A value is a scalar expression (size-1 values) or an
# expression in ``i`` (length-N values); anything else raises, naming the op.

LENGTH = sympy.Symbol("n", integer=True, positive=True)
INDEX = sympy.Symbol("i", integer=True, nonnegative=True)


class _SymbolicLength:
    def __init__(self, graph: Graph):
        self.graph = graph
        lengths = {x.shape for x in graph.inputs if x is not None and x.size > 1}
        if len(lengths) != 1 or len(next(iter(lengths))) != 1:
            shapes = sorted(map(str, lengths))
            raise ValueError(f"sympy form of {graph.name}: arrays larger than {MAX_ELEMENTS} "
                             "elements have a symbolic-length form only when every array "
                             f"argument is 1-d of one length (got shapes {', '.join(shapes)}); "
                             "call .sympy() with smaller example arrays for the element form")
        ((self.N,),) = lengths
        self.bound = 0   # summation indices handed out

    def unsupported(self, n: Node, why: str):
        raise NotImplementedError(f"sympy form over a symbolic length (arrays of {self.N} "
                                  f"elements): {n.op} {why}; call .sympy() with at most "
                                  f"{MAX_ELEMENTS} elements for the element form")

    def kind(self, n: Node) -> str:
        if n.size == 1:
            return "scalar"
        if n.shape == (self.N,):
            return "indexed"
        self.unsupported(n, f"makes a value of shape {n.shape}")

    def leaf(self, n: Node):
        if n.op == "arg":
            name = self.graph.params[n.attrs[0]]
            if n.size == 1 and n.ndim == 0:
                return sympy.Symbol(name, real=True)
            if n.size == 1:
                return sympy.Symbol(f"{name}_0", real=True)
            return sympy.IndexedBase(name, real=True)[INDEX]
        if n.op in ("const", "full"):
            return number(n.attrs[0], n.dtype)
        if n.op == "arange":
            return number(n.attrs[0], n.dtype) + number(n.attrs[1], n.dtype) * INDEX
        self.unsupported(n, "(an array constant) has no element formula")

    def bound_index(self) -> sympy.Symbol:
        """A fresh summation index (j, k, l, j_1, ...): i stays the free element index."""
        k = self.bound
        self.bound += 1
        name = "jkl"[k % 3] + (f"_{k // 3}" if k >= 3 else "")
        return sympy.Symbol(name, integer=True, nonnegative=True)

    def reduce(self, n: Node, x):
        if self.kind(n.inputs[0]) == "scalar":
            return x
        if n.op not in ("sum", "prod"):
            self.unsupported(n, "(a max/min of n terms) has no closed form in sympy")
        j = self.bound_index()
        over = (j, 0, LENGTH - 1)
        return (sympy.Sum if n.op == "sum" else sympy.Product)(x.subs(INDEX, j), over)

    def value(self, n: Node, args):
        self.kind(n)
        x = digamma_argument(n)
        if x is not None:
            return sympy.polygamma(0, self.values[x])
        if n.op in SCALAR:
            return SCALAR[n.op](n, *args)
        if n.op in ("sum", "prod", "max", "min"):
            return self.reduce(n, args[0])
        if n.op in ("broadcast_to", "reshape") and self.kind(n.inputs[0]) in (
                "scalar", self.kind(n)):
            return args[0]   # a scalar stretched to length N, or the same N elements
        self.unsupported(n, "moves elements between positions")

    def run(self) -> dict:
        values = self.values = {}
        for n in toposort(self.graph.outputs):
            values[n] = self.leaf(n) if n.op in LEAVES else \
                self.value(n, [values[i] for i in n.inputs])
        return values


def _too_large(graph: Graph) -> bool:
    return any(n.size > MAX_ELEMENTS for n in toposort(graph.outputs))


def as_sympy(value: np.ndarray):
    """0-d -> expression, 2-d -> ``sympy.Matrix``, else ``sympy.Array``."""
    value = np.asarray(value, dtype=object)
    if value.ndim == 0:
        return sympy.sympify(value[()])
    if value.ndim == 2:
        return sympy.Matrix(value.tolist())
    return sympy.Array(value.tolist(), value.shape)


def _refuse_exits_on_data(graph: Graph):
    """A loop that stops on data has no closed form to show: a ``while`` on data runs as often
    as the values say (the IR's trip count is only a capacity, retraced when exceeded), and the
    formula of a ``break`` on data nests a condition per iteration (exponential in size)."""
    if graph.guards:
        (filename, line, _col), *_ = graph.guards
        raise NotImplementedError(f"a while loop on data ({filename}:{line}) has no closed form: "
                                  "how many times it runs depends on the values")
    stack = [graph.outputs]
    while stack:
        for n in toposort(stack.pop()):
            if n.op == "loop" and loop_exit(n) is not None and loop_exit(n)[0] == "until":
                raise NotImplementedError("a loop that breaks on data has no readable closed form "
                                          "(a nested condition per iteration)")
            stack.extend(body.results for body in n.attrs if isinstance(body, Body))


def to_sympy(graph: Graph):
    """The graph's outputs as sympy, structured like its return value (tuples stay tuples):
    element form for small arrays, else the symbolic-length form (an array output is then its
    element ``i`` of ``n``)."""
    _refuse_exits_on_data(graph)
    graph = straight_line(graph)   # mathematics has no loops: a loop is its unrolled formula
    if _too_large(graph):
        values = _SymbolicLength(graph).run()
        outputs = [sympy.sympify(values[o]) for o in graph.outputs]
    else:
        values = node_values(graph)
        outputs = [as_sympy(values[o]) for o in graph.outputs]
    return unflatten_tree(graph.out_tree, outputs)


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
