"""Which loops of a schedule may grow past ``codegen.schedule.STAGE_OPS`` ops, up to
``wide_stage.WIDE_STAGE_OPS`` (the schedule's side of ``codegen.wide_stage``), and what such
long loops may recompute instead of loading.

A loop of nothing but ops, loads and stores that wide_stage emits as SIMD code compiles in time
linear in its length, so straight-line elementwise code fills fewer, longer loops than the loop
vectoriser's bound allows (fewer values handed between loops in memory). A loop of under
``fusion.COSTLY_MIN`` elements that is long recomputes a value only from values it already
has: a recomputed chain that needs loads of its own costs more than the load it saves.
"""
from __future__ import annotations

import bisect
from math import prod

from symgrad.ir import Node

from . import wide_stage   # (its WIDE_STAGE_OPS, read when asked: tests set it)
from .fusion import COSTLY_MIN
from .lower import LOWER
from .opsets import CONSTANTS as LEAF_INLINE   # (schedule.LEAF_INLINE; schedule imports this)
from .wide_stage import MEMORY, _node_widens, lanes


def grows(n: Node, size: int) -> bool:
    """May elementwise node ``n`` be in a loop of ``size`` iterations grown past
    ``schedule.STAGE_OPS`` (which only a stage codegen.wide_stage emits may be)? A float64 op
    it widens on the host, in a loop too large to be compiled light."""
    if not _HOST:
        from . import jit
        from .kernel import LIGHT_MAX_ITERATIONS
        math = jit.target()["math"]
        _HOST.update(math=math, lanes=lanes(math), light=LIGHT_MAX_ITERATIONS)
    return (size > _HOST["light"] and n.dtype in MEMORY and n.op in LOWER
            and _node_widens(_HOST["math"], n, _HOST["lanes"]))


_HOST: dict = {}   # grows' view of the host: its math, lanes and the light bound (read once)


class Growth:
    """Which loops of a ``codegen.schedule.Schedule`` may take more than ``STAGE_OPS`` ops (up
    to ``WIDE_STAGE_OPS``): those whose every op, load and store codegen.wide_stage emits, as
    they join. A sink it cannot emit (a reduction) never joins a grown loop: it reads its
    value from memory in a loop of its own, so no loop past STAGE_OPS ends up with the loop
    vectoriser, whose time grows with the square of the loop."""

    def __init__(self, schedule):
        from . import schedule as bounds   # (its STAGE_OPS, read when asked: tests set it)
        self.s, self.bounds = schedule, bounds
        self.grown: set[int] = set()        # loops that took ops past STAGE_OPS
        self._seen: dict[int, tuple] = {}   # loop -> (ops, sinks checked, all wide so far)
        self._memo: dict[tuple, bool] = {}  # (node, loop shape) -> _node_grows
        self._open: dict[tuple, list] = {}  # loop shape -> loops that may take more, in order
        self._indexed = 0                   # stages filed in _open so far

    def loops(self, shape, lo: int):
        """The loops over ``shape`` from stage ``lo`` on that may still take work, in order
        (Schedule.loop_stage asks ``takes`` of each). A loop that can take nothing more
        (STAGE_OPS ops and either WIDE_STAGE_OPS or not wide: ops only join) leaves the list
        for good, so a node no longer scans every full loop between its inputs and the end
        (straight-line code on a vector: 1.6 / 2.1 / 3.2 loops asked per node at 1000 / 2000
        / 4000 statements)."""
        stages = self.s.stages
        for k in range(self._indexed, len(stages)):
            if stages[k].kind == "loop":
                self._open.setdefault(stages[k].shape, []).append(k)
        self._indexed = len(stages)
        found = self._open.get(shape, []) if isinstance(shape, tuple) else []
        i = bisect.bisect_left(found, lo)
        while i < len(found):
            k = found[i]
            ops = len(stages[k].ssa)
            if ops >= self.bounds.STAGE_OPS and (ops >= wide_stage.WIDE_STAGE_OPS
                                                 or not self._seen.get(k, (0, 0, True))[2]):
                del found[i]   # (takes would say no to every node and sink from now on)
                continue
            yield k
            i += 1

    def takes(self, k: int, joining: Node | None) -> bool:
        """May elementwise node ``joining`` (None: a sink) join loop k? (The schedule's
        callers add a node the answer admits, so a loop admitted past STAGE_OPS is recorded
        as grown here.) Asked of every full loop a node scans past: the common answers first."""
        ops = len(self.s.stages[k].ssa)
        if ops < self.bounds.STAGE_OPS:
            return True
        if joining is None or ops >= wide_stage.WIDE_STAGE_OPS \
                or not self._seen.get(k, (0, 0, True))[2]:
            return False
        st = self.s.stages[k]
        if self.grows(joining, st) and self._stays_wide(k):
            self.grown.add(k)
            return True
        return False

    def may_recompute(self, nodes, k: int) -> bool:
        """May loop k recompute ``nodes`` (Schedule._clonable's plan)? In a grown loop, only
        what grows it; in a long loop (STAGE_OPS ops or grown) of fewer than COSTLY_MIN
        elements, only what it computes from values it already has (``_reads_nothing_new``)."""
        st = self.s.stages[k]
        if k in self.grown and not all(self.grows(n, st) for n in nodes):
            return False
        long = k in self.grown or len(st.ssa) >= self.bounds.STAGE_OPS
        return not long or prod(st.shape) >= COSTLY_MIN or self._reads_nothing_new(nodes, k)

    def _reads_nothing_new(self, nodes, k: int) -> bool:
        """Does recomputing ``nodes`` in loop k read only what its nodes read already? Recomputing
        saves a pass over memory, which under COSTLY_MIN elements is a pass over the cache; a
        chain that needs loads of its own costs more instructions than loading the value it
        makes (a math call is 20-70 and clobbers every vector register: spills around it). In
        straight-line code each statement reads a random earlier value, which lives in another
        loop ever more often as the program grows: the gradient's recomputed nodes grew 2.5-2.7x
        per doubling of the program (2175 / 5789 / 14239 at 1000 / 2000 / 4000 statements; 500
        / 1110 / 1988 with this rule, math calls 1327 / 3077 / 6751 -> 1125 / 2293 / 4429 at
        WIDE_STAGE_OPS 2048), for 5-7% more loads and stores."""
        has = self.s._operands_of(k)
        planned = set(nodes)
        return all(y.op in LEAF_INLINE or y in planned or y in has or self.s._in_stage(y, k)
                   for n in nodes for y in n.inputs)

    def grows(self, n: Node, st) -> bool:
        """Can a wide loop over ``st.shape`` compute ``n`` (its inputs read from memory at a
        unit or zero inner stride)? (Asked once per node and shape: a full loop is asked
        again by every node that scans past it.)"""
        key = (n, st.shape)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._node_grows(n, st.shape)
        return found

    def _node_grows(self, n: Node, shape) -> bool:
        if not grows(n, prod(shape)):
            return False
        for x in n.inputs:
            if x in self.s.loc and x.op not in LEAF_INLINE:
                view = self.s.loc[x].align(shape)
                if view.strides[-1] not in (0, 1) or self.s.buffers[view.buf].dtype not in MEMORY:
                    return False
        return True

    def _stays_wide(self, k: int) -> bool:
        """Is every op and sink of loop k one codegen.wide_stage emits? (Brought up to date as the
        loop grows: a scan per question would be quadratic.)"""
        st = self.s.stages[k]
        ops, sinks, wide = self._seen.get(k, (0, 0, True))
        if len(st.ssa) < ops or len(st.sinks) < sinks:
            ops, sinks, wide = 0, 0, True
        if wide:
            size = prod(st.shape)
            wide = all(grows(n, size) for n in st.ssa[ops:]) and all(
                self.wide_sink(sk) for sk in st.sinks[sinks:])
        self._seen[k] = (len(st.ssa), len(st.sinks), wide)
        return wide

    def wide_sink(self, sk) -> bool:
        return (sk.kind == "store" and sk.node.dtype in MEMORY and sk.dest.strides[-1] == 1
                and self.s.buffers[sk.dest.buf].dtype == sk.node.dtype)

    def home_loop(self, k: int, sink=None) -> bool:
        """Is stage k, the home of a value, a loop that may take ``sink`` of it (None: any)?"""
        return self.s.stages[k].kind == "loop" and (
            k not in self.grown or (sink is not None and self.wide_sink(sink)))
