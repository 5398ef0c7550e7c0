"""Scheduling: which nodes get memory, which are fused into which loop, in what order.

The result is a list of :class:`Stage`\\ s, each one loop nest over a concrete shape:

* elementwise nodes are computed *in registers* (``stage.ssa``) in the loop of their own shape;
  a node is inlined into a consumer only when both have the same shape, so broadcasting always
  happens at a load (a zero stride), never by recomputing an expensive value per element;
* a node gets a buffer only when something needs memory: an output, a value read by a later
  stage or at another shape, the operand of a view, a reduction or matmul result;
* views (transpose, broadcast_to, getitem, reshape of contiguous data) are only strides and
  an offset over their operand's buffer, computed here in Python from the concrete shapes;
* sinks say what a loop writes: ``store`` a value into a (strided) view, ``accum`` into one
  (index_add), ``reduce`` into a reduction's buffer, ``matmul`` (a reduction over the middle
  axis of an ``(..., m, k, n)`` loop);
* a loop or branch (``symgrad.regions``) is one serial *region stage* (``codegen.regions``): its
  body is scheduled as a nested Schedule and runs from a real loop or branch in the kernel;
* ``codegen.fusion`` joins and drops loops, ``codegen.tiling`` runs groups of them by chunks.

Stages are appended in dependency order, and a node joins the *first* compatible loop whose
inputs are ready, so chains of same-shaped work (a function and its gradient, a reduction of a
product) share one pass over memory. Sizes, strides and offsets stay concrete numbers here;
``codegen.kernel`` makes them run-time parameters, so one machine code serves every size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from symgrad.ir import Graph, Node, toposort, use_counts

from . import fusion, tiling, wide_growth
from .buffers import Buffer, contiguous_strides
from .lower import LOWER
from .opsets import CONSTANTS, REDUCTIONS, VIEWS
from .views import View, index_view, keepdims_strides

LEAF_INLINE = CONSTANTS               # a constant is the same value at every index
CLONE_BUDGET = 6                      # elementwise ops a loop may recompute instead of loading
# Elementwise ops one loop computes at most (more continue in a new loop of the same shape):
# LLVM's loop vectoriser is quadratic in a body's size (6000 ops: 22 s, 2000: 3.2 s); real
# programs stay far below (GMM gradient: 8). codegen.wide_stage's loops grow further.
STAGE_OPS = 256


@dataclass
class Sink:
    kind: str            # "store" | "accum" | "reduce" | "matmul" | "scatter"
    node: Node           # value stored, or the reduction / matmul node
    dest: View           # aligned to the stage's loop shape
    operands: tuple = ()  # matmul: (a, b) views aligned to the (..., m, k, n) loop;
    #                       scatter: (index view,) aligned to the loop


@dataclass
class Stage:
    index: int
    shape: tuple
    kind: str = "loop"    # "loop" | "matmul" (not joinable by other work)
    serial: bool = False  # must not be split across threads (a scatter over axis 0)
    ssa: list = field(default_factory=list)
    sinks: list = field(default_factory=list)
    region: object = None  # kind "region": a loop or branch (codegen.regions), emitted by it
    epilogue: object = None  # kind "matmul": the next loop's work on its tiles (fusion.Epilogue)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class Schedule:
    """Build with ``Schedule(graph)``; read ``stages``, ``buffers``, ``home``, ``loc``.
    ``parent``: the schedule a region body (``codegen.regions``) is part of; the body's
    buffers are numbered in the parent's list and share its error flag."""

    def __init__(self, graph: Graph, parent: "Schedule | None" = None):
        if parent is None:
            graph = _regions().prepare(graph)   # what is not lowered natively is expanded
        self.graph = graph
        self.parent = parent
        self.stages: list[Stage] = []
        self.buffers: list[Buffer] = [] if parent is None else parent.buffers
        self.home: dict[Node, int] = {}     # elementwise node -> stage computing it
        self.loc: dict[Node, View] = {}     # node -> where its values live
        self.ready: dict[Node, int] = {}    # node with a loc -> first stage that may read it
        self.outputs: list[int] = []        # buffer index per graph output
        self.out_of: dict[Node, int] = {}   # output node -> output index (first occurrence)
        for k, o in enumerate(graph.outputs):
            self.out_of.setdefault(o, k)
        self.flag: int | None = None
        self.clones: dict[int, set] = {}        # stage -> nodes it recomputes
        self.growth = wide_growth.Growth(self)   # which loops may pass STAGE_OPS
        self._operands: dict[int, tuple] = {}   # stage -> (nodes seen, their inputs)
        self.uses = use_counts(graph.outputs)   # consumers per node (outputs count once)
        self.once = fusion.computed_once(graph.outputs)   # never recomputed in another loop
        self._claimed: set = set()              # output indices that have their buffer
        self.arg_buffers: dict[Node, int] = {}  # arg node -> buffer (ref: parameter position)
        self.region_writes: dict = {}   # buffer -> its chain of updates (fusion.RegionWrites)
        # buffer -> reads of it still to come: the uses of every node living in it (views and
        # in-place updates share their operand's buffer), less the uses by such sharers
        self.readers: dict[int, int] = {}
        for i, x in enumerate(graph.inputs):
            if x is not None:
                buf = self._buffer("arg" if x.ndim else "scalar", x.dtype, max(x.size, 1), i)
                self.arg_buffers[x] = buf   # by node: attrs[0] need not be the position
        for n in toposort(graph.outputs):
            self._schedule(n)
        self._finish_outputs()
        fusion.fuse_matmul_epilogues(self)
        self.tile_groups = tiling.tile_groups(self) if parent is None else []   # (not a body's)

    # -- buffers and locations -----------------------------------------------------------------
    def _buffer(self, kind, dtype, size, ref=None) -> int:
        self.buffers.append(Buffer(len(self.buffers), kind, dtype, size, ref))
        return len(self.buffers) - 1

    def _own_buffer(self, n: Node) -> View:
        """A fresh contiguous buffer for ``n``: its output array if it is an output."""
        if n in self.out_of and self.out_of[n] not in self._claimed:
            k = self.out_of[n]
            self._claimed.add(k)
            buf = self._buffer("out", n.dtype, max(n.size, 1), k)
        else:
            buf = self._buffer("tmp", n.dtype, max(n.size, 1))
        return View(buf, 0, n.shape, contiguous_strides(n.shape))

    def _locate(self, n: Node, view: View, ready: int):
        """``n``'s values live at ``view`` from stage ``ready`` on."""
        self.loc[n], self.ready[n] = view, ready
        inside = sum(1 for x in n.inputs if x in self.loc and self.loc[x].buf == view.buf)
        self.readers[view.buf] = self.readers.get(view.buf, 0) + self.uses.get(n, 0) - inside

    def ensure_loc(self, n: Node) -> View:
        """Give ``n`` memory (storing it from its home loop if it is computed in registers)."""
        if n in self.loc:
            return self.loc[n]
        if n.op in LEAF_INLINE:
            buf = self._buffer("const", n.dtype, 1, np.array(n.attrs[0], dtype=n.dtype))
            view = View(buf, 0, n.shape, (0,) * n.ndim)   # one element seen everywhere
            self._locate(n, view, 0)
            return view
        if n not in self.home:
            raise AssertionError(f"internal: {n} has no value")
        view = self._own_buffer(n)
        h = self.home[n]
        self.stages[h].sinks.append(Sink("store", n, view.align(self.stages[h].shape)))
        self._locate(n, view, h + 1)
        return view

    def _flag(self) -> int:
        """The int64 error slot gathers and scatters set on an out-of-bounds index."""
        if self.parent is not None:
            self.flag = self.parent._flag()
        if self.flag is None:
            self.flag = self._buffer("flag", "int64", 1)
        return self.flag

    def ready_at(self, n: Node) -> int:
        if n.op in LEAF_INLINE:
            return 0
        if n in self.loc:
            return self.ready[n]
        return self.home[n] + 1

    # -- stage selection -------------------------------------------------------------------------
    def loop_stage(self, shape, lo: int, joining: Node | None = None) -> int:   # (None: a sink)
        for k in self.growth.loops(shape, lo):   # (the loops over shape that may take more)
            if self.growth.takes(k, joining):
                return k
        self.stages.append(Stage(len(self.stages), tuple(shape)))
        return len(self.stages) - 1

    def place(self, value: Node, dest: View, lo: int, kind="store") -> int:
        """Add a sink writing ``value`` (broadcast) into ``dest`` at a stage >= lo."""
        shape = dest.shape
        if value in self.home and value.shape == shape and self.home[value] >= lo \
                and self.growth.home_loop(self.home[value], Sink(kind, value, dest.align(shape))):
            k = self.home[value]
        else:
            if value.op not in LEAF_INLINE:
                self.ensure_loc(value)
            k = self.loop_stage(shape, max(lo, self.ready_at(value)))
        self.stages[k].sinks.append(Sink(kind, value, dest.align(shape)))
        return k

    # -- per-op scheduling -------------------------------------------------------------------------
    def _schedule(self, n: Node):
        rule = SCHEDULE_RULES.get(n.op)
        if n.op in UNSUPPORTED:
            raise NotImplementedError(f"op {n.op!r} is not supported on target='cpu': "
                                      f"{UNSUPPORTED[n.op]}")
        if rule is None:
            if n.op not in LOWER:
                raise NotImplementedError(f"op {n.op!r} has no lowering on target='cpu' (no "
                                          "entry in codegen.lower.LOWER or codegen.schedule."
                                          "SCHEDULE_RULES)")
            rule = Schedule._elementwise   # a scalar op: computed in registers in a loop
        rule(self, n)

    # The per-op rules (SCHEDULE_RULES below): each gives ``n`` its home loop or its memory.
    def _arg(self, n: Node):
        """A kernel argument: its buffer, read from stage 0 on."""
        buf = self.arg_buffers[n]
        self._locate(n, View(buf, 0, n.shape, contiguous_strides(n.shape)), 0)

    def _array(self, n: Node):
        """A constant array: a buffer the run time fills once."""
        value = n.attrs[0].value
        buf = self._buffer("const", n.dtype, max(value.size, 1), value)
        self._locate(n, View(buf, 0, n.shape, contiguous_strides(n.shape)), 0)

    def _constant(self, n: Node):
        """const/full: baked or a run-time parameter where used (ensure_loc when needed)."""

    def _reduction(self, n: Node):
        """sum/prod/max/min: a ``reduce`` sink into the result's buffer, in x's loop."""
        x = n.inputs[0]
        axes, _ = n.attrs
        view = self._own_buffer(n)
        keep = View(view.buf, 0, tuple(1 if i in axes else d for i, d in enumerate(x.shape)),
                    keepdims_strides(x.shape, axes))
        dest = View(keep.buf, 0, x.shape, tuple(0 if i in axes else s
                                                for i, s in enumerate(keep.strides)))
        k = self._value_stage(x, x.shape)
        self.stages[k].sinks.append(Sink("reduce", n, dest))
        self._locate(n, view, k + 1)

    def _pieces(self, n: Node):
        """concatenate/stack: each operand stored into its slice of the output."""
        view = self._own_buffer(n)
        last, start = 0, 0
        (axis,) = n.attrs
        for i, x in enumerate(n.inputs):
            if n.op == "stack":
                piece = View(view.buf, i * view.strides[axis], x.shape,
                             view.strides[:axis] + view.strides[axis + 1:])
            else:
                piece = View(view.buf, start * view.strides[axis], x.shape, view.strides)
                start += x.shape[axis]
            last = max(last, self.place(x, piece, 0))
        self._locate(n, view, last + 1)

    def _take(self, n: Node):
        """A gather: computed in registers in the loop over its own shape, like an
        elementwise node, reading x at an index loaded from the index array."""
        x, idx = n.inputs
        self.ensure_loc(x)
        self.ensure_loc(idx)
        self._flag()
        k = self.loop_stage(n.shape, max(self.ready_at(x), self.ready_at(idx)))
        self.home[n] = k
        self.stages[k].ssa.append(n)

    def _scatter_add(self, n: Node):
        """An accumulate loop over the updates at indices read from the index array."""
        g, idx = n.inputs
        axis, _ = n.attrs
        view = self._own_buffer(n)
        vi = self.ensure_loc(idx)
        self._flag()
        lo = self.ready_at(idx)
        if g in self.home and self.home[g] >= lo and self.growth.home_loop(self.home[g]):
            k = self.home[g]
        else:
            if g.op not in LEAF_INLINE:
                self.ensure_loc(g)
            k = self.loop_stage(g.shape, max(lo, self.ready_at(g)))
        r = idx.ndim
        dest = View(view.buf, 0, g.shape, view.strides[:axis] + (0,) * r + view.strides[axis + 1:])
        iview = View(vi.buf, vi.offset, g.shape,
                     (0,) * axis + vi.strides + (0,) * (g.ndim - axis - r))
        self.stages[k].sinks.append(Sink("scatter", n, dest, (iview,)))
        if axis == 0:   # duplicate indices collide across the outer axis: one thread
            self.stages[k].serial = True
        self._locate(n, view, k + 1)

    def _region_update(self, n: Node):
        """setitem/index_add: the base (copied unless it may be updated in place), then a
        store or accumulate loop over the region."""
        base, value = n.inputs
        view = self._update_in_place(n, base)
        in_place = view is not None
        if not in_place:
            view = self._own_buffer(n)
        floor = self.ready[base] if in_place else self.place(base, view, 0) + 1
        region = index_view(view, n.attrs[0])
        lo = fusion.after_overlapping_writes(self, view.buf, region, floor) if in_place else floor
        k2 = self.place(value, region, lo, "store" if n.op == "setitem" else "accum")
        ready = max(floor, k2 + 1)
        fusion.record_region_write(self, view.buf, region, in_place, floor, k2, ready)
        self._locate(n, view, ready)

    def _update_in_place(self, n: Node, base: Node):
        """The base's own buffer, when setitem/index_add may overwrite it instead of copying:
        nothing but this update reads that buffer (gradients of slicing chain index_adds on a
        zeros array), and it is a scratch buffer of exactly the base's shape. Not only the
        base must be unread: a view (``reshape(sum(x))``) shares its operand's buffer, and
        that operand may have other readers. The buffer becomes the output array when the
        update is an output."""
        if self.uses.get(base, 0) != 1 or base in self.out_of or base.op in LEAF_INLINE:
            return None
        if base not in self.loc and base in self.home:
            self.ensure_loc(base)
        view = self.loc.get(base)
        if view is None or view.offset or view.shape != n.shape or not view.is_contiguous():
            return None
        if self.readers[view.buf] != 1:   # the one read is this update's
            return None
        buf = self.buffers[view.buf]
        if buf.kind != "tmp" or buf.size != max(n.size, 1):
            return None
        if n in self.out_of and self.out_of[n] not in self._claimed:
            k = self.out_of[n]
            self._claimed.add(k)
            buf.kind, buf.ref = "out", k
        return view

    def _value_stage(self, x: Node, shape) -> int:
        """The stage where a loop over ``shape`` can read ``x`` (its home when it is in
        registers at that shape)."""
        if x in self.home and x.shape == tuple(shape) and self.growth.home_loop(self.home[x]):
            return self.home[x]
        if x.op not in LEAF_INLINE:
            self.ensure_loc(x)
        return self.loop_stage(tuple(shape), self.ready_at(x))

    def _elementwise(self, n: Node):
        lo, ssa_max = 0, -1
        for x in n.inputs:
            if x.op in LEAF_INLINE:
                continue
            if x in self.home and x.shape == n.shape:
                ssa_max = max(ssa_max, self.home[x])
            else:
                lo = max(lo, self.ready_at(x))
        if ssa_max >= lo and self.growth.takes(ssa_max, n):
            k = ssa_max
        else:
            k = self.loop_stage(n.shape, max(lo, ssa_max), n)
        for x in n.inputs:   # inputs computed in another loop: recompute them here, or load
            if x.op in LEAF_INLINE or self._in_stage(x, k):
                continue
            plan: list = []
            if self._clonable(x, k, plan) and self.growth.may_recompute(plan, k):
                self._recompute(plan, k)
            if not self._in_stage(x, k):
                self.ensure_loc(x)
        self.home[n] = k
        self.stages[k].ssa.append(n)

    def _recompute(self, plan: list, k: int):
        """Make stage k compute the nodes of ``plan`` (from _clonable) in registers."""
        for c in plan:
            self.clones.setdefault(k, set()).add(c)
            self.stages[k].ssa.append(c)
            for y in c.inputs:
                if y.op not in LEAF_INLINE and not self._in_stage(y, k):
                    self.ensure_loc(y)

    def _recompute_beats_load(self, x: Node, k: int) -> bool:
        """Should stage k recompute x, which is in memory (a matmul reads it there), instead
        of loading it? Yes when x is one scalar op of broadcast operands (each at most half its
        size): loading x streams a whole array, recomputing it reads arrays that stay in cache
        (the GMM's (K, n, d) ``x[None] - means[:, None]`` from an (n, d) and a (K, d) one). Not
        where an earlier node of stage k reads x from memory: they are computed in list order."""
        st = self.stages[k]
        if x not in self.home or x.op not in LOWER or x in self.once or x.shape != st.shape \
                or x in self._operands_of(k):
            return False
        return all(y.op in LEAF_INLINE or self._in_stage(y, k) or (
            y in self.loc and self.ready[y] <= k and 2 * y.size <= x.size) for y in x.inputs)

    def _operands_of(self, k: int) -> set:
        """The inputs of stage k's nodes, brought up to date as nodes join it (a scan of its
        list per question was quadratic: half of schedule's time at 2000 statements)."""
        seen, found = self._operands.get(k, (0, set()))
        ssa = self.stages[k].ssa
        if len(ssa) < seen:
            seen, found = 0, set()
        for n in ssa[seen:]:
            found.update(n.inputs)
        self._operands[k] = (len(ssa), found)
        return found

    def _in_stage(self, x: Node, k: int) -> bool:
        """Is x computed in registers in stage k (its home, or recomputed there)?"""
        return x in self.home and x.shape == self.stages[k].shape and (
            self.home[x] == k or x in self.clones.get(k, ()))

    def _clonable(self, x: Node, k: int, plan: list) -> bool:
        """Can stage k recompute x (appending what it must recompute to ``plan``, inputs
        first) instead of reading it from memory? Recomputing a few elementwise ops beats
        storing an array in one pass and loading it in the next (softmax: exp(x - max) is
        needed by the sum and again by the gradient). At most CLONE_BUDGET nodes are
        recomputed, however long the chain below x (an iterative walk: no recursion limit)."""
        first = self._clone_need(x, k, plan)
        if first is not None:
            return first
        entered = {x}
        stack = [(x, 0)]
        while stack:
            y, i = stack.pop()
            if i == len(y.inputs):
                plan.append(y)          # inputs first
                continue
            stack.append((y, i + 1))
            z = y.inputs[i]
            if z in entered:
                continue
            need = self._clone_need(z, k, plan)
            if need is False or (need is None and len(entered) >= CLONE_BUDGET):
                return False
            if need is None:
                entered.add(z)
                stack.append((z, 0))
        return True

    def _clone_need(self, x: Node, k: int, plan: list) -> bool | None:
        """For _clonable: True if stage k has x without recomputing it (a constant, computed
        or recomputed there, readable from memory), False if stage k can neither read nor
        recompute it, None if recomputing it is the way."""
        if x.op in LEAF_INLINE or self._in_stage(x, k) or x in plan:
            return True
        if x in self.loc:
            return None if self._recompute_beats_load(x, k) else self.ready[x] <= k
        if x not in self.home or x.op not in LOWER:   # only scalar ops are recomputed
            return False
        if x.shape != self.stages[k].shape or x in self.once:
            return self.home[x] < k        # read from memory (with broadcasting), as usual
        return None

    def _matmul(self, n: Node):
        a, b = n.inputs
        va, vb = self.ensure_loc(a), self.ensure_loc(b)
        view = self._own_buffer(n)
        batch = n.shape[:-2]
        m, kk, nn = a.shape[-2], a.shape[-1], b.shape[-1]
        loop = batch + (m, kk, nn)
        # a[..., i, k] and b[..., k, j] seen from the (..., i, k, j) loop
        a4 = View(va.buf, va.offset, a.shape[:-2] + (m, kk, 1), va.strides + (0,)).align(loop)
        b4 = View(vb.buf, vb.offset, b.shape[:-2] + (1, kk, nn),
                  vb.strides[:-2] + (0,) + vb.strides[-2:]).align(loop)
        dest = View(view.buf, 0, loop, view.strides[:-1] + (0, view.strides[-1]))
        k = len(self.stages)
        self.stages.append(Stage(k, loop, "matmul", sinks=[Sink("matmul", n, dest, (a4, b4))]))
        self._locate(n, view, k + 1)

    def _view(self, n: Node):
        x = n.inputs[0]
        v = self.ensure_loc(x)
        if n.op == "transpose":
            (perm,) = n.attrs
            out = View(v.buf, v.offset, n.shape, tuple(v.strides[p] for p in perm))
        elif n.op == "broadcast_to":
            out = v.align(n.shape)
        elif n.op == "getitem":
            out = index_view(v, n.attrs[0])
        else:  # reshape: only contiguous data can be re-strided; copy anything else first
            if not v.is_contiguous():
                copy = self._buffer("tmp", x.dtype, max(x.size, 1))
                cv = View(copy, 0, x.shape, contiguous_strides(x.shape))
                k = self.loop_stage(x.shape, self.ready_at(x))
                self.stages[k].sinks.append(Sink("store", x, cv))
                self._locate(n, View(copy, 0, n.shape, contiguous_strides(n.shape)), k + 1)
                return
            out = View(v.buf, v.offset, n.shape, contiguous_strides(n.shape))
        self._locate(n, out, self.ready[x])

    def _finish_outputs(self):
        """Every output ends in its own output buffer (never an argument's memory)."""
        for k, o in enumerate(self.graph.outputs):
            if self.out_of[o] != k:
                self.outputs.append(None)   # a repeated output: the caller copies the first
                continue
            if k in self._claimed:
                self.outputs.append(self.loc[o].buf)
                continue
            if o in self.home and o not in self.loc:
                self.outputs.append(fusion.output_buffer(self, o, k))
                continue
            buf = self._buffer("out", o.dtype, max(o.size, 1), k)
            self._claimed.add(k)
            view = View(buf, 0, o.shape, contiguous_strides(o.shape))
            self.place(o, view, 0)
            self.outputs.append(buf)


# op -> how the CPU back end schedules it: the structural ops (leaves, reductions, views,
# matmul, indexing, concatenation). Ops with a scalar rule in codegen.lower.LOWER need no entry:
# they are computed in registers in the loop of their shape (Schedule._elementwise).
SCHEDULE_RULES = {
    "arg": Schedule._arg,
    "array": Schedule._array,
    "const": Schedule._constant,
    "full": Schedule._constant,
    "arange": Schedule._elementwise,      # start + step * index, in registers
    **{op: Schedule._reduction for op in sorted(REDUCTIONS)},
    "matmul": Schedule._matmul,
    **{op: Schedule._view for op in sorted(VIEWS)},
    "concatenate": Schedule._pieces,
    "stack": Schedule._pieces,
    "take": Schedule._take,
    "scatter_add": Schedule._scatter_add,
    "setitem": Schedule._region_update,
    "index_add": Schedule._region_update,
    "param": Schedule._arg,               # a region body's parameter: the body's argument
    **{op: (lambda s, n: _regions().SCHEDULE_REGION[n.op](s, n)) for op in ("loop", "cond", "remat", "proj")},
}


def _regions():
    from . import regions   # region lowering schedules its bodies with Schedule itself
    return regions


# Ops the CPU back end refuses with NotImplementedError, and why (empty: every op lowers). Kept
# explicit so the coverage test tells "forgotten" from "deliberately unsupported".
UNSUPPORTED: dict[str, str] = {
    "custom_gradient": "never lowered: symgrad.custom_gradient.lowerable replaces it by its value"}
