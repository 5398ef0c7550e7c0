"""The CUDA PTX back end: a graph becomes a few GPU kernels, compiled by LLVM's NVPTX target.

Scheduling (:func:`plan`) gives memory only to what needs it: graph inputs and constant arrays,
outputs, reductions and matmuls, scatter-adds, matmul operands that are computed, and computed
values that several consumers read at *different* positions. Everything else is an index
expression evaluated in registers where it is consumed: elementwise ops, views (reshape,
transpose, broadcast_to, getitem), gathers, and the region ops (setitem, index_add,
concatenate, stack), which become branches on the output position. Shapes are concrete, so
index arithmetic is division by constants.

Kernels (:class:`Kernel`):

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

The scalar ops lower through ``codegen.lower.LOWER`` (the table the CPU back end uses) with
:class:`codegen.libdevice.LibdeviceMath` as the math target; libdevice is linked, internalized
and optimised with the kernels, then emitted as PTX text.
"""
from __future__ import annotations

import math
import re
import threading
import weakref
from dataclasses import dataclass, field

from llvmlite import ir

from symgrad.ir import Graph, NewAxis, Node, Slice, is_float, toposort

from . import libdevice
from .kernel import REDUCE_KIND, identity
from .dtypes import is_unsigned, memory_type, storage, value_type
from .loops import close_loop, open_loop
from .lower import LOWER, Scalar
from .opsets import LEAVES, REDUCTIONS, VIEWS
from .schedule import contiguous_strides

DEFAULT_ARCH = "sm_80"
# Architectures LLVM's NVPTX target is asked for; PTX for an older one JITs on newer GPUs.
KNOWN_ARCHS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_120")
BLOCK = 256            # threads per block, every kernel
WARP = 32
THREAD_REDUCE_MAX = 32  # reductions at most this long run one thread per output element
SPLIT_CHUNK = 4 * BLOCK * 8  # elements one block reduces before a reduction is split over blocks

# Ops whose values are buffers from the start: kernel parameters (an array by pointer, a 0-d
# value by value) and constant arrays.
IN_MEMORY = ("arg", "array")
# Ops the CUDA back end refuses with NotImplementedError (empty: every op lowers). Kept
# explicit so the coverage test tells "forgotten" from "deliberately unsupported".
UNSUPPORTED: dict[str, str] = {}


# ----------------------------------------------------------------------------------------------
# The plan: buffers and kernels


@dataclass
class Buffer:
    index: int
    kind: str        # "arg" (array parameter), "scalar" (0-d parameter, by value), "const", "out", "tmp"
    dtype: str
    size: int        # elements
    ref: object = None   # parameter index (arg/scalar), or the ndarray (const)

    @property
    def nbytes(self) -> int:
        return self.size * storage(self.dtype).itemsize


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


def _reads(root: Node, source: dict, skip_root=True) -> list:
    """Materialized nodes a kernel computing ``root`` reads (its fused region's frontier)."""
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
    return out


def plan(graph: Graph) -> Plan:
    """Decide buffers and kernels for ``graph`` (deterministic: toposort order throughout)."""
    order = toposort(graph.outputs)
    for n in order:
        if n.op in UNSUPPORTED:
            raise NotImplementedError(f"op {n.op!r} is not supported on target='cuda': {UNSUPPORTED[n.op]}")
        if lowering(n.op) is None:
            raise NotImplementedError(f"op {n.op!r} has no lowering on target='cuda' (no entry in "
                                      "codegen.lower.LOWER or the tables of codegen.ptx)")
    buffers: list[Buffer] = []
    source: dict[Node, int] = {}

    def new(kind, dtype, size, ref=None):
        buffers.append(Buffer(len(buffers), kind, dtype, int(size), ref))
        return len(buffers) - 1

    for i, a in enumerate(graph.inputs):
        if a is not None and a not in source:
            source[a] = new("scalar" if a.shape == () else "arg", a.dtype, max(a.size, 1), i)
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
        if n.op in KERNEL_RULES:   # computed by kernels of its own, into memory
            if n.op == "matmul":
                for x in n.inputs:
                    if not cheap(x) and x not in mat:
                        mat.append(x)
            mat.append(n)
        elif n.shape != () and len(users[n]) >= 2 and not cheap(n) and any(
                u.op not in LOWER or u.shape != n.shape for u in users[n]):   # views, reductions, ...
            mat.append(n)   # read at several positions: compute once, not once per reader
    outs, out_of, copies = [], {}, []
    for o in graph.outputs:
        if o not in out_of:
            out_of[o] = new("out", o.dtype, max(o.size, 1))
            if o in source:
                copies.append(o)      # an argument or constant returned as is: a copy
            elif o not in mat:
                mat.append(o)
        outs.append(out_of[o])
    mat.sort(key={n: i for i, n in enumerate(order)}.get)
    for n in mat:
        source[n] = out_of[n] if n in out_of else new("tmp", n.dtype, max(n.size, 1))

    # Levels: a kernel runs after every kernel whose results it reads.
    level: dict[Node, int] = {}
    for n in mat:
        level[n] = 1 + max((level.get(m, 0) for m in _reads(n, source)), default=0)

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

    for n in mat:
        if n.size == 0:
            continue      # nothing to compute (its buffer still exists, of one element)
        rule = KERNEL_RULES.get(n.op)
        if rule is not None:
            staged += [(level[n], k) for k in rule(n, source, new)]
        else:
            store(level[n], n, source[n])
    for n in copies:
        if n.size:
            store(1, n, out_of[n])
    staged.sort(key=lambda lk: lk[0])   # stable: toposort order within a level
    for i, (_, k) in enumerate(staged):
        k.name = f"{base}_k{i}"
        kernels.append(k)
    trig = {(n.op, n.inputs[0]): n for n in order if n.op in ("sin", "cos") and is_float(n.dtype)}
    sincos = {n: trig[("cos" if op == "sin" else "sin", x)] for (op, x), n in trig.items()
              if ("cos" if op == "sin" else "sin", x) in trig}
    return Plan(graph, buffers, kernels, tuple(outs), source, sincos)


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


# ----------------------------------------------------------------------------------------------
# Kernel code generation


class Index:
    """A position in an array of ``shape`` inside one kernel: a flat offset and/or one value per
    axis. Values derived lazily are cached in the kernel's scoped memo, not here, so that a
    value computed inside a branch is never reused where it does not dominate."""
    __slots__ = ("shape", "flat", "dims")

    def __init__(self, shape, flat=None, dims=None):
        self.shape, self.flat, self.dims = tuple(shape), flat, dims



class KernelBuilder:
    """Builds one kernel function: parameters, special registers, loops, index expressions."""

    def __init__(self, module: ir.Module, plan_: Plan, kernel: Kernel, math_target, emulate=False):
        self.plan, self.kernel, self.module = plan_, kernel, module
        # emulate: a CPU function that runs the whole grid as one thread (codegen.ptx_emulate)
        self.emulate = emulate
        self.block = 1 if emulate else BLOCK
        space = 0 if emulate else 1
        sizes = [plan_.buffers[b].size for b in kernel.params] + [kernel.count * BLOCK + 1]
        self.ity = ir.IntType(32 if max(sizes) * 2 < 2 ** 31 else 64)
        types = []
        for b in kernel.params:
            buf = plan_.buffers[b]
            types.append(value_type(buf.dtype) if buf.kind == "scalar" else ir.PointerType(addrspace=space))
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), types), kernel.name)
        if not emulate:
            self.fn.calling_convention = "ptx_kernel"
        self.args = {}
        for b, arg in zip(kernel.params, self.fn.args):
            arg.name = f"{plan_.buffers[b].kind}{b}"
            if plan_.buffers[b].kind != "scalar":
                arg.add_attribute("noalias")
            self.args[b] = arg
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.cx = Scalar(self.b, math_target)
        self.scopes: list[dict] = [{}]
        self.keep: list = []     # Index objects stay alive, so their ids stay unique
        self.scalar_index = self.index((), flat=self.int(0), dims=[])

    # -- basics ------------------------------------------------------------------------------
    def int(self, v) -> ir.Constant:
        return ir.Constant(self.ity, int(v))

    def sreg(self, name) -> ir.Value:
        if self.emulate:   # one block of one thread
            return self.int(1 if name.startswith("n") else 0)
        fn = self.module.globals.get(f"llvm.nvvm.read.ptx.sreg.{name}")
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ir.IntType(32), []),
                             f"llvm.nvvm.read.ptx.sreg.{name}")
        v = self.b.call(fn, [], name=name.replace(".", "_"))
        return v if self.ity.width == 32 else self.b.zext(v, self.ity)

    def lookup(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def remember(self, key, value):
        self.scopes[-1][key] = value
        return value

    def index(self, shape, flat=None, dims=None) -> Index:
        idx = Index(shape, flat, dims)
        self.keep.append(idx)
        return idx

    def flat(self, idx: Index) -> ir.Value:
        if idx.flat is not None:
            return idx.flat
        key = ("flat", id(idx))
        hit = self.lookup(key)
        if hit is None:
            acc = self.int(0)
            for d, s, v in zip(idx.shape, contiguous_strides(idx.shape), idx.dims):
                if d != 1:
                    acc = self.b.add(acc, self.b.mul(v, self.int(s)) if s != 1 else v)
            hit = self.remember(key, acc)
        return hit

    def dims(self, idx: Index) -> list:
        if idx.dims is not None:
            return idx.dims
        key = ("dims", id(idx))
        hit = self.lookup(key)
        if hit is None:
            f, out = idx.flat, []
            for k, (d, s) in enumerate(zip(idx.shape, contiguous_strides(idx.shape))):
                if d == 1:
                    out.append(self.int(0))
                    continue
                v = self.b.udiv(f, self.int(s)) if s != 1 else f
                out.append(self.b.urem(v, self.int(d)) if k else v)
            hit = self.remember(key, out)
        return hit

    def derive(self, idx: Index, key, build) -> Index:
        full = ("derive", id(idx), key)
        hit = self.lookup(full)
        if hit is None:
            hit = self.remember(full, build())
        return hit

    def broadcast(self, idx: Index, shape) -> Index:
        """The position in an operand of ``shape`` that NumPy broadcasting reads at ``idx``."""
        shape = tuple(shape)
        if shape == idx.shape:
            return idx
        if math.prod(shape) == 1:
            return self.scalar_index if shape == () else self.index(shape, flat=self.int(0))
        if math.prod(shape) == math.prod(idx.shape):   # only size-1 axes differ: same layout
            return self.derive(idx, ("b", shape), lambda: self.index(shape, flat=self.flat(idx)))

        def build():
            dims, lead = self.dims(idx), len(idx.shape) - len(shape)
            return self.index(shape, dims=[self.int(0) if d == 1 else dims[lead + j]
                                           for j, d in enumerate(shape)])
        return self.derive(idx, ("b", shape), build)

    # -- memory ------------------------------------------------------------------------------
    def address(self, buf: int, flat: ir.Value):
        dtype = self.plan.buffers[buf].dtype
        return self.b.gep(self.args[buf], [flat], inbounds=True, source_etype=memory_type(dtype))

    def load(self, buf: int, flat: ir.Value) -> ir.Value:
        dtype = self.plan.buffers[buf].dtype
        if self.plan.buffers[buf].kind == "scalar":
            return self.args[buf]
        v = self.b.load(self.address(buf, flat), typ=memory_type(dtype),
                        align=storage(dtype).itemsize)
        if dtype == "bool":
            v = self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        return v

    def store(self, buf: int, flat: ir.Value, value: ir.Value):
        dtype = self.plan.buffers[buf].dtype
        if dtype == "bool":
            value = self.b.zext(value, ir.IntType(8))
        self.b.store(value, self.address(buf, flat),
                     align=storage(dtype).itemsize)

    # -- control flow ------------------------------------------------------------------------
    def loop(self, start, stop, step, body, carried=(), name="loop"):
        """``for i in range(start, stop, step)`` with loop-carried values; returns their final
        values. ``body(i, *carried) -> new carried tuple``."""
        loop = open_loop(self.b, start, stop, (f"{name}.cond", f"{name}.body", f"{name}.exit"),
                         f"{name}.index", [(f"{name}.acc{k}", init) for k, init in enumerate(carried)],
                         ty=self.ity, unsigned=True)
        self.scopes.append({})   # values computed in the body do not dominate the exit
        new = body(loop.index, *loop.carried) or ()
        self.scopes.pop()
        close_loop(self.b, loop, step, new, next_name=f"{name}.next")
        return loop.carried

    def choose(self, conds, thunks, ty):
        """``thunks[k]()`` for the first true ``conds[k]`` (the last thunk is the default),
        each evaluated in its own block and scope; returns the phi of the results."""
        b = self.b
        merge = self.fn.append_basic_block("choose.merge")
        incoming = []
        for k, thunk in enumerate(thunks):
            if k < len(conds):
                then_bb = self.fn.append_basic_block(f"choose.case{k}")
                next_bb = self.fn.append_basic_block(f"choose.next{k}")
                b.cbranch(conds[k], then_bb, next_bb)
                b.position_at_end(then_bb)
            self.scopes.append({})
            v = thunk()
            self.scopes.pop()
            incoming.append((v, b.block))
            b.branch(merge)
            if k < len(conds):
                b.position_at_end(next_bb)
        b.position_at_end(merge)
        phi = b.phi(ty, name="choose")
        for v, blk in incoming:
            phi.add_incoming(v, blk)
        return phi

    # -- values ------------------------------------------------------------------------------
    def value(self, node: Node, idx: Index) -> ir.Value:
        """``node`` at ``idx``: loaded if it has memory, else computed (once per scope).

        What a node reads unconditionally (elementwise operands, the operand of a view) is
        computed first, from an explicit stack, so a long chain of fused ops nests no Python
        calls (no recursion limit); only ops that read inside branches (item updates,
        concatenation, gathers) call back in, one level per such op."""
        key = ("v", node, id(idx))
        hit = self.lookup(key)
        if hit is not None:
            return hit
        stack = [(node, idx, None)]    # (node, index, its operands once they are pushed)
        while stack:
            n, ix, operands = stack.pop()
            k = ("v", n, id(ix))
            if self.lookup(k) is not None:
                continue
            buf = self.plan.source.get(n)
            if buf is not None:
                self.remember(k, self.load(buf, self.flat(ix)))
            elif operands is not None:   # they are computed now
                self.remember(k, self._apply(n, ix, [self.lookup(("v", x, id(xi)))
                                                     for x, xi in operands]))
            elif n.op in LOWER or n.op in VIEW_INDEX:   # straight-line: operands first
                operands = self._operands(n, ix)
                stack.append((n, ix, operands))
                stack.extend((x, xi, None) for x, xi in reversed(operands))
            else:
                self.remember(k, self.compute(n, ix))
        return self.lookup(key)

    def _operands(self, node: Node, idx: Index) -> list:
        """(operand, index) pairs an elementwise op or a view reads, in straight-line code."""
        view = VIEW_INDEX.get(node.op)
        if view is not None:
            return [(node.inputs[0], view(self, node, idx))]
        return [(x, self.broadcast(idx, x.shape)) for x in node.inputs]

    def _apply(self, node: Node, idx: Index, args: list) -> ir.Value:
        """An elementwise op or a view at ``idx``, given its operands' values there."""
        if node.op in VIEW_INDEX:
            return args[0]
        if node.op in ("sin", "cos") and not self.emulate and node in self.plan.sincos:
            return self._sincos(node, idx)
        return LOWER[node.op](self.cx, node, args)

    # -- views: where each reads its operand (VIEW_INDEX) -------------------------------------
    def _reshape_index(self, node: Node, idx: Index) -> Index:
        x = node.inputs[0]
        return self.derive(idx, ("r", x.shape), lambda: self.index(x.shape, flat=self.flat(idx)))

    def _broadcast_index(self, node: Node, idx: Index) -> Index:
        return self.broadcast(idx, node.inputs[0].shape)

    def _transpose_index(self, node: Node, idx: Index) -> Index:
        x = node.inputs[0]
        (perm,) = node.attrs

        def build():
            d, src = self.dims(idx), [None] * x.ndim
            for i, p in enumerate(perm):
                src[p] = d[i]
            return self.index(x.shape, dims=src)
        return self.derive(idx, ("t", perm), build)

    def _getitem_index(self, node: Node, idx: Index) -> Index:
        return self.derive(idx, ("g", node.attrs[0]), lambda: self._getitem(idx, node))

    def to_index(self, v: ir.Value, dtype: str) -> ir.Value:
        w = v.type.width
        if w == self.ity.width:
            return v
        if w > self.ity.width:
            return self.b.trunc(v, self.ity)
        return self.b.zext(v, self.ity) if is_unsigned(dtype) else self.b.sext(v, self.ity)

    def compute(self, node: Node, idx: Index) -> ir.Value:
        """``node`` at ``idx`` from its operands (never loaded from its own buffer)."""
        op = node.op
        if op in LOWER or op in VIEW_INDEX:
            operands = self._operands(node, idx)
            return self._apply(node, idx, [self.value(x, xi) for x, xi in operands])
        rule = COMPUTE_RULES.get(op)
        if rule is None:
            raise NotImplementedError(f"op {op!r} cannot be computed inside a CUDA kernel")
        return rule(self, node, idx)

    # -- ops computed at a position from their operands (COMPUTE_RULES) -----------------------
    def _constant(self, node, idx):
        return self.cx.const(node.attrs[0], node.dtype)

    def _arange(self, node, idx):
        b = self.b
        start, step, dtype, _ = node.attrs
        i = self.dims(idx)[0]
        if isinstance(start, float) or isinstance(step, float) or is_float(dtype):
            f = b.fadd(b.fmul(b.uitofp(i, ir.DoubleType()), ir.Constant(ir.DoubleType(), float(step))),
                       ir.Constant(ir.DoubleType(), float(start)))
            if dtype == "float64":
                return f
            if dtype == "float32":
                return b.fptrunc(f, ir.FloatType())
            return b.fptosi(f, value_type(dtype))
        v = b.add(b.mul(b.zext(i, ir.IntType(64)) if self.ity.width < 64 else i,
                        ir.Constant(ir.IntType(64), step)), ir.Constant(ir.IntType(64), start))
        return v if value_type(dtype).width == 64 else b.trunc(v, value_type(dtype))

    def _sincos(self, node, idx):
        """sin(x) and cos(x) of the same x from one libdevice ``__nv_sincos[f]`` call: one
        range reduction instead of two (W1's gradient needs both)."""
        b, x = self.b, node.inputs[0]
        ty = value_type(node.dtype)
        name = "__nv_sincosf" if node.dtype == "float32" else "__nv_sincos"
        fn = self.module.globals.get(name) or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), [ty, ir.PointerType(), ir.PointerType()]), name)
        here = b.block
        b.position_at_start(self.fn.entry_basic_block)   # allocas in the entry block promote to registers
        sp, cp = b.alloca(ty, name="sin.slot"), b.alloca(ty, name="cos.slot")
        b.position_at_end(here)
        b.call(fn, [self.value(x, idx), sp, cp])
        s, c = b.load(sp, typ=ty, name="sin"), b.load(cp, typ=ty, name="cos")
        self.remember(("v", self.plan.sincos[node], id(idx)), c if node.op == "sin" else s)
        return s if node.op == "sin" else c

    def _getitem(self, idx, node):
        d, src, k = self.dims(idx), [], 0
        x = node.inputs[0]
        for item in node.attrs[0]:
            if isinstance(item, NewAxis):
                k += 1
            elif isinstance(item, Slice):
                start, step = item.start, item.step
                v = d[k] if step == 1 else self.b.mul(d[k], ir.Constant(self.ity, step))
                src.append(self.b.add(v, self.int(start)) if start else v)
                k += 1
            else:
                src.append(self.int(item))
        src += d[k:]
        return self.index(x.shape, dims=src[:x.ndim])

    def _region(self, node, d):
        """(in-region condition, index into the region) for setitem/index_add at dims ``d``."""
        b, base = self.b, node.inputs[0]
        conds, coords, a = [], [], 0
        for item in node.attrs[0]:
            if isinstance(item, NewAxis):
                coords.append(self.int(0))
                continue
            v = d[a]
            if isinstance(item, Slice):
                start, stop, step = item.start, item.stop, item.step
                if step > 0:
                    off = b.sub(v, self.int(start))
                    conds += [b.icmp_signed(">=", v, self.int(start)), b.icmp_signed("<", v, self.int(stop))]
                else:
                    off = b.sub(self.int(start), v)
                    conds += [b.icmp_signed("<=", v, self.int(start)), b.icmp_signed(">", v, self.int(stop))]
                s = abs(step)
                if s != 1:
                    conds.append(b.icmp_signed("==", b.srem(off, self.int(s)), self.int(0)))
                    off = b.sdiv(off, self.int(s))
                coords.append(off)
            else:
                conds.append(b.icmp_signed("==", v, self.int(item)))
            a += 1
        coords += d[a:]
        cond = ir.Constant(ir.IntType(1), 1)
        for c in conds:
            cond = b.and_(cond, c)
        from symgrad.ops import _index_shape
        region = self.index(_index_shape(base.shape, node.attrs[0]), dims=coords)
        return cond, region

    def _update(self, node, idx):
        """setitem/index_add: a branch on whether the position is in the region."""
        base, upd = node.inputs
        cond, region = self._region(node, self.dims(idx))
        ty = value_type(node.dtype)
        if node.op == "setitem":
            return self.choose([cond], [lambda: self.value(upd, self.broadcast(region, upd.shape)),
                                        lambda: self.value(base, idx)], ty)
        old = self.value(base, idx)
        add = LOWER["add"]
        return self.choose([cond], [lambda: add(self.cx, node, [old, self.value(upd, self.broadcast(region, upd.shape))]),
                                    lambda: old], ty)

    def _concatenate(self, node, idx):
        (axis,) = node.attrs
        d = self.dims(idx)
        c, off, conds, starts = d[axis], 0, [], []
        for x in node.inputs:
            starts.append(off)
            off += x.shape[axis]
            conds.append(self.b.icmp_unsigned("<", c, self.int(off)))
        subs = [self.index(x.shape, dims=d[:axis] + [self.b.sub(c, self.int(s)) if s else c] + d[axis + 1:])
                for x, s in zip(node.inputs, starts)]
        thunks = [(lambda x=x, s=s: self.value(x, s)) for x, s in zip(node.inputs, subs)]
        return self.choose(conds[:-1], thunks, value_type(node.dtype))

    def _stack(self, node, idx):
        (axis,) = node.attrs
        d = self.dims(idx)
        sub = self.index(node.inputs[0].shape, dims=d[:axis] + d[axis + 1:])
        conds = [self.b.icmp_unsigned("==", d[axis], self.int(k)) for k in range(len(node.inputs) - 1)]
        thunks = [(lambda x=x: self.value(x, sub)) for x in node.inputs]
        return self.choose(conds, thunks, value_type(node.dtype))

    def _gathered(self, k, idx_dtype, size):
        """An index value from data: negative counts from the end, then clamped in bounds
        (a GPU kernel cannot raise IndexError; out-of-range indices read the nearest edge)."""
        b = self.b
        k = self.to_index(k, idx_dtype)
        if not is_unsigned(idx_dtype):
            k = b.select(b.icmp_signed("<", k, self.int(0)), b.add(k, self.int(size)), k)
            k = b.select(b.icmp_signed("<", k, self.int(0)), self.int(0), k)
        return b.select(b.icmp_unsigned(">", k, self.int(size - 1)), self.int(size - 1), k)

    def _take(self, node, idx):
        x, ind = node.inputs
        (axis,) = node.attrs
        d = self.dims(idx)
        k = self.value(ind, self.index(ind.shape, dims=d[axis:axis + ind.ndim]) if ind.ndim else self.scalar_index)
        k = self._gathered(k, ind.dtype, x.shape[axis])
        return self.value(x, self.index(x.shape, dims=d[:axis] + [k] + d[axis + ind.ndim:]))


# view -> where it reads its operand at a position of its own (straight-line index math)
VIEW_INDEX = {
    "reshape": KernelBuilder._reshape_index,
    "broadcast_to": KernelBuilder._broadcast_index,
    "transpose": KernelBuilder._transpose_index,
    "getitem": KernelBuilder._getitem_index,
}
if set(VIEW_INDEX) != VIEWS:
    raise ImportError("codegen.ptx: VIEW_INDEX and codegen.opsets.VIEWS disagree")
# op -> its value at a position, computed in the kernel that reads it (no memory of its own)
COMPUTE_RULES = {
    "const": KernelBuilder._constant,
    "full": KernelBuilder._constant,
    "arange": KernelBuilder._arange,
    "take": KernelBuilder._take,               # a gather: an index map through a loaded index
    "setitem": KernelBuilder._update,          # a branch on the output position
    "index_add": KernelBuilder._update,
    "concatenate": KernelBuilder._concatenate,
    "stack": KernelBuilder._stack,
}
# op -> the kernels that compute it into its buffer: (node, source, new buffer) -> [Kernel]
KERNEL_RULES = {
    **{op: _reduction_kernels for op in sorted(REDUCTIONS)},   # block/warp-shuffle reductions
    "matmul": _reduction_kernels,                              # a sum over k
    "scatter_add": _scatter_kernels,                           # atomic adds
}


def lowering(op: str) -> str | None:
    """Which table lowers ``op`` on target='cuda' (None: none does)."""
    for name, table in (("LOWER", LOWER), ("VIEW_INDEX", VIEW_INDEX),
                        ("COMPUTE_RULES", COMPUTE_RULES), ("KERNEL_RULES", KERNEL_RULES)):
        if op in table:
            return name
    return "IN_MEMORY" if op in IN_MEMORY else None


# -- reductions -------------------------------------------------------------------------------

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
        k = kb._gathered(k, ind.dtype, size)
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
            reads.update(p.source[m] for m in _reads(n, p.source))
        elif isinstance(job, StoreJob):      # an output that is another buffer's value: a copy
            reads.add(p.source[n])
        else:                          # reduce / scatter: the operands' expressions
            for x in n.inputs:
                reads.update(p.source[m] for m in _reads(x, p.source, skip_root=False))
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
    for k in p.kernels:
        k.params = _kernel_params(p, k)
        kb = KernelBuilder(module, p, k, math_target, emulate=emulate_with is not None)
        KERNEL_EMITTERS[k.kind](kb)
        kb.b.ret_void()
    text = str(module)
    if emulate_with is not None:
        return text
    libdevice.check_intrinsics(text)
    # Flush denormals? No: IEEE semantics, like the CPU and NumPy (libdevice reads this flag).
    text += '\n!llvm.module.flags = !{!0}\n!0 = !{i32 4, !"nvvm-reflect-ftz", i32 0}\n'
    return text


# ----------------------------------------------------------------------------------------------
# LLVM: NVPTX target, libdevice, optimisation, PTX

_llvm_lock = threading.Lock()
_llvm_ready = False


def _llvm():
    global _llvm_ready
    import llvmlite.binding as llvm
    if not _llvm_ready:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _llvm_ready = True
    return llvm


def check_arch(arch: str) -> str:
    if not re.fullmatch(r"sm_\d+a?", arch or ""):
        raise ValueError(f"arch must look like 'sm_80' or 'sm_90', got {arch!r}")
    return arch


def compile_ptx(text: str, arch: str, kernels) -> str:
    """Optimise an NVPTX module (linking libdevice) and emit PTX for ``arch``."""
    with _llvm_lock:   # LLVM's global state (targets, pass registry) is not thread-safe to set up
        llvm = _llvm()
        target = llvm.Target.from_triple("nvptx64-nvidia-cuda")
        tm = target.create_target_machine(cpu=arch, opt=3)
        mod = llvm.parse_assembly(text)
        mod.data_layout = str(tm.target_data)
        mod.verify()
        libdevice.link(mod, set(kernels))
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        pre = llvm.create_new_module_pass_manager()
        pre.add_global_dead_code_eliminate_pass()   # drop unused libdevice before O3 sees it
        pre.run(mod, pb)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        libdevice.check_intrinsics(str(mod), strict=False)
        return tm.emit_assembly(mod)


# ----------------------------------------------------------------------------------------------
# Entry points


@dataclass
class Program:
    plan: Plan
    arch: str
    ptx: str


_plans: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_programs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def _plan_and_text(entry):
    got = _plans.get(entry)
    if got is None:
        p = plan(entry.graph)
        got = (p, build_module(p))
        with _cache_lock:
            _plans[entry] = got
    return got


def program(entry, arch: str) -> Program:
    """The compiled program of a ``symgrad.api.Compiled`` entry for ``arch`` (cached)."""
    arch = check_arch(arch)
    progs = _programs.get(entry)
    if progs is None:
        with _cache_lock:
            progs = _programs.setdefault(entry, {})
    prog = progs.get(arch)
    if prog is None:
        p, text = _plan_and_text(entry)
        prog = Program(p, arch, compile_ptx(text, arch, [k.name for k in p.kernels]))
        progs[arch] = prog
    return prog


def default_arch() -> str:
    """The present GPU's architecture, else sm_80."""
    try:
        from .cuda import device_arch
        arch = device_arch()
    except Exception:   # noqa: BLE001 - no driver, no bindings, no GPU: all mean "no GPU"
        arch = None
    return arch or DEFAULT_ARCH


def ptx(entry, arch: str | None = None) -> str:
    """PTX text for a ``symgrad.api.Compiled`` entry (``Function.ptx``), each kernel preceded
    by the user's lines it computes (comments; see ``codegen.source_map``)."""
    from .source_map import annotate_ptx
    prog = program(entry, arch or default_arch())
    return annotate_ptx(prog.ptx, prog.plan)


def llvm_ir(entry) -> str:
    """The kernels' LLVM IR before libdevice linking and optimisation (for inspection)."""
    return _plan_and_text(entry)[1]
