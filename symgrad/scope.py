"""Values and scopes of the tracer: frames (local variables, closures, globals), functions
defined while tracing, and the helpers that walk traced values."""
from __future__ import annotations

import ast
import builtins
from typing import TYPE_CHECKING

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
    if isinstance(value, Node):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from walk_nodes(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from walk_nodes(v)


def copy_value(v):
    """Branches of a data-dependent if work on private copies of mutable containers."""
    if isinstance(v, list):
        return [copy_value(x) for x in v]
    if isinstance(v, dict):
        return {k: copy_value(x) for k, x in v.items()}
    return v


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
    def __init__(self, value):
        self.value = value


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
        self.owned_by_caller: set[str] = set()
        self.loop_depth = 0
        self.name = name

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
        raise NameError(f"{self.source.loc(node)}: name '{name}' is not defined")


def fork(frame: Frame) -> Frame:
    child = Frame(frame.tracer, frame.source, frame.globals, frame.parent, frame.closure, frame.name)
    child.env = {k: copy_value(v) for k, v in frame.env.items()}
    child.owned_by_caller = set(frame.owned_by_caller)
    child.loop_depth = frame.loop_depth
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
