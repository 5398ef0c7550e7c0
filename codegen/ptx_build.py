"""The CUDA back end's kernel builder: one GPU kernel function with its parameters, special
registers, loops, memory access and the value of any node at a position (an :class:`Index`).

A node's value at a position is loaded if the plan gave it memory, else computed there from
its operands through tables keyed by op: ``codegen.lower.LOWER`` for scalar ops (the CPU's
table, with libdevice as the math target), ``VIEW_INDEX`` for views (index maps: where a view
reads its operand) and ``COMPUTE_RULES`` for the other ops computed in place (constants,
``arange``, gathers, region updates, concatenation). Shapes are concrete, so index arithmetic
is division by constants.
"""
from __future__ import annotations

import math

from llvmlite import ir

from symgrad.guards import INDEX_OUT_OF_BOUNDS
from symgrad.ir import NewAxis, Node, Slice, is_float

from .buffers import contiguous_strides
from .dtypes import is_unsigned, memory_type, storage, value_type
from .loops import close_loop, open_loop
from .lower import LOWER, Scalar
from .opsets import VIEWS
from .ptx_plan import BLOCK, BY_VALUE, Kernel, Plan, checks_index


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
            types.append(value_type(buf.dtype) if buf.kind in BY_VALUE else ir.PointerType(addrspace=space))
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType(), types), kernel.name)
        if not emulate:
            self.fn.calling_convention = "ptx_kernel"
        self.args = {}
        for b, arg in zip(kernel.params, self.fn.args):
            arg.name = f"{plan_.buffers[b].kind}{b}"
            if plan_.buffers[b].kind not in BY_VALUE:
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
        if self.plan.buffers[buf].kind in BY_VALUE:
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
    def enter_guards(self):
        """Return at once unless every branch the kernel is inside is the one taken
        (``Kernel.guards``): the side of a ``cond`` not taken does no work. The predicate is
        one value for the whole grid, so all threads leave together (before any barrier)."""
        if not self.kernel.guards:
            return
        b, taken = self.b, None
        for buf, want in self.kernel.guards:
            pred = self.load(buf, self.int(0))
            pred = pred if want else b.not_(pred)
            taken = pred if taken is None else b.and_(taken, pred)
        run = self.fn.append_basic_block("branch.taken")
        skip = self.fn.append_basic_block("branch.not_taken")
        b.cbranch(taken, run, skip)
        b.position_at_end(skip)
        b.ret_void()
        b.position_at_end(run)

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
        # keyed by the operand's shape too: one index (R[1, 0]) into arrays of two shapes reads
        # two different flat positions
        key = ("g", node.attrs[0], node.inputs[0].shape)
        return self.derive(idx, key, lambda: self._getitem(idx, node))

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

    def _branch(self, node, idx):
        """A result of a branch computed in place (``Plan.fused``): the predicate, then a real
        branch to the side taken, which alone is computed at ``idx`` (in its own scope)."""
        cond, (k,) = node.inputs[0], node.attrs
        then, other = self.plan.fused[cond]
        pred = self.value(cond.inputs[0], self.scalar_index)
        return self.choose([pred], [lambda: self.value(then[k], idx), lambda: self.value(other[k], idx)],
                           value_type(node.dtype))

    def _gathered(self, k, idx_dtype, size, check):
        """An index value from data: negative counts from the end, then clamped in bounds, so
        memory stays safe. Out of range (``check``: the kernel has the plan's error word) is
        noted in the error word, and the call raises NumPy's IndexError after the kernels
        (``guards.KERNEL_ERRORS``). The test is made at the index's own width, before it is
        narrowed to the kernel's index type."""
        b = self.b
        ty = ir.IntType(max(k.type.width, self.ity.width))
        if k.type.width < ty.width:
            k = b.zext(k, ty) if is_unsigned(idx_dtype) else b.sext(k, ty)
        n = ir.Constant(ty, size)
        if not is_unsigned(idx_dtype):
            k = b.select(b.icmp_signed("<", k, ir.Constant(ty, 0)), b.add(k, n), k)
        if check:
            self.report_error(b.icmp_unsigned(">=", k, n), INDEX_OUT_OF_BOUNDS)
        if not is_unsigned(idx_dtype):
            k = b.select(b.icmp_signed("<", k, ir.Constant(ty, 0)), ir.Constant(ty, 0), k)
        last = ir.Constant(ty, max(size - 1, 0))   # an empty axis reads its one allocated element
        k = b.select(b.icmp_unsigned(">", k, last), last, k)
        return k if ty.width == self.ity.width else b.trunc(k, self.ity)

    def report_error(self, bad: ir.Value, code: int):
        """Where ``bad`` holds, raise the plan's error word to ``code`` (an atomic max: threads
        that meet errors at once do not race, and the word says the same whichever wins)."""
        b = self.b
        word = self.address(self.kernel.flag, self.int(0))
        with b.if_then(bad):   # (no branch weights: the module's metadata ids are its own)
            b.atomic_rmw("umax", word, ir.Constant(ir.IntType(32), code), "monotonic")

    def checks(self, node) -> bool:
        """Whether ``node``'s index is checked here (``ptx_plan.checks_index``, and the
        kernel was given the error word)."""
        return self.kernel.flag is not None and checks_index(node)

    def _take(self, node, idx):
        x, ind = node.inputs
        (axis,) = node.attrs
        d = self.dims(idx)
        k = self.value(ind, self.index(ind.shape, dims=d[axis:axis + ind.ndim]) if ind.ndim else self.scalar_index)
        k = self._gathered(k, ind.dtype, x.shape[axis], self.checks(node))
        return self.value(x, self.index(x.shape, dims=d[:axis] + [k] + d[axis + ind.ndim:]))


# view -> where it reads its operand at a position of its own (straight-line index math)
VIEW_INDEX = {
    "reshape": KernelBuilder._reshape_index,
    "broadcast_to": KernelBuilder._broadcast_index,
    "transpose": KernelBuilder._transpose_index,
    "getitem": KernelBuilder._getitem_index,
}
if set(VIEW_INDEX) != VIEWS:
    raise ImportError("symgrad.codegen.ptx: VIEW_INDEX and codegen.opsets.VIEWS disagree")
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
    "proj": KernelBuilder._branch,             # a fused branch's result (a loop's is in memory)
}
