"""Loops (``symgrad.regions``) on the CUDA back end: a host-driven launch sequence.

A loop is a *step* of its plan (:class:`LoopStep`, in ``Plan.kernels`` where a kernel would be)
and its body a plan of its own (``codegen.ptx_plan.plan`` over the body's params, its buffers
numbered in the parent's list), whose kernels are compiled into the same module once. The
launcher (``codegen.cuda``, and ``codegen.ptx_emulate`` on the CPU) walks the steps with
:func:`run_steps`: per iteration it points the body's parameters at memory and launches the
body's kernels, in stream order, without synchronising: the loop index is a by-value kernel
argument, row ``i`` of each per-iteration input and stacked output is the array's device
address plus ``i * row_bytes``, each carry one of two buffers that swap after every iteration
(a new value never overwrites the old one while other kernels of the body still read it), the
loop-invariant inputs are read in place. Carries start as device copies of the inits; zero
trips leave the inits. The kernels therefore do not change with the trip count (a new one
reuses the PTX).

Branches are not native on this target: a ``cond`` is expanded into a select between both
sides (``expand_conds``: what ``symgrad.regions.straight_line`` does, for branches only) in the
graph and in every loop body, since taking a branch on the host would need the predicate back
from the device, a synchronisation per branch. A checkpoint's recomputation (``remat``) is
inlined the same way: values are right, and the kernels of a plan hold no intermediate longer
than the plan's buffers do anyway.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

from symgrad.ir import Graph, make, substitute, toposort
from symgrad.regions import Body, inlined, results_of

from .dtypes import storage


# Regions this target inlines (a branch as a select, a checkpoint's recomputation as its body).
_INLINED = ("cond", "remat")


def expand_conds(outputs) -> list:
    """``outputs`` with every ``cond`` a select between its two sides and every ``remat``
    (a checkpoint's recomputation) its body on its operands (loops kept)."""
    from symgrad.ops import cast, where   # the op table sits above this module
    outputs = list(outputs)
    while True:
        region = next((n for n in toposort(outputs) if n.op in _INLINED), None)
        if region is None:
            return outputs
        if region.op == "remat":
            values = inlined(region)
        else:
            then, other = region.attrs
            pred, operands = region.inputs[0], region.inputs[1:]
            a = substitute(then.results, dict(zip(then.params, operands)))
            b = substitute(other.results, dict(zip(other.params, operands)))
            values = [cast(where(pred, x, y), x.dtype) for x, y in zip(a, b)]
        mapping = {make("proj", (region,), (k,)): v for k, v in enumerate(values)}
        outputs = substitute(outputs, mapping)


def without_conds(graph: Graph) -> Graph:
    if not any(n.op in _INLINED for n in toposort(graph.outputs)):
        return graph
    return graph.derive(graph.name, expand_conds(graph.outputs), graph.out_tree)


def _nbytes(dtype: str, shape) -> int:
    return math.prod(shape) * storage(dtype).itemsize


@dataclass
class BodyPlan:
    """A loop body planned as a graph of its own: ``args``/``outs`` its parameter and result
    buffers (slots the launcher points at memory per iteration; ``None``: a result that
    repeats an earlier one, ``repeats`` (k, first))."""
    plan: object
    args: list
    outs: list
    repeats: list


def plan_body(body: Body, buffers: list, name: str) -> BodyPlan:
    from .ptx_plan import plan   # the body is planned like any graph
    graph = without_conds(Graph(name, tuple(f"p{k}" for k in range(len(body.params))),
                                body.params, body.results, tuple(range(len(body.results)))))
    p = plan(graph, buffers)
    args = [p.source[x] for x in body.params]
    firsts = {}
    outs, repeats = [], []
    for k, r in enumerate(graph.outputs):
        if r in firsts:
            outs.append(None)
            repeats.append((k, firsts[r]))
        else:
            firsts[r] = k
            outs.append(p.outputs[k])
    for k, buf in enumerate(args):   # the loop index by value, the rest by pointer
        buffers[buf].kind = "slot" if k else "index"
    for buf in outs:
        if buf is not None:
            buffers[buf].kind = "slot"
    return BodyPlan(p, args, outs, repeats)


@dataclass
class LoopStep:
    """A loop in a plan's launch sequence (see the module docstring)."""
    name: str
    trips: int
    reverse: bool
    inits: list       # buffers
    xs: list
    consts: list
    carries: list     # the loop's carry results (where the final carries live)
    spare: list       # each carry's second buffer
    ys: list
    body: BodyPlan
    row_bytes: list   # of xs, then of ys
    carry_bytes: list
    kind: str = "loop"
    zero: tuple = ()


def loop_steps(proj, source: dict, new, buffers: list, name: str) -> list:
    """The step of ``proj``'s loop (planned once per loop, at the first of its results the plan
    meets; it locates the others): its results' buffers (fresh ones for results nothing reads),
    each carry's spare buffer and the body's plan, named ``name``."""
    loop = proj.inputs[0]
    body, trips, nc, nx, reverse = loop.attrs[:5]   # (no exit: symgrad.regions.without_exits)
    results = results_of(loop)
    dests = [source[r] if r in source else new("tmp", r.dtype, max(r.size, 1)) for r in results]
    for r, d in zip(results, dests):
        source.setdefault(r, d)
    inputs = [source[x] for x in loop.inputs]
    spare = [new("tmp", r.dtype, max(r.size, 1)) for r in results[:nc]]
    row_bytes = [_nbytes(x.dtype, x.shape[1:]) for x in loop.inputs[nc:nc + nx]] + [
        _nbytes(r.dtype, r.shape) for r in body.results[nc:]]
    return [LoopStep(name, trips, reverse, inputs[:nc], inputs[nc:nc + nx], inputs[nc + nx:],
                     dests[:nc], spare, dests[nc:], plan_body(body, buffers, name), row_bytes,
                     [_nbytes(r.dtype, r.shape) for r in results[:nc]])]


# ----------------------------------------------------------------------------------------------
# Running a plan's steps


def all_kernels(p):
    """(plan, kernel) for every kernel of a plan and of its loops' bodies, in a fixed order."""
    stack = [(p, list(p.kernels))]
    out = []
    while stack:
        plan_, steps = stack.pop()
        for k, step in enumerate(steps):
            if isinstance(step, LoopStep):
                stack.append((plan_, steps[k + 1:]))
                stack.append((step.body.plan, list(step.body.plan.kernels)))
                break
            out.append((plan_, step))
    return out


def run_steps(p, addr: dict, launch, copy):
    """Launch a plan's kernels in order, loops per iteration. ``addr``: buffer -> device
    address (a ctypes value for a by-value scalar), updated for the body slots; ``launch(kernel,
    addr)``; ``copy(dst, src, nbytes)`` device to device."""
    for step in p.kernels:
        if isinstance(step, LoopStep):
            _run_loop(step, addr, launch, copy)
        else:
            launch(step, addr)


def _run_loop(step: LoopStep, addr: dict, launch, copy):
    nc, nx = len(step.carries), len(step.xs)
    args, outs = step.body.args, step.body.outs
    for dst, src, nbytes in zip(step.carries, step.inits, step.carry_bytes):
        if nbytes:
            copy(addr[dst], addr[src], nbytes)
    for k, buf in enumerate(step.consts):
        addr[args[1 + nc + nx + k]] = addr[buf]
    old = [addr[b] for b in step.carries]
    new = [addr[b] for b in step.spare]
    x_rows, y_rows = step.row_bytes[:nx], step.row_bytes[nx:]
    sizes = step.carry_bytes + y_rows
    order = range(step.trips - 1, -1, -1) if step.reverse else range(step.trips)
    for i in order:
        addr[args[0]] = ctypes.c_int64(i)
        for k in range(nc):
            addr[args[1 + k]] = old[k]
        for k, (buf, row) in enumerate(zip(step.xs, x_rows)):
            addr[args[1 + nc + k]] = addr[buf] + i * row
        dests = new + [addr[buf] + i * row for buf, row in zip(step.ys, y_rows)]
        for buf, dest in zip(outs, dests):
            if buf is not None:
                addr[buf] = dest
        run_steps(step.body.plan, addr, launch, copy)
        for k, first in step.body.repeats:
            if sizes[k]:
                copy(dests[k], dests[first], sizes[k])
        old, new = new, old
    for k, buf in enumerate(step.carries):
        if old[k] != addr[buf] and step.carry_bytes[k]:
            copy(addr[buf], old[k], step.carry_bytes[k])
