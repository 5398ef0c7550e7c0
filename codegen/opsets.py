"""The sets of ops the back ends dispatch on, in one place: derived from symgrad's op table
(``OpDef.kind``) where the kind says it, declared here once where it does not.

Each back end then keys its own lowering table by op (``codegen.lower.LOWER`` for scalar ops,
``codegen.schedule.SCHEDULE_RULES`` for the CPU's structural ops, ``codegen.ptx_build``'s
tables for the GPU); these sets only say what an op *is*.
"""
from __future__ import annotations

from symgrad import ops as _ops  # noqa: F401 - every op registered before the sets are read
from symgrad.ir import ops_of_kind


LEAVES = ops_of_kind("leaf")              # arg, const, full, array, arange: read, not computed
REDUCTIONS = ops_of_kind("reduction")     # sum, prod, max, min
CONSTANTS = frozenset(("const", "full"))  # the same value at every index: never in memory
# Ops that only re-index their operand (no arithmetic, no second operand): strides on the CPU,
# index maps on the GPU. OpDef.kind calls them "shape" together with the region updates.
VIEWS = frozenset(("reshape", "transpose", "broadcast_to", "getitem"))
if not VIEWS <= ops_of_kind("shape") or not CONSTANTS <= LEAVES:
    raise ImportError("symgrad.codegen.opsets: a view or constant op is missing from the op table")
