"""Tile groups of the CPU schedule: consecutive stages run chunk by chunk of their outer axis.

A schedule runs one stage after the other over its whole range, so a value one stage writes
and the next reads goes through memory in between: ADBench GMM's (K, n, d) ``x - means``, its
product with the triangles and the sum of squares of that are 8 MB each at d = 20 and 102 MB
at d = 64, far beyond the L2 cache. A :class:`TileGroup` runs a run of stages that share the
outer axis (the K mixture components) ``rows`` at a time instead: every stage over rows
``[t0, t0 + rows)``, then every stage over the next rows, so what one stage writes for those
rows is still in cache when the next reads it. A buffer that only the group's stages use is
*chunk-local*: it holds ``rows`` rows, which every chunk reuses (the kernel addresses row
``t`` of it at ``base - t0 * row`` + ``t * row``), so the workspace and its first touch
shrink by the factor ``extent / rows`` and the data never leave the cache.

Chunking changes no value. Every stage of a group computes row ``t`` of its outer axis from
row ``t`` of what the group's earlier stages wrote (each access of such a buffer is *row
aligned*: outer index ``t`` touches only row ``t`` of it), with the same inner loops whatever
the chunk, and a stage over ``[t0, t1)`` then ``[t1, t2)`` is the stage over ``[t0, t2)``:
nothing is reassociated, and the threads, which split the outer axis, see the same rows.
The kernel keeps the outer axis of a grouped stage a loop of its own (:func:`grouped`), never
merged with the inner ones, so a chunk boundary is a row boundary and the vectorised loop is
an inner one (a vectorised outer axis would move the vector/scalar split with the chunks).

Not grouped: region stages, serial stages (a scatter over axis 0), stages reducing over the
outer axis (the threads would need private partial sums), 0-d and 1-d stages.
"""
from __future__ import annotations

from dataclasses import dataclass

from symgrad.ir import Node

from .opsets import CONSTANTS as LEAF_INLINE

# Bytes of shared rows (what a group's stages pass each other) one chunk may hold: the chunk
# stays in a core's L2 cache (1-2 MiB on current x86-64 server cores, 256 KiB-1 MiB on older
# ones) beside the inputs the stages stream.
CHUNK_BYTES = 256 * 1024


@dataclass
class TileGroup:
    """Stages ``stages`` (consecutive indices) run ``rows`` rows of their common outer axis of
    ``extent`` at a time; ``local``: chunk-local buffer -> its row stride in elements."""
    stages: list
    extent: int
    rows: int
    local: dict


def grouped(schedule) -> set:
    """The indices of the stages in a tile group."""
    return {j for g in schedule.tile_groups for j in g.stages}


@dataclass(frozen=True)
class Access:
    """One view a stage reads or writes; ``rowwise``: outer index ``t`` touches only row
    ``t`` (of ``row`` elements) of the buffer."""
    buf: int
    write: bool
    rowwise: bool
    row: int


def row_span(view, extent: int):
    """The row stride of ``view`` when outer index ``t`` reaches only elements
    ``[t * row, (t + 1) * row)`` of its buffer, else None."""
    if not view.shape or view.shape[0] != extent or view.strides[0] <= 0:
        return None
    row = view.strides[0]
    lo = hi = view.offset
    for e, s in zip(view.shape[1:], view.strides[1:]):
        if e == 0:
            return None
        lo += min(0, (e - 1) * s)
        hi += max(0, (e - 1) * s)
    return row if 0 <= lo and hi < row else None


def stage_accesses(s, st) -> list[Access]:
    """Every buffer view stage ``st`` of schedule ``s`` reads or writes (its loads, sinks,
    matmul operands, gathers and epilogue), as the kernel addresses them."""
    extent = st.shape[0] if st.shape else None
    views: list = []             # (view or None for an unaligned access, buf, write)
    ssa = set(st.ssa)

    def read(x: Node):
        if x not in ssa and x.op not in LEAF_INLINE:
            views.append((s.loc[x].align(st.shape), s.loc[x].buf, False))

    for n in st.ssa:
        if n.op == "take":       # x read at run-time indices along the gathered axis
            x, idx = n.inputs
            (axis,) = n.attrs
            # gathered along an inner axis, row t of the result reads only row t of x
            views.append((s.loc[x] if axis > 0 else None, s.loc[x].buf, False))
            views.append((None, s.loc[idx].buf, False))
            continue
        for x in n.inputs:
            read(x)
    for sk in st.sinks:
        if sk.kind in ("store", "accum"):
            read(sk.node)
        elif sk.kind in ("reduce", "scatter"):
            read(sk.node.inputs[0])
        if sk.kind == "scatter":  # written at run-time indices
            views.append((None, sk.dest.buf, True))
            views += [(None, v.buf, False) for v in sk.operands]
            continue
        views.append((sk.dest, sk.dest.buf, True))
        views += [(v, v.buf, False) for v in sk.operands]
    if st.epilogue is not None:
        views += [(v, v.buf, False) for v in st.epilogue.loads.values()]
        views += [(sk.dest, sk.dest.buf, True) for sk in st.epilogue.sinks]
    out = []
    for view, buf, write in views:
        row = None if view is None or extent is None else row_span(view, extent)
        out.append(Access(buf, write, row is not None, row or 0))
    return out


def _fills(s, st) -> set:
    """Buffers the stage's init fills with the identity (over the whole buffer)."""
    from .matmul_kernel import applies as blocked   # (it imports the loop emitter)
    if blocked(st, s.buffers):
        return set()
    return {sk.dest.buf for sk in st.sinks if sk.kind in ("reduce", "matmul", "scatter")}


def tileable(st) -> bool:
    """Can the stage run chunk by chunk of its outer axis?"""
    if st.kind not in ("loop", "matmul") or st.region is not None or st.serial:
        return False
    if len(st.shape) < 2 or st.shape[0] < 2:
        return False
    # a reduction over the outer axis (a zero destination stride) needs all rows at once
    return not any(sk.kind in ("reduce", "matmul") and sk.dest.strides[0] == 0
                   for sk in st.sinks)


class _Run:
    """A candidate group: its stages' accesses per buffer, checked as stages join."""

    def __init__(self, s, first):
        self.s = s
        self.stages = [first]
        self.extent = first.shape[0]
        self.by_buf: dict[int, list] = {}
        self.filled: dict[int, int] = {}   # buffer -> the stage whose init fills it
        self.hoisted: list = []            # stages that run before the group instead
        self._add(first)

    def _add(self, st):
        for acc in stage_accesses(self.s, st):
            self.by_buf.setdefault(acc.buf, []).append((st.index, acc))
        for buf in _fills(self.s, st):
            self.filled.setdefault(buf, st.index)

    def admits(self, st) -> bool:
        """Would the run stay chunkable with ``st`` after its stages?"""
        if not tileable(st) or st.shape[0] != self.extent:
            return False
        mine = stage_accesses(self.s, st)
        fills = _fills(self.s, st)
        for acc in mine:
            earlier = self.by_buf.get(acc.buf, [])
            if not earlier:
                continue
            if acc.buf in fills:         # filled before the group runs: nothing before it
                return False             # may use the buffer
            if not (acc.write or any(a.write for _, a in earlier)):
                continue                 # read by all: any order is fine
            if not _aligned([a for _, a in earlier] + [acc]):
                return False
        for buf in fills:                # a fill must follow every earlier use
            if buf in self.by_buf:
                return False
        for buf, k in self.filled.items():   # written once filled, by the filling stage only
            if any(a.buf == buf and a.write for a in mine):
                return False
        return True

    def can_hoist(self, st) -> bool:
        """May ``st`` run before the run's stages (it comes after them): it writes nothing
        they use and reads nothing they write?"""
        if st.region is not None:
            return False
        for acc in stage_accesses(self.s, st):
            uses = self.by_buf.get(acc.buf, [])
            if uses and (acc.write or any(a.write for _, a in uses)):
                return False
        return not any(buf in self.by_buf for buf in _fills(self.s, st))

    def join(self, st):
        self.stages.append(st)
        self._add(st)

    def rebuild(self, stages: list):
        """The run with ``stages`` instead (the accesses gathered again)."""
        self.stages, self.by_buf, self.filled = [], {}, {}
        for st in stages:
            self.join(st)


def _aligned(accesses) -> bool:
    return all(a.rowwise for a in accesses) and len({a.row for a in accesses}) == 1


def tile_groups(s) -> list[TileGroup]:
    """The schedule's tile groups; shrinks their chunk-local buffers to one chunk, and
    moves a stage that interrupts a group but shares no buffer with its stages so far (the
    GMM gradient's (K,) alphas gradient between two (K, n) loops) before the group (then
    numbers the stages again)."""
    runs, cur = [], None
    for st in s.stages:
        if cur is not None and cur.admits(st):
            cur.join(st)
            continue
        if cur is not None and cur.can_hoist(st):
            cur.hoisted.append(st)
            continue
        if cur is not None:
            runs.append(cur)
        cur = _Run(s, st) if tileable(st) else None
        if cur is None:
            runs.append(_Alone(st))
    if cur is not None:
        runs.append(cur)
    if not any(isinstance(run, _Run) for run in runs):
        return []   # (nothing to group: no pass over every stage's accesses, which straight-
        #            line code of 4000 statements on a vector took ~0.2 s for)
    _recompute_cheap_operands(s, [run for run in runs if isinstance(run, _Run)])
    users = _buffer_users(s)
    groups, order = [], []
    for run in runs:
        group = _group(s, run, users) if isinstance(run, _Run) else None
        if group is None:     # the original order
            order += sorted(run.stages + getattr(run, "hoisted", []), key=lambda st: st.index)
            continue
        order += run.hoisted
        groups.append((group, run.stages))
        order += run.stages
    s.stages = order
    for k, st in enumerate(order):   # (a recomputing stage's index was provisional)
        st.index = k
    for group, stages in groups:
        group.stages = [st.index for st in stages]
    return [group for group, _ in groups]


def _recompute_cheap_operands(s, runs: list):
    """A matmul of a later run reading a value an earlier run stored, where that value is
    one scalar op of arguments (the GMM gradient's ``x - means``, which its backward
    multiplies by the (K, n, d) cotangent after the logsumexp over K), gets its own copy:
    a stage at the head of its run computes it again into a buffer of its own. Both copies
    are then used by one run each and hold one chunk (a 102 MB array at d = 64 becomes two
    of 512 KB), and the recomputation reads arrays that stay in cache instead of streaming
    the stored one back from memory. The same op on the same values: the same bits."""
    if any(st.region is not None for st in s.stages):
        return        # a region's bodies write buffers no stage_accesses sees
    writes: dict = {}
    for st in s.stages:
        for acc in stage_accesses(s, st):
            writes[acc.buf] = writes.get(acc.buf, 0) + acc.write
    stored = {}      # buffer -> (run, value) it alone stores
    for run in runs:
        for st in run.stages:
            for sk in st.sinks:
                v = sk.node
                if sk.kind == "store" and writes.get(sk.dest.buf) == 1 and _cheap(s, v) \
                        and s.loc.get(v) == sk.dest and v.shape and v.shape[0] == run.extent:
                    stored[sk.dest.buf] = (run, v)
    fresh = len(s.stages)
    for run in runs:
        for buf, (source, v) in stored.items():
            uses = run.by_buf.get(buf, [])
            if source is run or not uses or len(uses) != _operand_uses(run, buf) \
                    or v.shape[0] != run.extent or not _aligned([a for _, a in uses]) \
                    or _chunk_rows(s, run) is None:   # (a copy only helps a group: it
                continue                              # sharing more rows, it stays one)
            copy = s._buffer("tmp", v.dtype, s.buffers[buf].size)
            for st in run.stages:
                for sk in st.sinks:
                    sk.operands = tuple(_moved(w, buf, copy) for w in sk.operands)
            head = type(run.stages[0])(fresh, v.shape, ssa=[v],
                                       sinks=[_store(v, copy, s.loc[v])])
            fresh += 1
            run.rebuild([head] + run.stages)


def _cheap(s, v) -> bool:
    """One scalar op of arguments and constants (never written by the kernel)."""
    from .lower import LOWER
    from .loop_body import IN_LOOP_RULES
    if v.op not in LOWER or v.op in IN_LOOP_RULES or v in s.once:
        return False
    return all(x.op in LEAF_INLINE or (x in s.loc and s.buffers[s.loc[x].buf].kind in
                                       ("arg", "const")) for x in v.inputs)


def _operand_uses(run, buf: int) -> int:
    """How many matmul operand views of ``buf`` the run's stages have."""
    return sum(1 for st in run.stages for sk in st.sinks if sk.kind == "matmul"
               for w in sk.operands if w.buf == buf)


def _moved(view, buf: int, copy: int):
    return type(view)(copy, view.offset, view.shape, view.strides) if view.buf == buf else view


def _store(v, copy: int, view):
    from .schedule import Sink
    return Sink("store", v, type(view)(copy, view.offset, view.shape, view.strides))


class _Alone:
    def __init__(self, st):
        self.stages = [st]


def _chunk_rows(s, run) -> int | None:
    """Rows per chunk when chunking the run keeps something in cache, else None."""
    shared = _shared_rows(run)
    if len(run.stages) < 2 or not shared:
        return None            # nothing passes from one stage to the next through memory
    row_bytes = sum(row * s.buffers[buf].nbytes // s.buffers[buf].size
                    for buf, row in shared.items())
    rows = max(1, CHUNK_BYTES // max(row_bytes, 1))
    return rows if rows < run.extent else None   # one chunk: the stages as they were


def _group(s, run, users) -> TileGroup | None:
    """The run as a tile group, when chunking it keeps something in cache."""
    rows = _chunk_rows(s, run)
    if rows is None:
        return None
    local = _chunk_local(s, run, users)
    for buf, row in local.items():
        s.buffers[buf].size = rows * row
    return TileGroup([], run.extent, rows, local)


def _shared_rows(run) -> dict:
    """Buffer -> row stride of the buffers one stage of the run writes and a later one
    reads (row aligned, as admits checked)."""
    shared = {}
    for buf, accs in run.by_buf.items():
        writers = [k for k, a in accs if a.write]
        if writers and any(k > min(writers) and not a.write for k, a in accs):
            shared[buf] = accs[0][1].row
    return shared


def _buffer_users(s) -> dict:
    """Buffer -> the stages using it; None where some stage's use is not known (a region
    stage's bodies read the parent's buffers)."""
    users: dict = {}
    if any(st.region is not None for st in s.stages):
        return {}
    for st in s.stages:
        for acc in stage_accesses(s, st):
            users.setdefault(acc.buf, set()).add(st.index)
    return users


def _chunk_local(s, run, users: dict) -> dict:
    """The buffers nothing outside the run uses: scratch of exactly ``extent`` rows, not
    filled by an init, every access row aligned (what one stage passes the next, and what
    only one writes: the product a matmul epilogue consumes in registers)."""
    mine = {st.index for st in run.stages}
    local = {}
    for buf, accs in run.by_buf.items():
        row = accs[0][1].row
        b = s.buffers[buf]
        if b.kind != "tmp" or buf not in users or not users[buf] <= mine or buf in run.filled:
            continue
        if b.size != run.extent * row or not _aligned([a for _, a in run.by_buf[buf]]):
            continue
        local[buf] = row
    return local
