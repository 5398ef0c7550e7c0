"""One vector a step for stage loops too short to gain from more (``codegen.kernel`` calls it).

LLVM's loop vectoriser interleaves a vectorised loop up to 4 times (4 vectors a step) and,
when that steps 16 or more elements, vectorises the remainder again (epilogue
vectorisation): three copies of the loop beside the scalar one. A loop of at most
SHORT_VECTORS vectors' worth of iterations never runs the interleaved copy, yet it is most
of the loop's compile time: the stages of an 8x8 LU factorisation (det, slogdet, solve) take
45 ms of LLVM each with it, 28 ms without. Such an innermost loop of a loop region's stage
carries ``llvm.loop.interleave.count 1``: one vector a step, no epilogue copy. (A region's
stages are never compiled light, as they run once per iteration; at the top level short
stages are light, and sizes past that share machine code, which a hint by size would split.)
The extent is the stage's own (sizes are static); the hint is part of the text, so the cache
key covers it.

Results are the same to the bit: interleaving repeats the vector body, every element computed
by the same operations. A reduction LLVM may reassociate (``reassoc`` flags) would keep more
partial sums interleaved, so a body with one keeps its loops as they are, as does one that
calls a function with SIMD variants (should the hint change the vector width, libmvec's
results may differ from the scalar function's).
"""
from __future__ import annotations

import re

from llvmlite import ir

from .wide_stage import lanes

SHORT_VECTORS = 4     # the vectoriser's interleave count at most (x86-64)


def hint_short_inner_loop(fn: ir.Function, extents: tuple, math) -> None:
    """Mark the innermost loop of stage body ``fn`` (blocks ``loop<d-1>.*``, codegen.loop_body's
    nest) with an interleave count of one when its extent (``extents[-1]``) is short and the
    hint cannot change a result (see above)."""
    width = lanes(math)
    if not extents or not width or extents[-1] > SHORT_VECTORS * width:
        return
    head = f"loop{len(extents) - 1}.head"
    varied = {sym for (_, _, _, sym) in getattr(fn.module, "math_calls", ())}
    latch = None
    for block in fn.blocks:
        for ins in block.instructions:
            if "reassoc" in getattr(ins, "flags", ()) or "reassoc" in getattr(ins, "fastmath", ()):
                return
            if isinstance(ins, ir.CallInstr) and getattr(ins.callee, "name", None) in varied:
                return
        end = block.terminator
        if isinstance(end, ir.Branch) and end.operands[0].name == head:
            latch = end
    if latch is not None:
        latch.set_metadata("llvm.loop", _loop_id(fn.module))


def _loop_id(module: ir.Module) -> ir.values.MDValue:
    """A loop's own metadata node (``!n = !{!n, !{"llvm.loop.interleave.count", i32 1}}``):
    LLVM reads a loop's hints from a node whose first operand is the node itself."""
    hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"),
                                ir.Constant(ir.IntType(32), 1)])
    node = ir.values.MDValue(module, [hint], name=str(len(module.metadata)))
    node.operands = (node, hint)
    return node


_LOOP_REF = re.compile(r", !llvm\.loop !\d+")


def without_loop_ids(text: str) -> str:
    """A function's text with its loops' metadata references left out (each loop's node is
    its own, so two bodies of the same code name different ones)."""
    return _LOOP_REF.sub("", text)
