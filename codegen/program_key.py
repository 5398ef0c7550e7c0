"""The disk cache's key of a program before any LLVM IR is built (``codegen.plans.plan_key``).

A fresh process with the machine code on disk used to schedule its graph, build the
kernel's LLVM IR (``llvmlite.ir``, the emitters) and print it only to hash the text. The
*run plan* of a signature (what ``codegen.llvm.Native`` needs: the text's cache key, the
symbols, the run-time parameters, the buffers and stages) is a function of

* the graph the back end is given: :func:`graph_digest` encodes every node reachable from
  its outputs (op, inputs, dtype, shape, every attribute, constants' bytes, loop and branch
  bodies) and the graph's name, parameters, inputs and result tree, injectively (each item
  typed and length-prefixed); an attribute of a type it does not know makes the graph
  unkeyable (None: the signature takes the IR path, as before);
* the code that schedules and lowers it: :func:`code_fingerprint`, the name, size and
  modification time of every module of ``symgrad`` and ``codegen`` (any edit, reinstall or
  checkout changes it);
* the values of the code generator's module-level settings (``CHUNK_BYTES``,
  ``mathlib.F32_VIA_F64``, its functions by name...): :func:`knobs` records a digest of
  each module's with a plan;
  :func:`knobs_match` refuses a plan whose recorded value differs from a module imported
  here (a test or benchmark that patched one), and :func:`knobs_at_defaults` keeps a
  process that patched a literal one from writing plans at all (a module not imported cannot
  have been patched, and its source is in the fingerprint). Left open: a process that
  patched a computed table or a function of a module a fresh reader never imports (the
  kernel builders) still writes plans, which such a reader would take;
* the host and the options ``codegen.plans.plan_key`` adds (target triple, CPU, features,
  ``SYMGRAD_PRECISE_MATH``, jit's FORMAT, symgrad's and llvmlite's versions).
"""
from __future__ import annotations

import ast
import operator
import os
import re
import struct
import sys
import types

import numpy as np

from symgrad.ir import ArrayConst, Graph, NewAxis, Node, Slice


class Unkeyable(Exception):
    """A graph holding something :func:`graph_digest` cannot encode exactly."""


# -- the graph ------------------------------------------------------------------------------------

def graph_digest(graph: Graph, h) -> bool:
    """Feed ``h`` (a hash object) the encoding of ``graph``; False if it cannot be encoded."""
    writer = _GraphWriter()
    try:
        writer.graph(graph)
    except Unkeyable:
        return False
    h.update(b"".join(writer.out))      # (one update: ~1000 small ones cost W1 ~0.5 ms)
    return True


class _GraphWriter:
    """Writes each node once, children first, numbered in the order written; a body's nodes
    share the numbering (a body may read nodes of the enclosing graph)."""

    def __init__(self):
        self.out: list[bytes] = []            # length-prefixed tokens, in order
        self.ids: dict[Node, int] = {}
        self.bodies: dict[int, int] = {}      # id(body) -> its number (bodies are written once)

    def put(self, token: str) -> None:
        data = token.encode()
        self.out.append(b"%d:" % len(data))
        self.out.append(data)

    def graph(self, graph: Graph) -> None:
        self.put("graph")
        self.put(graph.name)
        self.value(tuple(graph.params))
        self.nodes(list(graph.outputs) + [x for x in graph.inputs if x is not None])
        self.put("inputs")
        for x in graph.inputs:
            self.put("-" if x is None else str(self.ids[x]))
        self.put("outputs")
        for o in graph.outputs:
            self.put(str(self.ids[o]))
        self.put("tree")
        self.value(graph.out_tree)

    def nodes(self, roots: list) -> None:
        """Every node reachable from ``roots`` (through inputs, and through the nodes and
        bodies in attributes), each after everything it refers to: an iterative walk."""
        stack = [(r, False) for r in reversed(roots)]
        while stack:
            n, ready = stack.pop()
            if n in self.ids:
                continue
            if ready:
                self.node(n)
                continue
            stack.append((n, True))
            for x in reversed(self.referenced(n)):
                if x not in self.ids:
                    stack.append((x, False))

    def referenced(self, n: Node) -> list:
        out = list(n.inputs)
        todo = list(n.attrs)
        while todo:
            a = todo.pop()
            if isinstance(a, Node):
                out.append(a)
            elif isinstance(a, (tuple, list)):
                todo.extend(a)
            elif hasattr(a, "results") and hasattr(a, "params"):    # a region's Body
                out.extend(a.params)
                out.extend(a.results)
        return out

    def node(self, n: Node) -> None:
        self.put("node")
        self.put(n.op)
        self.put(n.dtype)
        self.put(",".join(map(str, n.shape)))
        self.put(",".join(str(self.ids[x]) for x in n.inputs))
        self.value(n.attrs)
        self.ids[n] = len(self.ids)

    def value(self, a) -> None:
        """One attribute, typed: ints, floats (their bits), strings, tuples... Recursion on
        the attribute's own nesting only (a few levels), never on the graph."""
        t = type(a)
        if a is None or t is bool:
            self.put(f"b{a}")
        elif t is int:
            self.put(f"i{a}")
        elif t is float:
            self.put("f" + struct.pack("<d", a).hex())
        elif t is str:
            self.put("s" + a)
        elif t is tuple or t is list:
            self.put(f"{'t' if t is tuple else 'l'}{len(a)}")
            for item in a:
                self.value(item)
        elif t is Node:
            self.put(f"n{self.ids[a]}")
        elif t is Slice:
            self.put(f"S{a.start},{a.stop},{a.step}")
        elif t is NewAxis:
            self.put("A")
        elif t is slice:
            self.put("z")
            for item in (a.start, a.stop, a.step):
                self.value(item)
        elif t is ArrayConst:
            self.array(a.value)
        elif isinstance(a, np.ndarray):
            self.array(a)
        elif isinstance(a, np.generic):
            self.array(np.asarray(a))
        elif t is np.dtype:
            self.put("d" + a.str)
        elif t is frozenset:
            items = sorted(a, key=repr)
            if len({repr(i) for i in items}) != len(items):
                raise Unkeyable(a)
            self.put(f"F{len(items)}")
            for item in items:
                self.value(item)
        elif hasattr(a, "results") and hasattr(a, "params") and type(a).__name__ == "Body":
            self.body(a)
        else:
            raise Unkeyable(t)

    def array(self, v: np.ndarray) -> None:
        if v.dtype.hasobject:
            raise Unkeyable(v.dtype)
        self.put(f"a{v.dtype.str}{v.shape}")
        data = np.ascontiguousarray(v).tobytes()
        self.out.append(b"%d:" % len(data))
        self.out.append(data)

    def body(self, body) -> None:
        if id(body) in self.bodies:
            self.put(f"B{self.bodies[id(body)]}")
            return
        self.bodies[id(body)] = len(self.bodies)
        self.put(f"body{len(body.params)},{len(body.results)}")
        for p in body.params:
            self.put(str(self.ids[p]))
        for r in body.results:
            self.put(str(self.ids[r]))
        self.value(tuple(body.names))
        self.value(bool(body.derivative))


# -- the code -------------------------------------------------------------------------------------

_fingerprint: list = []


def code_fingerprint() -> str:
    """Name, size and modification time (ns) of every module of symgrad and codegen: what
    schedules and lowers a graph (once per process; ~130 ``stat`` calls)."""
    if not _fingerprint:
        import symgrad
        parts = []
        for root in (os.path.dirname(symgrad.__file__), os.path.dirname(__file__)):
            folders = [("", root)]
            while folders:
                rel, folder = folders.pop()
                for entry in sorted(os.scandir(folder), key=lambda e: e.name):
                    if entry.is_dir() and entry.name != "__pycache__":
                        folders.append((f"{rel}{entry.name}/", entry.path))
                    elif entry.name.endswith((".py", ".pyc")):
                        st = entry.stat()
                        parts.append(f"{rel}{entry.name}:{st.st_size}:{st.st_mtime_ns}")
        _fingerprint.append("\n".join(parts))
    return _fingerprint[0]


# -- the code generator's settings ----------------------------------------------------------------

_PACKAGE = __name__.rpartition(".")[0]      # "symgrad.codegen"
_KNOB = re.compile(r"^[A-Z][A-Z0-9_]*$")
_SIMPLE = (bool, int, float, str, bytes, type(None))
RUN_TIME_STATE = frozenset({"STATS"})     # counters, not settings (codegen.jit.STATS)


def _canonical(value):
    """A comparable, picklable copy of a setting's value, or None for values that are not
    plain data (ctypes types, objects; a function counts by its qualified name)."""
    if isinstance(value, _SIMPLE):
        return (type(value).__name__, repr(value))
    if isinstance(value, (set, frozenset)):
        items = [_canonical(v) for v in value]
        return None if None in items else ("set", tuple(sorted(items)))
    if isinstance(value, (tuple, list)):
        items = [_canonical(v) for v in value]
        return None if None in items else ("seq", tuple(items))
    if isinstance(value, dict):
        items = [(_canonical(k), _canonical(v)) for k, v in value.items()]
        return None if any(None in kv for kv in items) else ("map", tuple(sorted(items, key=repr)))
    if callable(value) and hasattr(value, "__qualname__"):     # a rule in a table, a hook
        return ("code", f"{getattr(value, '__module__', '')}.{value.__qualname__}")
    return None


def _module_knobs(module) -> dict:
    """A module's settings: its UPPERCASE names holding plain data or code, and its
    functions and classes by qualified name (a test that patches ``jit.codegen_level``
    changes the code too). Lowercase data is run-time state (caches, tables of what was
    linked), never a setting."""
    out = {}
    for name, value in vars(module).items():
        if name.startswith("__") or name in RUN_TIME_STATE:
            continue
        if _KNOB.match(name) or isinstance(value, (types.FunctionType, type)):
            c = _canonical(value)
            if c is not None:
                out[name] = c
    return out


def _codegen_modules() -> list:
    prefix = _PACKAGE + "."
    return sorted((name, m) for name, m in list(sys.modules.items())
                  if m is not None and name.startswith(prefix))


def _digest(values: dict) -> str:
    from .diskcache import hasher
    return hasher(repr(sorted(values.items())).encode()).hexdigest()


def knobs() -> dict:
    """{module: digest of its settings} of the code generator's modules imported here."""
    return {name: _digest(_module_knobs(m)) for name, m in _codegen_modules()}


def knobs_match(recorded: dict) -> bool:
    """Does every imported module hold the settings ``recorded`` (:func:`knobs`) with a plan?"""
    for name, digest in recorded.items():
        module = sys.modules.get(name)
        if module is not None and _digest(_module_knobs(module)) != digest:
            return False    # (a module not imported holds its defaults: the fingerprint's)
    return True


_defaults: dict = {}     # module -> {NAME: value} of the settings its source assigns literally


def knobs_at_defaults() -> bool:
    """Does every setting of the imported modules that its source assigns a literal
    (``CHUNK_BYTES = 256 * 1024``, ``NATIVE = True``) hold that value? False (write no plan)
    when one differs: a plan written by a process that patched one would otherwise serve
    that setting's code to processes that did not. A computed setting or a function has no
    default to compare with here (a value seen first could be a patch already): those are
    checked where a plan is read (:func:`knobs_match`), in every module the reader has
    imported."""
    for name, module in _codegen_modules():
        if name not in _defaults:
            _defaults[name] = _source_literals(module)
        for knob, value in _defaults[name].items():
            if _canonical(getattr(module, knob, None)) != value:
                return False
    return True


def _source_literals(module) -> dict:
    """The module's settings its source assigns a one-line literal, with that value (a line
    scan: parsing every module costs ~0.15 s)."""
    out: dict = {}
    path = getattr(module, "__file__", None)
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except (OSError, TypeError, ValueError):
        return out
    for m in _ASSIGNMENT.finditer(source):
        if m.group(1) in RUN_TIME_STATE:
            continue
        try:
            out[m.group(1)] = _canonical(_constant(ast.parse(m.group(2), mode="eval").body))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError,
                ArithmeticError):
            out.pop(m.group(1), None)     # computed (or reassigned so): no literal default
    return out


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv,
               ast.Mod: operator.mod, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
               ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor}
_SIGNS = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}


def _constant(node):
    """The value of a literal, or of arithmetic on literals (``256 * 1024``, ``1 << 20``);
    ValueError for anything else (names, calls, powers: no setting is computed here)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_constant(e) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else \
            items if isinstance(node, ast.List) else set(items)
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _constant(node.left), _constant(node.right)
        if isinstance(node.op, ast.LShift) and right > 64:
            raise ValueError("a shift too large for a setting")
        return _ARITHMETIC[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _SIGNS:
        return _SIGNS[type(node.op)](_constant(node.operand))
    raise ValueError(ast.dump(node))


_ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)[ \t]*(?::[^=\n]*)?=[ \t]*(.+)$", re.M)
