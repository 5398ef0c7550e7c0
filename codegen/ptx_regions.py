"""Loops and branches (``symgrad.regions``) on the CUDA back end: a host-driven launch sequence.

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

A branch (``cond``) whose sides are computed in place (elementwise ops, views, gathers) is no
step: its results are computed inside the kernels that read them, through a real branch per
element to the taken side (``ptx_plan.fused_branches``, ``ptx_build.KernelBuilder._branch``).
Any other branch is a step too (:class:`CondStep`): each side is a plan of its own over
the branch's operands (read in place) whose kernels write the branch's results, and every one
of those kernels (those of loops and branches inside a side too) is *guarded*: it reads the
predicate from device memory and returns at once unless its side is the one taken
(``Kernel.guards``, a conditional branch at the kernel's entry). The launcher launches both
sides without looking at the predicate (taking the branch on the host would need it back from
the device, a synchronisation per branch); only the taken side computes anything, so a NaN or
an inf of the side not taken is never computed, let alone mixed into a result. What the
launcher itself does inside a side (a loop's carry copies, zeroing before a scatter) touches
only that side's own buffers: a side's results get buffers of their own that only its guarded
kernels write (``ptx_plan.plan(kernel_written=True)``).

A checkpoint's recomputation (``remat``) is inlined (``inline_remats``): values are right, and
the kernels of a plan hold no intermediate longer than the plan's buffers do anyway.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

from symgrad.ir import Graph, make, substitute, toposort
from symgrad.regions import Body, inlined, results_of

from .dtypes import storage


def inline_remats(outputs) -> list:
    """``outputs`` with every ``remat`` (a checkpoint's recomputation) its body on its
    operands (loops and branches kept; their bodies are planned with this applied too)."""
    outputs = list(outputs)
    while True:
        region = next((n for n in toposort(outputs) if n.op == "remat"), None)
        if region is None:
            return outputs
        mapping = {make("proj", (region,), (k,)): v for k, v in enumerate(inlined(region))}
        outputs = substitute(outputs, mapping)


def without_remats(graph: Graph) -> Graph:
    if not any(n.op == "remat" for n in toposort(graph.outputs)):
        return graph
    return graph.derive(graph.name, inline_remats(graph.outputs), graph.out_tree)


def region_bodies(node) -> tuple:
    """The bodies of a loop (one) or a branch (two) the plan steps into; () for other ops."""
    return node.attrs[:1] if node.op == "loop" else node.attrs[:2] if node.op == "cond" else ()


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


def plan_body(body: Body, buffers: list, name: str, kinds, kernel_written=False) -> BodyPlan:
    """``body`` planned with its params' buffers of ``kinds`` (by value or slots)."""
    from .ptx_plan import plan   # the body is planned like any graph
    graph = without_remats(Graph(name, tuple(f"p{k}" for k in range(len(body.params))),
                                 body.params, body.results, tuple(range(len(body.results)))))
    p = plan(graph, buffers, kinds, kernel_written)
    args = [p.source[x] for x in body.params]
    firsts = {}
    outs, repeats = [], []
    for k, buf in enumerate(p.outputs):   # one buffer per result under kernel_written
        if buf in firsts:
            outs.append(None)
            repeats.append((k, firsts[buf]))
        else:
            firsts[buf] = k
            outs.append(buf)
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


def _result_buffers(region, source: dict, new) -> list:
    """The buffers of a region's results (fresh ones for results nothing reads), entered in
    ``source`` for the readers."""
    results = results_of(region)
    dests = [source[r] if r in source else new("tmp", r.dtype, max(r.size, 1)) for r in results]
    for r, d in zip(results, dests):
        source.setdefault(r, d)
    return dests


def loop_steps(proj, source: dict, new, buffers: list, name: str, memory: dict) -> list:
    """The step of ``proj``'s loop (planned once per loop, at the first of its results the plan
    meets; it locates the others): its results' buffers, each carry's spare buffer and the
    body's plan, named ``name``. ``memory``: where each input is in memory."""
    loop = proj.inputs[0]
    body, trips, nc, nx, reverse = loop.attrs[:5]   # (no exit: symgrad.regions.without_exits)
    results = results_of(loop)
    dests = _result_buffers(loop, source, new)
    inputs = [memory[x] for x in loop.inputs]
    spare = [new("tmp", r.dtype, max(r.size, 1)) for r in results[:nc]]
    row_bytes = [_nbytes(x.dtype, x.shape[1:]) for x in loop.inputs[nc:nc + nx]] + [
        _nbytes(r.dtype, r.shape) for r in body.results[nc:]]
    return [LoopStep(name, trips, reverse, inputs[:nc], inputs[nc:nc + nx], inputs[nc + nx:],
                     dests[:nc], spare, dests[nc:],
                     plan_body(body, buffers, name, ["index"] + ["slot"] * (len(body.params) - 1)),
                     row_bytes, [_nbytes(r.dtype, r.shape) for r in results[:nc]])]


@dataclass
class CondStep:
    """A branch in a plan's launch sequence: both sides launched, only the taken one working
    (see the module docstring)."""
    name: str
    pred: int          # buffer of the predicate
    operands: list     # buffers, read in place by both sides
    results: list      # buffers both sides write (only the taken side's kernels run)
    sides: tuple       # (then, else) BodyPlan
    kind: str = "cond"
    zero: tuple = ()


def cond_steps(proj, source: dict, new, buffers: list, name: str, memory: dict) -> list:
    """The step of ``proj``'s branch (planned once, at its first result the plan meets): each
    side planned over slots for the operands, its kernels guarded by the predicate."""
    cond = proj.inputs[0]
    dests = _result_buffers(cond, source, new)
    pred = memory[cond.inputs[0]]
    sides = []
    for body, taken, tag in zip(cond.attrs, (True, False), ("then", "else")):
        side = plan_body(body, buffers, f"{name}_{tag}", ["slot"] * len(body.params),
                         kernel_written=True)
        for _, k in all_kernels(side.plan):   # loops and branches inside it too
            k.guards = ((pred, taken),) + k.guards
        sides.append(side)
    return [CondStep(name, pred, [memory[x] for x in cond.inputs[1:]], dests, tuple(sides))]


# region op -> the steps of its plan (ptx_plan.KERNEL_RULES dispatches here)
REGION_STEPS = {"loop": loop_steps, "cond": cond_steps}


# ----------------------------------------------------------------------------------------------
# Running a plan's steps


def _sub_plans(step) -> list | None:
    """The plans a step runs (a loop's body, a branch's two sides); None for a kernel."""
    if isinstance(step, LoopStep):
        return [step.body.plan]
    if isinstance(step, CondStep):
        return [side.plan for side in step.sides]
    return None


def all_kernels(p):
    """(plan, kernel) for every kernel of a plan and of its regions' bodies, in a fixed order."""
    stack = [(p, list(p.kernels))]
    out = []
    while stack:
        plan_, steps = stack.pop()
        for k, step in enumerate(steps):
            subs = _sub_plans(step)
            if subs is not None:
                stack.append((plan_, steps[k + 1:]))
                stack.extend((sub, list(sub.kernels)) for sub in reversed(subs))
                break
            out.append((plan_, step))
    return out


def run_steps(p, addr: dict, launch, copy):
    """Launch a plan's kernels in order, loops per iteration, branches both sides (guarded).
    ``addr``: buffer -> device address (a ctypes value for a by-value scalar), updated for the
    body slots; ``launch(kernel, addr)``; ``copy(dst, src, nbytes)`` device to device."""
    for step in p.kernels:
        if isinstance(step, LoopStep):
            _run_loop(step, addr, launch, copy)
        elif isinstance(step, CondStep):
            _run_cond(step, addr, launch, copy)
        else:
            launch(step, addr)


def _run_cond(step: CondStep, addr: dict, launch, copy):
    """Both sides, each reading the operands in place and writing the results: the guards in
    their kernels let only the taken side work (no predicate comes back to the host)."""
    for side in step.sides:
        for buf, operand in zip(side.args, step.operands):
            addr[buf] = addr[operand]
        for buf, dest in zip(side.outs, step.results):
            addr[buf] = addr[dest]
        run_steps(side.plan, addr, launch, copy)


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
