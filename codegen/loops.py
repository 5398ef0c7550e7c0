"""Counted loops in LLVM IR: the one skeleton every loop nest of the back ends is built from
(the CPU's stage loops, copy and fill helpers; the GPU's grid-stride and reduction loops).

``open_loop`` emits ``head: i = phi [start, pre], [i + step, latch]; br i < stop, body, exit``
and leaves the builder in the body; ``close_loop`` adds the step, feeds the phis and continues
after the loop. Loop-carried values (a reduction's accumulator in a register) are extra phis
of the head. Block and value names are the caller's, so the IR stays readable
(``loop0.head``, ``i0``, ``red.acc0``).
"""
from __future__ import annotations

from typing import NamedTuple

from llvmlite import ir

I64 = ir.IntType(64)


class Loop(NamedTuple):
    head: ir.Block
    body: ir.Block
    exit: ir.Block
    index: ir.PhiInstr
    carried: list        # phis of the loop-carried values, in the order given


def open_loop(b: ir.IRBuilder, start, stop, blocks: tuple, index: str = "i", carried=(),
              ty: ir.Type = I64, unsigned: bool = False) -> Loop:
    """Start ``for index in range(start, stop)`` in ``b``'s function; ``blocks``: the names of
    the head, body and exit blocks; ``carried``: (phi name, initial value) pairs."""
    fn = b.function
    pre = b.block
    head, body, exit_ = (fn.append_basic_block(name) for name in blocks)
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(ty, index)
    i.add_incoming(start, pre)
    phis = []
    for name, init in carried:
        phi = b.phi(init.type, name)
        phi.add_incoming(init, pre)
        phis.append(phi)
    compare = b.icmp_unsigned if unsigned else b.icmp_signed
    b.cbranch(compare("<", i, stop), body, exit_)
    b.position_at_end(body)
    return Loop(head, body, exit_, i, phis)


def close_loop(b: ir.IRBuilder, loop: Loop, step=None, carried=(), next_name: str = "") -> None:
    """End the loop's body (the builder's current block): ``index += step`` (default 1), the
    carried phis take ``carried``, and the builder continues in the exit block."""
    step = ir.Constant(loop.index.type, 1) if step is None else step
    latch = b.block
    loop.index.add_incoming(b.add(loop.index, step, name=next_name), latch)
    for phi, value in zip(loop.carried, carried):
        phi.add_incoming(value, latch)
    b.branch(loop.head)
    b.position_at_end(loop.exit)
