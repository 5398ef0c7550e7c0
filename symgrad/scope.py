"""Values and scopes of the tracer: frames (local variables, closures, globals), functions
defined while tracing, and the helpers that walk traced values."""
from __future__ import annotations

import ast
import builtins
from typing import TYPE_CHECKING

from .aliases import NO_BUFFERS, foreign_buffers
from .ir import Loc, Node

if TYPE_CHECKING:
    from .frontend import Tracer
    from .source import Source

MISSING = object()

SAFE_BUILTINS = {
    name: getattr(builtins, name) for name in (
        "range", "len", "abs", "min", "max", "sum", "float", "int", "bool", "enumerate", "zip",
        "list", "tuple", "dict", "reversed", "isinstance", "round", "sorted", "any", "all",
        "ValueError", "TypeError", "IndexError", "KeyError", "AssertionError",
        "NotImplementedError", "RuntimeError", "ZeroDivisionError", "Exception", "True",
        "False", "None", "slice", "map", "divmod", "pow", "str", "repr", "type", "hasattr",
        "getattr", "callable", "iter", "next", "set", "frozenset")
    if hasattr(builtins, name)}


def is_data(v) -> bool:
    return isinstance(v, Node)


def walk_nodes(value):
    """The IR nodes inside a value (nested lists, tuples, dicts), depth first, left to right;
    iterative, so a deeply nested value cannot exhaust the stack."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Node):
            yield v
        elif isinstance(v, (list, tuple)):
            stack.extend(reversed(v))
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))


def _empty_like(v):
    return [] if isinstance(v, list) else {} if isinstance(v, dict) else None


def copy_value(value):
    """Branches of a data-dependent if work on private copies of mutable containers (lists
    and dicts, copied to any depth without recursion)."""
    top = _empty_like(value)
    if top is None:
        return value
    stack = [(value, top)]
    while stack:
        src, dst = stack.pop()
        for key, item in (src.items() if isinstance(src, dict) else enumerate(src)):
            child = _empty_like(item)
            if child is not None:
                stack.append((item, child))
            if isinstance(dst, dict):
                dst[key] = item if child is None else child
            else:
                dst.append(item if child is None else child)
    return top


class Undefined:
    """A variable assigned in only one branch of a data-dependent ``if``."""

    def __init__(self, name: str, loc: Loc):
        self.name, self.loc = name, loc


class InterpFunction:
    """A lambda or nested def created while tracing: interpreted, closing over its frame."""

    def __init__(self, tree, frame: "Frame", defaults: list, kw_defaults: list):
        self.tree, self.frame = tree, frame
        self.defaults, self.kw_defaults = defaults, kw_defaults
        self.__name__ = getattr(tree, "name", "<lambda>")


class Return(Exception):
    def __init__(self, value, buffers: frozenset = NO_BUFFERS):
        self.value, self.buffers = value, buffers


class Break(Exception):
    pass


class Continue(Exception):
    pass


class Frame:
    def __init__(self, tracer: "Tracer", source: Source, globals_: dict, parent: "Frame | None",
                 closure: dict, name: str):
        self.tracer, self.source, self.globals, self.parent = tracer, source, globals_, parent
        self.closure = closure
        self.env: dict = {}
        # name -> the buffers its array value may live in (symgrad.aliases); absent for
        # values that hold no array
        self.buffers: dict[str, frozenset] = {}
        # name -> the aliases.RowView it is (a loop variable that is a row of an array)
        self.views: dict = {}
        self.loop_depth = 0
        self.exits = None    # the loop depth of a loop region whose break/continue are traced
        self.name = name
        self.forked_from: "Frame | None" = None   # a branch's frame: the scope it copies
        self.comprehension = False   # a comprehension's scope (a walrus binds past it)
        self.stmt = self.next_stmt = None   # the statement running and the one after it in its block

    def lookup(self, name: str, node: ast.AST):
        frame = self
        while frame is not None:
            if name in frame.env:
                value = frame.env[name]
                if isinstance(value, Undefined):
                    self.tracer.fail(node, f"variable '{name}' is assigned in only one branch of "
                                     f"a data-dependent if (line {value.loc.lineno})")
                return value
            if name in frame.closure:   # a cell: read now, and recorded (it may be rebound)
                value = frame.closure[name].cell_contents
                self.tracer.captured(frame.closure[name], name, value)
                return value
            frame = frame.parent
        root = self
        while root.parent is not None:
            root = root.parent
        value = root.globals.get(name, MISSING)
        self.tracer.captured(root.globals, name, value)   # a builtin is a global not defined
        if value is not MISSING:
            return value
        if name in SAFE_BUILTINS:
            return SAFE_BUILTINS[name]
        if hasattr(builtins, name):   # calls are vetted in Tracer.call
            return getattr(builtins, name)
        raise NameError(f"name '{name}' is not defined")   # located by the statement (frontend._locate)

    def buffers_of(self, name: str) -> frozenset:
        """The buffers ``name``'s value may live in, resolved like :meth:`lookup` (globals
        and closure cells are memory the function does not own)."""
        frame = self
        while frame is not None:
            if name in frame.env:
                return frame.buffers.get(name, NO_BUFFERS)
            if name in frame.closure:
                return foreign_buffers(f"closure variable '{name}'", frame.closure[name].cell_contents)
            frame = frame.parent
        root = self
        while root.parent is not None:
            root = root.parent
        if name in root.globals:
            return foreign_buffers(f"global '{name}'", root.globals[name])
        return NO_BUFFERS


def fork(frame: Frame) -> Frame:
    child = Frame(frame.tracer, frame.source, frame.globals, frame.parent, frame.closure, frame.name)
    child.env = {k: copy_value(v) for k, v in frame.env.items()}
    child.buffers = dict(frame.buffers)
    child.views = dict(frame.views)
    child.loop_depth = frame.loop_depth
    child.exits = frame.exits
    child.forked_from = frame
    return child


def first_seen(*envs):
    order = {}
    for env in envs:
        for k in env:
            order.setdefault(k, len(order))
    return lambda k: order[k]


def closure_of(fn) -> dict:
    """The function's filled closure cells by name (cells, not values: a trace records which
    cells it read, so a call after one is rebound traces again)."""
    if not fn.__closure__:
        return {}
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
        try:
            cell.cell_contents
        except ValueError:   # not assigned yet
            continue
        out[name] = cell
    return out
