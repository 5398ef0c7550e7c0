"""The CUDA back end's kernel bodies, one writer per kernel kind (``KERNEL_EMITTERS``): the
grid-stride ``map`` and ``scatter`` loops, and the ``thread`` and ``block`` reductions (warp
shuffles and a shared-memory round), then :func:`build_module`, the LLVM IR of a whole plan.
"""
from __future__ import annotations

import math

from llvmlite import ir

from symgrad.ir import is_float

from . import libdevice
from .dtypes import memory_type
from .loop_body import REDUCE_KIND, identity
from .lower import LOWER, Scalar
from .ptx_build import KernelBuilder
from .ptx_regions import all_kernels
from .ptx_plan import WARP, FinishJob, Kernel, Plan, ReduceJob, StoreJob, _reads


def _identity(cx: Scalar, op: str, dtype: str):
    """The reduction's starting value (the CPU back end's table)."""
    return cx.const(identity(REDUCE_KIND[op], dtype), dtype)


# reduction -> the scalar rule (codegen.lower.LOWER) that combines two partial results
COMBINE_RULE = {"sum": "add", "prod": "mul", "max": "maximum", "min": "minimum"}


def _combine(kb: KernelBuilder, op: str, dtype: str, a, c):
    rule = COMBINE_RULE[op]
    if dtype == "bool" and op in ("sum", "prod"):
        return (kb.b.or_ if op == "sum" else kb.b.and_)(a, c)
    return LOWER[rule](kb.cx, _Typed(dtype), [a, c])


class _Typed:
    """The little a scalar lowering rule reads from a node: its dtype (and operands' dtype)."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.inputs = (self, self)
        self.op = "reduce"


def _shuffle_down(kb: KernelBuilder, v: ir.Value, delta: int) -> ir.Value:
    b, i32 = kb.b, ir.IntType(32)
    name = "llvm.nvvm.shfl.sync.down.i32"
    fn = kb.module.globals.get(name) or ir.Function(kb.module, ir.FunctionType(i32, [i32] * 4), name)

    def shfl(x):
        return b.call(fn, [ir.Constant(i32, -1), x, ir.Constant(i32, delta), ir.Constant(i32, 31)])
    ty = v.type
    if isinstance(ty, ir.FloatType):
        return b.bitcast(shfl(b.bitcast(v, i32)), ty)
    if isinstance(ty, ir.DoubleType):
        v = b.bitcast(v, ir.IntType(64))
    if v.type.width == 64:
        lo = shfl(b.trunc(v, i32))
        hi = shfl(b.trunc(b.lshr(v, ir.Constant(v.type, 32)), i32))
        out = b.or_(b.zext(lo, v.type), b.shl(b.zext(hi, v.type), ir.Constant(v.type, 32)))
        return b.bitcast(out, ty) if isinstance(ty, ir.DoubleType) else out
    if v.type.width < 32:
        return b.trunc(shfl(b.zext(v, i32)), ty)
    return shfl(v)


def _warp_reduce(kb, op, dtype, v):
    if kb.emulate:
        return v
    for delta in (16, 8, 4, 2, 1):
        v = _combine(kb, op, dtype, v, _shuffle_down(kb, v, delta))
    return v


def _barrier(kb):
    if kb.emulate:
        return
    name = "llvm.nvvm.barrier0"
    fn = kb.module.globals.get(name) or ir.Function(kb.module, ir.FunctionType(ir.VoidType(), []), name)
    kb.b.call(fn, [])


def _element_fn(kb: KernelBuilder, job):
    """``elem(o, r)``: the r-th term of the o-th output of a reduction job."""
    n = job.node
    if isinstance(job, FinishJob):
        return lambda o, r: kb.load(job.partial, kb.b.add(kb.b.mul(o, kb.int(job.parts)), r))
    if n.op == "matmul":
        a, c = n.inputs
        out_shape = n.shape

        def elem(o, r):
            od = kb.dims(kb.index(out_shape, flat=o))
            batch, i, j = od[:-2], od[-2], od[-1]
            ia = kb.broadcast(kb.index(out_shape[:-2] + a.shape[-2:], dims=batch + [i, r]), a.shape)
            ic = kb.broadcast(kb.index(out_shape[:-2] + c.shape[-2:], dims=batch + [r, j]), c.shape)
            va, vc = kb.value(a, ia), kb.value(c, ic)
            if n.dtype == "bool":
                return kb.b.and_(va, vc)
            return LOWER["mul"](kb.cx, n, [va, vc])
        return elem
    x = n.inputs[0]
    axes = n.attrs[0]
    kept = [d for i, d in enumerate(x.shape) if i not in axes]
    red = [x.shape[i] for i in axes]
    rsize = math.prod(red)
    prefix = axes == tuple(range(len(axes)))
    suffix = axes == tuple(range(x.ndim - len(axes), x.ndim))

    def elem(o, r):
        if suffix:
            idx = kb.index(x.shape, flat=kb.b.add(kb.b.mul(o, kb.int(rsize)), r) if kept else r)
        elif prefix:
            idx = kb.index(x.shape, flat=kb.b.add(kb.b.mul(r, kb.int(math.prod(kept))), o))
        else:
            od = kb.dims(kb.index(kept, flat=o))
            rd = kb.dims(kb.index(red, flat=r))
            dims, ko, kr = [], 0, 0
            for i in range(x.ndim):
                if i in axes:
                    dims.append(rd[kr])
                    kr += 1
                else:
                    dims.append(od[ko])
                    ko += 1
            idx = kb.index(x.shape, dims=dims)
        return kb.value(x, idx)
    return elem


def _reduce_length(job) -> int:
    n = job.node
    if isinstance(job, FinishJob):
        return job.parts
    if n.op == "matmul":
        return n.inputs[0].shape[-1]
    return math.prod(n.inputs[0].shape[a] for a in n.attrs[0])


def _emit_thread_reduce(kb: KernelBuilder):
    (job,) = kb.kernel.jobs
    n, dest, op = job.node, job.dest, job.op
    dtype, rlen = n.dtype, _reduce_length(job)
    elem = _element_fn(kb, job)
    gid = kb.b.add(kb.b.mul(kb.sreg("ctaid.x"), kb.sreg("ntid.x")), kb.sreg("tid.x"))
    stride = kb.b.mul(kb.sreg("ntid.x"), kb.sreg("nctaid.x"))

    def body(o):
        (acc,) = kb.loop(kb.int(0), kb.int(rlen), kb.int(1),
                         lambda r, acc: (_combine(kb, op, dtype, acc, elem(o, r)),),
                         carried=(_identity(kb.cx, op, dtype),), name="red")
        kb.store(dest, o, acc)
    kb.loop(gid, kb.int(kb.kernel.count), stride, body, name="out")


def _emit_block_reduce(kb: KernelBuilder):
    (job,) = kb.kernel.jobs
    n, dest, op = job.node, job.dest, job.op
    parts = job.parts if isinstance(job, ReduceJob) else 1   # a FinishJob's parts are its length
    dtype, rlen = n.dtype, _reduce_length(job)
    elem = _element_fn(kb, job)
    b, i32 = kb.b, ir.IntType(32)
    mty = memory_type(dtype)
    space = 0 if kb.emulate else 3
    shared = ir.GlobalVariable(kb.module, ir.ArrayType(mty, WARP), f"{kb.kernel.name}_shared", addrspace=space)
    shared.linkage = "internal"
    shared.initializer = ir.Constant(ir.ArrayType(mty, WARP), ir.Undefined)   # .shared has no initial value
    shared.align = 8
    shared.type = ir.PointerType(addrspace=space)   # opaque, or llvmlite types the gep as the array
    tid = kb.sreg("tid.x")
    lane = b.and_(tid, kb.int(WARP - 1))
    warp = b.lshr(tid, kb.int(5))
    zero32 = ir.Constant(i32, 0)

    def slot(k):
        return b.gep(shared, [zero32, k], inbounds=True, source_etype=shared.value_type)

    def to_mem(v):
        return b.zext(v, mty) if dtype == "bool" else v

    def from_mem(v):
        return b.icmp_unsigned("!=", v, ir.Constant(mty, 0)) if dtype == "bool" else v

    def body(blk):
        o, p = (blk, None) if parts == 1 else (b.udiv(blk, kb.int(parts)), b.urem(blk, kb.int(parts)))
        start = tid if p is None else b.add(b.mul(p, kb.int(kb.block)), tid)
        (acc,) = kb.loop(start, kb.int(rlen), kb.int(kb.block * parts),
                         lambda r, acc: (_combine(kb, op, dtype, acc, elem(o, r)),),
                         carried=(_identity(kb.cx, op, dtype),), name="red")
        acc = _warp_reduce(kb, op, dtype, acc)
        with b.if_then(b.icmp_unsigned("==", lane, kb.int(0))):
            b.store(to_mem(acc), slot(warp))
        _barrier(kb)
        with b.if_then(b.icmp_unsigned("==", warp, kb.int(0))):
            v = from_mem(b.load(slot(lane), typ=mty))
            v = b.select(b.icmp_unsigned("<", lane, kb.int(max(1, kb.block // WARP))), v,
                         _identity(kb.cx, op, dtype))
            v = _warp_reduce(kb, op, dtype, v)
            with b.if_then(b.icmp_unsigned("==", lane, kb.int(0))):
                kb.store(dest, blk, v)
        _barrier(kb)   # the next output reuses the shared slots
    kb.loop(kb.sreg("ctaid.x"), kb.int(kb.kernel.count), kb.sreg("nctaid.x"), body, name="blocks")


def _emit_map(kb: KernelBuilder):
    gid = kb.b.add(kb.b.mul(kb.sreg("ctaid.x"), kb.sreg("ntid.x")), kb.sreg("tid.x"))
    stride = kb.b.mul(kb.sreg("ntid.x"), kb.sreg("nctaid.x"))

    def body(i):
        idx = kb.index(kb.kernel.jobs[0].node.shape, flat=i)   # one position: outputs share work
        for job in kb.kernel.jobs:
            n = job.node
            v = kb.compute(n, idx) if kb.plan.source.get(n) == job.dest else kb.value(n, idx)
            kb.store(job.dest, i, v)
    kb.loop(gid, kb.int(kb.kernel.count), stride, body, name="elem")


def _emit_scatter(kb: KernelBuilder):
    (job,) = kb.kernel.jobs
    n, dest = job.node, job.dest
    g, ind = n.inputs
    axis, size = n.attrs
    if not is_float(n.dtype) and n.dtype not in ("int32", "int64", "uint32", "uint64"):
        raise NotImplementedError(f"scatter_add of {n.dtype} on target='cuda' (no atomic add)")
    gid = kb.b.add(kb.b.mul(kb.sreg("ctaid.x"), kb.sreg("ntid.x")), kb.sreg("tid.x"))
    stride = kb.b.mul(kb.sreg("ntid.x"), kb.sreg("nctaid.x"))

    def body(i):
        gi = kb.index(g.shape, flat=i)
        d = kb.dims(gi)
        k = kb.value(ind, kb.index(ind.shape, dims=d[axis:axis + ind.ndim]) if ind.ndim else kb.scalar_index)
        k = kb._gathered(k, ind.dtype, size, kb.checks(n))
        out = kb.index(n.shape, dims=d[:axis] + [k] + d[axis + ind.ndim:])
        kb.b.atomic_rmw("fadd" if is_float(n.dtype) else "add", kb.address(dest, kb.flat(out)),
                        kb.value(g, gi), "monotonic")
    kb.loop(gid, kb.int(kb.kernel.count), stride, body, name="upd")


def _kernel_params(p: Plan, k: Kernel) -> tuple:
    """Every buffer a kernel touches: its destinations and the frontier of what it computes."""
    reads = set()
    for job in k.jobs:
        n, dest = job.node, job.dest
        reads.add(dest)
        if isinstance(job, FinishJob):
            reads.add(job.partial)
        elif isinstance(job, StoreJob) and p.source.get(n) == dest:
            reads.update(p.source[m] for m in _reads(n, p.source, fused=p.fused))
        elif isinstance(job, StoreJob):      # an output that is another buffer's value: a copy
            reads.add(p.source[n])
        else:                          # reduce / scatter: the operands' expressions
            for x in n.inputs:
                reads.update(p.source[m] for m in _reads(x, p.source, False, p.fused))
    reads.update(buf for buf, _ in k.guards)   # the predicates of the branches it is inside
    if k.flag is not None:                      # the error word of its index checks
        reads.add(k.flag)
    return tuple(sorted(reads))


# kernel kind -> the function that writes its body
KERNEL_EMITTERS = {"map": _emit_map, "scatter": _emit_scatter, "thread": _emit_thread_reduce,
                   "block": _emit_block_reduce}


def build_module(p: Plan, emulate_with=None) -> str:
    """The LLVM IR text of every kernel of a plan (libdevice calls still declarations).
    ``emulate_with``: a CPU math target; builds the single-thread CPU emulation instead."""
    module = ir.Module(name=p.graph.name)
    if emulate_with is None:
        module.triple = "nvptx64-nvidia-cuda"
    math_target = emulate_with or libdevice.LibdeviceMath()
    for sub, k in all_kernels(p):   # with the kernels of loop bodies (codegen.ptx_regions)
        k.params = _kernel_params(sub, k)
        kb = KernelBuilder(module, sub, k, math_target, emulate=emulate_with is not None)
        kb.enter_guards()
        KERNEL_EMITTERS[k.kind](kb)
        kb.b.ret_void()
    text = str(module)
    if emulate_with is not None:
        return text
    libdevice.check_intrinsics(text)
    # Flush denormals? No: IEEE semantics, like the CPU and NumPy (libdevice reads this flag).
    text += '\n!llvm.module.flags = !{!0}\n!0 = !{i32 4, !"nvvm-reflect-ftz", i32 0}\n'
    return text
