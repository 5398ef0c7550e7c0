"""``while`` loops (a mixin of :class:`symgrad.frontend.Tracer`), and the guards they leave.

A ``while`` whose test is a Python bool runs while tracing, like a static ``if`` (at most
:data:`STATIC_TRIPS` iterations: a longer one is refused rather than tracing for ever). Once
the test (or a ``break`` in the body) depends on data, the rest of the loop is traced as a
capped loop region, ``for _ in range(cap): if not test: break; body``, with the break machinery
of ``for`` loops (``symgrad.loops``: a hidden done flag, the body under a branch node), plus a
*guard*: a bool that is true when all ``cap`` trips ran and the test still held. The cap is
the while statement's entry in ``symgrad.guards.CAPS`` (read as a capture); the API grows it and
runs the call again when a guard fires. Neither the IR nor the compiled code depend on the cap,
and a call costs the trips it takes, not the cap: the loop region stops once its done flag is
set (its ``("until", ...)`` exit, ``symgrad.regions``) and its backward loop walks those trips.

Guards are collected per region body being traced (``guard_scopes``): a loop region carries
the guards of its body (or-accumulated, one carry per while statement), a data-dependent
``if`` chooses between its sides' guards like any variable, and whatever reaches the function
body becomes ``Graph.guards``.
"""
from __future__ import annotations

import ast

from . import guards as guard_table
from . import ops
from .ir import Node
from .loop_plan import _Plan, _body_facts
from .loops import DONE, guard_name
from .scope import Break, MISSING

# A while whose test stays a Python bool runs at most this many iterations while tracing.
STATIC_TRIPS = 10_000

# The hidden loop variable of a while traced as a loop region (not an identifier: no user
# variable can be called that).
TRIP = "<trip>"

class WhileLoops:
    """``while`` statements; the tracer's guard scopes."""

    # -- guards --------------------------------------------------------------------------------
    def add_guard(self, key, node: Node):
        """Record ``node`` (a bool) as a guard of the while at ``key`` in the body being traced."""
        scope = self.guard_scopes[-1]
        scope[key] = guard_table.any_of(scope.get(key), node)

    def open_guards(self):
        self.guard_scopes.append({})

    def close_guards(self) -> dict:
        return self.guard_scopes.pop()

    def guards_into_sides(self, sides, scopes):
        """Bind each side's guards (of a data-dependent ``if``) as hidden variables, False
        where a side has none, so joining the sides chooses between them."""
        keys = list(dict.fromkeys(k for scope in scopes for k in scope))
        for side, scope in zip(sides, scopes):
            for key in keys:
                side.env[guard_name(key)] = scope.get(key, False)
        return keys

    def guards_out_of(self, frame, keys):
        """The joined guards (hidden variables of ``frame``) back in the guard scope."""
        for key in keys:
            value = frame.env.pop(guard_name(key), MISSING)
            frame.buffers.pop(guard_name(key), None)
            if isinstance(value, Node):
                self.add_guard(key, value if value.dtype == "bool" else ops.cast(value, "bool"))

    # -- while ---------------------------------------------------------------------------------
    def stmt_While(self, stmt, frame, cont):
        if stmt.orelse:   # symgrad.loop_else
            return self.run_loop_else(stmt, frame, cont)
        enclosing = frame.env.pop(DONE, MISSING)   # an enclosing loop region's flag
        try:
            self._run_while(stmt, frame)
        finally:
            frame.env.pop(DONE, None)
            if enclosing is not MISSING:
                frame.env[DONE] = enclosing

    def _run_while(self, stmt, frame):
        """Static iterations in Python, then (once data decides) the rest as a region."""
        exits = _body_facts(stmt.body)[3]
        for _trip in range(STATIC_TRIPS):
            test = self.located(frame, stmt, lambda: self.eval(stmt.test, frame))
            if isinstance(test, Node):
                self.truth_value(test, stmt, "a while test")   # one element, or refused
                return self._data_while(stmt, frame)
            if not test:
                return
            try:
                if self.run_iteration(stmt, frame, exits):
                    return
            except Break:
                return
            if isinstance(frame.env.get(DONE), Node):   # a break on data: the rest is a region
                test = self.located(frame, stmt, lambda: self.eval(stmt.test, frame))
                if not isinstance(test, Node) and not test:
                    return
                return self._data_while(stmt, frame)
            frame.env.pop(DONE, None)
        self.fail(stmt, f"while loop on static values that runs more than {STATIC_TRIPS} "
                  "iterations while tracing", "make its test depend on an array (it then "
                  "becomes a compiled loop), or use a for loop over range()")

    def _data_while(self, stmt, frame):
        """The loop as ``for <trip> in range(cap): if not test: break; body``, and its guard."""
        loc = frame.source.loc(stmt)
        key = (loc.filename, loc.lineno, loc.col)
        cap = guard_table.cap_of(key)
        self.captured(guard_table.CAPS, key, cap)   # a grown cap makes this trace stale
        _assigned, appended, jumps, _exits = _body_facts(stmt.body)
        if jumps:
            self.fail(stmt, "return (or global/nonlocal) inside a while loop on data")
        if appended:
            self.fail(stmt, f"list.append on '{appended[0]}' inside a while loop on data (the "
                      "list's length would depend on the data)",
                      "carry an array of fixed shape instead (y = np.zeros(n); y[k] = ...)")
        check = ast.If(test=stmt.test, body=[ast.Pass()], orelse=[ast.Break()])
        loop = ast.For(target=ast.Name(id=TRIP, ctx=ast.Store()), iter=ast.Constant(value=0),
                       body=[check, *stmt.body], orelse=[])
        for node in (check, loop, loop.target, loop.iter, *check.body, *check.orelse):
            ast.copy_location(node, stmt)   # errors and comments cite the while line
        self.exit_flag = None
        left = self.loop_region(loop, frame, _Plan(cap, [("range", range(cap))], False),
                                force=True)
        if left is not True or self.exit_flag is None:
            self.fail(stmt, "while loop on data whose body cannot be traced as a loop region",
                      "its variables must keep their dtype and shape from one iteration to the "
                      "next (give them their final type before the loop)")
        frame.env.pop(TRIP, None)
        frame.buffers.pop(TRIP, None)
        test = self.located(frame, stmt, lambda: self.eval(stmt.test, frame))
        ended = ops.cast(ops.lift(self.exit_flag), "bool")
        if isinstance(test, Node):
            test = self.truth_value(test, stmt, "a while test")
            still = test if test.dtype == "bool" else ops.cast(test, "bool")
            self.add_guard(key, ops.logical_and(ops.logical_not(ended), still))
        elif test:
            self.add_guard(key, ops.logical_not(ended))
