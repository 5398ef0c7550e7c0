"""The C back end: IR -> a self-contained C99 function (libm only), for ``sg.export(f, "f.c")``.

Calling convention (stated in the generated header too): sizes are *baked* for the exported
signature. Each array argument is a pointer to contiguous, row-major (C order) elements of its
dtype; each 0-d argument is passed by value; static (int/bool) arguments are baked in and do not
appear. Every output is a pointer the caller provides (contiguous, one element for a 0-d
output). The function returns 0, or 1 if a temporary could not be allocated.

Generation is node by node through one table keyed by op (:data:`C_ELEMENTWISE` for the
per-element ops; reductions, ``@`` and updates are loop nests of their own): an elementwise or
view node used once at its own shape is inlined into its consumer's loop, so chains of
elementwise work (and a reduction of them) fuse into one loop, as in the CPU back end. Other
nodes get a temporary array (``malloc``) or a local scalar. Comments cite the user's line.

Why this module is long (~700 lines): it does one job, printing C, and most of it is the one
emitter class whose loop-nest writers (reductions, ``@``, updates, fused elementwise loops)
share its naming, temporaries and indentation state; splitting them apart would thread that
state through every call.
"""
from __future__ import annotations

import math
import os
import re

import numpy as np

from .emit_python import Namer, _schedule, function_name
from . import ops as _ops  # noqa: F401 - every op registered before LEAVES is read
from .ir import OPS, Graph, NewAxis, Node, Slice, ops_of_kind, toposort, use_counts
from .regions import EXPANDED, straight_line

C_TYPES = {"float64": "double", "float32": "float", "bool": "bool", "int8": "int8_t",
           "int16": "int16_t", "int32": "int32_t", "int64": "int64_t", "uint8": "uint8_t",
           "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t"}
C_KEYWORDS = set("""auto break case char const continue default do double else enum extern
float for goto if inline int long register restrict return short signed sizeof static struct
switch typedef union unsigned void volatile while bool true false main NAN INFINITY""".split())

# libm functions by op (float32 uses the C99 ``f``-suffixed variants).
_LIBM = {"exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1", "sqrt": "sqrt",
         "sin": "sin", "cos": "cos", "tan": "tan", "arcsin": "asin", "arccos": "acos",
         "arctan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "arctan2": "atan2",
         "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "exp2": "exp2", "log2": "log2",
         "log10": "log10", "cbrt": "cbrt", "erf": "erf", "erfc": "erfc", "hypot": "hypot",
         "fmod": "fmod", "floor": "floor", "ceil": "ceil", "rint": "rint", "trunc": "trunc",
         "lgamma": "lgamma", "gamma": "tgamma"}   # (C99's lgamma writes signgam: one thread)

# Helpers a C compiler does not have, emitted only when used: {T} is the C type, {S} its suffix.
_HELPERS = {
    "sign_float": "static {T} sg_sign_{S}({T} x) {{ return x > 0 ? 1 : x < 0 ? -1 : x == 0 ? 0 : x; }}",
    "sign_int": "static {T} sg_sign_{S}({T} x) {{ return (x > 0) - (x < 0); }}",
    "abs_int": "static {T} sg_abs_{S}({T} x) {{ return x < 0 ? -x : x; }}",
    # np.maximum / np.minimum propagate NaN (C's fmax does not); ties give the first operand
    # (a != a: NaN wins, as in NumPy; only floats have one, and gcc rejects it on integers)
    "maximum": "static {T} sg_maximum_{S}({T} a, {T} b) {{ return (a >= b{NAN}) ? a : b; }}",
    "minimum": "static {T} sg_minimum_{S}({T} a, {T} b) {{ return (a <= b{NAN}) ? a : b; }}",
    "ipow": "static {T} sg_ipow_{S}({T} a, {T} b) {{ {T} r = 1; while (b > 0) {{ if (b & 1) r *= a;"
            " a *= a; b >>= 1; }} return r; }}",
}


def _suffix(dtype: str) -> str:
    return {"float64": "f64", "float32": "f32"}.get(dtype, dtype)


def c_number(value, dtype: str) -> str:
    """A C literal of exactly this value and dtype."""
    if dtype == "bool":
        return "true" if value else "false"
    if dtype.startswith(("int", "uint")):
        if dtype == "int64" and int(value) == -2 ** 63:
            return "INT64_MIN"
        text = str(int(value)) + ("u" if dtype.startswith("uint") else "") + (
            "LL" if dtype in ("int64", "uint64") else "")
    else:
        value = float(value)
        if math.isnan(value):
            return "NAN"
        if math.isinf(value):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        # repr round-trips the double exactly; a float32 value is exactly a double, and the
        # nearest float to that decimal is the value itself
        text = repr(float(np.float32(value))) + "f" if dtype == "float32" else repr(value)
    return f"({text})" if text.startswith("-") else text


def _strides(shape) -> list[int]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return list(reversed(strides))


def flat_index(idx: list[str], shape) -> str:
    """``i0 * s0 + i1 * s1 + ...`` for contiguous C-order storage of ``shape``."""
    terms = []
    for i, s, d in zip(idx, _strides(shape), shape):
        if d == 1 or i == "0":
            continue
        terms.append(i if s == 1 else f"{_p(i)} * {s}")
    return " + ".join(terms) or "0"


_ATOM = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\(\*\w+\)")


def _one_group(text: str, start: int) -> bool:
    """``text[start]`` opens a bracket that closes at the very end of ``text``."""
    depth = 0
    for k in range(start, len(text)):
        if text[k] in "([":
            depth += 1
        elif text[k] in ")]":
            depth -= 1
        if depth == 0:
            return k == len(text) - 1
    return False


def _p(text: str) -> str:
    """Parenthesised unless atomic: a name, a number, a call, an element, a group."""
    if _ATOM.fullmatch(text):
        return text
    head = re.match(r"[A-Za-z_]\w*", text)
    start = head.end() if head else 0
    if start < len(text) and text[start] in "([" and _one_group(text, start):
        return text
    return f"({text})"


def _align(idx: list[str], out_shape, in_shape) -> list[str]:
    """NumPy broadcasting: the trailing axes, index 0 on stretched length-1 axes."""
    lead = len(out_shape) - len(in_shape)
    return [("0" if d == 1 else i) for i, d in zip(idx[lead:], in_shape)]


def _unravel(flat: str, shape) -> list[str]:
    out = []
    for s, d in zip(_strides(shape), shape):
        if d == 1:
            out.append("0")
            continue
        q = flat if s == 1 else f"{_p(flat)} / {s}"
        out.append(q if s * d >= math.prod(shape) else f"{_p(q)} % {d}")
    return out


class ExportError(NotImplementedError):
    """An op or a signature the C back end cannot express."""


# ----------------------------------------------------------------------------------------------
# Per-element ops: (emitter, node, operand expressions) -> C expression.

def _libm(op):
    def rule(em, n, a):
        name = _LIBM[op] + ("f" if n.dtype == "float32" else "")
        return f"{name}({', '.join(a)})"
    return rule


def _infix(symbol):
    return lambda em, n, a: f"{_p(a[0])} {symbol} {_p(a[1])}"


def _helper(kind, op_of=lambda n: n.dtype):
    def rule(em, n, a):
        dtype = op_of(n)
        em.use_helper(kind, dtype)
        name = {"sign_float": "sign", "sign_int": "sign", "abs_int": "abs"}.get(kind, kind)
        return f"sg_{name}_{_suffix(dtype)}({', '.join(a)})"
    return rule


def _abs(em, n, a):
    if n.dtype.startswith("float"):
        return _libm_named("fabs")(em, n, a)
    if n.dtype.startswith("uint") or n.dtype == "bool":
        return a[0]
    return _helper("abs_int")(em, n, a)


def _libm_named(name):
    def rule(em, n, a):
        return f"{name}{'f' if n.dtype == 'float32' else ''}({', '.join(a)})"
    return rule


def _sign(em, n, a):
    return _helper("sign_float" if n.dtype.startswith("float") else "sign_int")(em, n, a)


def _pow(em, n, a):
    if n.dtype.startswith("float"):
        return _libm_named("pow")(em, n, a)
    return _helper("ipow")(em, n, a)


def _cast(em, n, a):
    source = n.inputs[0].dtype
    if n.dtype == "bool":
        return f"({_p(a[0])} != 0)"
    if source == "bool":
        return f"({_p(a[0])} ? ({C_TYPES[n.dtype]})1 : ({C_TYPES[n.dtype]})0)"
    return f"({C_TYPES[n.dtype]}){_p(a[0])}"


def _neg(em, n, a):
    return f"-{_p(a[0])}"


C_ELEMENTWISE = {
    **{op: _libm(op) for op in _LIBM},
    "neg": _neg,
    "abs": _abs,
    "sign": _sign,
    "logical_not": lambda em, n, a: f"!{_p(a[0])}",
    "cast": _cast,
    "stop_gradient": lambda em, n, a: a[0],
    "custom_gradient": lambda em, n, a: a[0],   # its value (lowerable removes it before this)
    "add": _infix("+"),
    "sub": _infix("-"),
    "mul": _infix("*"),
    "div": _infix("/"),
    "pow": _pow,
    "maximum": _helper("maximum"),
    "minimum": _helper("minimum"),
    "lt": _infix("<"), "le": _infix("<="), "gt": _infix(">"), "ge": _infix(">="),
    "eq": _infix("=="), "ne": _infix("!="),
    "logical_and": _infix("&&"), "logical_or": _infix("||"),
    "where": lambda em, n, a: f"{_p(a[0])} ? {_p(a[1])} : {_p(a[2])}",
}
# Ops spelled as index arithmetic on their operand (no loop of their own when inlined).
VIEWS = ("reshape", "transpose", "broadcast_to", "getitem", "take")
# Ops that are loop nests of their own (always given storage).
LOOP_NESTS = ("sum", "prod", "max", "min", "matmul", "concatenate", "stack", "setitem",
              "index_add", "scatter_add")
LEAVES = ops_of_kind("leaf")
# Names the generated body uses for itself (loop indices, accumulators); user names avoid them.
_LOCALS = {"status", "done", "acc", "k"} | {f"{p}{d}" for p in "ir" for d in range(32)}
# The C functions and types the body calls: a user variable named ``cos`` or ``exp`` would
# shadow them (``double cos = cos(theta);`` does not compile), so user names avoid them too.
_C_CALLED = {f"{name}{f}" for name in (*_LIBM.values(), "fabs", "pow") for f in ("", "f")}
_C_CALLED |= set(C_TYPES.values())
_REDUCE_IDENTITY = {"sum": 0, "prod": 1, "max": -math.inf, "min": math.inf}


def unsupported_ops() -> list[str]:
    """Ops of the op table this back end has no rule for (a completeness test keeps it empty)."""
    known = set(C_ELEMENTWISE) | set(VIEWS) | set(LOOP_NESTS) | set(LEAVES) | set(EXPANDED)
    return [op for op in OPS if op not in known]


class _CEmitter:
    def __init__(self, graph: Graph, name: str | None = None):
        graph = straight_line(graph)   # C has loops, but regions are not lowered to them yet
        self.graph = graph
        self.name = name or function_name(graph)
        self.order = toposort(graph.outputs)
        self.counts = use_counts(graph.outputs)
        self.namer = Namer(C_KEYWORDS | _LOCALS | _C_CALLED | {self.name})
        self.helpers: dict[tuple, str] = {}
        self.statics: list[str] = []
        self.body: list[str] = []
        self.var: dict[Node, str] = {}        # nodes with storage: array or scalar variable
        self.temps: list[tuple] = []          # (name, C type) of malloc'd arrays, freed at the end
        self.undeclared: dict[str, str] = {}  # scalar temporaries not declared yet
        self.last_comment = None
        self.params = self._parameters()
        self.outputs = self._outputs()
        self.stored = self._storage_plan()

    # -- signature ---------------------------------------------------------------------------
    def _parameters(self) -> list[tuple[str, Node]]:
        params = []
        for i, x in enumerate(self.graph.inputs):
            if x is None:
                continue   # a static int/bool: baked into the code
            name = self.namer.name(self.graph.params[i])
            self.var[x] = name
            params.append((name, x))
        return params

    def _outputs(self) -> list[str]:
        names = []
        for k, o in enumerate(self.graph.outputs):
            hint = self.graph.names.get(o) if o.op not in LEAVES else None
            names.append(self.namer.name(hint if hint and hint not in names else f"out{k}"))
        return names

    def signature(self) -> str:
        parts = []
        for name, x in self.params:
            t = C_TYPES[x.dtype]
            parts.append(f"const {t} *{name}" if x.ndim else f"{t} {name}")
        for name, o in zip(self.outputs, self.graph.outputs):
            parts.append(f"{C_TYPES[o.dtype]} *{name}")
        return f"int {self.name}({', '.join(parts) or 'void'})"

    # -- which nodes get storage ---------------------------------------------------------------
    def _storage_plan(self) -> set:
        stored = set()
        consumers: dict[Node, list[Node]] = {}
        for n in self.order:
            if n.op not in C_ELEMENTWISE and n.op not in VIEWS and n.op not in LOOP_NESTS \
                    and n.op not in LEAVES:
                raise ExportError(f"C export: no C rule for the op {n.op!r} "
                                  "(symgrad.emit_c.C_ELEMENTWISE)")
            for i in n.inputs:
                consumers.setdefault(i, []).append(n)
        for n in self.order:
            if n.op in LEAVES:
                continue
            if n.op in VIEWS and n.op != "take" and self._cheap(n, stored):
                continue   # index arithmetic on memory: a copy would buy nothing
            if n.op in LOOP_NESTS or self.counts[n] > 1:
                stored.add(n)
                continue
            for c in consumers.get(n, ()):
                # recomputing per element of a larger loop (a broadcast, the k loop of a
                # matmul) would multiply the work: compute once into storage instead
                stretched = (c.op in C_ELEMENTWISE and c.shape != n.shape) or \
                    c.op in ("broadcast_to", "matmul")
                if stretched and not self._cheap(n, stored):
                    stored.add(n)
        for n in [n for n in self.order if n.op == "stop_gradient" and n in stored]:
            stored.discard(n)   # the identity: store the value it passes on instead
            if n.inputs[0].op not in LEAVES:
                stored.add(n.inputs[0])
        return stored

    @staticmethod
    def _cheap(n: Node, stored: set) -> bool:
        """A leaf or stored value seen through views: reading it costs a load."""
        while n.op in VIEWS and n.op != "take":
            n = n.inputs[0]
        return n.op in LEAVES or n in stored

    # -- helpers -----------------------------------------------------------------------------
    def use_helper(self, kind: str, dtype: str):
        key = (kind, dtype)
        if key not in self.helpers:
            self.helpers[key] = _HELPERS[kind].format(
                T=C_TYPES[dtype], S=_suffix(dtype), NAN=" || a != a" if dtype.startswith("float") else "")

    def comment(self, n: Node):
        loc, prefix = self.graph.locs.get(n), ""
        if loc is None:
            origin = self.graph.grad_origin.get(n)
            loc, prefix = (self.graph.locs.get(origin) if origin is not None else None), "grad of "
        if loc is None:
            return
        where = "" if loc.filename == self.graph.filename else f"{os.path.basename(loc.filename)} "
        text = f"/* {prefix}{where}line {loc.lineno}: {loc.text.replace('*/', '* /')} */"
        if text != self.last_comment:
            self.body.append(text)
            self.last_comment = text

    # -- element expressions -------------------------------------------------------------------
    def element(self, n: Node, idx: list[str]) -> str:
        """C expression of ``n`` at the multi-index ``idx`` (one expression per axis)."""
        if n in self.var:
            return self.var[n] if not n.ndim else f"{self.var[n]}[{flat_index(idx, n.shape)}]"
        op = n.op
        if op == "const":
            return c_number(n.attrs[0], n.dtype)
        if op == "full":
            return c_number(n.attrs[0], n.dtype)
        if op == "array":
            return f"{self.static_array(n)}[{flat_index(idx, n.shape)}]"
        if op == "arange":
            start, step = n.attrs[0], n.attrs[1]
            ctype = C_TYPES[n.dtype]
            return f"(({ctype}){c_number(start, n.dtype)} + ({ctype}){c_number(step, n.dtype)} * {_p(idx[0])})"
        if op in C_ELEMENTWISE:
            args = [self.element(i, _align(idx, n.shape, i.shape)) for i in n.inputs]
            return C_ELEMENTWISE[op](self, n, args)
        return getattr(self, f"view_{op}")(n, idx)

    def view_reshape(self, n, idx):
        x = n.inputs[0]
        flat = flat_index(idx, n.shape)
        if x in self.var and x.ndim:
            return f"{self.var[x]}[{flat}]"
        return self.element(x, _unravel(flat, x.shape))

    def view_transpose(self, n, idx):
        (perm,) = n.attrs
        inner = [""] * len(perm)
        for k, p in enumerate(perm):
            inner[p] = idx[k]
        return self.element(n.inputs[0], inner)

    def view_broadcast_to(self, n, idx):
        x = n.inputs[0]
        return self.element(x, _align(idx, n.shape, x.shape))

    def view_getitem(self, n, idx):
        return self.element(n.inputs[0], _index_map(n.attrs[0], idx, n.inputs[0].shape))

    def view_take(self, n, idx):
        x, indices = n.inputs
        (axis,) = n.attrs
        k = indices.ndim
        i = self.element(indices, idx[axis:axis + k])
        size = x.shape[axis]
        wrapped = f"({_p(i)} < 0 ? {_p(i)} + {size} : {_p(i)})" if not indices.dtype.startswith("uint") else i
        return self.element(x, idx[:axis] + [wrapped] + idx[axis + k:])

    def static_array(self, n: Node) -> str:
        if n not in self.var:
            value = np.asarray(n.attrs[0].value)
            name = self.namer.name("c")
            items = ", ".join(c_number(v, n.dtype) for v in value.ravel().tolist())
            self.statics.append(f"static const {C_TYPES[n.dtype]} {name}[{max(value.size, 1)}] = {{{items or '0'}}};")
            self.var[n] = name
        return self.var[n]

    # -- statements ----------------------------------------------------------------------------
    def loops(self, shape, prefix="i") -> tuple[list[str], list[str]]:
        """The ``for`` headers and index names of a loop nest over ``shape`` (length-1 axes
        get index 0 and no loop)."""
        idx, heads = [], []
        for k, d in enumerate(shape):
            if d == 1:
                idx.append("0")
                continue
            i = f"{prefix}{k}"
            idx.append(i)
            heads.append(f"for (long {i} = 0; {i} < {d}; ++{i})")
        return heads, idx

    @staticmethod
    def nest(heads: list[str], inner: list[str]) -> list[str]:
        """``inner`` inside the loops ``heads``, indented, braces on their own lines."""
        lines = []
        for depth, head in enumerate(heads):
            lines.append("    " * depth + head + " {")
        lines += ["    " * len(heads) + line for line in inner]
        lines += ["    " * depth + "}" for depth in reversed(range(len(heads)))]
        return lines

    def scoped(self, heads: list[str], inner: list[str]) -> list[str]:
        """Like :meth:`nest`, in a block of its own even without loops (``acc`` is local)."""
        if heads:
            return self.nest(heads, inner)
        return ["{", *["    " + line for line in inner], "}"]

    def storage(self, n: Node, output: str | None) -> str:
        """Where ``n`` is computed: the caller's output array, a new temporary, or a scalar."""
        if output is not None:
            self.var[n] = f"(*{output})" if not n.ndim else output
            return self.var[n]
        ctype = C_TYPES[n.dtype]
        name = self.namer.name(self.graph.names.get(n))
        if n.ndim == 0:
            self.undeclared[name] = ctype   # declared where first assigned
        else:
            # declared NULL at the top, so the cleanup after any failure frees only real memory
            self.body.append(f"{name} = malloc(sizeof({ctype}) * {max(n.size, 1)});")
            self.body.append(f"if (!{name}) {{ status = 1; goto done; }}")
            self.temps.append((name, ctype))
        self.var[n] = name
        return name

    def assign_loop(self, target: str, shape, value_of, op="="):
        """``target[idx] op value_of(idx)`` over ``shape``."""
        heads, idx = self.loops(shape)
        lhs = f"{target}[{flat_index(idx, shape)}]" if shape else target
        if not shape and target in self.undeclared:
            lhs = f"{self.undeclared.pop(target)} {target}"
        self.body += self.nest(heads, [f"{lhs} {op} {value_of(idx)};"])

    def compute(self, n: Node, output: str | None = None):
        self.comment(n)
        if n.op in ("sum", "prod", "max", "min"):
            return self.reduction(n, output)
        if n.op in LOOP_NESTS:
            target = self.storage(n, output)
            return getattr(self, f"stmt_{n.op}")(n, target)
        value = self.element_fresh(n)
        target = self.storage(n, output)
        self.assign_loop(target, n.shape, value)

    def element_fresh(self, n):
        """The element expression of ``n`` itself (not of its storage)."""
        return lambda idx: self.element_unstored(n, idx)

    def element_unstored(self, n, idx):
        saved = self.var.pop(n, None)
        try:
            return self.element(n, idx)
        finally:
            if saved is not None:
                self.var[n] = saved

    def reduction(self, n: Node, output):
        (x,) = n.inputs
        axes, keepdims = n.attrs
        out_shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        ctype = C_TYPES[n.dtype]
        combine = {"sum": "{acc} + {v}", "prod": "{acc} * {v}"}.get(n.op)   # v: the element
        if combine is None:
            helper = "maximum" if n.op == "max" else "minimum"
            self.use_helper(helper, n.dtype)
            combine = f"sg_{helper}_{_suffix(n.dtype)}({{acc}}, {{v}})"
        identity = _REDUCE_IDENTITY[n.op]
        if not n.dtype.startswith("float") and n.op in ("max", "min"):
            identity = np.iinfo(n.dtype).min if n.op == "max" else np.iinfo(n.dtype).max
        target = self.storage(n, output)
        heads, idx = self.loops(out_shape)
        inner_heads, inner = self.loops(tuple(x.shape[a] for a in axes), "r")
        full_idx, it_out, it_in = [], iter(idx), iter(inner)
        for a in range(x.ndim):
            full_idx.append(next(it_in) if a in axes else next(it_out))
        value = _p(self.element(x, full_idx))
        identity = c_number(identity, n.dtype)
        if not n.ndim:   # accumulate straight into the scalar
            decl = f"{self.undeclared.pop(target)} " if target in self.undeclared else ""
            self.body.append(f"{decl}{target} = {identity};")
            self.body += self.nest(inner_heads, [f"{target} = {combine.format(acc=target, v=value)};"])
            return
        self.body += self.scoped(heads, [
            f"{ctype} acc = {identity};",
            *self.nest(inner_heads, [f"acc = {combine.format(acc='acc', v=value)};"]),
            f"{target}[{flat_index(idx, out_shape)}] = acc;"])

    def stmt_matmul(self, n, target):
        a, b = n.inputs
        k = a.shape[-1]
        ctype = C_TYPES[n.dtype]
        heads, idx = self.loops(n.shape)
        kk = "k" if k != 1 else "0"
        ai = _align(idx[:-2], n.shape[:-2], a.shape[:-2]) + [idx[-2], kk]
        bi = _align(idx[:-2], n.shape[:-2], b.shape[:-2]) + [kk, idx[-1]]
        step = f"acc += {_p(self.element(a, ai))} * {_p(self.element(b, bi))};"
        inner = [f"{ctype} acc = 0;"]
        inner += [f"for (long k = 0; k < {k}; ++k)", "    " + step] if k != 1 else [step]
        inner.append(f"{target}[{flat_index(idx, n.shape)}] = acc;")
        self.body += self.scoped(heads, inner)

    def stmt_concatenate(self, n, target):
        (axis,) = n.attrs
        start = 0
        for x in n.inputs:
            def value(idx, x=x):
                return self.element(x, idx)
            self._place(target, n.shape, x.shape, value, lambda idx, s=start: idx[:axis] + [
                f"{_p(idx[axis])} + {s}" if s else idx[axis]] + idx[axis + 1:])
            start += x.shape[axis]

    def stmt_stack(self, n, target):
        (axis,) = n.attrs
        for k, x in enumerate(n.inputs):
            self._place(target, n.shape, x.shape, lambda idx, x=x: self.element(x, idx),
                        lambda idx, k=k: idx[:axis] + [str(k)] + idx[axis:])

    def _place(self, target, out_shape, shape, value_of, where, op="="):
        """``target[where(idx)] op value_of(idx)`` for idx over ``shape``."""
        heads, idx = self.loops(shape)
        lhs = f"{target}[{flat_index(where(idx), out_shape)}]" if out_shape else target
        self.body += self.nest(heads, [f"{lhs} {op} {value_of(idx)};"])

    def _copy_base(self, n, target):
        base = n.inputs[0]
        self.assign_loop(target, base.shape, lambda idx: self.element(base, idx))

    def _update(self, n, target, op):
        base, value = n.inputs
        self._copy_base(n, target)
        region = _region_shape(base.shape, n.attrs[0])
        if base.ndim == 0:
            self.body.append(f"{target} {op} {self.element(value, [])};")
            return
        self._place(target, base.shape, region,
                    lambda idx: self.element(value, _align(idx, region, value.shape)),
                    lambda idx: _index_map(n.attrs[0], idx, base.shape), op)

    def stmt_setitem(self, n, target):
        self._update(n, target, "=")

    def stmt_index_add(self, n, target):
        self._update(n, target, "+=")

    def stmt_scatter_add(self, n, target):
        g, indices = n.inputs
        axis, size = n.attrs
        self.assign_loop(target, n.shape, lambda idx: c_number(0, n.dtype))
        k = indices.ndim

        def where(idx):
            i = self.element(indices, idx[axis:axis + k])
            wrapped = f"({_p(i)} < 0 ? {_p(i)} + {size} : {_p(i)})"
            return idx[:axis] + [wrapped] + idx[axis + k:]
        self._place(target, n.shape, g.shape, lambda idx: self.element(g, idx), where, "+=")

    # -- the whole function --------------------------------------------------------------------
    def run(self) -> tuple[str, str]:
        g = self.graph
        first_output = {}
        for k, o in enumerate(g.outputs):
            first_output.setdefault(o, k)
        for n in _schedule(g, g.outputs):   # the forward computation first, then the derivative
            if n in self.stored and n not in self.var:
                k = first_output.get(n)
                self.compute(n, self.outputs[k] if k is not None else None)
        for k, o in enumerate(g.outputs):
            if first_output[o] == k and self.var.get(o) == (
                    f"(*{self.outputs[k]})" if not o.ndim else self.outputs[k]):
                continue   # computed in place
            self.comment(o)
            target = f"(*{self.outputs[k]})" if not o.ndim else self.outputs[k]
            self.assign_loop(target, o.shape, lambda idx, o=o: self.element(o, idx))
        return self.render()

    def render(self) -> tuple[str, str]:
        g = self.graph
        header_name = self.name
        includes = ["#include <math.h>", "#include <stdbool.h>", "#include <stdint.h>",
                    "#include <stdlib.h>"]
        doc = self.convention_comment()
        lines = [f"/* {header_name}: generated by symgrad from {os.path.basename(g.filename)} "
                 "(C99; needs only libm). */", *includes, f'#include "{header_name}.h"', ""]
        lines += self.statics + [""] if self.statics else []
        lines += [h for _, h in sorted(self.helpers.items())] + ([""] if self.helpers else [])
        lines.append(doc)
        lines.append(self.signature() + " {")
        lines.append("    int status = 0;")
        reached = set(self.order)
        lines += [f"    (void){name};  /* not needed by this derivative */"
                  for name, x in self.params if x not in reached]
        lines += [f"    {ctype} *{t} = NULL;" for t, ctype in self.temps]
        lines += ["    " + line for line in self.body]
        if self.temps:
            lines.append("done:")
        lines += [f"    free({t});" for t, _ in reversed(self.temps)]
        lines.append("    return status;")
        lines.append("}")
        source = "\n".join(lines) + "\n"
        return source, self.header(doc)

    def describe(self, name: str, x: Node, role: str) -> str:
        dims = "".join(f"[{d}]" for d in x.shape)
        kind = ("by value" if role == "in" else "through a pointer to one element") if not x.ndim \
            else "contiguous, row-major"
        return f" *   {name}: {C_TYPES[x.dtype]}{dims or ' (0-d)'} {role}put, {kind}"

    def convention_comment(self) -> str:
        g = self.graph
        lines = ["/* Calling convention: sizes are baked for the exported signature; arrays are",
                 " * pointers to contiguous C-order elements, 0-d inputs are passed by value and",
                 " * 0-d outputs through a pointer to one element. Returns 0, or 1 when a",
                 " * temporary could not be allocated."]
        static = [p for i, p in enumerate(g.params) if g.inputs[i] is None]
        if static:
            lines.append(f" * Static (int/bool) arguments baked in, not parameters: {', '.join(static)}.")
        for name, x in self.params:
            lines.append(self.describe(name, x, "in"))
        for name, o in zip(self.outputs, g.outputs):
            lines.append(self.describe(name, o, "out"))
        lines.append(" */")
        return "\n".join(lines)

    def header(self, doc: str) -> str:
        guard = f"SYMGRAD_{self.name.upper()}_H"
        lines = [f"#ifndef {guard}", f"#define {guard}", "#include <stdbool.h>",
                 "#include <stdint.h>", ""]
        for name, x in self.params:
            lines.append(f"#define {self.name.upper()}_{name.upper()}_SIZE {max(x.size, 1)}")
        for name, o in zip(self.outputs, self.graph.outputs):
            lines.append(f"#define {self.name.upper()}_{name.upper()}_SIZE {max(o.size, 1)}")
        lines += ["", doc, self.signature() + ";", "", f"#endif /* {guard} */"]
        return "\n".join(lines) + "\n"


def _region_shape(shape, index) -> tuple:
    from .ops import _index_shape
    return _index_shape(shape, index)


def _index_map(index, idx: list[str], in_shape) -> list[str]:
    """Input multi-index of a basic index (see ``shape_ops``) at output multi-index ``idx``."""
    out, k = [], 0
    for item in index:
        if isinstance(item, NewAxis):
            k += 1
            continue
        if isinstance(item, Slice):
            start, step = item.start, item.step
            i = idx[k]
            k += 1
            if step == 1:
                out.append(i if start == 0 else f"{_p(i)} + {start}")
            else:
                out.append(f"{start} + {step} * {_p(i)}" if start else f"{step} * {_p(i)}")
        else:
            out.append(str(item))
    out.extend(idx[k:])
    return out


def c_interface(graph: Graph, name: str | None = None):
    """``(parameters, outputs)`` of the C function: ``[(C name, node)]`` each, in order."""
    em = _CEmitter(graph, name)
    return em.params, list(zip(em.outputs, graph.outputs))


def emit_c(graph: Graph, name: str | None = None) -> tuple[str, str]:
    """``(source, header)`` of ``graph`` as a C99 function named ``name``."""
    return _CEmitter(graph, name).run()
