"""Loops and branches (``symgrad.regions``) lowered natively by the CPU back end.

A region node is one *region stage* of its schedule (``Stage.kind == "region"``, serial, 0-d),
and its body is scheduled as a graph of its own (:class:`BodyCall`: a nested
:class:`~codegen.schedule.Schedule` whose buffers are numbered in the parent's list), emitted
into the same LLVM module as internal functions (``sg_r<k>_run`` and its stages) that LLVM
inlines into the region stage. So the IR holds one copy of a body however many iterations run,
and the trip count is a run-time parameter like every size: a new trip count reuses the
machine code.

* ``loop``: a real LLVM loop ``for j in range(n)`` (``i = n-1-j`` when ``reverse``) in the
  region stage. The body's argument and output buffers are *slots*: entries of the pointer
  table the loop sets before each call of the body (no per-iteration Python, no thread hand-off):
  ``i`` a cell on the stack, each carry one of two buffers (the body reads one and writes the
  other, then they swap: a carry's new value never overwrites the old one while other results
  still read it), row ``i`` of each per-iteration input and of each stacked output at byte
  offset ``i * row_bytes`` of its array, the loop-invariant inputs their own memory, read in
  place. The carries start as copies of the inits, and the final carries are copied where the
  loop's results live when they ended in the other buffer; zero trips leave the inits. A loop
  that exits early (``symgrad.regions``: a ``while`` or ``break`` on data) loads its done flag
  at the top of each iteration and branches out of the loop once it is set; its backward loop
  (``("count",)``) loads its trip count, clamped to ``[0, n]``, and zeroes its stacked outputs
  first (the rows of the iterations that do not run).
* ``cond``: the predicate is loaded and a real branch calls only the taken side's body, which
  writes the branch's results directly.
* ``remat`` (a checkpoint's recomputation in a backward pass; the checkpoint itself reaches no
  back end, ``symgrad.checkpoint.lowerable``): its body is called once, writing the results
  directly; the values it recomputes live in the body's own buffers.

No input's memory is ever written: a body's slot buffers are never updated in place (only
scratch buffers are, ``Schedule._update_in_place``), and inputs that are not contiguous
(transposes, broadcasts, constants) are first copied into scratch. A body runs on the calling
thread (its stages are not split across the thread pool). Everything lowers natively; nothing
falls back to ``symgrad.regions.straight_line`` on this target (the front end already unrolls
loops of at most ``symgrad.loops.UNROLL_MAX`` iterations).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from symgrad.ir import Graph, Node, toposort
from symgrad.regions import UNTIL, Body, loop_consts, loop_count, results_of, straight_line

from .buffers import contiguous_strides
from .dtypes import memory_type, storage
from .loops import close_loop, open_loop
from .schedule import LEAF_INLINE, Schedule, Stage
from .views import View

I64 = ir.IntType(64)
I8 = ir.IntType(8)
PTR = ir.PointerType()


# False: expand every region into straight-line code first, as before native regions (for
# measuring the difference; a back end then compiles code that grows with the trip count).
NATIVE = True


def prepare(graph: Graph) -> Graph:
    """The graph a top-level schedule lowers: itself (every region lowers natively), or its
    straight-line expansion when ``NATIVE`` is off."""
    return graph if NATIVE else straight_line(graph)


# ----------------------------------------------------------------------------------------------
# Scheduling


def _dense(s: Schedule, x: Node) -> View:
    """A contiguous view of ``x`` a body can take as its argument (x's own memory when it is
    contiguous already, else a copy into scratch)."""
    if x.op not in LEAF_INLINE:
        view = s.ensure_loc(x)
        if view.is_contiguous():
            return view
    view = _scratch(s, x)
    s.place(x, view, 0)
    return view


def _scratch(s: Schedule, n: Node) -> View:
    buf = s._buffer("tmp", n.dtype, max(n.size, 1))
    return View(buf, 0, n.shape, contiguous_strides(n.shape))


class BodyCall:
    """A region body scheduled as its own graph over its params; its argument and output
    buffers become slots (pointer-table entries the region stage sets)."""

    def __init__(self, parent: Schedule, body: Body, name: str):
        graph = Graph(name, tuple(f"p{k}" for k in range(len(body.params))), body.params,
                      body.results, tuple(range(len(body.results))))
        self.schedule = Schedule(graph, parent=parent)
        self.args = [self.schedule.arg_buffers[p] for p in body.params]
        self.outs = list(self.schedule.outputs)   # None: a repeat of an earlier result
        self.repeats = [(k, body.results.index(r)) for k, r in enumerate(body.results)
                        if self.outs[k] is None]
        for buf in self.args + [b for b in self.outs if b is not None]:
            parent.buffers[buf].kind = "slot"

    def emit(self, km, prefix: str) -> ir.Function:
        from .kernel import KernelModule   # the body is emitted like any schedule
        return KernelModule(self.schedule, km.math, parent=km, prefix=prefix).run_fn


def region_nodes(region) -> list[Node]:
    """Every node a region stage computes, in its bodies and their nested regions (for the
    source map of ``f.llvm_ir()``)."""
    out, pending = [], [region]
    while pending:
        r = pending.pop()
        for call in r.calls():
            out += toposort(call.schedule.graph.outputs)
            pending += [st.region for st in call.schedule.stages if st.region is not None]
    return out


def _region_stage(s: Schedule, n: Node, region) -> int:
    k = len(s.stages)
    s.stages.append(Stage(k, (), "region", serial=True, region=region))
    return k


def _locate_results(s: Schedule, n: Node, views, k: int):
    for p, v in zip(results_of(n), views):
        s._locate(p, v, k + 1)


def schedule_loop(s: Schedule, n: Node):
    body, trips, nc, nx, reverse, exit_ = n.attrs
    inits, xs, consts = n.inputs[:nc], n.inputs[nc:nc + nx], loop_consts(n)
    projs = results_of(n)
    count = loop_count(n)
    region = LoopRegion(
        trips, reverse,
        flag=exit_[1] if exit_ is not None and exit_[0] == UNTIL else None,
        count=None if count is None else _dense(s, count),
        inits=[_dense(s, x) for x in inits],
        xs=[_dense(s, x) for x in xs],
        consts=[_dense(s, x) for x in consts],
        carries=[s._own_buffer(p) for p in projs[:nc]],
        spare=[_scratch(s, p) for p in projs[:nc]],
        ys=[s._own_buffer(p) for p in projs[nc:]],
        body=BodyCall(s, body, f"{s.graph.name}.loop"))
    k = _region_stage(s, n, region)
    _locate_results(s, n, region.carries + region.ys, k)


def schedule_cond(s: Schedule, n: Node):
    then, other = n.attrs
    pred, operands = n.inputs[0], n.inputs[1:]
    region = CondRegion(
        pred=s.ensure_loc(pred),
        operands=[_dense(s, x) for x in operands],
        results=[s._own_buffer(p) for p in results_of(n)],
        then=BodyCall(s, then, f"{s.graph.name}.then"),
        other=BodyCall(s, other, f"{s.graph.name}.else"))
    k = _region_stage(s, n, region)
    _locate_results(s, n, region.results, k)


def schedule_remat(s: Schedule, n: Node):
    body, _role = n.attrs
    region = RematRegion(
        operands=[_dense(s, x) for x in n.inputs],
        results=[s._own_buffer(p) for p in results_of(n)],
        body=BodyCall(s, body, f"{s.graph.name}.remat"))
    k = _region_stage(s, n, region)
    _locate_results(s, n, region.results, k)


def schedule_proj(s: Schedule, n: Node):
    """A region's result: located by its region's rule."""
    if n not in s.loc:
        raise AssertionError(f"internal: {n} of an unscheduled region")


SCHEDULE_REGION = {"loop": schedule_loop, "cond": schedule_cond, "remat": schedule_remat,
                   "proj": schedule_proj}


# ----------------------------------------------------------------------------------------------
# Emission helpers


class _Emit:
    """The region stage's function being built: pointer table, parameters, builder."""

    def __init__(self, km, st: Stage):
        from .kernel import StageFunctions, StageInfo
        self.km = km
        self.buffers = km.s.buffers
        km.stage_info.append(StageInfo(None, [], True, ()))
        self.fn = ir.Function(km.module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64]),
                              f"{km.prefix}stage{st.index}")
        self.fn.attributes.add("nounwind")
        self.ptrs, self.params = self.fn.args[:2]
        self.ptrs.name, self.params.name = "ptrs", "params"
        self.fn.args[2].name, self.fn.args[3].name = "begin", "end"
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        init = ir.Function(km.module, ir.FunctionType(ir.VoidType(), [PTR, PTR]),
                           f"{km.prefix}init{st.index}")
        init.attributes.add("nounwind")
        ir.IRBuilder(init.append_basic_block("entry")).ret_void()   # nothing to fill
        self.functions = StageFunctions(self.fn, init, None, 0)

    def param(self, value: int, name: str) -> ir.Value:
        return self.km.load_param(self.b, self.params, self.km.param(value), name)

    def address(self, view: View, name: str) -> ir.Value:
        """The address of a view's first element."""
        b = self.b
        base = b.load(b.gep(self.ptrs, [ir.Constant(I64, view.buf)], source_etype=PTR),
                      typ=PTR, name=name)
        if not view.offset:
            return base
        ty = memory_type(self.buffers[view.buf].dtype)
        return b.gep(base, [self.param(view.offset, f"{name}.off")], source_etype=ty, name=name)

    def set_slot(self, buf: int, address: ir.Value):
        b = self.b
        b.store(address, b.gep(self.ptrs, [ir.Constant(I64, buf)], source_etype=PTR))

    def nbytes(self, view: View) -> int:
        return math.prod(view.shape) * storage(self.buffers[view.buf].dtype).itemsize

    def row_bytes(self, view: View) -> int:
        """Bytes of one row of a per-iteration input or stacked output (``(n, ...)``)."""
        return math.prod(view.shape[1:]) * storage(self.buffers[view.buf].dtype).itemsize

    def copy(self, dst, src, nbytes: ir.Value, intrinsic="llvm.memmove.p0.p0.i64"):
        """``memmove``: a carry's final copy may be a copy onto itself (an even trip count)."""
        mod = self.km.module
        fn = mod.globals.get(intrinsic) or ir.Function(
            mod, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, ir.IntType(1)]), intrinsic)
        self.b.call(fn, [dst, src, nbytes, ir.Constant(ir.IntType(1), 0)])

    def zero(self, dst, nbytes: ir.Value):
        mod, name = self.km.module, "llvm.memset.p0.i64"
        fn = mod.globals.get(name) or ir.Function(
            mod, ir.FunctionType(ir.VoidType(), [PTR, I8, I64, ir.IntType(1)]), name)
        self.b.call(fn, [dst, ir.Constant(I8, 0), nbytes, ir.Constant(ir.IntType(1), 0)])

    def call_body(self, call: BodyCall, dests: list, sizes: list, prefix: str):
        """Point the body's outputs at ``dests`` (of ``sizes`` bytes), run it, fill the
        repeated outputs."""
        run = call.emit(self.km, prefix)
        for buf, dest in zip(call.outs, dests):
            if buf is not None:
                self.set_slot(buf, dest)
        self.b.call(run, [self.ptrs, self.params])
        for k, first in call.repeats:
            self.copy(dests[k], dests[first], sizes[k])


# ----------------------------------------------------------------------------------------------
# The regions


@dataclass
class LoopRegion:
    """A loop's stage: the views (in the parent schedule) of its inputs and results."""
    trips: int
    reverse: bool
    flag: int | None   # the carry whose truth stops the loop (an early exit), or None
    count: View | None  # the int64 trip count (at most ``trips``) it runs, or None: all
    inits: list
    xs: list
    consts: list
    carries: list     # where the final carries live (the loop's results)
    spare: list       # each carry's second buffer
    ys: list          # the stacked outputs
    body: BodyCall
    label = "a loop"

    def calls(self) -> list[BodyCall]:
        return [self.body]

    def emit(self, km, st: Stage):
        e = _Emit(km, st)
        b = e.b
        nc, nx = len(self.carries), len(self.xs)
        args = self.body.args
        i_cell = b.alloca(I64, name="i.cell")
        trips = e.param(self.trips, "trips")
        if self.count is not None:   # clamped to [0, trips]
            given = b.load(e.address(self.count, "count"), typ=I64, name="count")
            given = b.select(b.icmp_signed("<", given, trips), given, trips)
            trips = b.select(b.icmp_signed("<", given, ir.Constant(I64, 0)),
                             ir.Constant(I64, 0), given, name="trips.run")
        carry_bytes = [e.param(e.nbytes(v), f"carry{k}.bytes") for k, v in enumerate(self.carries)]
        x_rows = [e.param(e.row_bytes(v), f"x{k}.row") for k, v in enumerate(self.xs)]
        y_rows = [e.param(e.row_bytes(v), f"y{k}.row") for k, v in enumerate(self.ys)]
        carries = [e.address(v, f"carry{k}") for k, v in enumerate(self.carries)]
        spare = [e.address(v, f"spare{k}") for k, v in enumerate(self.spare)]
        xs = [e.address(v, f"x{k}") for k, v in enumerate(self.xs)]
        ys = [e.address(v, f"y{k}") for k, v in enumerate(self.ys)]
        for k, v in enumerate(self.inits):
            e.copy(carries[k], e.address(v, f"init{k}"), carry_bytes[k])
        if self.count is not None:   # the rows of the iterations that do not run are zeros
            for k, (y, v) in enumerate(zip(ys, self.ys)):
                e.zero(y, e.param(e.nbytes(v), f"y{k}.bytes"))
        e.set_slot(args[0], i_cell)
        for k, v in enumerate(self.consts):
            e.set_slot(args[1 + nc + nx + k], e.address(v, f"const{k}"))
        pairs = [(f"old{k}", c) for k, c in enumerate(carries)] + \
                [(f"new{k}", s) for k, s in enumerate(spare)]
        loop = open_loop(b, ir.Constant(I64, 0), trips, ("loop.head", "loop.body", "loop.exit"),
                         "j", carried=pairs)
        old, new = loop.carried[:nc], loop.carried[nc:]
        if self.flag is not None:   # a real branch out of the loop once the flag is set
            done = b.load(old[self.flag], typ=memory_type("bool"), name="done")
            going = e.fn.append_basic_block("loop.going")
            b.cbranch(b.icmp_unsigned("!=", done, ir.Constant(I8, 0)), loop.exit, going)
            b.position_at_end(going)
        i = b.sub(b.sub(trips, ir.Constant(I64, 1)), loop.index, name="i") if self.reverse \
            else loop.index
        b.store(i, i_cell)
        for k in range(nc):
            e.set_slot(args[1 + k], old[k])
        for k, (x, row) in enumerate(zip(xs, x_rows)):
            e.set_slot(args[1 + nc + k], b.gep(x, [b.mul(i, row)], source_etype=I8, name=f"x{k}.i"))
        dests = list(new) + [b.gep(y, [b.mul(i, row)], source_etype=I8, name=f"y{k}.i")
                             for k, (y, row) in enumerate(zip(ys, y_rows))]
        e.call_body(self.body, dests, carry_bytes + y_rows, f"{km.prefix}r{st.index}_")
        close_loop(b, loop, carried=list(new) + list(old))   # swap: this result is the next input
        for k in range(nc):   # the final carries where the loop's results live
            e.copy(carries[k], old[k], carry_bytes[k])
        b.ret_void()
        return e.functions


@dataclass
class CondRegion:
    """A branch's stage: its predicate, operands and results (views in the parent)."""
    pred: View
    operands: list
    results: list
    then: BodyCall
    other: BodyCall
    label = "a branch"

    def calls(self) -> list[BodyCall]:
        return [self.then, self.other]

    def emit(self, km, st: Stage):
        e = _Emit(km, st)
        b = e.b
        sizes = [e.param(e.nbytes(v), f"result{k}.bytes") for k, v in enumerate(self.results)]
        flag = b.load(e.address(self.pred, "pred"), typ=memory_type("bool"))
        taken = b.icmp_unsigned("!=", flag, ir.Constant(I8, 0), name="taken")
        operands = [e.address(v, f"operand{k}") for k, v in enumerate(self.operands)]
        results = [e.address(v, f"result{k}") for k, v in enumerate(self.results)]
        then_block = e.fn.append_basic_block("then")
        else_block = e.fn.append_basic_block("else")
        done = e.fn.append_basic_block("done")
        b.cbranch(taken, then_block, else_block)
        for block, side, name in ((then_block, self.then, "t"), (else_block, self.other, "e")):
            b.position_at_end(block)
            for buf, address in zip(side.args, operands):
                e.set_slot(buf, address)
            e.call_body(side, results, sizes, f"{km.prefix}r{st.index}{name}_")
            b.branch(done)
        b.position_at_end(done)
        b.ret_void()
        return e.functions


@dataclass
class RematRegion:
    """A checkpoint's recomputation: its operands and results (views in the parent)."""
    operands: list
    results: list
    body: BodyCall
    label = "a recomputation (sg.checkpoint)"

    def calls(self) -> list[BodyCall]:
        return [self.body]

    def emit(self, km, st: Stage):
        e = _Emit(km, st)
        sizes = [e.param(e.nbytes(v), f"result{k}.bytes") for k, v in enumerate(self.results)]
        operands = [e.address(v, f"operand{k}") for k, v in enumerate(self.operands)]
        results = [e.address(v, f"result{k}") for k, v in enumerate(self.results)]
        for buf, address in zip(self.body.args, operands):
            e.set_slot(buf, address)
        e.call_body(self.body, results, sizes, f"{km.prefix}r{st.index}_")
        e.b.ret_void()
        return e.functions
