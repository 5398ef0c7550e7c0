"""LLVM IR for a :class:`~codegen.schedule.Schedule`: one loop nest per stage.

Size-generic by construction: every extent, stride and offset the loops use is read from a
run-time ``i64 params[]`` array, so the IR text (and thus the machine code, which is cached by
the hash of that text) does not change when only sizes change. What *is* baked in is
structure: the ops, dtypes, ranks, which strides are zero (broadcasting) and whether the
innermost stride is one (so the loop vectoriser sees unit-stride loads), and "nice" constants
(small integers, halves, infinities) whose value matters to instruction selection.

Exported symbols (``sg_`` is renamed to a per-kernel prefix before compilation):

* ``sg_run(i64* ptrs, i64* params)``: every stage, single thread;
* ``sg_stage<k>(ptrs, params, i64 begin, i64 end)``: stage k over ``[begin, end)`` of its
  outermost axis (the thread pool splits that range);
* ``sg_init<k>(ptrs, params)``: fill stage k's reduction outputs with the identity.

A region stage (a loop or branch) is emitted by ``codegen.regions``; its bodies' stages are
internal functions of the same module (``sg_r<k>_run`` and its ``sg_r<k>_stage<j>``).

``ptrs[b]`` is the address of buffer b. Each stage body is a separate function whose buffer
arguments are ``noalias`` (the scheduler guarantees distinct buffers never overlap), which is
what lets LLVM vectorise without run-time overlap checks.
"""
from __future__ import annotations

import dataclasses
import math
import struct
from typing import NamedTuple

from llvmlite import ir

from symgrad.ir import Node, is_float

from . import matmul_kernel, tile_run, tiling, wide_stage
from .libraries import copy_body, declare_copy, library_function
from .dtypes import memory_type, value_type
from .loops import close_loop, open_loop
from .lower import Scalar
from .mathlib import MathTarget, inlines_own_code
from .loop_body import (IN_LOOP_RULES, REDUCE_KIND, Access, GatherViews, StageEmitter, const_key,
                        identity, reduction_order)
from .schedule import LEAF_INLINE, Schedule, Stage
from .short_loops import hint_short_inner_loop, without_loop_ids
from .views import View, merge_axes

I64 = ir.IntType(64)
PTR = ir.PointerType()

# A stage of at most this many iterations is compiled without optimisation (LLVM's optnone:
# no IR passes, fast instruction selection): the -O3 pipeline with the vectorisers costs every
# stage 10-40 ms of compile time however few iterations it has (ADBench GMM's gradient at
# d = 2: 16 of its 33 stages have <= 15), while unoptimised code is slower by ~0.1 us per
# iteration of a transcendental-heavy body (measured: +7.6 us a call at 64 iterations, none
# at 4), so the bound stays where that loss is at most ~2 us a call.
LIGHT_MAX_ITERATIONS = 16
# Beside a much larger stage, a small one is light too: unoptimised, a loop runs ~10x slower,
# so a stage of at most 1/LIGHT_SHARE of the largest one's iterations costs at most ~0.5% of
# the largest one's time (ADBench GMM: its (K,) and (K, d) stages beside the (K, n, d) ones),
# up to LIGHT_CAP iterations.
LIGHT_SHARE = 2048
LIGHT_CAP = 4096


def light_bound(schedule: Schedule) -> int:
    """The most iterations a stage of ``schedule`` may have to be compiled light."""
    biggest = max((st.size for st in schedule.stages), default=0)
    return max(LIGHT_MAX_ITERATIONS, min(LIGHT_CAP, biggest // LIGHT_SHARE))


# A stage whose loop calls more of our own float64 functions (codegen.f64math: exp, sin, tanh,
# ...) than this calls them out of line (CPUMath.outlined: one vector call a site, the library
# compiled once per process) instead of inlining and widening each call site: inlined, every
# call is 40-70 instructions that LLVM optimises, vectorises and allocates registers for
# again, which made LLVM's time per statement of straight-line code grow with the number of
# calls (13 s for 250 statements with 370 calls). Below the bound inlining keeps the kernels
# that matter for speed (W1: 6 calls) free of call overhead.
OUTLINE_MATH_CALLS = 8


def _own_math_calls(st: Stage) -> int:
    return sum(1 for n in st.ssa if inlines_own_code(n.op, n.dtype))


def _compile_light(fn: ir.Function):
    fn.attributes.add("noinline")   # LLVM requires it beside optnone
    fn.attributes.add("optnone")


def all_stages_light(schedule: Schedule, light: int) -> bool:
    """Is every stage compiled light (see _light_stage)?"""
    return bool(schedule.stages) and all(_light_stage(st, light, schedule.buffers)
                                         for st in schedule.stages)


def _light_stage(st: Stage, light: int, buffers) -> bool:
    """Is the stage's body compiled light? A region's never (its body is a module of its
    own); a blocked matmul's without epilogue always, whatever its size: the body only loops
    over the batch and calls the library kernel, which is compiled optimised once; one with
    an epilogue never (its kernel is the module's own and would be light too); any other up to
    ``light`` iterations."""
    if st.region is not None:
        return False
    if matmul_kernel.applies(st, buffers):
        return st.epilogue is None
    return st.size <= light


def _module_light(module: ir.Module):
    """Mark every function the module defines light (the stages' bodies are already): their
    wrappers and ``sg_run`` only load addresses and call, so nothing is lost, and a module of
    nothing but optnone functions is compiled by the -O0 code generator (``jit.is_light``),
    whose register allocation takes a fraction of the time on long straight-line bodies.
    Inlined maths (``codegen.f64math``'s alwaysinline functions) becomes a call: without
    fast-math flags the arithmetic, and so every result, is the same either way."""
    for fn in module.functions:
        if fn.blocks and "optnone" not in fn.attributes:
            fn.attributes.discard("alwaysinline")
            _compile_light(fn)

class StageInfo(NamedTuple):
    """What the run time needs to know of one stage's machine code (``KernelModule.stage_info``)."""
    extent0_slot: int | None   # params slot of the outermost extent (None: a 0-d stage)
    partial: list              # (buffer, combine kind) of reductions over the outer axis
    serial: bool               # must not be split across threads (a scatter over axis 0)
    shape: tuple               # the loop shape, after axis merging


class StageFunctions(NamedTuple):
    """A stage's exported functions, as ``sg_run`` calls them."""
    stage: ir.Function         # sg_stage<k>(ptrs, params, begin, end)
    init: ir.Function          # sg_init<k>(ptrs, params): reduction outputs := identity
    extent0_slot: int | None
    rank: int


def baked(value) -> bool:
    """Constants compiled into the code; any other value is a run-time parameter, so that a
    function differing only in a constant (a mean's 1/n) reuses the machine code."""
    if isinstance(value, bool):
        return True
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        return True
    return v in (0.5, -0.5) or (v == int(v) and abs(v) <= 8)


def _bits(value, dtype: str) -> int:
    if dtype == "float64":
        return struct.unpack("<q", struct.pack("<d", float(value)))[0]
    if dtype == "float32":
        return struct.unpack("<i", struct.pack("<f", float(value)))[0]
    v = int(value) & 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >= 1 << 63 else v


class KernelModule:
    """Build with ``KernelModule(schedule, math)``; read ``module``, ``params``, ``stage_info``."""

    def __init__(self, schedule: Schedule, math_target: MathTarget, name="symgrad",
                 parent: "KernelModule | None" = None, prefix: str = "sg_"):
        """``parent``/``prefix``: a region body (``codegen.regions``), emitted into the
        parent's module with the parent's parameters, its functions named ``prefix...``."""
        self.s = schedule
        self.math = math_target
        self.prefix = prefix
        if parent is None:
            self.module = ir.Module(name)
            self.module.math_calls = set()
            self.module.stage_bodies = {}    # a body's text, name left out -> its function
            self.params: list[int] = []
        else:
            self.module, self.params = parent.module, parent.params
        self.param_base: dict = {}   # a stage body's params argument -> its first slot
        self.stage_info: list[StageInfo] = []   # per stage
        # stages up to this size compile light; none in a loop region's body, whose stages
        # run once per iteration (ADBench LSTM: 14-element stages, 1023 steps)
        self.light = light_bound(schedule) if parent is None else -1
        # scalar code: every function light, compiled by the -O0 code generator (_module_light)
        self.all_light = parent is None and all_stages_light(schedule, self.light)
        self.tiled = tiling.grouped(schedule)
        wrappers = []
        for st in schedule.stages:
            wrappers.append(st.region.emit(self, st) if st.region is not None else self._stage(st))
        self.groups = [tile_run.group_function(self, g, k, wrappers)
                       for k, g in enumerate(schedule.tile_groups)]
        self.run_fn = self._run(wrappers)
        if self.all_light:
            _module_light(self.module)
        if parent is not None:   # called only from the region's loop: inlined there
            for fn in [self.run_fn] + [f for w in wrappers for f in (w.stage, w.init)]:
                fn.linkage = "internal"
        else:
            # sg_run calls the very code the threads call (inlined into sg_run, a stage could
            # be optimised differently there, and compiled twice), and codegen.module_split
            # may put them in different parts
            for fn in [f for w in wrappers for f in (w.stage, w.init)] + self.groups:
                fn.attributes.add("noinline")

    # -- parameters ----------------------------------------------------------------------------
    def param(self, value: int) -> int:
        self.params.append(int(value))
        return len(self.params) - 1

    def load_param(self, b: ir.IRBuilder, params, slot: int, name="p") -> ir.Value:
        return b.load(b.gep(params, [ir.Constant(I64, self.slot_in(params, slot))],
                            source_etype=I64), typ=I64, name=name)

    def slot_in(self, params, slot: int) -> int:
        """``slot`` as an index into ``params`` (a stage body's starts at its first slot)."""
        return slot - self.param_base.get(params, 0)

    def constant(self, b, params, value, dtype: str) -> ir.Value:
        cx = Scalar(b, self.math)
        if baked(value):
            return cx.const(value, dtype)
        raw = self.load_param(b, params, self.param(_bits(value, dtype)), "const")
        if dtype == "float64":
            return b.bitcast(raw, ir.DoubleType())
        if dtype == "float32":
            return b.bitcast(b.trunc(raw, ir.IntType(32)), ir.FloatType())
        return b.trunc(raw, value_type(dtype)) if dtype != "int64" else raw

    # -- one stage -------------------------------------------------------------------------------
    def _accesses(self, st: Stage):
        """Every memory view the stage reads or writes, in a deterministic order."""
        ssa = set(st.ssa)
        loads: dict[Node, View] = {}

        def read(x):
            if x in ssa or x.op in LEAF_INLINE or x in loads:
                return
            loads[x] = self.s.loc[x].align(st.shape)

        for n in st.ssa:
            if n.op not in IN_LOOP_RULES:   # a gather's operands are read through their own views
                for x in n.inputs:
                    read(x)
        for sk in st.sinks:
            if sk.kind in ("store", "accum"):
                read(sk.node)
            elif sk.kind in ("reduce", "scatter"):
                read(sk.node.inputs[0])
        return loads

    def _gather_views(self, st: Stage) -> dict:
        """For each gather: x seen from the loop without its indexed axis, and the index."""
        out = {}
        d = len(st.shape)
        for n in st.ssa:
            if n.op == "take":
                x, idx = n.inputs
                (axis,) = n.attrs
                vx, vi = self.s.loc[x], self.s.loc[idx]
                r = idx.ndim
                xs = vx.strides[:axis] + (0,) * r + vx.strides[axis + 1:]
                out[n] = GatherViews(View(vx.buf, vx.offset, st.shape, xs),
                                     View(vi.buf, vi.offset, st.shape,
                                          (0,) * axis + vi.strides + (0,) * (d - axis - r)),
                                     vx.strides[axis], x.shape[axis])
        return out

    def _merged(self, st: Stage, loads: dict, gathers: dict):
        """The stage with its loop axes collapsed where every view allows (merge_axes)."""
        views = list(loads.values()) + [sk.dest for sk in st.sinks] + [
            v for sk in st.sinks for v in sk.operands] + [v for g in gathers.values() for v in (g.x, g.index)]
        if len(st.shape) < 2 or any(n.op == "arange" for n in st.ssa):
            return st, loads, gathers
        shape, views = reduction_order(st, views)
        if st.index in self.tiled:   # the outer axis stays a loop: chunks are rows (tiling)
            inner, merged = merge_axes(shape[1:], [View(v.buf, v.offset, shape[1:], v.strides[1:])
                                                   for v in views])
            shape = shape[:1] + inner
            merged = [View(v.buf, m.offset, shape, v.strides[:1] + m.strides)
                      for v, m in zip(views, merged)]
        else:
            shape, merged = merge_axes(shape, views)
        it = iter(merged)
        loads = {x: next(it) for x in loads}
        sinks = [dataclasses.replace(sk, dest=next(it)) for sk in st.sinks]
        sinks = [dataclasses.replace(sk, operands=tuple(next(it) for _ in sk.operands)) for sk in sinks]
        gathers = {n: g._replace(x=next(it), index=next(it)) for n, g in gathers.items()}
        return dataclasses.replace(st, shape=shape, sinks=sinks), loads, gathers

    def _stage(self, st: Stage):
        loads = self._accesses(st)
        gathers = self._gather_views(st)
        blocked = matmul_kernel.applies(st, self.s.buffers)   # keeps its (..., m, k, n) axes
        if not blocked:
            st, loads, gathers = self._merged(st, loads, gathers)
        wide = (not blocked and st.size > self.light
                and wide_stage.applies(self, st, loads, gathers))
        views = list(loads.values()) + [sk.dest for sk in st.sinks] + [
            v for sk in st.sinks for v in sk.operands] + [v for g in gathers.values() for v in (g.x, g.index)]
        views += matmul_kernel.epilogue_views(st) if blocked else []
        bufs = {v.buf for v in views}
        if gathers or any(sk.kind == "scatter" for sk in st.sinks):
            bufs.add(self.s.flag)
        bufs = sorted(bufs)
        # A body takes its buffers as noalias arguments (what lets the loop vectoriser widen
        # without overlap checks); a wide one (no IR passes to inform) reads their addresses
        # from ptrs itself, where it uses them (wide_stage.emit): ~100 stack-passed arguments a
        # stage were a tenth of its code.
        pointers = [] if wide else bufs
        fty = ir.FunctionType(ir.VoidType(), [PTR] * (len(pointers) + 1 + wide) + [I64, I64])
        suffix = wide_stage.SUFFIX if wide else ".body"   # (jit compiles .wide without IR passes)
        body = ir.Function(self.module, fty, f"{self.prefix}stage{st.index}{suffix}")
        body.linkage = "internal"
        body.attributes.add("nounwind")
        if self.light >= 0 and _light_stage(st, self.light, self.s.buffers):
            _compile_light(body)
        for a in body.args[:0 if wide else len(pointers) + 1]:
            a.add_attribute("noalias")
        argmap = {buf: body.args[i] for i, buf in enumerate(pointers)}
        for i, buf in enumerate(pointers):
            body.args[i].name = f"buf{buf}"
        params, begin, end = body.args[-3:]
        params.name, begin.name, end.name = "params", "begin", "end"
        # parameters from the body's first slot on (its wrapper passes &params[base]): two
        # stages of the same structure print the same body, compiled once (_shared_body)
        base = self.param_base[params] = len(self.params)
        b = ir.IRBuilder(body.append_basic_block("entry"))
        if wide:
            body.args[0].name = "ptrs"
        d = len(st.shape)
        extents = [self.load_param(b, params, self.param(e), f"n{j}") for j, e in enumerate(st.shape)]
        extent0_slot = len(self.params) - d if d else None

        if blocked:
            matmul_kernel.emit_stage(self, b, st, argmap, params, begin, end)
        elif d and not st.ssa and all(sk.kind in ("store", "accum") and sk.node.op not in LEAF_INLINE
                                    for sk in st.sinks):
            self._copies(b, st, loads, argmap, params, extent0_slot, begin, end)
        elif wide:
            wide_stage.emit(self, b, st, loads, body.args[0], params,
                            self._constants(b, params, st), extents, begin, end)
        elif (_own_math_calls(st) > OUTLINE_MATH_CALLS and hasattr(self.math, "outlined")
              and not self.all_light):   # light, each function is one called definition anyway
            inline, self.math = self.math, self.math.outlined()
            try:
                self._loops(b, body, st, loads, gathers, argmap, params, extents, begin, end)
            finally:
                self.math = inline
        else:
            self._loops(b, body, st, loads, gathers, argmap, params, extents, begin, end)
        b.ret_void()
        body = self._shared_body(body, pointers)
        return self._wrappers(st, pointers, body, extent0_slot, d, wide, base)

    def _shared_body(self, body: ir.Function, pointers: list) -> ir.Function:
        """``body``, or an earlier stage's function of the same text but for its name and
        buffer numbers (det(a) and det(b) factorise in two loop regions of the same stages),
        kept ``noinline`` (compiled once, not into each caller) and exported (an internal one
        its callers share would hold them all in one part of codegen.module_split, on one
        thread). The text is the function's whole meaning (ops, attributes, globals named)."""
        text = without_loop_ids(str(body)).replace(f'@"{body.name}"', '@"body"', 1)
        for i, buf in enumerate(pointers):
            text = text.replace(f'%"buf{buf}"', f'%"arg{i}"')
        earlier = self.module.stage_bodies.setdefault(text, body)
        if earlier is body:
            return body
        del self.module.globals[body.name]
        earlier.attributes.add("noinline")
        earlier.linkage = ""
        return earlier

    def _copies(self, b, st, loads, argmap, params, extent0_slot, begin, end):
        """A stage that only moves data (concatenate pieces, index_add regions, copies) calls
        one shared strided-copy loop per (dtype, rank, mode) instead of a loop of its own:
        such stages are numerous in gradients of shape code and would dominate compile time."""
        for sk in st.sinks:
            src, dst = loads[sk.node], sk.dest
            dtype = self.s.buffers[dst.buf].dtype
            helper = self._copy_helper(dtype, len(st.shape), sk.kind)
            ptrs = []
            for v in (dst, src):
                base = argmap[v.buf]
                if v.offset:
                    off = self.load_param(b, params, self.param(v.offset), "off")
                    base = b.gep(base, [off], source_etype=memory_type(dtype))
                ptrs.append(base)
            slots = [self.slot_in(params, s) for s in
                     [extent0_slot] + [[self.param(x) for x in v.strides][0] for v in (dst, src)]]
            b.call(helper, ptrs + [params] + [ir.Constant(I64, s) for s in slots] + [begin, end])

    def _copy_helper(self, dtype: str, d: int, mode: str) -> ir.Function:
        """The strided copy loop of (dtype, rank, mode): a library function (codegen.libraries)."""
        return library_function(self, f"symgrad_copy_{dtype}_{d}_{mode}", declare_copy,
                                lambda fn: copy_body(fn, dtype, d, mode))

    def _access(self, b, argmap, params, d: int, v: View, name: str) -> Access:
        """View ``v`` of a ``d``-axis loop ready to address: its base (plus offset) and the
        stride values (run-time parameters; None: a broadcast axis; 1: unit inner stride)."""
        base = argmap[v.buf]
        if v.offset:
            off = self.load_param(b, params, self.param(v.offset), f"{name}.off")
            base = b.gep(base, [off], source_etype=memory_type(self.s.buffers[v.buf].dtype),
                         name=name)
        strides = []
        for j, s in enumerate(v.strides):
            if s == 0:
                strides.append(None)
            elif j == d - 1 and s == 1:
                strides.append(1)   # unit inner stride: a plain `+ i`, vectorisable
            else:
                strides.append(self.load_param(b, params, self.param(s), f"{name}.s{j}"))
        return Access(base, strides, self.s.buffers[v.buf].dtype)

    def _constants(self, b, params, st) -> dict:
        """const_key -> value of every constant the stage's nodes and sinks read."""
        consts = {}
        for n in st.ssa + [sk.node for sk in st.sinks]:
            for x in n.inputs + ((n,) if n.op in LEAF_INLINE else ()):
                if x.op in LEAF_INLINE and const_key(x) not in consts:
                    consts[const_key(x)] = self.constant(b, params, x.attrs[0], x.dtype)
        return consts

    def _loops(self, b, body, st, loads, gathers, argmap, params, extents, begin, end):
        d = len(st.shape)

        def prepare(v: View, name):
            return self._access(b, argmap, params, d, v, name)

        acc_loads = {x: prepare(v, f"in{i}") for i, (x, v) in enumerate(loads.items())}
        acc_sinks = [prepare(sk.dest, f"out{i}") for i, sk in enumerate(st.sinks)]
        acc_ops = [tuple(prepare(v, f"op{i}.{j}") for j, v in enumerate(sk.operands))
                   for i, sk in enumerate(st.sinks)]
        for i, sk in enumerate(st.sinks):
            if sk.kind == "scatter":   # + the output's stride and extent on the indexed axis
                axis = sk.node.attrs[0]
                out_strides = self.s.loc[sk.node].strides
                acc_ops[i] += (self.load_param(b, params, self.param(out_strides[axis]), "sstride"),
                               self.load_param(b, params, self.param(sk.node.attrs[1]), "ssize"))
        acc_gathers = {n: (prepare(vx, f"g{i}.x"), prepare(vi, f"g{i}.i"),
                           self.load_param(b, params, self.param(stride), f"g{i}.stride"),
                           self.load_param(b, params, self.param(size), f"g{i}.size"))
                       for i, (n, (vx, vi, stride, size)) in enumerate(gathers.items())}
        flag = argmap.get(self.s.flag)
        consts = self._constants(b, params, st)
        extra = {n: tuple(self.load_param(b, params, self.param(_bits(v, "float64" if is_float(n.dtype)
                                                                        else "int64")), "arange")
                          for v in n.attrs[:2])
                 for n in st.ssa if n.op == "arange"}   # (start, step) as run-time parameters
        emit = StageEmitter(self, b, st, acc_loads, acc_sinks, acc_ops, consts, extra)
        emit.gathers, emit.flag, emit.fn = acc_gathers, flag, body
        emit.nest(body, extents, begin, end)
        if self.light < 0:      # a loop region's stage (the top level's short ones are light)
            hint_short_inner_loop(body, st.shape, self.math)

    def _wrappers(self, st, bufs, body, extent0_slot, d, direct=False, base=0):
        """The exported entry points of a stage: load the buffer addresses, call the body
        (``direct``: the body takes ``ptrs`` itself) with its parameters from slot ``base``."""
        partial = [(sk.dest.buf, REDUCE_KIND[sk.node.op]) for sk in st.sinks
                   if sk.kind in ("reduce", "matmul") and d and sk.dest.strides[0] == 0]
        self.stage_info.append(StageInfo(extent0_slot, partial, st.serial, st.shape))
        wrap = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64]),
                           f"{self.prefix}stage{st.index}")
        wrap.attributes.add("nounwind")
        ptrs, wparams, wb, we = wrap.args
        ptrs.name, wparams.name, wb.name, we.name = "ptrs", "params", "begin", "end"
        bw = ir.IRBuilder(wrap.append_basic_block("entry"))
        addrs = [bw.load(bw.gep(ptrs, [ir.Constant(I64, buf)], source_etype=PTR), typ=PTR,
                         name=f"buf{buf}") for buf in bufs]
        own = bw.gep(wparams, [ir.Constant(I64, base)], source_etype=I64) if base else wparams
        bw.call(body, ([ptrs] if direct else addrs) + [own, wb, we])
        bw.ret_void()

        init = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, PTR]),
                           f"{self.prefix}init{st.index}")
        init.attributes.add("nounwind")
        if st.size <= self.light:
            _compile_light(init)
        ptrs, iparams = init.args
        ptrs.name, iparams.name = "ptrs", "params"
        bi = ir.IRBuilder(init.append_basic_block("entry"))
        blocked = matmul_kernel.applies(st, self.s.buffers)   # writes its output without a fill
        for sk in st.sinks:
            if sk.kind in ("reduce", "matmul", "scatter") and not blocked:
                self._fill(init, bi, ptrs, iparams, sk)
        bi.ret_void()
        return StageFunctions(wrap, init, extent0_slot, d)

    def _fill(self, fn, b, ptrs, params, sk):
        buf = self.s.buffers[sk.dest.buf]
        ty = memory_type(buf.dtype)
        value = identity(REDUCE_KIND[sk.node.op], buf.dtype)
        cx = Scalar(b, self.math)
        val = cx.const(value, buf.dtype)
        if buf.dtype == "bool":
            val = b.zext(val, ty)
        base = b.load(b.gep(ptrs, [ir.Constant(I64, sk.dest.buf)], source_etype=PTR), typ=PTR)
        n = self.load_param(b, params, self.param(sk.node.size), "size")
        loop = open_loop(b, ir.Constant(I64, 0), n, ("fill.head", "fill.body", "fill.done"), "i")
        b.store(val, b.gep(base, [loop.index], source_etype=ty))
        close_loop(b, loop)

    def _run(self, wrappers):
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, PTR]), f"{self.prefix}run")
        fn.attributes.add("nounwind")
        ptrs, params = fn.args
        ptrs.name, params.name = "ptrs", "params"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        first = {g.stages[0]: (k, g) for k, g in enumerate(self.s.tile_groups)}
        grouped = {j for g in self.s.tile_groups for j in g.stages}
        for j, fns in enumerate(wrappers):
            if j in first:    # a tile group: its inits, then its chunks
                k, group = first[j]
                for i in group.stages:
                    b.call(wrappers[i].init, [ptrs, params])
                end = self.load_param(b, params, fns.extent0_slot, "extent")
                b.call(self.groups[k], [ptrs, params, ir.Constant(I64, 0), end])
                continue
            if j in grouped:
                continue
            b.call(fns.init, [ptrs, params])
            end = (self.load_param(b, params, fns.extent0_slot, "extent") if fns.rank
                   else ir.Constant(I64, 1))
            b.call(fns.stage, [ptrs, params, ir.Constant(I64, 0), end])
        b.ret_void()
        return fn
