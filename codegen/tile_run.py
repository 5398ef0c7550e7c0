"""How a tile group (``codegen.tiling``) runs: its LLVM function, for ``codegen.kernel``, and
its rows split among the threads, for ``codegen.llvm``.

``sg_group<k>(ptrs, params, begin, end)`` calls the group's stage functions chunk by chunk of
rows ``[begin, end)`` of their common outer axis, with each chunk-local buffer addressed so
that the chunk's rows fall in its one chunk of memory. ``sg_run`` calls it over all rows after
the stages' inits; on the threads each gets a share of the rows and, in a
pointer table of its own, chunk memory of its own (:func:`thread_table`), when
``codegen.dispatch`` runs the group as one of a threaded call's passes."""
from __future__ import annotations

from typing import NamedTuple


def group_function(km, group, k: int, wrappers):
    """``sg_group<k>``: each chunk-local buffer at ``ptrs[buf] - t0 * row`` while rows
    ``[t0, t0 + rows)`` run, so that they fall in its one chunk of memory. The stages' inits
    are the caller's (once, before)."""
    # (imported here: the run time below is what a fresh process with its machine code on
    # disk needs, and llvmlite.ir costs it ~4 ms)
    from llvmlite import ir

    from .loops import close_loop, open_loop

    I64, PTR = ir.IntType(64), ir.PointerType()
    fn = ir.Function(km.module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64]),
                     f"{km.prefix}group{k}")
    fn.attributes.add("nounwind")
    ptrs, params, begin, end = fn.args
    ptrs.name, params.name, begin.name, end.name = "ptrs", "params", "begin", "end"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    rows = km.load_param(b, params, km.param(group.rows), "rows")
    local = list(group.local.items())
    row_bytes = [km.load_param(b, params, km.param(row * km.s.buffers[buf].nbytes
                                                       // km.s.buffers[buf].size), f"row{buf}")
                 for buf, row in local]
    table = ptrs
    if local:   # a private table: other calls (threads) share ptrs
        nbuf = ir.Constant(I64, len(km.s.buffers))
        table = b.alloca(PTR, size=nbuf, name="table")
        copy = open_loop(b, ir.Constant(I64, 0), nbuf, ("copy.head", "copy.body", "copy.exit"),
                         "i")
        b.store(b.load(b.gep(ptrs, [copy.index], source_etype=PTR), typ=PTR),
                b.gep(table, [copy.index], source_etype=PTR))
        close_loop(b, copy)
    chunk = open_loop(b, begin, end, ("chunk.head", "chunk.body", "chunk.exit"), "t0")
    t0 = chunk.index
    t1 = b.add(t0, rows, name="t1")
    t1 = b.select(b.icmp_signed("<", t1, end), t1, end, name="t1")
    for (buf, _), nbytes in zip(local, row_bytes):
        base = b.load(b.gep(ptrs, [ir.Constant(I64, buf)], source_etype=PTR), typ=PTR)
        shifted = b.gep(base, [b.neg(b.mul(t0, nbytes))], source_etype=ir.IntType(8))
        b.store(shifted, b.gep(table, [ir.Constant(I64, buf)], source_etype=PTR))
    for j in group.stages:
        b.call(wrappers[j].stage, [table, params, t0, t1])
    close_loop(b, chunk, step=rows)
    b.ret_void()
    return fn


class GroupCall(NamedTuple):
    """A tile group as the run time calls it."""
    run: object            # ctypes sg_group<k>(ptrs, params, begin, end)
    stages: list           # its stages' indices (their inits run first)
    extent: int            # rows of the common outer axis: what the threads split
    work: int              # iterations of all its stages
    local: list            # (buffer, bytes) of its chunk-local buffers: one per thread


def symbols(schedule) -> list:
    """The group functions' names, as ``codegen.jit`` looks them up."""
    return [f"sg_group{k}" for k in range(len(schedule.tile_groups))]


class Tiles:
    """A native's tile groups: ``calls`` (first stage index -> GroupCall), ``grouped`` (every
    grouped stage's index), ``work`` (the most iterations of a group), ``private`` (thread,
    group) -> that thread's chunk memory for the native's cached state."""

    def __init__(self, groups: list, addrs: dict, stage_type):
        """``groups``: per tile group (its stages, extent, work, [(buffer, bytes)] of its
        chunk-local buffers), as ``codegen.plans.run_plan`` lists them."""
        self.calls = {stages[0]: GroupCall(stage_type(addrs[f"sg_group{k}"]), stages, extent,
                                           work, local)
                      for k, (stages, extent, work, local) in enumerate(groups)}
        self.grouped = {j for stages, _, _, _ in groups for j in stages}
        self.work = max((g.work for g in self.calls.values()), default=0)
        self.private: dict = {}


def thread_table(native, ptrs, group: GroupCall, t: int):
    """The pointer table thread ``t`` runs ``group`` with: this call's, with the group's
    chunk-local buffers in that thread's own memory (kept for the native's cached state),
    and that memory."""
    from .workspace import allocate, workspace_bytes
    table = ptrs.copy()
    if not group.local:
        return table, None
    key = (t, group.stages[0])
    memory = native.tiles.private if ptrs is native.cached[0] else {}
    if key not in memory:
        memory[key] = allocate(workspace_bytes(group.local))
    base = (memory[key].ctypes.data + 63) // 64 * 64
    for buf, size in group.local:
        table[buf] = base
        base += (size + 63) // 64 * 64
    return table, memory[key]
