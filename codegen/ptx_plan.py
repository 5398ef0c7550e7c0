"""The CUDA back end's plan: which values get memory and which kernels compute them.

Scheduling (:func:`plan`) gives memory only to what needs it: graph inputs and constant arrays,
outputs, reductions and matmuls, scatter-adds, matmul operands that are computed, and computed
values that several consumers read at *different* positions. Everything else is an index
expression evaluated in registers where it is consumed (``codegen.ptx_build``): elementwise
ops, views (reshape, transpose, broadcast_to, getitem), gathers, the region ops (setitem,
index_add, concatenate, stack), which become branches on the output position, and the results
of a ``cond`` whose sides are all of these (a branch on its predicate, :func:`fused_branches`).
Loops and other branches are steps of the launch sequence (``codegen.ptx_regions``).

Kernels (:class:`Kernel`, bodies written by ``codegen.ptx_kernels``):

* ``map`` — a grid-stride loop over a shape; every output of that shape (say a function's value
  and both partial derivatives) is stored from the same loop body, so shared subexpressions are
  computed once per element;
* ``block`` — one thread block per output element (per slice of it, for long reductions): each
  thread strides over the reduced axis, then warp shuffles and one shared-memory round combine
  the block; ``thread`` — one thread per output element for short reductions. Reductions that
  produce few outputs split the reduced axis over several blocks and finish with a second kernel
  over the partial results. Matmul is a sum reduction of ``a[..., i, k] * b[..., k, j]``;
* ``scatter`` — a grid-stride loop over a scatter-add's updates with atomic adds into a buffer
  the launcher zeroes first.

A kernel that gathers or scatters through an index from data also gets the plan's *error word*
(:func:`add_error_word`), where an out-of-range index is noted for the launcher to raise.

What each kernel does is a job (:class:`StoreJob`, :class:`ReduceJob`, :class:`FinishJob`,
:class:`ScatterJob`); ``KERNEL_RULES`` says which ops get kernels of their own.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from symgrad.ir import Graph, Node, is_float, substitute, toposort

from .buffers import Buffer
from .lower import LOWER
from .opsets import LEAVES, REDUCTIONS, VIEWS

BLOCK = 256            # threads per block, every kernel
WARP = 32
THREAD_REDUCE_MAX = 32  # reductions at most this long run one thread per output element
SPLIT_CHUNK = 4 * BLOCK * 8  # elements one block reduces before a reduction is split over blocks

# Ops whose values are buffers from the start: kernel parameters (an array by pointer, a 0-d
# value by value) and constant arrays.
IN_MEMORY = ("arg", "array", "param")   # param: a loop body's (codegen.ptx_regions)
# Buffer kinds passed by value: a 0-d argument, a loop body's index (codegen.ptx_regions).
BY_VALUE = ("scalar", "index")
# Region nodes that are steps of the launch sequence (codegen.ptx_regions), planned at their
# first result (a ``proj``); their inputs are in memory.
STEPPED = ("loop", "cond")
# Ops the CUDA back end refuses with NotImplementedError (empty: every op lowers). Kept
# explicit so the coverage test tells "forgotten" from "deliberately unsupported".
UNSUPPORTED: dict[str, str] = {
    "remat": "inlined first (codegen.ptx_regions.inline_remats)",
    "custom_gradient": "never lowered: symgrad.custom_gradient.lowerable replaces it by its value"}


@dataclass(frozen=True)
class StoreJob:
    """A map kernel stores ``node``'s values into buffer ``dest``."""
    node: Node
    dest: int


@dataclass(frozen=True)
class ReduceJob:
    """A reduction (or matmul) kernel: ``op`` over ``node``'s reduced axis into ``dest``;
    ``parts`` blocks share each output when the reduction is split (then ``dest`` holds the
    partial results and a FinishJob combines them)."""
    node: Node
    dest: int
    op: str
    parts: int = 1


@dataclass(frozen=True)
class FinishJob:
    """The second kernel of a split reduction: ``op`` over the ``parts`` partial results of
    each output (buffer ``partial``) into ``dest``."""
    node: Node
    dest: int
    op: str
    parts: int
    partial: int


@dataclass(frozen=True)
class ScatterJob:
    """A scatter-add's updates, added atomically into buffer ``dest``."""
    node: Node
    dest: int


@dataclass
class Kernel:
    name: str
    kind: str        # "map" | "thread" | "block" | "scatter": how it is launched
    count: int       # work items: threads (map/thread/scatter) or blocks (block)
    params: tuple = ()   # buffer indices, in parameter order
    zero: tuple = ()     # buffers the launcher zeroes first
    # (predicate buffer, value it must have) of each branch the kernel is inside: the kernel
    # does its work only when all hold (codegen.ptx_regions.CondStep)
    guards: tuple = ()
    # the plan's error word (a buffer) when the kernel checks an index from data
    # (:func:`checks_index`): an out-of-range one is noted there (``guards.KERNEL_ERRORS``)
    flag: int | None = None
    # code generation details (not needed to launch)
    jobs: list = field(default_factory=list, repr=False)   # StoreJob | ReduceJob | FinishJob | ScatterJob


@dataclass
class Plan:
    graph: Graph
    buffers: list
    kernels: list
    outputs: tuple        # buffer index of each graph output
    source: dict          # node -> buffer it is read from
    sincos: dict = field(default_factory=dict)   # sin(x) <-> cos(x) pairs, computed together
    # branches computed inside the kernels that read them: cond -> (then, else) results as
    # nodes of this graph (the sides on the operands)
    fused: dict = field(default_factory=dict)
    # the error word (a buffer of kind "flag"), when a kernel checks an index (add_error_word)
    flag: int | None = None


def _reads(root: Node, source: dict, skip_root=True, fused=None) -> list:
    """Materialized nodes a kernel computing ``root`` reads (its fused region's frontier,
    through both sides of the branches computed in place)."""
    seen, out, stack = set(), [], [root]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in source and not (skip_root and n is root):
            out.append(n)
            continue
        stack.extend(n.inputs)
        if fused and n in fused:
            stack.extend(fused[n][0] + fused[n][1])
    return out


def checks_index(node: Node) -> bool:
    """Whether ``node`` reads through an index from data that may be out of range: a gather or
    a scatter-add whose index is not a constant array (a constant one is checked while
    tracing, as NumPy checks it)."""
    return node.op in ("take", "scatter_add") and node.inputs[1].op != "array"


def _kernel_checks_index(p: Plan, k: Kernel) -> bool:
    """Whether kernel ``k`` of plan ``p`` computes a node that :func:`checks_index` (in what
    it computes in place: up to the buffers it reads, through fused branches)."""
    roots = []
    for job in k.jobs:
        n = job.node
        if isinstance(job, StoreJob) and p.source.get(n) == job.dest:
            roots.append(n)
        elif isinstance(job, (ReduceJob, ScatterJob)):
            roots.append(n)
    seen, stack = set(), roots
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if checks_index(n):
            return True
        stack.extend(x for x in n.inputs if x not in p.source)
        if n in p.fused:
            stack.extend(p.fused[n][0] + p.fused[n][1])
    return False


def add_error_word(p: Plan, kernels) -> None:
    """Give plan ``p`` an error word, and each of ``kernels`` ((plan, kernel) pairs: those of
    ``p`` and of its regions' bodies) that checks an index from data its address, if any does.
    The launcher zeroes the word before the call and raises after it if a kernel set it."""
    checking = [k for sub, k in kernels if _kernel_checks_index(sub, k)]
    if not checking:
        return
    p.flag = len(p.buffers)
    p.buffers.append(Buffer(p.flag, "flag", "int32", 1))
    for k in checking:
        k.flag = p.flag


def _computed_in_place(op: str) -> bool:
    from .ptx_build import COMPUTE_RULES   # the kernel builder's table (it imports this module)
    return op in LOWER or op in VIEWS or op in COMPUTE_RULES or op == "param"


def fused_branches(order) -> dict:
    """The branches among ``order`` whose sides are computed in place (elementwise ops, views,
    gathers, constants, such branches): a real branch inside the kernel that reads their
    results, per element, instead of a step of guarded kernels. cond -> its sides on its
    operands (nodes of this graph; the branches nested in them are entered as well)."""
    fused: dict = {}
    pending = [n for n in reversed(order) if n.op == "cond"]
    while pending:
        n = pending.pop()
        if n in fused or not _sides_in_place(n):
            continue
        operands = n.inputs[1:]
        fused[n] = sides = tuple(substitute(list(body.results), dict(zip(body.params, operands)))
                                 for body in n.attrs[:2])
        pending.extend(m for m in reversed(toposort(sides[0] + sides[1])) if m.op == "cond")
    return fused


def _sides_in_place(cond: Node) -> bool:
    """Whether every node of both sides of ``cond`` (and of the branches nested in them) is
    computed in place."""
    stack = [cond]
    while stack:
        c = stack.pop()
        for m in toposort([r for body in c.attrs[:2] for r in body.results]):
            if m.op == "cond":
                stack.append(m)
            elif not (_computed_in_place(m.op) or m.op == "proj"):   # a loop's proj meets "loop"
                return False
    return True


def plan(graph: Graph, buffers: list | None = None, kinds=None, kernel_written=False) -> Plan:
    """Decide buffers and kernels for ``graph`` (deterministic: toposort order throughout).
    Callers go through ``codegen.ptx.plan``, which first checks that every op has a lowering.
    For a region's body (``codegen.ptx_regions``): ``buffers`` is the list its buffers are
    numbered in (its parent plan's), ``kinds`` the kind of each input's buffer (default: a 0-d
    argument by value, an array by pointer), and ``kernel_written`` gives every output a buffer
    of its own that only kernels write (a branch's side: its kernels are guarded by the
    predicate, the launcher's copies and zeroing are not)."""
    order = toposort(graph.outputs)
    buffers = [] if buffers is None else buffers
    source: dict[Node, int] = {}
    fused = fused_branches(order)

    def new(kind, dtype, size, ref=None):
        buffers.append(Buffer(len(buffers), kind, dtype, int(size), ref))
        return len(buffers) - 1

    for i, a in enumerate(graph.inputs):
        if a is not None and a not in source:
            kind = kinds[i] if kinds is not None else "scalar" if a.shape == () else "arg"
            source[a] = new(kind, a.dtype, max(a.size, 1), i)
    for n in order:
        if n.op == "array":
            source[n] = new("const", n.dtype, n.size, n.attrs[0].value)

    users: dict[Node, list] = {n: [] for n in order}
    for n in order:
        for x in n.inputs:
            users[x].append(n)

    def cheap(n):   # a leaf, or a view chain over one: nothing to compute
        while n.op in VIEWS:
            n = n.inputs[0]
        return n.op in LEAVES or n in mat

    mat: list[Node] = []
    for n in order:
        if n.op in LEAVES:
            continue
        if n.op in STEPPED and n not in fused:   # inputs in memory for the body's kernels
            for x in n.inputs:
                if x.op not in IN_MEMORY and x not in mat:
                    mat.append(x)
        elif n in fused:           # nothing of its own: its results are computed in place
            continue
        elif n.op == "proj" and n.inputs[0] not in fused:   # written by its region's step
            mat.append(n)
        elif n.op in KERNEL_RULES:   # computed by kernels of its own, into memory
            if n.op == "matmul":
                for x in n.inputs:
                    if not cheap(x) and x not in mat:
                        mat.append(x)
            mat.append(n)
        elif n.shape != () and len(users[n]) >= 2 and not cheap(n) and any(
                u.op not in LOWER or u.shape != n.shape for u in users[n]):   # views, reductions, ...
            mat.append(n)   # read at several positions: compute once, not once per reader
    outs, out_of, copies = [], {}, []   # copies: (node, output buffer) a map kernel stores
    for o in graph.outputs:
        if o in out_of and not kernel_written:
            outs.append(out_of[o])
            continue
        buf = new("out", o.dtype, max(o.size, 1))
        if o in out_of or o in source or kernel_written and _host_written(o, fused):
            copies.append((o, buf))   # an argument or constant returned as is, ...: a copy
            if o not in source and o not in mat:
                mat.append(o)
        else:
            out_of[o] = buf
            if o not in mat:
                mat.append(o)
        outs.append(buf)
    mat.sort(key={n: i for i, n in enumerate(order)}.get)
    for n in mat:
        source[n] = out_of[n] if n in out_of else new("tmp", n.dtype, max(n.size, 1))
    # A region's body reads its inputs through pointers: a by-value input (a 0-d argument, a
    # loop index) is stored into memory first (a cond's predicate is read by value as it is).
    boxed: dict[Node, int] = {}
    for n in order:
        if n.op in STEPPED and n not in fused:
            for x in n.inputs[1:] if n.op == "cond" else n.inputs:
                if buffers[source[x]].kind in BY_VALUE and x not in boxed:
                    boxed[x] = new("tmp", x.dtype, 1)

    # Levels: a kernel runs after every kernel whose results it reads.
    level: dict[Node, int] = {x: 1 for x in boxed}
    for n in mat:
        level[n] = 1 + max((level.get(m, 0) for m in _reads(n, source, fused=fused)), default=0)

    base = re.sub(r"\W", "_", graph.name) or "kernel"
    kernels: list[Kernel] = []
    maps: dict[tuple, Kernel] = {}
    staged: list[tuple] = []

    def store(lvl, n, dest):
        key = (lvl, n.shape)
        if key not in maps:
            maps[key] = Kernel("", "map", max(n.size, 1))
            staged.append((lvl, maps[key]))
        maps[key].jobs.append(StoreJob(n, dest))

    for x, buf in boxed.items():
        store(1, x, buf)
    stepped: set = set()
    for n in mat:
        if n.op == "proj" and n.inputs[0] not in fused:   # the region's step, once per region
            if n.inputs[0] not in stepped:
                stepped.add(n.inputs[0])
                staged += [(level[n], k) for k in KERNEL_RULES[n.inputs[0].op](
                    n, source, new, buffers, f"{base}_r{len(buffers)}", {**source, **boxed})]
            continue
        if n.size == 0:
            continue      # nothing to compute (its buffer still exists, of one element)
        rule = KERNEL_RULES.get(n.op)
        if rule is not None:
            staged += [(level[n], k) for k in rule(n, source, new)]
        else:
            store(level[n], n, source[n])
    for n, buf in copies:
        if n.size:
            store(level.get(n, 0) + 1, n, buf)
    staged.sort(key=lambda lk: lk[0])   # stable: toposort order within a level
    for i, (_, k) in enumerate(staged):
        if k.kind not in STEPPED:   # a region step keeps its name
            k.name = f"{base}_k{i}"
        kernels.append(k)
    trig = {(n.op, n.inputs[0]): n for n in order if n.op in ("sin", "cos") and is_float(n.dtype)}
    sincos = {n: trig[("cos" if op == "sin" else "sin", x)] for (op, x), n in trig.items()
              if ("cos" if op == "sin" else "sin", x) in trig}
    return Plan(graph, buffers, kernels, tuple(outs), source, sincos, fused)


def _scatter_kernels(n: Node, source, new) -> list:
    """A grid-stride loop over the updates, adding atomically into a zeroed buffer."""
    return [Kernel("", "scatter", n.inputs[0].size, zero=(source[n],),
                   jobs=[ScatterJob(n, source[n])])]


def _reduction_kernels(n: Node, source, new) -> list:
    """One kernel, or a split kernel and a finishing one, for a reduction or matmul ``n``."""
    if n.op == "matmul":
        a, b = n.inputs
        outer, r = n.size, a.shape[-1]
        op, suffix = "sum", False
    else:
        x = n.inputs[0]
        axes = n.attrs[0]
        r = math.prod(x.shape[a] for a in axes)
        outer = max(n.size, 1)
        op = n.op
        suffix = axes == tuple(range(x.ndim - len(axes), x.ndim))
    dest = source[n]
    if r <= THREAD_REDUCE_MAX or (not suffix and outer >= (4096 if n.op != "matmul" else 8192)):
        return [Kernel("", "thread", outer, jobs=[ReduceJob(n, dest, op)])]
    parts = 1
    if outer < 2048:
        parts = max(1, min(1024, -(-r // SPLIT_CHUNK), -(-2048 // outer)))
    if parts == 1:
        return [Kernel("", "block", outer, jobs=[ReduceJob(n, dest, op)])]
    partial = new("tmp", n.dtype, outer * parts)
    first = Kernel("", "block", outer * parts, jobs=[ReduceJob(n, partial, op, parts)])
    second_kind = "thread" if parts <= THREAD_REDUCE_MAX else "block"
    finish = "sum" if n.op == "matmul" else op
    second = Kernel("", second_kind, outer, jobs=[FinishJob(n, dest, finish, parts, partial)])
    return [first, second]


# op -> the kernels that compute it into its buffer: (node, source, new buffer) -> [Kernel]
KERNEL_RULES = {
    **{op: _reduction_kernels for op in sorted(REDUCTIONS)},   # block/warp-shuffle reductions
    "matmul": _reduction_kernels,                              # a sum over k
    "scatter_add": _scatter_kernels,                           # atomic adds
    # a loop or a branch is a step of the launch sequence (codegen.ptx_regions), planned at
    # its first result (a ``proj``: computed in place, ``ptx_build``, for a fused branch); its
    # inputs are in memory
    "loop": lambda *args: _region_steps(*args),
    "cond": lambda *args: _region_steps(*args),
}


def _region_steps(proj, *args):
    """The steps of the region of ``proj`` (one of its results)."""
    from .ptx_regions import REGION_STEPS   # plans the bodies with plan() itself
    return REGION_STEPS[proj.inputs[0].op](proj, *args)


def _host_written(node: Node, fused: dict) -> bool:
    """Whether the launcher writes ``node``'s buffer itself: a region step's result (copies of
    carries) or a buffer it zeroes before a kernel adds into it."""
    if node.op == "proj":
        return node.inputs[0] not in fused
    return KERNEL_RULES.get(node.op) is _scatter_kernels
