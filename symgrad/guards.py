"""The caps of ``while`` loops on data, and the guards that tell when one was too small.

A ``while test: body`` on data is traced as a capped loop region,
``for _ in range(cap): if not test: break; body`` (``symgrad.while_loops``), so the IR, the
compiled code and the generated source do not depend on how many trips a call takes. Its
*guard* is a bool node, true when the loop used all ``cap`` trips and the test still held (the
cap was too small). Guards travel with the graph (``Graph.guards``: while key -> node) through
every transform; the back ends compute them as hidden extra outputs (:func:`with_guard_outputs`)
and the API checks them after each call (a hot call: the back end's call plan, which declines
when one fired): when one fired, that while's cap grows (:data:`GROWTH` times) and the call
is traced and run again.

Each while statement's cap lives in :data:`CAPS`, keyed by its location; a trace reads it as a
*capture* (``symgrad.captures``), so a grown cap makes every cached entry that read it, root
and derived functions alike, trace again. A loop still running after :data:`MAX_TRIPS` trips
raises :class:`WhileLimitError` instead of growing its cap for ever.

A guard of the other kind, an *error guard*, stands for an exception NumPy raises on a run-time
value that a compiled function cannot raise by itself: ``np.linalg.inv`` of a singular matrix
(``LinAlgError: Singular matrix``), ``cholesky`` of one that is not positive definite. A
builder reports it (:func:`report`, a bool node true when the call must raise) while the
tracer collects reports around each library call (:func:`reporting`) and files them under an
:class:`ErrorKey` naming the call's line; when one fires the API raises the error
(:func:`raise_errors`) instead of growing a cap. It travels through every transform like a
while's guard, so the derivative of a function that calls ``inv`` raises where its value does.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import NamedTuple

import numpy as np

from . import ops
from .ir import Graph, Node
from .runtime import flat_values

# The trips a data while gets first; a call that needs more grows the cap by GROWTH (the
# trip count is a run-time parameter of the compiled loop: growing it does not recompile).
INITIAL_CAP = 16
GROWTH = 8
# The most trips a while loop on data may take (2**24: ~16.7 million); beyond it the loop is
# taken for one that never ends.
MAX_TRIPS = 2 ** 24

# (filename, line, column) of a while statement -> its current cap (an int)
CAPS: dict = {}


class WhileLimitError(RuntimeError):
    """A ``while`` loop on data still ran after :data:`MAX_TRIPS` trips."""


def cap_of(key) -> int:
    """The cap of the while statement at ``key`` (set to the initial one on first use, so a
    capture of it reads the very object the table holds)."""
    return CAPS.setdefault(key, INITIAL_CAP)


def grow(keys) -> None:
    """Grow the caps of the while loops whose guards fired, or raise :class:`WhileLimitError`
    for one already at :data:`MAX_TRIPS`."""
    for key in keys:
        cap = cap_of(key)
        if cap >= MAX_TRIPS:
            filename, lineno, _col = key
            raise WhileLimitError(
                f"{filename}:{lineno}: the while loop on data did not end within {MAX_TRIPS} "
                "trips (symgrad.guards.MAX_TRIPS): it looks like it never ends for these "
                "arguments")
        CAPS[key] = min(cap * GROWTH, MAX_TRIPS)


def describe(key) -> str:
    filename, lineno, _col = key
    return f"{filename}:{lineno}"


def any_of(a, b):
    """``a or b`` of two guards, either None (no guard)."""
    if a is None:
        return b
    if b is None:
        return a
    return ops.logical_or(a, b)


def merge_guards(into: dict, more: dict) -> dict:
    """``into`` with each guard of ``more`` or-ed in (per while statement)."""
    for key, node in more.items():
        into[key] = any_of(into.get(key), node)
    return into


def guard_nodes(graph: Graph) -> list[Node]:
    return list(graph.guards.values())


def rebuilt_guards(graph: Graph, nodes) -> dict:
    """``graph.guards`` with its nodes replaced by ``nodes`` (same order)."""
    return dict(zip(graph.guards, nodes))


def with_guard_outputs(graph: Graph) -> Graph:
    """What a back end runs for a guarded graph: its outputs followed by one bool per guard,
    returned as ``(results, (guard, ...))``; ``graph`` itself when it has none."""
    if not graph.guards:
        return graph
    n = len(graph.outputs)
    flags = [g if g.ndim == 0 else ops.reduce("max", g) for g in graph.guards.values()]
    result = graph.derive(graph.name, tuple(graph.outputs) + tuple(flags),
                          (graph.out_tree, tuple(range(n, n + len(flags)))))
    result.guards = {}
    return result


def fired(graph: Graph, flags) -> list:
    """The keys of the guards (of ``graph``, in order) whose run-time value ``flags`` is true."""
    return [key for key, flag in zip(graph.guards, flags) if bool(np.asarray(flag))]


class GuardedSignature:
    """What back ends see of a signature with while loops on data or error guards
    (``symgrad.backends``): its graph with the guards as extra outputs, ``guard_flags`` of
    them (a back end's call plan checks them itself: see ``Backend.call_plan``)."""
    __slots__ = ("graph", "guard_flags", "__weakref__")

    def __init__(self, graph: Graph):
        self.graph = with_guard_outputs(graph)
        self.guard_flags = len(graph.guards)


def run_guarded(entry, backend, values, retrace):
    """Run ``entry`` (a ``symgrad.api.Compiled`` with guards) on ``backend``; while a guard
    fired, grow those caps and run the entry ``retrace()`` gives (traced with them). Returns
    ``(entry, prepared, results)`` of the run whose caps sufficed."""
    while True:
        prepared = entry.prepare(backend)
        flat = values if entry.flat_plan is None else flat_values(values, entry.flat_plan)
        result, flags = backend.run(prepared, flat, None)
        keys = fired(entry.graph, flags)
        if not keys:
            return entry, prepared, result
        raise_errors(keys)
        grow(keys)
        entry = retrace()


# ----------------------------------------------------------------------------------------------
# Error guards: a run-time condition under which NumPy raises

# an error guard's kind -> (exception type, NumPy's message)
ERRORS = {
    "singular": (np.linalg.LinAlgError, "Singular matrix"),
    "not positive definite": (np.linalg.LinAlgError, "Matrix is not positive definite"),
}


# The errors a compiled kernel reports through an *error word* of its call (the CPU's flag
# slot, the GPU's flag buffer: zeroed before the call, set by any thread that meets one, read
# by the host after it): NumPy raises them from inside an operation on data (a gather's index
# out of range), where a kernel can only note it. Word value -> (exception type, message);
# 0 is no error. The kernels keep memory safe (an out-of-range index reads a position in
# bounds), the host raises instead of returning what they computed.
INDEX_OUT_OF_BOUNDS = 1
KERNEL_ERRORS = {
    INDEX_OUT_OF_BOUNDS: (IndexError, "an index array has an entry out of bounds"),
}


def kernel_error(name: str, code: int) -> Exception:
    """The exception for error word ``code`` of a call of the compiled function ``name``."""
    kind, message = KERNEL_ERRORS[code]
    return kind(f"{name}: {message}")


class ErrorKey(NamedTuple):
    """The key of an error guard: the call that raises (its first three fields are a while
    key's, so the hidden carry of a guard through a loop is named alike) and its kind."""
    filename: str
    lineno: int
    col: int
    text: str     # the stripped source line, for the message
    kind: str     # a key of ERRORS


def is_error(key) -> bool:
    return isinstance(key, ErrorKey)


# The kind of an error guard for an exception raised while tracing one side of an ``if`` on
# data (a shape error on a side NumPy may never run): "raised <builtin type>: <message>"
RAISED = "raised "
_RAISED_TYPES = {t.__name__: t for t in (ValueError, TypeError, IndexError, ZeroDivisionError,
                                         NameError, KeyError, AttributeError)}


def raised(e: Exception):
    """The error guard's key for ``e``, a located error of tracing (``_symgrad_at``: its
    statement and NumPy's message), or None when ``e`` is not one: raised at run time when
    the side that raised it is taken, as NumPy raises it only then."""
    at = getattr(e, "_symgrad_at", None)
    if at is None or type(e).__name__ not in _RAISED_TYPES or _RAISED_TYPES[type(e).__name__] is not type(e):
        return None
    loc, message = at
    return ErrorKey(loc.filename, loc.lineno, loc.col, loc.text, f"{RAISED}{type(e).__name__}: {message}")


def error_for(key: ErrorKey) -> Exception:
    """NumPy's exception, its message prefixed with the user's file and line (as the located
    errors of tracing are)."""
    if key.kind.startswith(RAISED):
        name, message = key.kind[len(RAISED):].split(": ", 1)
        kind = _RAISED_TYPES[name]
    else:
        kind, message = ERRORS[key.kind]
    return kind(f"{key.filename}:{key.lineno}: {message}\n    {key.text}")


def raise_errors(keys) -> None:
    """Raise the error of the first error guard among the fired ``keys``, if any."""
    for key in keys:
        if is_error(key):
            raise error_for(key)


# the reports of the library call being traced now: one per thread (traces of different
# Functions may run at once), the innermost call's (builders may call builders)
_REPORTS: contextvars.ContextVar = contextvars.ContextVar("symgrad_guard_reports", default=None)


@contextlib.contextmanager
def reporting():
    """Collect the :func:`report` calls of the builders run inside: yields the list of
    ``(kind, node)`` they report."""
    found: list = []
    token = _REPORTS.set(found)
    try:
        yield found
    finally:
        _REPORTS.reset(token)


def report(kind: str, flag: Node) -> None:
    """A builder's condition ``flag`` (a bool node, any shape: any true entry raises) under
    which its call raises ``ERRORS[kind]``. Outside a trace nobody checks guards: dropped."""
    if kind not in ERRORS:
        raise KeyError(f"unknown error guard kind {kind!r}")
    found = _REPORTS.get()
    if found is not None:
        found.append((kind, flag if flag.ndim == 0 else ops.reduce("max", flag)))
