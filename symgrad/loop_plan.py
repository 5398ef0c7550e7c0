"""What a ``for`` loop is, for the loop-region tracer (``symgrad.loops``): the facts of its
body read from the AST (what it rebinds, appends to, how it exits), how it iterates (a
:class:`_Plan`: its trip count and how item i is made), what a carry may hold, the range of
an integer made from loop indices, how a (nested) tuple/list carry is split into one carry
per leaf, and the exceptions by which the tracer's steps signal each
other (fall back to unrolling, peel the first iteration, ...).
"""
from __future__ import annotations

import ast
import numbers

import numpy as np

from .aliases import NO_BUFFERS
from .ir import Node
from .op_base import weak_kind
from .scope import MISSING


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
        elif ufunc_at_target(node) is not None:        # np.add.at(y, idx, v) writes y
            assigned.setdefault(ufunc_at_target(node))
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
        else:
            names.add(ufunc_at_target(node))
    return names - {None}


def ufunc_at_target(node) -> str | None:
    """The variable ``y`` of a call spelled ``<ufunc>.at(y, ...)`` (``np.add.at(y, idx, v)``,
    which writes into ``y``), ``np.copyto(y, ...)``, ``np.fill_diagonal(y, v)`` or
    ``f(..., out=y)``, else None. Read from the spelling: a loop's carries are known before
    its body runs."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Attribute) and node.args and (
            node.func.attr == "at" and isinstance(node.func.value, ast.Attribute)
            or node.func.attr in ("copyto", "fill_diagonal")):
        return _root_name(node.args[0])
    out = out_keyword(node)
    return _root_name(out) if out is not None else None


def out_keyword(call: ast.Call):
    """The expression of a call's ``out=`` (``out=(y,)`` is ``y``), or None."""
    out = next((k.value for k in call.keywords if k.arg == "out"), None)
    if isinstance(out, ast.Tuple) and len(out.elts) == 1:
        out = out.elts[0]
    return out


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


def _part(value, body=()):
    """('range', range) or ('rows', node) for a value a loop region can iterate, else None.
    A list or tuple of traced arrays of one dtype and shape (a sequence passed as a list) is
    iterated as the rows of their stack, unless the body writes anything in place (a row of
    the stack is not the list's array, and an alias of an item could be written through any
    name: such a loop iterates the list itself, whose alias checks answer the write)."""
    if isinstance(value, range):
        return ("range", value)
    if isinstance(value, Node) and value.ndim >= 1:
        return ("rows", value)
    if isinstance(value, (list, tuple)) and stackable(value) and not written_in_place(body):
        from . import ops   # (ops sits above this module)
        return ("rows", ops.stack(list(value)))
    if isinstance(value, np.ndarray) and value.ndim >= 1 and value.dtype.kind in "fiub" and \
            _body_facts(body)[3]:
        # A constant array unrolls (its rows are static), but a break/continue on data needs
        # a region: its rows as a constant (NumPy's rows are strong-typed scalars, as these).
        from . import ops
        return ("rows", ops.lift(value))
    return None


def stackable(items, least: int = 2) -> bool:
    """Whether ``items`` are traced arrays of one dtype and shape (``least`` of them at least:
    a loop over one item is no loop, but a traced index may pick the only one)."""
    if len(items) < least or not all(isinstance(v, Node) for v in items):
        return False
    return all(v.dtype == items[0].dtype and v.shape == items[0].shape for v in items)


def _length(part) -> int:
    if part[0] == "span":
        return part[1].cap
    return len(part[1]) if part[0] == "range" else part[1].shape[0]


class Span:
    """``range(start, stop, step)`` whose bounds are integers made from enclosing loop regions'
    indices (a triangular loop: ``range(i + 1, n)``): ``count`` (an int64 node; at most ``cap``,
    negative for no trips) iterations of ``start + k * step``, k = 0, 1, ...; ``cap``, the most
    iterations any value of the indices gives, is the static length of the loop region, which
    runs only the first ``count`` (its ``("count",)`` exit): an iteration outside the range is
    never run, forward or backward. ``bounds``: the lowest and highest item of any of them."""

    def __init__(self, start, step: int, count: Node, cap: int, bounds):
        self.start, self.step, self.count, self.cap, self.bounds = start, step, count, cap, bounds


def span_of(args, ranges: dict):
    """The :class:`Span` of ``range(*args)`` whose bounds are integers of loop indices (and
    static ints) of known range, step 1 or -1; None for any other range (a static one, a bound
    made from data: a loop cannot be sized by it)."""
    from . import ops   # (ops sits above this module)
    if not 1 <= len(args) <= 3 or not any(isinstance(a, Node) for a in args):
        return None
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args[:2], args[2] if len(args) == 3 else 1)
    if not isinstance(step, int) or isinstance(step, bool) or step not in (1, -1):
        return None
    bounds = [_static_range(v, ranges) for v in (start, stop)]
    if None in bounds:
        return None
    (lo_a, hi_a), (lo_b, hi_b) = bounds
    if step == 1:
        count, cap = ops.sub(stop, start), max(hi_b - lo_a, 0)
        items = (lo_a, min(hi_b - 1, hi_a + cap - 1))
    else:
        count, cap = ops.sub(start, stop), max(hi_a - lo_b, 0)
        items = (max(lo_b + 1, lo_a - cap + 1), hi_a)
    count = ops.lift(count)
    if (count.dtype, count.shape) != ("int64", ()):
        return None
    return Span(start, step, count, cap, items)


def _static_range(value, ranges: dict):
    """(lowest, highest) of a range or window bound: a Python (or NumPy) int, or an int64
    scalar node of loop indices (``_int_range``); None for anything else."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value), int(value)
    if isinstance(value, Node) and value.shape == () and value.dtype == "int64":
        return _int_range(value, ranges)
    return None


def _carry_type(value):
    """(dtype, shape, weak) of a value a loop may carry, or None."""
    if isinstance(value, Node):   # (one standing for a Python number is weak: a loop index)
        return value.dtype, value.shape, weak_kind(value) is not None
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
    """A carry changed type in the first iteration: peel it and try again. ``cast_first``:
    the body reads the carry only cast to its new dtype (its first iteration is every other
    one on the carry's start cast to that dtype: it needs no peeling)."""

    def __init__(self, name, before, after, cast_first=False):
        self.name, self.before, self.after, self.cast_first = name, before, after, cast_first


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


# ----------------------------------------------------------------------------------------------
# Carries that are (nested) tuples / lists: one carry per leaf, the container rebuilt around them

def _is_container(value) -> bool:
    return type(value) in (tuple, list)   # not a namedtuple, StackedList or other subclass


def flatten_carry(value):
    """(structure, leaves) of a (nested) tuple/list: the structure in pre-order, ``(type,
    length)`` per container and ``None`` per leaf; the leaves with their index paths."""
    structure, leaves = [], []
    stack = [((), value)]
    while stack:
        path, v = stack.pop()
        if _is_container(v):
            structure.append((type(v), len(v)))
            stack.extend(((*path, k), item) for k, item in reversed(list(enumerate(v))))
        else:
            structure.append(None)
            leaves.append((path, v))
    return tuple(structure), leaves


def rebuild_carry(structure, leaves):
    """The container ``structure`` (from :func:`flatten_carry`) around ``leaves``, in order."""
    values = iter(leaves)
    open_ = [[list, 1, []]]   # a one-item holder of the result
    for entry in structure:
        if entry is None:
            open_[-1][2].append(next(values))
        else:
            open_.append([entry[0], entry[1], []])
        while len(open_) > 1 and len(open_[-1][2]) == open_[-1][1]:
            kind, _, items = open_.pop()
            open_[-1][2].append(kind(items))
    return open_[0][2][0]


def leaf_name(name: str, path) -> str:
    """The hidden variable carrying the leaf at ``path`` of the container ``name``: its
    name in generated code first (``state_0_1``), then how errors name it (``state[0][1]``)."""
    return f"<{'_'.join([name, *map(str, path)])} {name}{''.join(f'[{k}]' for k in path)}>"


def shown_carry(name: str) -> str:
    """How a carry is named to the user (a leaf of a container: ``state[0]``)."""
    return name[1:-1].split()[1] if name.startswith("<") and "[" in name else name


def container_carries(stmt, frame, assigned, appended, targets):
    """(name -> (structure, leaf names) of each carry holding a (nested) tuple/list, the
    names to carry: its leaves in its place). One carry per leaf, bound in ``frame`` under
    its hidden name for this trace (:func:`drop_leaves` unbinds them). A container
    the body calls a method of or writes into in place is unrolled (its items are the
    loop's values only when the body rebuilds it)."""
    in_place = written_in_place(stmt.body)
    called = {node.func.value.id for node in ast.walk(ast.Module(body=stmt.body, type_ignores=[]))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name)}
    containers = {}
    for name in assigned:
        value = frame.env.get(name, MISSING)
        if name in targets or name in appended or type(value) not in (tuple, list):
            continue
        if name in in_place or name in called:
            raise _Fallback()
        structure, leaves = flatten_carry(value)
        names = [leaf_name(name, path) for path, _ in leaves]
        for leaf, (_, v) in zip(names, leaves):
            frame.env[leaf] = v
            if name in frame.buffers:
                frame.buffers[leaf] = frame.buffers[name]
        containers[name] = (structure, names)
    return containers, [leaf for name in assigned
                        for leaf in (containers[name][1] if name in containers else [name])]


def leaves_after_body(containers, child, in_place):
    """Bind each container's leaves as the body leaves them; a body that changes the
    container's structure, or writes in place into memory it shares, is unrolled."""
    for name, (structure, leaves) in containers.items():
        value = child.env.get(name, MISSING)
        if type(value) not in (tuple, list):
            raise _Fallback()
        after, values = flatten_carry(value)
        if after != structure:
            raise _Fallback()
        held = child.buffers.get(name, NO_BUFFERS)
        if any(child.buffers.get(other, NO_BUFFERS) & held for other in in_place):
            raise _Fallback()
        for leaf, (_, v) in zip(leaves, values):
            child.env[leaf] = v
            child.buffers.pop(leaf, None)


def drop_leaves(frame, containers):
    """Unbind the leaves' hidden variables (bound for one trace by :func:`container_carries`)."""
    for _, leaves in containers.values():
        for leaf in leaves:
            frame.env.pop(leaf, None)
            frame.buffers.pop(leaf, None)


def check_carried_memory(names, frame, child, assigned):
    """The body is traced once, with each carry in the memory it has before the loop: a
    body that writes into a carry in place and leaves it in memory the function does not
    own or that a name the body does not rebind holds (``h = x``) would start the next
    iteration elsewhere, so the loop is unrolled (where each iteration's writes are
    checked as they are)."""
    for name in names:
        end = child.buffers.get(name, NO_BUFFERS) - frame.buffers.get(name, NO_BUFFERS)
        if any(b.owner for b in end) or any(
                held & end for other, held in child.buffers.items()
                if other != name and other not in assigned):
            raise _Fallback()


def carry_buffers(name, frame, child):
    """After the loop, a carry lives where the body left it (written in place: where it
    was before)."""
    buffers = child.buffers.get(name)
    if buffers:
        frame.buffers[name] = buffers
    else:
        frame.buffers.pop(name, None)
