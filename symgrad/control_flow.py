"""Control flow of the tracer (a mixin of :class:`symgrad.frontend.Tracer`): ``if`` on a
static value is decided while tracing, ``if`` on data runs both branches and merges what they
bound with selects (``where``); ``for`` over a static iterable unrolls, with ``break`` and
``continue`` (``while``: ``symgrad.while_loops``). This is the module regions (loops and branches as IR nodes
with bodies) will replace the unrolling in.
"""
from __future__ import annotations

import ast
import numbers

import numpy as np

from . import guards as guard_table, ops, regions
from .aliases import NO_BUFFERS, zero_d_buffers
from .ir import Node, is_float
from .loop_else import broke_name, without_else
from .while_loops import WhileLoops
from .scope import (MISSING, Break, Continue, Frame, Return, Undefined, first_seen, fork, is_data,
                    walk_nodes)


def _contains(stmts, kinds) -> bool:
    for stmt in stmts:
        for node in ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.Lambda)) else ():
            if isinstance(node, kinds):
                return True
    return False


class _Merged:
    """A placeholder, while merging, for the sequence built at ``index``."""
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


class ControlFlow(WhileLoops):
    """``if``, ``for``, ``break``, ``continue`` and ``while``; the tracer supplies ``eval``,
    ``exec_block``, ``fail``, ``assign`` and the rest."""

    def stmt_If(self, stmt, frame, cont):  # only reached through exec_if
        self.exec_if(stmt, frame, cont)

    def exec_if(self, stmt, frame: Frame, cont):
        self.frame = frame
        cond = self.located(frame, stmt, lambda: self.eval(stmt.test, frame))
        if not isinstance(cond, Node):
            self.exec_block(stmt.body if cond else stmt.orelse, frame, cont)
            return
        if _contains(stmt.body + stmt.orelse, (ast.Break, ast.Continue)):
            cond = self.truth_value(cond, stmt, "an if that breaks or continues a loop")
            if frame.exits is not None and frame.exits == frame.loop_depth:
                return self.exec_exit_if(stmt, frame, cont, cond)   # in a loop region
            self.fail(stmt, "break/continue inside an if on a data-dependent condition",
                      "in a loop that is unrolled (over a Python list or tuple of numbers, or "
                      "one that appends to a list); loop over range(...) or an array instead")
        has_return = _contains(stmt.body + stmt.orelse, (ast.Return,))
        if has_return and frame.loop_depth:
            self.fail(stmt, "return inside a data-dependent if within a loop")
        branches, returned, scopes, failed = [], [], [], []
        for body in (stmt.body, stmt.orelse):
            child = fork(frame)
            self.frames.append(child)
            self.open_guards()   # the guards of while loops in this side (symgrad.while_loops)
            try:
                try:
                    self.trace_side(body, child, has_return, cont, branches, returned)
                except (ValueError, TypeError, IndexError, ZeroDivisionError, NameError, KeyError,
                        AttributeError) as e:
                    key = guard_table.raised(e)
                    if key is None or failed:   # not the user's error, or both sides raise
                        raise
                    failed.append((len(branches), key))
                    branches.append(None)
                    returned += [NO_BUFFERS] if has_return else []
            finally:
                self.frames.pop()
                scopes.append(self.close_guards())
            self.frame = frame
        if failed:   # the other side is the value; taking this one raises (as NumPy, only then)
            side, key = failed[0]
            for table in (branches, returned, scopes) if has_return else (branches, scopes):
                table[side] = table[1 - side]
        if has_return and any(scopes):
            self.fail(stmt, "a while loop on data in a data-dependent if whose branches return",
                      "assign the result to a variable and return it after the if")
        if has_return:
            value = self.merge(cond, branches[0], branches[1], stmt, "return value", frame)
            self.raise_if_taken(cond, failed)
            raise Return(value, _merged_buffers(returned[0], returned[1], value, frame.source.loc(stmt)))
        keys = self.guards_into_sides(branches, scopes)
        self.join_branches(cond, branches[0], branches[1], stmt, frame)
        self.guards_out_of(frame, keys)
        self.raise_if_taken(cond, failed)

    def trace_side(self, body, child, has_return, cont, branches, returned):
        """One side of a data-dependent ``if``: its frame (or, where the sides return, its
        return value, run with everything after the if) appended to ``branches``."""
        if not has_return:
            self.exec_block(body, child, ())
            branches.append(child)
            return
        rest = [s for block in cont for s in block]   # run with everything after it, then select
        try:
            self.exec_block(body + rest, child, ())
            value, buffers = None, NO_BUFFERS
        except Return as r:
            value, buffers = r.value, r.buffers
        branches.append(value)
        returned.append(buffers)

    def raise_if_taken(self, cond, failed):
        """The error guard of a side that raised while tracing: true when that side is taken."""
        if not failed:
            return
        side, key = failed[0]
        taken = cond if cond.dtype == "bool" else ops.cast(cond, "bool")
        if taken.ndim:
            taken = ops.reduce("max", taken)
        self.add_guard(key, taken if side == 0 else ops.logical_not(taken))

    def truth_value(self, cond: Node, stmt, what: str) -> Node:
        """``cond`` as one truth value where Python needs one (NumPy's ``bool(a)``): a
        one-element array is its element; a larger one is refused as NumPy refuses it."""
        if cond.ndim == 0:
            return cond
        if cond.size == 1:
            return ops.reshape(cond, ())
        self.fail(stmt, f"{what} on an array of shape {cond.shape} (NumPy: the truth value of "
                  "an array with more than one element is ambiguous)",
                  "reduce it to one truth value (np.any / np.all)")

    def join_branches(self, cond, then: Frame, other: Frame, stmt, frame: Frame):
        """Bind in ``frame`` what the two sides of a data-dependent ``if`` bound: one choice
        for every variable both sides have, ``Undefined`` for one only one side has."""
        loc = frame.source.loc(stmt)
        names = sorted(set(then.env) | set(other.env), key=first_seen(then.env, other.env))
        both = [n for n in names if then.env.get(n, MISSING) is not MISSING
                and other.env.get(n, MISSING) is not MISSING]
        # One choice for every variable the branches bind (one branch node on a scalar
        # condition: each side's work runs once, and only when taken).
        chosen = dict(zip(both, self.merge(cond, tuple(then.env[n] for n in both),
                                           tuple(other.env[n] for n in both), stmt,
                                           [f"variable '{n}'" for n in both], frame)))
        for name in names:
            a, b = then.env.get(name, MISSING), other.env.get(name, MISSING)
            if a is MISSING or b is MISSING:
                frame.env[name] = Undefined(name, loc)
                continue
            frame.env[name] = chosen[name]
            # the value is one side's or the other's: it may live where either lives
            self.bind_buffers(frame, name, frame.env[name],
                              _merged_buffers(then.buffers.get(name, NO_BUFFERS),
                                              other.buffers.get(name, NO_BUFFERS), frame.env[name], loc))
            if frame.env[name] is not a and name.isidentifier():   # not a hidden flag
                self.record(frame, stmt, frame.env[name], name)

    def merge(self, cond, a, b, stmt, what, frame):
        """The value of a data-dependent choice between ``a`` and ``b``, item by item for
        tuples and lists of one length (iterative, so deeply nested values cannot exhaust the
        stack), the value itself where both sides agree. On a scalar condition the traced
        values are chosen by one branch node (``symgrad.regions.cond``: only the taken side
        runs, so the other never reaches a value or a derivative); on an array condition,
        or between constants, by selects. ``what`` names the value (a list: the items of a
        top-level tuple)."""
        top: list = []
        stack = [(a, b, top, what)]
        sequences = []          # (kind, items), outermost first
        pending: list = []      # (a, b) pairs the branch node chooses between
        while stack:
            x, y, into, name = stack.pop()
            if x is not y and isinstance(x, (list, tuple)) and type(x) is type(y) and len(x) == len(y):
                items: list = []
                sequences.append((type(x), items))
                into.append(_Merged(len(sequences) - 1))
                names = name if isinstance(name, list) else [name] * len(x)
                stack.extend((p, q, items, w) for p, q, w in reversed(list(zip(x, y, names))))
            else:
                leaf = self.merge_leaf(cond, x, y, stmt, name)
                if isinstance(leaf, _Choice):
                    leaf.index = len(pending)
                    pending.append(leaf)
                into.append(leaf)
        if pending:
            values = self.branch_values(cond, pending, frame)
            for leaf in pending:
                leaf.value = values[leaf.index]
        built: list = [None] * len(sequences)
        for i in reversed(range(len(sequences))):   # inner sequences first
            kind, items = sequences[i]
            built[i] = kind(_resolved(built, v) for v in items)
        return _resolved(built, top[0])

    def branch_values(self, cond, choices, frame) -> list:
        """One ``cond`` node choosing each pair: the values each side computed, of one dtype
        and shape (as ``np.where`` would promote them)."""
        then, other = [], []
        for c in choices:
            like = ops.where(cond, c.a, c.b)      # the dtype and shape NumPy's choice has
            then.append(ops.broadcast_to(ops.cast(ops.lift(c.a), like.dtype), like.shape))
            other.append(ops.broadcast_to(ops.cast(ops.lift(c.b), like.dtype), like.shape))
        outer = {n for f in self.frames + [frame] for v in f.env.values() for n in walk_nodes(v)}
        pred = cond if cond.dtype == "bool" else ops.cast(cond, "bool")
        values = regions.cond(pred, then, other, outer=outer)
        return [_weak_if_both(v, c.a, c.b) for v, c in zip(values, choices)]

    def merge_leaf(self, cond, a, b, stmt, what):
        if a is b:
            return a
        if isinstance(a, Undefined) or isinstance(b, Undefined):
            return a if isinstance(a, Undefined) else b
        leaves = all(isinstance(v, (Node, numbers.Number, np.ndarray)) for v in (a, b))
        if leaves and not is_data(a) and not is_data(b) and np.array_equal(a, b):
            return a
        if leaves and (is_data(a) or is_data(b) or isinstance(a, (numbers.Number, np.ndarray))):
            self.check_branch_shapes(cond, a, b, stmt, what)
            if cond.ndim == 0 and (is_data(a) or is_data(b)):
                return _Choice(a, b)
            return _weak_if_both(ops.where(cond, a, b), a, b)
        try:
            if a == b:
                return a
        except Exception:
            pass
        if a is None or b is None:
            self.fail(stmt, f"{what} is None on one branch of a data-dependent if")
        self.fail(stmt, f"{what} differs between the branches of a data-dependent if in a way "
                  "that cannot be selected elementwise")

    def check_branch_shapes(self, cond, a, b, stmt, what):
        """A data-dependent choice between values of two shapes has a shape known only at
        run time; a select would broadcast the smaller one (wrong numbers), so refuse it. With
        an array condition (an elementwise if) each side need only broadcast to its shape."""
        shape_a, shape_b = tuple(np.shape(a)), tuple(np.shape(b))
        cond_shape = tuple(np.shape(cond))
        try:
            elementwise = bool(cond_shape) and np.broadcast_shapes(cond_shape, shape_a, shape_b) == cond_shape
        except ValueError:
            elementwise = False
        dtype_a, dtype_b = _strong_dtype(a), _strong_dtype(b)
        if not elementwise and dtype_a != dtype_b and is_float(dtype_a) and is_float(dtype_b):
            # NumPy would give the taken side's precision, known only at run time: float32 work
            # would silently run in float64. (A Python number is weak and takes the other side's
            # dtype; an integer side is promoted exactly, as a select of it with floats must be.)
            self.fail(stmt, f"{what} is {dtype_a} on one branch and {dtype_b} on the other of a "
                      "data-dependent if (its dtype would depend on the data)",
                      "cast one side with .astype(...) so both branches have one dtype")
        if shape_a == shape_b:
            return
        carried = [v for v in (a, b) if isinstance(v, Node) and v.op == "param"]
        if not elementwise and carried and isinstance(what, str) and what.startswith("variable"):
            # one side is the loop's value before the iteration: the carry itself changes shape
            after = shape_b if carried[0] is a else shape_a
            self.fail(stmt, f"loop-carried {what} changes shape from {carried[0].shape} to "
                      f"{after} between iterations", "give it its final shape before the loop")
        if not elementwise:
            self.fail(stmt, f"{what} has shape {shape_a} on one branch and {shape_b} on the other "
                      "of a data-dependent if (its shape would depend on the data)",
                      "give both branches the same shape (e.g. np.full_like / np.broadcast_to), or "
                      "select elementwise with np.where")

    def stmt_For(self, stmt, frame, cont):
        if stmt.orelse:   # the loop, then an if on whether it broke (symgrad.loop_else)
            return self.run_loop_else(stmt, frame, cont)
        plan = self.plan_of(stmt, frame)
        left = False if plan is None else self.loop_region(stmt, frame, plan)
        if left is True:
            return
        if left is not False:     # a first iteration ran (peeled): unroll the rest
            items = iter(self.plan_items(left))
            iterable = self.eval(stmt.iter, frame)
        else:
            iterable = self.eval(stmt.iter, frame)   # a traced array iterates over its rows
            try:
                items = iter(iterable)
            except TypeError:
                self.fail(stmt.iter, f"iteration over {type(iterable).__name__}")
        origin = self.items_origin(stmt.iter, iterable, frame)   # rows: views of it
        first = 0 if left is False else left.first   # the row item 0 is
        frame.loop_depth += 1
        try:
            for k, item in enumerate(items):
                self.assign(stmt.target, item, frame, stmt, origin=origin)
                if plan is not None:
                    self.bind_row_views(stmt, frame, first + k)
                try:
                    self.exec_block(stmt.body, frame, ())
                except Continue:
                    continue
                except Break:
                    break
        finally:
            frame.loop_depth -= 1

    def run_loop_else(self, stmt, frame, cont):
        form = self.else_forms.get(stmt)
        if form is None:
            form = self.else_forms[stmt] = without_else(stmt)
        try:
            self.exec_block(form, frame, cont)
        finally:
            frame.env.pop(broke_name(stmt), None)
            frame.buffers.pop(broke_name(stmt), None)

    def stmt_Break(self, stmt, frame, cont):
        raise Break()

    def stmt_Continue(self, stmt, frame, cont):
        raise Continue()


class _Choice:
    """A leaf a branch node will choose (``value``, once built)."""
    __slots__ = ("a", "b", "index", "value")

    def __init__(self, a, b):
        self.a, self.b, self.index, self.value = a, b, 0, None


def _resolved(built, v):
    if isinstance(v, _Merged):
        return built[v.index]
    return v.value if isinstance(v, _Choice) else v


def _weak_if_both(chosen, a, b):
    """A scalar choice between two Python numbers of one kind (traced ones included: a loop
    index) is a Python number in NumPy too, whichever side runs: marked weak, so a float32
    array times it stays float32."""
    kinds = {ops.weak_kind(a), ops.weak_kind(b)}
    if len(kinds) == 1 and None not in kinds and isinstance(chosen, Node) and not chosen.ndim \
            and ops.in_weak_scope():
        return ops.mark_weak(chosen)
    return chosen


def _strong_dtype(v) -> str:
    """The dtype of a traced value or NumPy array/scalar; "" for a (weak) Python number, or a
    node standing for one (a Python number carried by a loop region: ``s = 0.0`` before it)."""
    if isinstance(v, Node):
        return "" if ops.weak_kind(v) is not None else v.dtype
    if isinstance(v, (np.ndarray, np.generic)):
        return v.dtype.name
    return ""


def _merged_buffers(then: frozenset, other: frozenset, value, loc) -> frozenset:
    """Where a variable chosen by a data-dependent ``if`` may live: where either side's
    lives. A 0-d value that is an ndarray on one side and a scalar on the other may be
    either (symgrad.aliases): its buffers say so."""
    if bool(then) != bool(other) and isinstance(value, Node) and value.ndim == 0:
        return then | other | zero_d_buffers(
            f"the data-dependent if at line {loc.lineno} gives a 0-d array on one branch and a "
            "scalar on the other")
    return then | other
