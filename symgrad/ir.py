"""The expression IR: immutable, hash-consed nodes and the graphs built from them.

A :class:`Node` is ``(op, inputs, dtype, shape, attrs)``. Nodes are created only through
:func:`make`, which runs the op's shape/dtype rule and interns the result, so an identical
node exists once: common subexpressions are shared by construction, equality is identity and
"nothing changed" is ``new is old``. Shapes are concrete tuples of ints (a trace is specialised
on shapes; the LLVM back end makes the sizes run-time parameters again).

Source locations and user variable names are *not* part of a node (that would defeat sharing);
they live in side tables on :class:`Graph`.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

FLOAT_DTYPES = ("float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


@dataclass(frozen=True)
class Loc:
    """Where a node came from in the user's source."""
    filename: str
    lineno: int
    col: int
    text: str  # the stripped source line

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"


@dataclass(frozen=True)
class OpDef:
    """One row of the op table (see ``symgrad.ops``).

    infer:  (inputs, attrs) -> (dtype, shape); raises TypeError/ValueError on bad operands.
    numpy:  (*input_values, attrs) -> value; the reference semantics.
    vjp:    (g, node) -> tuple of cotangents, one per input, ``None`` for a structural zero;
            ``None`` for the whole entry means the op is not differentiable (all zeros).
    jvp:    (tangents, node) -> the output's tangent, ``None`` for a structural zero; ``tangents``
            has one entry per input, ``None`` where that input's tangent is zero (forward mode).
    python: (input_sources, node) -> (source, precedence); the Python/NumPy spelling.
    kind:   'leaf', 'elementwise', 'reduction', 'shape', 'linalg' (used by back ends).
    names:  what the spelling refers to besides ``np``: name -> object, bound in the generated
            module's namespace when the op is used (``{"erf": scipy.special.erf}``).
    """
    name: str
    kind: str
    infer: Callable
    numpy: Callable
    python: Callable
    vjp: Callable | None = None
    jvp: Callable | None = None
    names: Mapping[str, object] = field(default_factory=dict)


OPS: dict[str, OpDef] = {}


def ops_of_kind(kind: str) -> frozenset:
    """The names of the registered ops of one ``OpDef.kind`` (read after ``symgrad.ops`` has
    registered them all)."""
    return frozenset(name for name, opdef in OPS.items() if opdef.kind == kind)


def register(opdef: OpDef) -> OpDef:
    assert opdef.name not in OPS, opdef.name
    OPS[opdef.name] = opdef
    return opdef


class ArrayConst:
    """A hashable wrapper for an array constant (closure arrays, literal lists)."""
    __slots__ = ("value", "_key")

    def __init__(self, value: np.ndarray):
        value = np.array(value)  # private copy: later mutation of the user's array cannot leak in
        value.setflags(write=False)
        self.value = value
        self._key = (value.dtype.str, value.shape, value.tobytes())

    def __eq__(self, other):
        return isinstance(other, ArrayConst) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return f"array{self.value.shape}"


@dataclass(frozen=True, slots=True)
class Slice:
    """A basic-index item that keeps an axis: its entries ``range(start, stop, step)``, with
    concrete bounds as ``slice.indices`` gives them (a negative ``stop`` with a negative
    ``step`` means "down to index 0"). See ``symgrad.index_ops``."""
    start: int
    stop: int
    step: int

    def __repr__(self):
        return f"Slice({self.start}, {self.stop}, {self.step})"


@dataclass(frozen=True, slots=True)
class NewAxis:
    """A basic-index item that inserts an axis of length 1 (``np.newaxis``)."""

    def __repr__(self):
        return "NEWAXIS"


NEWAXIS = NewAxis()


def _attr_key(attrs: tuple) -> tuple:
    # Floats compare 0.0 == -0.0 and nan != nan; key them by repr so interning is exact.
    return tuple((type(a), repr(a)) if isinstance(a, float) else a for a in attrs)


# The builders behind Node's operators, by name; ``symgrad.ops`` fills it when imported (the op
# table sits above this module, so Node cannot import its builders).
OPERATOR_NAMES = ("add", "sub", "mul", "truediv", "pow", "matmul", "neg", "abs", "lt", "le", "gt",
                  "ge", "iter", "len")
OPERATORS: dict[str, Callable] = {}


def _binary(name: str, reflected: bool = False):
    if reflected:
        def method(self, other):
            return OPERATORS[name](other, self)
    else:
        def method(self, other):
            return OPERATORS[name](self, other)
    method.__name__ = f"__{'r' if reflected else ''}{name}__"
    return method


def _unary(name: str):
    def method(self):
        return OPERATORS[name](self)
    method.__name__ = f"__{name}__"
    return method


class Node:
    """An immutable IR node. Build with :func:`make`, never directly.

    Its operators build nodes through ``OPERATORS`` (so derivative rules read as math:
    ``g * cos(x)``); ``==`` stays identity, because nodes are dict keys."""
    __slots__ = ("op", "inputs", "dtype", "shape", "attrs", "__weakref__")

    op: str
    inputs: tuple
    dtype: str
    shape: tuple
    attrs: tuple

    def __setattr__(self, name, value):
        raise AttributeError("IR nodes are immutable")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"<{self.op} {self.dtype}{list(self.shape)}>"

    __add__, __radd__ = _binary("add"), _binary("add", True)
    __sub__, __rsub__ = _binary("sub"), _binary("sub", True)
    __mul__, __rmul__ = _binary("mul"), _binary("mul", True)
    __truediv__, __rtruediv__ = _binary("truediv"), _binary("truediv", True)
    __pow__, __rpow__ = _binary("pow"), _binary("pow", True)
    __matmul__, __rmatmul__ = _binary("matmul"), _binary("matmul", True)
    __lt__, __le__, __gt__, __ge__ = _binary("lt"), _binary("le"), _binary("gt"), _binary("ge")
    __neg__, __abs__, __iter__, __len__ = _unary("neg"), _unary("abs"), _unary("iter"), _unary("len")
    __array_ufunc__ = None   # NumPy arrays defer to the node's reflected operators

    def __bool__(self):
        raise TypeError("the truth value of a traced array is data-dependent; use np.where")


_interned: "weakref.WeakValueDictionary[tuple, Node]" = weakref.WeakValueDictionary()


def make(op: str, inputs: Iterable[Node] = (), attrs: tuple = ()) -> Node:
    """The one constructor: run the shape rule, then return the interned node."""
    inputs = tuple(inputs)
    key = (op, inputs, _attr_key(attrs))
    node = _interned.get(key)
    if node is not None:
        return node
    dtype, shape = OPS[op].infer(inputs, attrs)
    node = object.__new__(Node)
    for name, value in (("op", op), ("inputs", inputs), ("dtype", dtype),
                        ("shape", tuple(shape)), ("attrs", attrs)):
        object.__setattr__(node, name, value)
    _interned[key] = node
    return node


def toposort(outputs: Iterable[Node], known=()) -> list[Node]:
    """Inputs before users, in a deterministic order (iterative DFS, input order). Nodes in
    ``known`` (and everything below them) are treated as already visited. (Two C-level
    membership tests: a set subclass with a Python ``__contains__`` made every visit a Python
    call, ~25% of toposort's time on a 16000-node gradient.)"""
    order: list[Node] = []
    done: set[Node] = set()
    for root in outputs:
        stack = [(root, 0)]
        while stack:
            node, i = stack.pop()
            if node in done or node in known:
                continue
            inputs = node.inputs
            if i < len(inputs):
                stack.append((node, i + 1))
                child = inputs[i]
                if child not in done and child not in known:
                    stack.append((child, 0))
            else:
                done.add(node)
                order.append(node)
    return order


def label_new(root: Node, table: dict, value, known=()) -> None:
    """Set ``table[n] = value`` for ``root`` and everything below it not labelled yet (nor in
    ``known``): how source locations and derivative origins reach the nodes a statement, a
    derivative rule or a rewrite created. Arguments and scalar constants stay unlabelled."""
    stack = [root]
    while stack:
        n = stack.pop()
        if n in table or n in known or n.op in ("arg", "const"):
            continue
        table[n] = value
        stack.extend(n.inputs)


def substitute(outputs: Iterable[Node], mapping: dict) -> list[Node]:
    """The same computation with some nodes replaced (rebuilt bottom-up, still interned)."""
    memo = dict(mapping)
    for node in toposort(outputs):
        if node not in memo:
            inputs = tuple(memo[i] for i in node.inputs)
            memo[node] = node if all(a is b for a, b in zip(inputs, node.inputs)) else \
                make(node.op, inputs, node.attrs)
    return [memo[o] for o in outputs]


def use_counts(outputs: Iterable[Node], order: list[Node] | None = None) -> dict[Node, int]:
    """Users of each node of the graph of ``outputs``, an output counting as one. ``order``:
    ``toposort(outputs)``, where the caller has it already."""
    counts: dict[Node, int] = {}
    outputs = list(outputs)
    for node in toposort(outputs) if order is None else order:
        counts.setdefault(node, 0)
        for child in node.inputs:
            counts[child] = counts.get(child, 0) + 1
    for out in outputs:
        counts[out] += 1
    return counts


@dataclass
class Graph:
    """A traced program: argument nodes, output nodes and side tables.

    ``params`` are the Python parameter names in order; ``inputs[i]`` is the ``arg`` node of
    parameter i, or ``None`` for a static (int/bool) parameter. ``out_tree`` says how outputs
    are returned: an int indexes ``outputs``, a tuple of trees is a Python tuple.
    ``names``/``locs`` map nodes to the user's variable names and source locations;
    ``grad_origin`` maps derivative nodes to the forward node whose rule produced them;
    ``stopped`` maps each ``stop_gradient`` node reverse mode passed to the cotangent that
    reached it (``None`` if none did): the derivative terms it removed (``f.grad.stopped()``).
    ``guards`` maps each ``while`` loop on data (its key, ``symgrad.guards``) to a bool node
    that is true when its cap of trips was too small (the results are then to be computed
    again with a larger cap); back ends run them as hidden extra outputs.
    ``in_tree`` is None when every parameter is one input; otherwise, for each Python
    parameter, its input index, or (a pytree argument) its tree (``symgrad.runtime``) whose
    leaves are input indices and ``StaticLeaf`` paths: ``params``/``inputs`` are then the
    flat leaves (``params_W`` for ``params['W']``), all a back end sees, and ``top_params``
    the Python parameter names.
    """
    name: str
    params: tuple
    inputs: tuple
    outputs: tuple
    out_tree: Any = 0
    names: dict = field(default_factory=dict)
    locs: dict = field(default_factory=dict)
    grad_origin: dict = field(default_factory=dict)
    filename: str = "<symgrad>"
    stopped: dict = field(default_factory=dict)
    in_tree: Any = None
    top_params: Any = None
    guards: dict = field(default_factory=dict)
    # constant array node -> the variable the traced function read it from ("closure variable
    # 'W'"), for the generated source's comments
    constants: dict = field(default_factory=dict)

    def nodes(self) -> list[Node]:
        return toposort(self.outputs)

    def derive(self, name: str, outputs, out_tree) -> "Graph":
        """A new graph over the same arguments, sharing copies of the side tables."""
        return Graph(name, self.params, self.inputs, tuple(outputs), out_tree, dict(self.names),
                     dict(self.locs), dict(self.grad_origin), self.filename, dict(self.stopped),
                     self.in_tree, self.top_params, dict(self.guards), self.constants)

    def rewritten(self, rebuild) -> "Graph":
        """This graph with its outputs and guards rebuilt by ``rebuild(roots, memo)`` (which
        fills ``memo``: old node -> new); rebuilt nodes inherit the old ones' names, locations
        and derivative origins. ``self`` when nothing changed."""
        memo: dict[Node, Node] = {}
        roots = list(self.outputs) + list(self.guards.values())   # guards: symgrad.guards
        outputs = rebuild(roots, memo)
        if all(a is b for a, b in zip(outputs, roots)):
            return self
        n_out = len(self.outputs)
        result = self.derive(self.name, outputs[:n_out], self.out_tree)
        result.guards = dict(zip(self.guards, outputs[n_out:]))
        for old, new in memo.items():
            if new is not old:
                for table in (result.names, result.locs, result.grad_origin):
                    if old in table:
                        table.setdefault(new, table[old])
        return result

    def listing(self) -> str:
        """A readable, deterministic listing: one line per node, ``%k = op(...)``; a loop or
        branch node is followed by its bodies, indented (``^k`` are a body's params)."""
        lines = [f"graph {self.name}({', '.join(self.params)}):"]
        self._list(self.outputs, {}, lines, "  ", [0])
        return "\n".join(lines)

    def _list(self, outputs, ids: dict, lines: list, indent: str, counter: list):
        order = toposort(outputs, known=ids)
        for n in order:   # one numbering through the nested bodies: every %k is unique
            ids[n] = f"%{counter[0]}"
            counter[0] += 1
        for n in order:
            args = ", ".join(ids[c] for c in n.inputs)
            attrs = ", ".join(_fmt_attr(a) for a in n.attrs if not hasattr(a, "results"))
            call = ", ".join(s for s in (args, attrs) if s)
            comment = []
            if n in self.names:
                comment.append(self.names[n])
            if n in self.locs:
                comment.append(f"line {self.locs[n].lineno}")
            note = f"    # {', '.join(comment)}" if comment else ""
            shape = "x".join(map(str, n.shape)) if n.shape else "scalar"
            lines.append(f"{indent}{ids[n]:>5} = {n.op}({call}) : {n.dtype}[{shape}]{note}")
            for body in (a for a in n.attrs if hasattr(a, "results")):
                inner = {p: f"^{k}" for k, p in enumerate(body.params)}
                inner.update((k, v) for k, v in ids.items() if v.startswith("%"))
                names = ", ".join(f"^{k}" + (f" {body.names[k]}" if k < len(body.names) and
                                             body.names[k] else "") for k in range(len(body.params)))
                lines.append(f"{indent}        body({names}):")
                self._list(body.results, inner, lines, indent + "        ", counter)
        lines.append(f"{indent}  return " + ", ".join(ids[o] for o in outputs))


def _fmt_attr(a: Any) -> str:
    if isinstance(a, slice):
        return f"{'' if a.start is None else a.start}:{'' if a.stop is None else a.stop}" + (
            "" if a.step is None else f":{a.step}")
    return repr(a)
