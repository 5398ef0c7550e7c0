"""The loop nest and loop body of one CPU stage: loads and stores through strided views,
the stage's values in registers (scalar ops through ``codegen.lower.LOWER``, the rest through
``IN_LOOP_RULES``), and its sinks (stores, accumulations, reductions with register
accumulators, scatters, matmul products). ``codegen.kernel`` prepares the views and calls
:class:`StageEmitter` for each stage.
"""
from __future__ import annotations

import math
import struct
from typing import NamedTuple

from llvmlite import ir

from symgrad.ir import Node, is_float

from .dtypes import is_unsigned, memory_type, value_type
from .loops import close_loop, open_loop
from .lower import LOWER, Scalar, intrinsic
from .schedule import LEAF_INLINE, Stage
from .views import View

I64 = ir.IntType(64)

# Reduction op -> (identity for floats, combine kind). Integer identities are computed below.
REDUCE_KIND = {"sum": "add", "prod": "mul", "max": "max", "min": "min", "matmul": "add",
               "scatter_add": "add"}


class GatherViews(NamedTuple):
    """A gather (``take``) as a stage reads it."""
    x: View          # the gathered array seen from the loop, its indexed axis at stride 0
    index: View      # the index array seen from the loop
    stride: int      # x's stride along the indexed axis
    size: int        # x's extent along it (the bounds check)


class Access(NamedTuple):
    """A view ready to address in a loop body: base pointer, per-axis stride values (None: a
    broadcast axis, 1: unit stride) and the buffer's dtype."""
    base: ir.Value
    strides: list
    dtype: str


def identity(kind: str, dtype: str):
    if kind == "add":
        return 0
    if kind == "mul":
        return 1
    if is_float(dtype):
        return -math.inf if kind == "max" else math.inf
    if dtype == "bool":
        return 0 if kind == "max" else 1
    bits = int(dtype.lstrip("uint")) if dtype[0] in "iu" else 64
    if is_unsigned(dtype):
        return 0 if kind == "max" else (1 << bits) - 1
    return -(1 << (bits - 1)) if kind == "max" else (1 << (bits - 1)) - 1


# Float max/min reductions in a register accumulate an integer *key* of the values' order
# instead of calling llvm.maximum/minimum per element: x86 has no instruction for those
# (vmaxpd returns its second operand for NaN and for -0 vs +0), so each combine was five
# dependent instructions (the sign test ordering -0 below +0, a blend, vmaxpd, the NaN test and
# its blend), and W2's max(x) ran at 0.22 ns an element where the sum beside it runs at 0.15;
# an integer max is one instruction. The key of a float's bits i is i when the sign bit is
# clear and i with every other bit flipped when it is set (negative values in reverse): keys
# compare as signed integers exactly as maximum/minimum order the values, -0 below +0. A NaN
# is given the sign that makes its key beat every number's (clear for max, set for min), so a
# NaN anywhere gives a NaN, as maximum/minimum do (one that came in, its payload kept, its
# sign the winning one). The key is turned back into a float once, after the loop.
ORDERED_KEY_BITS = {"float64": 64, "float32": 32}


def ordered_key_value(value: float, dtype: str) -> int:
    """The key (see ORDERED_KEY_BITS) of ``value`` as a signed integer."""
    bits = ORDERED_KEY_BITS[dtype]
    raw = struct.unpack("<q" if bits == 64 else "<i",
                        struct.pack("<d" if bits == 64 else "<f", value))[0]
    return raw ^ ((1 << (bits - 1)) - 1) if raw < 0 else raw


def _flip_negative(b: ir.IRBuilder, i, bits: int):
    """i with every bit but the sign flipped where the sign is set (its own inverse)."""
    return b.xor(i, b.lshr(b.ashr(i, ir.Constant(i.type, bits - 1)), ir.Constant(i.type, 1)))


def ordered_key(b: ir.IRBuilder, kind: str, v):
    """The key of float ``v`` for a ``kind`` ("max" or "min") reduction."""
    bits = 64 if v.type == ir.DoubleType() else 32
    ity = ir.IntType(bits)
    i = b.bitcast(v, ity)
    sign = ir.Constant(ity, 1 << (bits - 1))
    nan = b.fcmp_unordered("uno", v, v)
    winning = b.and_(i, ir.Constant(ity, (1 << (bits - 1)) - 1)) if kind == "max" else b.or_(i, sign)
    return _flip_negative(b, b.select(nan, winning, i), bits)


def key_value(b: ir.IRBuilder, key, fty):
    """The float whose key is ``key``."""
    return b.bitcast(_flip_negative(b, key, key.type.width), fty)


def reduction_order(st: Stage, views):
    """Loop order for stages that reduce: axes no reduction sums over go outermost (the
    innermost axis stays put, for vectorisation). Accumulators then stay in cache while the
    reduced axes run (GMM's (n, K, d, d) gradient loop sums over n into a (K, d, d) buffer:
    with K outermost that buffer's slice is 32 KB instead of 6.5 MB), and the outer axis the
    threads split is not reduced, so they need no private copies."""
    d = len(st.shape)
    red = [sk for sk in st.sinks if sk.kind == "reduce"]
    if d < 3 or not red:
        return st.shape, views
    reduced = {j for sk in red for j in range(d) if sk.dest.strides[j] == 0 and st.shape[j] != 1}
    perm = [j for j in range(d - 1) if j not in reduced] + [j for j in range(d - 1) if j in reduced]
    perm.append(d - 1)
    if perm == list(range(d)):
        return st.shape, views
    shape = tuple(st.shape[j] for j in perm)
    return shape, [View(v.buf, v.offset, shape, tuple(v.strides[j] for j in perm)) for v in views]


def const_key(x) -> tuple:
    """A constant's identity: -0.0 and 0.0 (equal as floats) are different constants, and a
    NaN must find itself, so floats are keyed by their repr."""
    value = x.attrs[0]
    return (repr(value) if isinstance(value, float) else value, x.dtype)


class Iteration(NamedTuple):
    """One loop iteration as the sinks see it."""
    value: object     # node -> its value at this index (loaded or computed)
    idx: list         # the loop indices
    accs: list        # register accumulators on entry
    new_accs: list    # ... and as the sinks leave them


class StageEmitter:
    """The loop nest and loop body of one stage."""

    def __init__(self, km, b, st, loads, sinks, ops, consts, arange_params):
        self.km, self.b, self.st = km, b, st
        self.loads, self.sinks, self.ops = loads, sinks, ops
        self.consts = consts
        self.arange_params = arange_params
        self.cx = Scalar(b, km.math)
        d = len(st.shape)
        # reductions whose innermost axis is reduced accumulate in a register across it
        self.in_register = [k for k, sk in enumerate(st.sinks) if sk.kind == "reduce" and d
                            and sk.dest.strides[-1] == 0]
        # ... a float max/min one as an integer key (ORDERED_KEY_BITS)
        self.keyed = {k for k in self.in_register if REDUCE_KIND[st.sinks[k].node.op] in
                      ("max", "min") and st.sinks[k].node.dtype in ORDERED_KEY_BITS}

    def address(self, access, idx):
        base, strides, dtype = access
        b = self.b
        off = None
        for i, s in zip(idx, strides):
            if s is None:
                continue
            term = i if s == 1 else b.mul(i, s)
            off = term if off is None else b.add(off, term)
        ty = memory_type(dtype)
        return base if off is None else b.gep(base, [off], source_etype=ty), ty, dtype

    def load(self, access, idx, name="x"):
        ptr, ty, dtype = self.address(access, idx)
        v = self.b.load(ptr, typ=ty, name=name)
        return self.b.icmp_unsigned("!=", v, ir.Constant(ty, 0)) if dtype == "bool" else v

    def store(self, value, access, idx):
        ptr, ty, dtype = self.address(access, idx)
        if dtype == "bool":
            value = self.b.zext(value, ty)
        self.b.store(value, ptr)

    def combine(self, kind, dtype, acc, v, fast=False):
        b = self.b
        flags = ("reassoc", "nsz") if fast else ()
        if kind == "add":
            return b.fadd(acc, v, flags=flags) if is_float(dtype) else (
                b.or_(acc, v) if dtype == "bool" else b.add(acc, v))
        if kind == "mul":
            return b.fmul(acc, v, flags=flags) if is_float(dtype) else (
                b.and_(acc, v) if dtype == "bool" else b.mul(acc, v))
        if is_float(dtype):
            fn = intrinsic(b.module, f"llvm.{kind}imum", acc.type, 2)
            return b.call(fn, [acc, v])
        if dtype == "bool":
            return (b.or_ if kind == "max" else b.and_)(acc, v)
        cmp = b.icmp_unsigned if is_unsigned(dtype) else b.icmp_signed
        return b.select(cmp(">" if kind == "max" else "<", v, acc), v, acc)

    # -- values ----------------------------------------------------------------------------------
    def values(self, idx):
        memo = {}

        def value(x):
            if x in memo:
                return memo[x]
            if x.op in LEAF_INLINE:
                return self.consts[const_key(x)]
            memo[x] = self.load(self.loads[x], idx)
            return memo[x]

        for n in self.st.ssa:
            rule = IN_LOOP_RULES.get(n.op)
            memo[n] = (rule(self, n, idx) if rule is not None else
                       LOWER[n.op](self.cx, n, [value(x) for x in n.inputs]))
        return value

    def checked_index(self, idx_access, idx, size):
        """The loaded index, wrapped if negative; out of bounds sets the error flag and
        reads/writes element 0 instead, so memory stays safe (Python raises IndexError)."""
        b = self.b
        j = self.load(idx_access, idx, "index")
        dtype = idx_access.dtype
        if j.type.width < 64:
            j = (b.zext if is_unsigned(dtype) else b.sext)(j, I64)
        if not is_unsigned(dtype):
            j = b.select(b.icmp_signed("<", j, ir.Constant(I64, 0)), b.add(j, size), j)
        bad = b.icmp_unsigned(">=", j, size, name="oob")
        fn = self.fn
        err = fn.append_basic_block("index.error")
        ok = fn.append_basic_block("index.ok")
        b.cbranch(bad, err, ok)
        b.position_at_end(err)
        b.store(ir.Constant(I64, 1), self.flag)
        b.branch(ok)
        b.position_at_end(ok)
        return b.select(bad, ir.Constant(I64, 0), j, name="index")

    def gather(self, n, idx):
        x_acc, i_acc, stride, size = self.gathers[n]
        j = self.checked_index(i_acc, idx, size)
        ptr, ty, dtype = self.address(x_acc, idx)
        ptr = self.b.gep(ptr, [self.b.mul(j, stride)], source_etype=ty)
        v = self.b.load(ptr, typ=ty, name="gather")
        return self.b.icmp_unsigned("!=", v, ir.Constant(ty, 0)) if dtype == "bool" else v

    def arange(self, n, idx):
        b = self.b
        start, step = self.arange_params[n]
        i = idx[-1]
        if is_float(n.dtype):
            d = ir.DoubleType()
            v = b.fadd(b.bitcast(start, d), b.fmul(b.bitcast(step, d), b.sitofp(i, d)))
            return v if n.dtype == "float64" else b.fptrunc(v, value_type(n.dtype))
        v = b.add(start, b.mul(step, i))
        return v if n.dtype == "int64" else b.trunc(v, value_type(n.dtype))

    def body(self, idx, accs):
        """Emit one iteration; returns the updated register accumulators."""
        it = Iteration(self.values(idx), idx, list(accs), list(accs))
        for k, sk in enumerate(self.st.sinks):
            SINK_RULES[sk.kind](self, k, sk, it)
        return it.new_accs

    # -- what each kind of sink writes in one iteration (SINK_RULES) ------------------------------
    def _store_sink(self, k, sk, it):
        self.store(it.value(sk.node), self.sinks[k], it.idx)

    def _accum_sink(self, k, sk, it):
        access = self.sinks[k]
        old = self.load(access, it.idx)
        self.store(self.combine("add", sk.node.dtype, old, it.value(sk.node)), access, it.idx)

    def _reduce_sink(self, k, sk, it):
        """An accumulator in a register along the innermost axis, else in memory."""
        v = it.value(sk.node.inputs[0])
        kind, dtype = REDUCE_KIND[sk.node.op], sk.node.dtype
        if k in self.keyed:
            j = self.in_register.index(k)
            key = ordered_key(self.b, kind, v)
            fn = self.b.module.declare_intrinsic(f"llvm.s{kind}", [key.type],
                                                 ir.FunctionType(key.type, [key.type] * 2))
            it.new_accs[j] = self.b.call(fn, [it.accs[j], key])
        elif k in self.in_register:
            j = self.in_register.index(k)
            it.new_accs[j] = self.combine(kind, dtype, it.accs[j], v, fast=True)
        else:
            access = self.sinks[k]
            old = self.load(access, it.idx)
            self.store(self.combine(kind, dtype, old, v), access, it.idx)

    def _scatter_sink(self, k, sk, it):
        """out[..., index[j], ...] += g[..., j, ...]"""
        i_acc, stride, size = self.ops[k]
        j = self.checked_index(i_acc, it.idx, size)
        v = it.value(sk.node.inputs[0])
        ptr, ty, _ = self.address(self.sinks[k], it.idx)
        ptr = self.b.gep(ptr, [self.b.mul(j, stride)], source_etype=ty)
        old = self.b.load(ptr, typ=ty)
        self.b.store(self.combine("add", sk.node.dtype, old, v), ptr)

    def _matmul_sink(self, k, sk, it):
        """out[..., i, j] += a[..., i, k] * b[..., k, j]"""
        a_acc, b_acc = self.ops[k]
        prod = LOWER["mul"](self.cx, sk.node, [self.load(a_acc, it.idx, "a"),
                                               self.load(b_acc, it.idx, "b")])
        access = self.sinks[k]
        old = self.load(access, it.idx)
        self.store(self.combine("add", sk.node.dtype, old, prod), access, it.idx)

    def identity(self, reduction: Node) -> ir.Constant:
        """The starting value of a reduction's accumulator."""
        dtype = reduction.dtype
        return self.cx.const(identity(REDUCE_KIND[reduction.op], dtype), dtype)

    def nest(self, fn, extents, begin, end):
        b, st = self.b, self.st
        d = len(st.shape)
        if d == 0:
            self.body([], [])
            return
        levels = []
        for j in range(d):
            # the innermost loop carries the register accumulators of reductions along it
            carried = [(f"acc{k}", self._start(k)) for k in self.in_register] if j == d - 1 else []
            levels.append(open_loop(b, begin if j == 0 else ir.Constant(I64, 0),
                                    end if j == 0 else extents[j],
                                    tuple(f"loop{j}.{s}" for s in ("head", "body", "exit")),
                                    f"i{j}", carried))
        idx = [loop.index for loop in levels]
        new_accs = self.body(idx, levels[-1].carried)
        for j in reversed(range(d)):
            close_loop(b, levels[j], carried=new_accs if j == d - 1 else (), next_name=f"i{j}.next")
            accs = levels[j].carried
            if j == d - 1:
                for acc, k in zip(accs, self.in_register):
                    sk = st.sinks[k]
                    access = self.sinks[k]
                    inner = idx[:-1] + [ir.Constant(I64, 0)]
                    old = self.load(access, inner)
                    if k in self.keyed:
                        acc = key_value(b, acc, value_type(sk.node.dtype))
                    self.store(self.combine(REDUCE_KIND[sk.node.op], sk.node.dtype, old, acc),
                               access, inner)

    def _start(self, k: int) -> ir.Constant:
        """The register accumulator's starting value for in-register sink ``k``."""
        node = self.st.sinks[k].node
        if k not in self.keyed:
            return self.identity(node)
        kind = REDUCE_KIND[node.op]
        return ir.Constant(ir.IntType(ORDERED_KEY_BITS[node.dtype]),
                           ordered_key_value(identity(kind, node.dtype), node.dtype))


# Ops a stage computes in registers that are not scalar rules of codegen.lower.LOWER: they read
# the loop index or memory themselves (the scheduler puts them in a loop's ``ssa``).
IN_LOOP_RULES = {
    "arange": StageEmitter.arange,    # start + step * index
    "take": StageEmitter.gather,      # a load at an index read from the index array
}
# sink kind (codegen.schedule.Sink) -> what it writes in one iteration
SINK_RULES = {
    "store": StageEmitter._store_sink,
    "accum": StageEmitter._accum_sink,
    "reduce": StageEmitter._reduce_sink,
    "scatter": StageEmitter._scatter_sink,
    "matmul": StageEmitter._matmul_sink,
}
