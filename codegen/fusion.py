"""Fusion rules of the CPU schedule (``codegen.schedule``) that join or remove loop nests
after the ops have their places:

* a chain of setitem/index_add updates of one buffer (:class:`RegionWrites`): an update whose
  region shares no element with the chain's earlier ones may run in their loop (or earlier),
  one that overlaps runs after them, so every element sees its updates in program order;
* a matmul *epilogue* (:class:`Epilogue`): the loop right after a float matmul, when it only
  does arithmetic on the product and sums it over the rows or stores it, runs on the
  matmul's tiles in registers (``codegen.matmul_kernel``);
* loops left with nothing to write, or that run over no element and only store, are dropped;
* what must not be fused by recomputing (:func:`computed_once`): the values a comparison reads,
  and those of a math-library function (exp, log, sin, ...), which cost more to recompute than
  to store and load;
* an output computed from an intermediate that dies in the output's loop writes over that
  intermediate's buffer (:func:`output_over_intermediate`), so the pair takes one array.

Nothing is reassociated: the sums add the same numbers in the same order as the loops they
replace.
"""
from __future__ import annotations

from dataclasses import dataclass

from symgrad.ir import Node, is_float, toposort

from .mathlib import MATH_NAMES
from .buffers import contiguous_strides
from .opsets import CONSTANTS as LEAF_INLINE
from .tiling import stage_accesses
from .views import View, views_overlap

# Ops that compare float values: a max/min reduction's gradient compares its input with the
# result (the tie mask), and a comparison decides a select. Their operands are computed once.
COMPARING = ("max", "min", "eq", "ne", "lt", "le", "gt", "ge")


@dataclass
class RegionWrites:
    """A chain of setitem/index_add updates of one buffer (``Schedule._region_update``): the
    stage from which its base copy is complete, each update's (stage, region), and the stage
    from which the chain's last value is readable."""
    floor: int
    writes: list
    ready: int


def after_overlapping_writes(s, buf: int, region: View, ready: int) -> int:
    """The first stage an in-place update of ``region`` may run in: after the base's
    copy and after the earlier updates of the chain whose regions share an element with
    it, but beside (or before) those of disjoint regions. Each element then sees its
    updates in program order, the same additions in the same order as one stage per
    update, while the gradient of slicing (an index_add per slice of a zeros array)
    accumulates its slices in the loops that compute them instead of one loop each.
    Without the chain's record (something else wrote the buffer), after everything."""
    chain = s.region_writes.get(buf)
    if chain is None or chain.ready != ready:
        return ready
    return max([chain.floor] + [k + 1 for k, v in chain.writes if views_overlap(v, region)])


def record_region_write(s, buf: int, region: View, in_place: bool, floor: int, stage: int,
                        ready: int):
    """Note an update of ``region`` of ``buf`` placed in ``stage``: the chain goes on when
    the update was in place on the chain's last value, else a new chain starts (everything
    before ``floor`` complete)."""
    chain = s.region_writes.get(buf)
    if in_place and chain is not None and chain.ready == floor:
        chain.writes.append((stage, region))
        chain.ready = ready
    else:
        s.region_writes[buf] = RegionWrites(floor, [(stage, region)], ready)


@dataclass
class Epilogue:
    """The elementwise work and reductions of the loop after a matmul, applied to each output
    tile while it is in registers (codegen.matmul_kernel) instead of in a loop of its own that
    reads the product back from memory. ``ssa``/``sinks`` are that loop's; ``loads`` the views
    (aligned to the product's (..., m, n) shape) of what it reads besides the product."""
    node: Node
    ssa: list
    sinks: list
    loads: dict


# Ops an epilogue computes on the tile's vectors (float arithmetic with a vector form)
EPILOGUE_OPS = ("add", "sub", "mul", "div", "neg")


def fuse_matmul_epilogues(s):
    """A loop right after a float matmul, over the product's shape, that only does
    arithmetic on the product (and values ready before the matmul) and stores it or sums
    it over the product's rows, becomes that matmul's epilogue: the blocked kernel applies
    it to each tile in registers, in the loop's order (rows in sequence, so the sums add
    the same numbers in the same order). The GMM gradient's ``sum_n(q * g + g @ L)``
    so reads neither the (K, n, d) product nor g back from memory."""
    from .matmul_kernel import applies as blocked   # (it imports the loop emitter)
    fused = []
    for m, st in zip(s.stages, s.stages[1:]):
        if m.kind == "matmul" and m.epilogue is None and blocked(m, s.buffers) \
                and _epilogue_fits(s, m, st):
            mm = m.sinks[0].node
            m.epilogue = Epilogue(mm, list(st.ssa), list(st.sinks), _epilogue_loads(s, mm, st))
            fused.append(st)
    _drop_stages(s, fused)


def _epilogue_loads(s, mm: Node, st) -> dict:
    """What the loop reads from memory (all but the product and its own values), each
    once, as views aligned to the loop."""
    read = [x for n in st.ssa for x in n.inputs] + [_sink_value(sk) for sk in st.sinks]
    loads = {}
    for x in read:
        if x is not mm and x.op not in LEAF_INLINE and x not in st.ssa and x not in loads:
            loads[x] = s.loc[x].align(st.shape)
    return loads


def _drop_stages(s, fused: list):
    """Remove the loops that became epilogues, those left without a sink (every value
    they computed is recomputed where it is used: the ``q * g`` an epilogue recomputes)
    and those that store nothing (no iterations: the empty slices of the GMM's d = 2
    triangle; a reduction over none still fills its identity), then number the stages
    again. A gather is kept: it checks its indices."""
    gone = {id(st) for st in fused} | {
        id(st) for st in s.stages if st.kind == "loop" and st.region is None
        and not any(n.op == "take" for n in st.ssa) and (not st.sinks or st.size == 0 and all(
            sk.kind in ("store", "accum") for sk in st.sinks))}
    if not gone:
        return
    s.stages = [st for st in s.stages if id(st) not in gone]
    for k, st in enumerate(s.stages):
        st.index = k


def _epilogue_fits(s, m, st) -> bool:
    """Can loop ``st`` run on matmul ``m``'s tiles: over the product's shape, with batch
    axes (the threads split them), arithmetic of the product's dtype, operands ready
    before the matmul, and sinks the tiles can write (_epilogue_sink)?"""
    mm = m.sinks[0].node
    if st.kind != "loop" or st.region is not None or st.serial or st.shape != mm.shape \
            or len(st.shape) < 3 or not is_float(mm.dtype):
        return False
    # An epilogue is a kernel of the module's own (~0.1 s of LLVM each, where the plain
    # kernel is a library compiled once); it saves reading the product back, which matters
    # where the product is taller than the contraction that makes it (m > k: the GMM
    # forward's (n, d) @ (d, d)). With k >= m (the Gram form's (1, d) @ (d, d) and
    # (d, d) @ (d, d) products) the product is no larger than the left operand the matmul
    # streams anyway, and the loop after it costs at most what one pass over that does.
    rows, depth = m.shape[-3], m.shape[-2]     # a matmul stage is over (..., m, k, n)
    if rows <= depth:
        return False
    if any(n.op not in EPILOGUE_OPS or n.dtype != mm.dtype for n in st.ssa):
        return False
    values = set(st.ssa) | {mm}
    for n in st.ssa:
        for x in n.inputs:
            if x in values or x.op in LEAF_INLINE and x.dtype == mm.dtype:
                continue
            if not _epilogue_operand(s, x, m, st):
                return False
    uses_mm = any(mm in n.inputs for n in st.ssa) or any(_sink_value(sk) is mm
                                                         for sk in st.sinks)
    return uses_mm and all(_epilogue_sink(s, sk, st, values, m) for sk in st.sinks)


def _epilogue_operand(s, x: Node, m, st) -> bool:
    """A value the epilogue loads: in memory before the matmul, same dtype, one value
    per row or a unit-stride row (a vector load or a broadcast scalar per tile row)."""
    if x not in s.loc or s.ready[x] > m.index or x.dtype != m.sinks[0].node.dtype:
        return False
    return s.loc[x].align(st.shape).strides[-1] in (0, 1)


def _epilogue_sink(s, sk, st, values: set, m) -> bool:
    """A sum over the rows into a unit-stride row per matrix (no two matrices share one,
    so the threads splitting the batch never add into the same row), or a store into
    unit-stride rows."""
    d = len(st.shape)
    dest = sk.dest.strides
    distinct = all(stride != 0 or e == 1 for stride, e in zip(dest[:d - 2], st.shape[:d - 2]))
    if sk.kind not in ("reduce", "store"):
        return False
    x = _sink_value(sk)
    if not (x in values or _epilogue_operand(s, x, m, st)) or not distinct or dest[-1] != 1:
        return False
    if sk.kind == "reduce":   # over the rows only
        return sk.node.op == "sum" and dest[-2] == 0
    return dest[-2] != 0


def _sink_value(sk) -> Node:
    """The value a store or reduce sink reads."""
    return sk.node.inputs[0] if sk.kind == "reduce" else sk.node


# Ops a loop never recomputes from the operands another loop computed them from: a math-library
# function is 20-70 vector instructions an element (exp: ~35 on AVX-512, ~1.7 cycles an element
# on one core), storing its value and loading it back two memory streams of 8 bytes an element
# (W2's softmax gradient recomputed exp(x - max) beside the sum that needs it: 0.68 ms a pass
# over 10^6 elements on one core, 0.32 ms loading it). sqrt is one instruction, but a
# long-latency one (~1 cycle an element at AVX-512 throughput). Below COSTLY_MIN elements
# recomputing costs under a microsecond, and storing can keep a loop alive that recomputing
# lets go (a 0-d log its consumers' scalar loop recomputes: its own loop is dropped).
COSTLY = frozenset(MATH_NAMES)
COSTLY_MIN = 1024


def computed_once(outputs) -> set:
    """The nodes no loop recomputes (``Schedule.once``): every loop but its home reads the
    value from memory. Those of :data:`COSTLY` ops of at least COSTLY_MIN elements (storing is
    cheaper), and the float values a comparison or a max/min reduction reads:

    Recomputing a value in another loop need not reproduce its bits: LLVM widens each loop by
    its own vector width, and a SIMD libmvec function differs from the scalar one (or another
    width's) in the last ulp, so which lanes see which bits depends on the loop. Arithmetic
    reproduces, but a comparison turns one ulp into a different answer: ``max(tanh(x))`` was
    reduced from one computation of ``tanh(x)`` and its tie mask ``tanh(x) == max`` compared
    another, so no element matched and the gradient was 1/0. Such values are computed in one
    loop and stored; every other loop loads those very bits."""
    once = set()
    for n in toposort(outputs):     # (one walk of the graph: it is as long as the program)
        if n.op in COMPARING:
            once.update(x for x in n.inputs if is_float(x.dtype))
        if n.op in COSTLY and n.size >= COSTLY_MIN:
            once.add(n)
    return once


def output_buffer(s, o: Node, k: int) -> int:
    """The buffer output ``k`` (``o``, computed in registers in its home loop) is stored
    into: an intermediate's (:func:`output_over_intermediate`), else its own."""
    over = output_over_intermediate(s, o, k)
    return s.ensure_loc(o).buf if over is None else over


def output_over_intermediate(s, o: Node, k: int) -> int | None:
    """Store output ``k`` (``o``, computed in registers in its home loop) over the scratch
    buffer of an intermediate that loop reads at its own index, when nothing reads that
    buffer afterwards; returns the buffer, now output ``k``'s array (None: no such buffer).

    W2's gradient ``c * exp(z) - t``: ``exp(z)`` is stored by the loop of its sum and read
    back by the gradient's loop, which can write its result in the same place. The pair
    then takes one array (one 8 MB stream fewer in the cache at 10^6 float64s) and the
    workspace shrinks by it. Safe because every iteration loads what it reads before the
    sinks store (``loop_body.StageEmitter.body``) and reads only its own index of that
    buffer, so the threads splitting the loop and the vector lanes see their own elements."""
    h = s.home[o]
    st = s.stages[h]
    if s.parent is not None or st.kind != "loop" or not o.ndim or (
            h and s.stages[h - 1].kind == "matmul"):   # (the loop may become its epilogue)
        return None
    for buf in _intermediates_read_in_place(s, st):
        b = s.buffers[buf]
        if b.kind == "tmp" and b.dtype == o.dtype and b.size == max(o.size, 1) \
                and not _used_after(s, buf, h) and not _holds_an_output(s, buf):
            b.kind, b.ref = "out", k
            s._claimed.add(k)
            view = View(buf, 0, o.shape, contiguous_strides(o.shape))
            st.sinks.append(_sink("store", o, view))
            s._locate(o, view, h + 1)
            return buf
    return None


def _intermediates_read_in_place(s, st) -> list:
    """The buffers loop ``st`` reads only at its own index, as whole contiguous arrays of
    its shape, and only to compute its values (a sink that reads memory reads it after the
    stores of the sinks before it)."""
    computed = set(st.ssa)
    whole = contiguous_strides(st.shape)
    found, refused = [], set()
    for n in st.ssa:
        for x in n.inputs:
            if x in computed or x.op in LEAF_INLINE:
                continue
            v = s.loc[x].align(st.shape)
            if n.op == "take" or v.offset or any(a != b for a, b, e in zip(v.strides, whole, st.shape)
                                                 if e > 1):
                refused.add(v.buf)
            elif v.buf not in found:
                found.append(v.buf)
    for sk in st.sinks:
        read = [] if sk.kind == "matmul" else [sk.node.inputs[0] if sk.kind in (
            "reduce", "scatter") else sk.node]
        refused.update(s.loc[x].buf for x in read if x not in computed and x in s.loc)
        refused.update(v.buf for v in sk.operands)
        refused.add(sk.dest.buf)
    return [buf for buf in found if buf not in refused]


def _used_after(s, buf: int, h: int) -> bool:
    """Does a stage after ``h`` read or write ``buf`` (a region stage may: its bodies' reads
    are not listed here)?"""
    for st in s.stages[h + 1:]:
        if st.region is not None or any(a.buf == buf for a in stage_accesses(s, st)):
            return True
    return False


def _holds_an_output(s, buf: int) -> bool:
    """Does a graph output live in ``buf`` (a view of the intermediate, copied into its
    own array by a loop placed later)?"""
    return any(v.buf == buf and n in s.out_of for n, v in s.loc.items())


def _sink(kind, node, dest):
    from .schedule import Sink   # (schedule imports this module)
    return Sink(kind, node, dest)
