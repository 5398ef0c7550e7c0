"""What a ``for`` loop is, for the loop-region tracer (``symgrad.loops``): the facts of its
body read from the AST (what it rebinds, appends to, how it exits), how it iterates (a
:class:`_Plan`: its trip count and how item i is made), what a carry may hold, the range of
an integer made from loop indices, and the exceptions by which the tracer's steps signal each
other (fall back to unrolling, peel the first iteration, ...).
"""
from __future__ import annotations

import ast
import numbers

import numpy as np

from .ir import Node


def _walk_body(stmts):
    """The AST nodes of a loop body, not entering nested functions, lambdas and classes."""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _in_inner_loop(jump, stmts) -> bool:
    """Whether a break/continue belongs to a loop nested in the body."""
    for node in _walk_body(stmts):
        if isinstance(node, (ast.For, ast.While)) and any(j is jump for j in ast.walk(node)):
            return True
    return False


def _body_facts(stmts):
    """(names the body rebinds, in first-seen order; names it calls ``.append`` on; whether it
    has return/yield/global; which of break/continue belong to this loop)."""
    assigned: dict[str, None] = {}
    appended: dict[str, None] = {}
    jumps = False
    exits: set[str] = set()
    for node in sorted(_walk_body(stmts), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            assigned.setdefault(node.id)
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, ast.Store):
            base = _root_name(node)
            if base is not None:
                assigned.setdefault(base)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name):
            if node.func.attr == "append":
                appended.setdefault(node.func.value.id)
        elif isinstance(node, (ast.Return, ast.Yield, ast.Global, ast.Nonlocal)):
            jumps = True
        elif isinstance(node, (ast.Break, ast.Continue)) and not _in_inner_loop(node, stmts):
            exits.add(type(node).__name__.lower())
    return list(assigned), list(appended), jumps, exits


def written_in_place(stmts) -> set[str]:
    """The names a loop body may write into in place: ``a[k] = v``, ``a[k] += v``, ``a += v``."""
    names = set()
    for node in _walk_body(stmts):
        if isinstance(node, ast.AugAssign):
            names.add(_root_name(node.target))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            names.add(_root_name(node))
    return names - {None}


def _root_name(target):
    """The variable ``a`` of ``a``, ``a[k]``, ``a.b[k]`` (None for another expression)."""
    while isinstance(target, (ast.Subscript, ast.Attribute)):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _target_names(target) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


class _Plan:
    """How a loop iterates: its trip count and, per loop target, how item i is made; ``first``:
    which row of the iterated arrays item 0 is (1 once a first iteration is peeled off)."""

    def __init__(self, trips: int, parts: list, tupled: bool, first: int = 0):
        self.trips, self.parts, self.tupled, self.first = trips, parts, tupled, first


def row_view_pairs(stmt) -> list[tuple[str, str]]:
    """(loop variable, array name) for each loop variable bound to the rows of an array the
    loop names: ``for row in A``, ``for i, row in enumerate(A)``, ``for a, b in zip(A, B)``."""
    target, it = stmt.target, stmt.iter
    if isinstance(it, ast.Name):
        return [(target.id, it.id)] if isinstance(target, ast.Name) else []
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and not it.keywords and
            isinstance(target, ast.Tuple)):
        return []
    if it.func.id == "enumerate" and len(it.args) == 1 and len(target.elts) == 2:
        pairs = [(target.elts[1], it.args[0])]
    elif it.func.id == "zip" and len(it.args) == len(target.elts):
        pairs = list(zip(target.elts, it.args))
    else:
        return []
    return [(t.id, a.id) for t, a in pairs if isinstance(t, ast.Name) and isinstance(a, ast.Name)]


def _part(value):
    """('range', range) or ('rows', node) for a value a loop region can iterate, else None."""
    if isinstance(value, range):
        return ("range", value)
    if isinstance(value, Node) and value.ndim >= 1:
        return ("rows", value)
    return None


def _length(part) -> int:
    return len(part[1]) if part[0] == "range" else part[1].shape[0]


def _carry_type(value):
    """(dtype, shape, weak) of a value a loop may carry, or None."""
    if isinstance(value, Node):
        return value.dtype, value.shape, False
    if isinstance(value, bool):
        return "bool", (), True
    if isinstance(value, numbers.Integral):
        return "int64", (), True
    if isinstance(value, numbers.Real) and not isinstance(value, np.generic):
        return "float64", (), True
    if isinstance(value, (np.generic, np.ndarray)) and value.dtype.kind in "fiub":
        return value.dtype.name, value.shape, False
    return None


def _int_range(n: Node, ranges: dict):
    """(lowest, highest) value of an integer expression of loop indices, or None."""
    if n in ranges:
        return ranges[n]
    if n.op == "const" and isinstance(n.attrs[0], int) and not isinstance(n.attrs[0], bool):
        return n.attrs[0], n.attrs[0]
    if n.op in ("add", "sub", "mul") and n.dtype.startswith("int"):
        a, b = (_int_range(i, ranges) for i in n.inputs)
        if a is None or b is None:
            return None
        if n.op == "add":
            return a[0] + b[0], a[1] + b[1]
        if n.op == "sub":
            return a[0] - b[1], a[1] - b[0]
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    return None


# ----------------------------------------------------------------------------------------------
# What the steps of the loop-region tracer (symgrad.loops) signal to each other

class BodyDone(Exception):
    """A branch with break/continue has run the rest of the loop body itself."""


class _Fallback(Exception):
    """The body needs something a loop region cannot give it: unroll instead."""


class _PeelFirst(Exception):
    """A carry starts as a Python number, whose weak type NumPy resolves in the first
    iteration: run that one as written, then loop over the rest."""


class _Counter(Exception):
    """A Python int the body steps by a fixed number (``count += 1``): not carried, its value
    in iteration i is ``start + i * step`` and after the loop a Python int again."""

    def __init__(self, name, step):
        self.name, self.step = name, step


class _Static(Exception):
    """A variable the body sets to the same Python value each iteration: not carried."""

    def __init__(self, name):
        self.name = name


class _Guarded(Exception):
    """The body traced while loops on data: carry their guards (``symgrad.while_loops``)."""

    def __init__(self, keys):
        self.keys = keys


class _Reshaped(Exception):
    """A carry changed type in the first iteration: peel it and try again."""

    def __init__(self, name, before, after):
        self.name, self.before, self.after = name, before, after


class StackedList(list):
    """A list the loop body appends to: it records the items (the stacked outputs); reading it
    inside the body needs its contents per iteration, which only unrolling gives. ``append``
    stays list's own builtin method: the tracer calls a container's builtin methods directly,
    whereas a Python-level override would be traced like user code (its ``self`` parameter
    then iterated by the alias analysis, which refuses)."""

    def _refuse(self, *args, **kwargs):
        raise _Fallback()

    __getitem__ = __len__ = __iter__ = __contains__ = extend = insert = pop = _refuse
    remove = index = count = sort = reverse = __setitem__ = __delitem__ = _refuse
