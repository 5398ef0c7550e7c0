"""The Python back end: IR -> readable, runnable NumPy source.

The code is what a person would write: the user's variable names survive, adjoints are
``b_<name>``, temporaries (``t1``, ``t2``, ...) exist only for values used more than once,
parentheses are minimal, and each block carries a comment citing the user's line it came from.
Output is deterministic (nodes are visited in topological order, names come from one Namer).
"""
from __future__ import annotations

import math

import keyword
import os
import re

import numpy as np

from . import emit_regions, spelling as sp
from .guards import CAPS, INITIAL_CAP, error_for, is_error
from .ir import OPS, Graph, Node, use_counts, toposort
from .ops import _index_text, full as full_node
from .runtime import DictTree, ListTree

# Python's own float arithmetic differs from NumPy's where these ops meet two Python numbers
# (1.0 / 0.0 raises, (-8.0) ** 0.5 is complex, 1e200 ** 2.0 raises OverflowError; NumPy gives
# inf, nan, inf): between two of them the ops are spelled as NumPy calls.
_NUMPY_SCALAR_CALLS = {"div": "np.divide", "pow": "np.power"}
# Ops that, on Python numbers, give a Python number (IEEE arithmetic, the same as NumPy's).
_PYTHON_ARITHMETIC = ("add", "sub", "mul", "neg", "stop_gradient")

# Ops whose result is a fresh array the generated code may update in place.
_FRESH_KINDS = ("elementwise", "reduction", "linalg")
_FRESH_OPS = ("full", "setitem", "index_add", "concatenate", "stack", "cast")
# Calls nested deeper than this inside one expression get a name: Python's parser refuses
# about 200 nested parentheses, and a person would not read 16.
MAX_NESTING = 16


def _nonzero_divisor(n: Node) -> bool:
    """``a / c`` with a constant c != 0: Python's division raises only for a zero divisor (it
    overflows to inf like NumPy), so it is spelled ``/`` (``scale / 2.0``)."""
    if n.op != "div":
        return False
    divisor = n.inputs[1]
    return divisor.op == "const" and divisor.attrs[0] != 0


def spelling_names() -> set[str]:
    """Every name an op's spelling may bind in the generated namespace (``OpDef.names``):
    never handed out to a variable. Two ops binding one name to different objects, or to
    ``np``, would make the source mean something else, so that is an error."""
    owner: dict[str, tuple] = {}
    for opdef in OPS.values():
        for name, obj in opdef.names.items():
            if name == "np" or not name.isidentifier() or keyword.iskeyword(name) or \
                    (name in owner and owner[name][1] is not obj):
                other = owner.get(name, ("the emitter",))[0]
                raise ValueError(f"op {opdef.name!r} binds {name!r} in the generated namespace, "
                                 f"which {other!r} already binds to something else")
            owner[name] = (opdef.name, obj)
    return set(owner)


class Namer:
    """Hands out unique names: the user's where possible, ``t1, t2, ...`` for temporaries."""

    def __init__(self, reserved):
        self.used = set(reserved) | set(keyword.kwlist) | {"np"} | spelling_names()
        self.temps = 0
        self.suffix: dict[str, int] = {}   # hint -> the last suffix tried (linear, not k^2)

    def name(self, hint: str | None) -> str:
        if hint is not None and not hint.isidentifier():   # a hidden variable (``<trip>``)
            hint = re.sub(r"\W+", "_", hint).strip("_") or None
            hint = None if hint is None or hint[0].isdigit() else hint
        if hint is None:
            while True:
                self.temps += 1
                if f"t{self.temps}" not in self.used:
                    hint = f"t{self.temps}"
                    break
        name, k = hint, self.suffix.get(hint, 0)
        while name in self.used:
            k += 1
            name = f"{hint}_{k}"
        self.suffix[hint] = k
        self.used.add(name)
        return name


class _Emitter:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.params = [p for p in graph.params]
        self.namer = Namer(self.params)
        self.expr: dict[Node, tuple[str, int]] = {}
        self.nesting: dict[Node, int] = {}   # inlined expression -> how deeply it nests
        self.var: dict[Node, str] = {}
        self.lines: list[str] = []
        self.namespace: dict = {"np": np}
        self.last_comment = None
        self.arg_shapes = {}   # shape -> (the first argument of that shape, its dtype)
        for i, x in enumerate(graph.inputs):
            if x is not None and x.ndim:
                self.arg_shapes.setdefault(x.shape, (graph.params[i], x.dtype))
        self.python_numbers: set[Node] = set()   # values that may be Python numbers at run time
        self.region_vars: dict[Node, list] = {}   # loop/cond -> the variables of its results

    # -- spelling helpers --------------------------------------------------------------------
    def shape_text(self, shape) -> str:
        for s, (name, _) in self.arg_shapes.items():
            if s == shape:
                return f"{name}.shape"
        return sp.shape_text(shape)

    def spell_full(self, n: Node) -> tuple[str, int]:
        value, dtype, shape = n.attrs
        like = self.arg_shapes.get(shape)
        signed_zero = isinstance(value, float) and math.copysign(1.0, value) < 0 and value == 0
        word = None if isinstance(value, bool) or signed_zero else {0: "zeros", 1: "ones"}.get(value)
        if like and like[1] == dtype:
            if word:
                return f"np.{word}_like({like[0]})", sp.ATOM
            return f"np.full_like({like[0]}, {sp.number(value)[0]})", sp.ATOM
        tail = "" if dtype == "float64" else f", dtype={sp.dtype_name(dtype)}"
        if word:
            return f"np.{word}({self.shape_text(shape)}{tail})", sp.ATOM
        return f"np.full({self.shape_text(shape)}, {sp.number(value)[0]}{tail})", sp.ATOM

    def comment_for(self, n: Node) -> str | None:
        loc, prefix = self.graph.locs.get(n), ""
        if loc is None:
            origin = self.graph.grad_origin.get(n)
            loc, prefix = (self.graph.locs.get(origin) if origin is not None else None), "grad of "
        if loc is None:
            return None
        # Lines of inlined helpers in other files name their file.
        where = "" if loc.filename == self.graph.filename else f"{os.path.basename(loc.filename)} "
        return f"# {prefix}{where}line {loc.lineno}: {loc.text}"

    def statement(self, n: Node, text: str, name: str | None = None) -> str:
        comment = self.comment_for(n)
        if comment is not None and comment != self.last_comment:
            self.lines.append(comment)
            self.last_comment = comment
        var = name or self.namer.name(self.graph.names.get(n))
        self.lines.append(f"{var} = {text}")
        self.var[n] = var
        self.expr[n] = (var, sp.ATOM)
        return var

    # -- the walk ----------------------------------------------------------------------------
    def run(self, header=()) -> tuple[str, dict]:
        g = self.graph
        roots = list(g.outputs) + list(g.guards.values())   # guards: symgrad.guards
        self.counts, self.products = display_counts(roots)
        self.outputs = set(g.outputs)
        for n in _schedule(g, roots):
            STATEMENTS.get(n.op, _Emitter.expression)(self, n)
        self.guard_statements()
        ret = self.render_tree(g.out_tree, top=True)
        body = "\n".join("    " + line for line in [*header, *self.lines, f"return {ret}"])
        source = f"def {function_name(g)}({', '.join(self.params)}):\n{body}\n"
        return source, self.namespace

    def guard_statements(self):
        """A while loop on data ran at most its cap of trips (``symgrad.guards``): the source
        says so where that was too few, rather than return a wrong number."""
        for key, node in self.graph.guards.items():
            self.lines.append(f"if {self.expr[node][0]}:")
            if is_error(key):   # NumPy's error (inv of a singular matrix, ...)
                error = error_for(key)
                self.lines.append(f"    raise np.linalg.{type(error).__name__}({str(error)!r})")
                continue
            cap = CAPS.get(key, INITIAL_CAP)
            message = (f"the while loop at line {key[1]} needs more than {cap} trips here "
                       "(this code stops there; the symgrad Function retries with a larger "
                       "cap)")
            self.lines.append(f"    raise RuntimeError({message!r})")

    def expression(self, n: Node):
        """An op spelled as an expression: inlined into its consumer, or named when it is
        used twice, named by the user, or nested too deeply."""
        g = self.graph
        args = [self.expr[i] for i in n.inputs]
        own = EMITTER_SPELLINGS.get(n.op)
        text = own(self, n) if own is not None else self.spell(n, args)
        if n.op in ALWAYS_INLINE:
            self.expr[n] = text
            return
        named = n in g.names and n.op != "full"
        depth = 1 + max((self.nesting.get(i, 0) for i in n.inputs), default=0)
        if self.counts[n] > 1 or named or (n in self.outputs and n in g.names) or depth > MAX_NESTING:
            self.statement(n, text[0])
        else:
            self.expr[n] = text
            self.nesting[n] = depth

    def bind_argument(self, n: Node):
        self.expr[n] = (n.attrs[1], sp.ATOM)
        if n.ndim == 0:   # a float argument may be a Python float
            self.python_numbers.add(n)

    def bind_array(self, n: Node):
        """A constant array: spelled where it is small, so that the source runs as shown (an
        array of one repeated number as ``np.zeros(3)``, others as an exact ``np.array([...])``
        literal); a larger one is a name bound in the namespace beside the source (sg.export
        writes it out), and a comment says what it holds and where it comes from."""
        value = n.attrs[0].value
        if value.size and value.dtype.kind in "fiub" and np.all(value == value.flat[0]) and \
                np.all(np.signbit(value) == np.signbit(value.flat[0])):   # -0.0 is not 0.0
            first = value.flat[0].item()
            self.expr[n] = self.spell_full(full_node(value.shape, first, value.dtype.name))
            return
        eye = _scaled_identity(value)
        if eye is not None:
            self.expr[n] = eye
            return
        if value.size <= sp.ARRAY_LITERAL_LIMIT:
            self.expr[n] = (sp.array_literal(value), sp.ATOM)
            return
        name = self.namer.name(self.graph.names.get(n, "const_array"))
        self.namespace[name] = value
        self.expr[n] = (name, sp.ATOM)
        self.lines.append(f"# {name}: {self.constant_origin(n)}, a {value.dtype.name} array of "
                          f"shape {value.shape} (too large to print: bound beside this source; "
                          "sg.export writes it out)")

    def constant_origin(self, n: Node) -> str:
        """Where a constant array bound by name comes from, for the comment above its use."""
        origin = self.graph.constants.get(n)
        if origin is not None:
            return f"{origin} when traced"
        loc = self.graph.locs.get(n)
        return f"computed while tracing line {loc.lineno}" if loc is not None else "a constant"

    def spell(self, n: Node, args) -> tuple[str, int]:
        """The op table's spelling, except where Python numbers would not follow NumPy."""
        python_operands = all(i in self.python_numbers for i in n.inputs)
        if n.op == "const" or (python_operands and n.op in _PYTHON_ARITHMETIC):
            self.python_numbers.add(n)
        if python_operands and n.op in _NUMPY_SCALAR_CALLS and not _nonzero_divisor(n):
            return sp.call(_NUMPY_SCALAR_CALLS[n.op])(args, n)
        opdef = OPS[n.op]
        if opdef.python is None:
            raise NotImplementedError(f"op {n.op!r} has no spelling on target='python' (no "
                                      "OpDef.python and no entry in symgrad.emit_python."
                                      "STATEMENTS)")
        self.namespace.update(opdef.names)   # only what the source uses (spelling_names)
        return opdef.python(args, n)

    def update_statement(self, n: Node):
        """``y[i] = v`` / ``y[i] += v`` on a private copy (never on an argument's array)."""
        base, value = n.inputs
        hint = self.graph.names.get(n)
        # A base used only here whose value is a new array (not a view, not an argument) can
        # be updated in place: by its own variable, or named now (y = <new array>; y[i] += v).
        private = (self.counts[base] == 1 and base.ndim > 0 and base.op != "stop_gradient" and
                   (OPS[base.op].kind in _FRESH_KINDS or base.op in _FRESH_OPS))
        if private and base in self.var:
            var = self.var[base]
        elif private and base.op != "full":
            var = self.statement(base, self.expr[base][0], self.namer.name(hint))
        elif base.op == "full" and base.ndim > 0:
            var = self.statement(n, self.spell_full(base)[0], self.namer.name(hint))
        else:
            var = self.statement(n, f"np.array({self.expr[base][0]})", self.namer.name(hint))
        index = _index_text(n.attrs[0], base.shape)
        symbol = "+=" if n.op == "index_add" else "="
        self.lines.append(f"{var}[{index}] {symbol} {self.expr[value][0]}")
        self.var[n] = var
        self.expr[n] = (var, sp.ATOM)

    def scatter_statement(self, n: Node):
        """The gradient of a gather: ``t = np.zeros(...); np.add.at(t, (..., idx), g)``."""
        g, idx = n.inputs
        axis, _ = n.attrs
        var = self.statement(n, self.spell_full(full_node(n.shape, 0, n.dtype))[0])
        where = ", ".join(["slice(None)"] * axis + [self.expr[idx][0]])
        self.lines.append(f"np.add.at({var}, ({where}{',' if axis == 0 else ''}), {self.expr[g][0]})")

    def render_tree(self, tree, top=False) -> str:
        """The returned value, shaped as ``out_tree``: ``return a, (b,)``. Only a tuple of two
        or more items may drop its parentheses at the top: ``return b_x`` would hand back the
        bare element of a 1-tuple, and ``return`` alone None for an empty one."""
        if isinstance(tree, int):
            return self.expr[self.graph.outputs[tree]][0]
        items = [self.render_tree(t) for t in tree]
        if type(tree) is ListTree:
            return "[" + ", ".join(items) + "]"
        if type(tree) is DictTree and all(type(k) in (str, int) for k in tree.keys):
            return "{" + ", ".join(f"{k!r}: {item}" for k, item in zip(tree.keys, items)) + "}"
        if top and len(items) > 1:
            return ", ".join(items)
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


# op -> the emitter's own statement(s) for it, in place of an expression: leaves bound to names,
# and the updates NumPy spells as statements (``y[i] += v``, ``np.add.at``).
STATEMENTS = {
    "arg": _Emitter.bind_argument,
    "array": _Emitter.bind_array,
    "setitem": _Emitter.update_statement,
    "index_add": _Emitter.update_statement,
    "scatter_add": _Emitter.scatter_statement,
    "loop": emit_regions.loop_statement,
    "cond": emit_regions.cond_statement,
    "remat": emit_regions.remat_statement,
    "proj": emit_regions.proj_expression,
}
def _scaled_identity(value) -> tuple[str, int] | None:
    """``np.eye(n)`` or ``c * np.eye(n)`` (c > 0, so the zeros keep their sign) when a float
    constant is exactly that, at any size; else None."""
    if value.ndim != 2 or value.shape[0] != value.shape[1] or value.shape[0] < 2 or \
            value.dtype.kind != "f":
        return None
    c = value[0, 0]
    eye = np.eye(value.shape[0], dtype=value.dtype)
    if not (np.isfinite(c) and c > 0) or not np.array_equal(value, c * eye) or np.signbit(value).any():
        return None
    tail = "" if value.dtype == np.float64 else f", dtype={sp.dtype_name(value.dtype.name)}"
    text = f"np.eye({value.shape[0]}{tail})"
    return (text, sp.ATOM) if c == 1 else (f"{sp.number(c.item())[0]} * {text}", sp.MUL)


def _vector(x: Node, axis: int) -> Node | None:
    """The 1-d array a matmul operand ``x`` is made of, when ``x`` is that vector as a column
    (``axis`` -1: shape (k, 1)) or a row (``axis`` -2: shape (1, k)); else None."""
    if x.ndim != 2 or x.shape[axis] != 1:
        return None
    if x.op == "transpose" and x.attrs[0] == (1, 0):
        return _vector(x.inputs[0], -1 - axis)
    v = x.inputs[0] if x.op == "reshape" else None
    return v if v is not None and v.ndim == 1 else None


def _columns(x: Node, counts, operands: list, depth: int = 0):
    """``x`` (shape (..., n, 1)) spelled without its last axis, when it is a product by a
    column vector (``A @ v``) or a sum/difference of such products used only here: a tree
    ``(node, subtrees)`` whose leaves index ``operands``; else None."""
    if x.op == "matmul" and counts[x] == 1 and x.inputs[1].ndim == 2:
        v = _vector(x.inputs[1], -1)
        if v is None:
            return None
        operands += [x.inputs[0], v]
        return x, (len(operands) - 2, len(operands) - 1)
    if x.op in ("add", "sub") and counts[x] == 1 and depth < MAX_NESTING and \
            all(i.shape == x.shape for i in x.inputs):
        terms = [_columns(i, counts, operands, depth + 1) for i in x.inputs]
        return None if None in terms else (x, tuple(terms))
    return None


def _numpy_product(n: Node, counts) -> tuple | None:
    """How NumPy spells ``n`` when it is made of products with a 1-d operand (``A @ v``,
    ``u @ B``, ``u @ v``, ``np.outer(u, v)``, ``A @ v + B @ w``), which the IR writes as 2-d
    matmuls between reshapes: ``(spelling tree, operands)``, or None."""
    if n.op == "matmul" and n.ndim == 2:    # a column times a row: the outer product
        u, v = _vector(n.inputs[0], -1), _vector(n.inputs[1], -2)
        return ((None, (0, 1)), (u, v)) if u is not None and v is not None else None
    if n.op != "reshape" or n.inputs[0].ndim < 2:
        return None
    x, operands = n.inputs[0], []
    if n.shape == x.shape[:-1]:
        tree = _columns(x, counts, operands)
        return None if tree is None else (tree, tuple(operands))
    u = _vector(x.inputs[0], -2) if x.op == "matmul" and x.inputs[0].ndim == 2 else None
    b = x.inputs[1] if u is not None else None
    v = _vector(b, -1) if u is not None and b.ndim == 2 else None   # u @ v: a number
    if u is None or counts[x] != 1 or n.shape != x.shape[:-2] + x.shape[-1:] * (v is None):
        return None
    return (x, (0, 1)), (u, b if v is None else v)


def _spell_tree(tree, texts):
    node, subtrees = tree
    args = [texts[t] if isinstance(t, int) else _spell_tree(t, texts) for t in subtrees]
    return sp.call("np.outer")(args, node) if node is None else OPS[node.op].python(args, node)


def display_counts(roots) -> tuple[dict, dict]:
    """Uses of each node as the source spells them, and the products it spells as NumPy does
    (node -> (spelling, operands)): a product with a 1-d operand reads the vector itself
    (``W @ x``), not the reshapes the IR puts around it, which then need no name."""
    counts = use_counts(roots)
    products = {}
    for n in toposort(roots):
        product = _numpy_product(n, counts)
        if product is None:
            continue
        products[n] = product
        for x in product[1]:
            counts[x] += 1
        released = list(n.inputs)   # what n no longer reads, and what only they read
        while released:
            x = released.pop()
            counts[x] -= 1
            if counts[x] == 0:
                released.extend(x.inputs)
    return counts, products


def spell_product(em, n: Node) -> tuple[str, int]:
    product = em.products.get(n)
    if product is None:
        return em.spell(n, [em.expr[i] for i in n.inputs])
    tree, operands = product
    return _spell_tree(tree, [em.expr[x] for x in operands])


# op -> a spelling the emitter gives instead of the op table's (``full`` reads the arguments'
# shapes: ``np.zeros_like(x)``; products with a vector spelled as NumPy does).
EMITTER_SPELLINGS = {"full": _Emitter.spell_full, "reshape": spell_product,
                     "matmul": spell_product}
# Ops spelled where they are used and never given a name (a number; the value itself).
ALWAYS_INLINE = ("const", "stop_gradient")


def function_name(graph: Graph) -> str:
    """A valid identifier for the generated function (``grad_<lambda>`` -> ``grad_lambda``)."""
    name = re.sub(r"\W", "", graph.name.replace("<", "").replace(">", "")) or "f"
    if keyword.iskeyword(name) or name[0].isdigit():
        name = f"{name}_"
    return name


def _schedule(graph: Graph, roots) -> list[Node]:
    """Topological order with the forward computation first, then the derivative: a node is
    forward when neither it nor anything it depends on was created by autodiff."""
    order = toposort(roots)
    forward: dict[Node, bool] = {}
    for n in order:
        forward[n] = (n in graph.locs or not n.inputs) and all(forward[i] for i in n.inputs)
    return [n for n in order if forward[n]] + [n for n in order if not forward[n]]


def emit(graph: Graph, header=()) -> tuple[str, dict]:
    """Source text of ``graph`` as a Python function, and the namespace it needs; ``header``:
    lines to begin its body with (``symgrad.source_contract``: what it was generated for)."""
    return _Emitter(graph).run(header)


def compile_python(graph: Graph):
    """Execute the generated source: the ``target="python"`` back end runs exactly this, less
    the argument checks ``.source`` begins with (``symgrad.source_contract``): it is called
    only once the API matched the exact signature, dtypes, shapes and static values."""
    source, namespace = emit(graph)
    code = compile(source, f"<symgrad {graph.name}>", "exec")
    exec(code, namespace)
    return namespace[function_name(graph)], source
