"""A threaded call's parallel passes handed to the pool once per call (``execute``, for
``codegen.llvm.Native._execute``), not once per pass.

Each parallel pass (a stage, or a tile group: ``codegen.tile_run``) is split into parts by
``llvm.split_bounds``, as before; what changed is who runs a part. A call writes a *block*
(below) naming every pass's parts, submits one job per pool worker, and then runs its passes
in order on the calling thread: per pass, it runs the inits and builds the parts' pointer
tables (Python), opens the pass (``sg_caller``: native, the GIL released), claims parts
itself until none is left, waits until every claimed part is done, and returns to Python,
which folds the parts' partial reductions (``llvm._COMBINE``, in part order) and goes on to
the next pass. A worker (``sg_worker``) waits for each pass to open, claims parts until none
is left, and waits for the next. Whoever claims a part runs it with that part's bounds and
table, so each part computes exactly what it computed when a given thread ran it, and the
fold's order is fixed: results are bit-identical to one pool hand-off per pass, whatever
thread ran what, and as independent of the thread count as ``split_bounds`` makes them.

Why claiming instead of a part per thread: on a shared machine a worker may not run for a
while after it is woken; the caller then runs the worker's parts itself instead of waiting
(the one-thread time is the worst case, plus the glue), and a pool busy with another call
(another Python thread's) never holds this one up. A worker never waits for the caller to
return: once the caller is done every opened pass has had all its parts claimed, so a late
worker finds nothing to claim and touches nothing but its block, which its job holds alive.

The waits spin with ``pause`` for ``SPINS`` rounds (the caller's glue between passes is a
few microseconds), then call ``sched_yield`` ``YIELDS`` times, then nap (``nanosleep``) in a
loop. Why they nap so soon (measured, benchmarks/RESULTS.md "branch ``w2pool``"): on a
shared machine the scheduler treats a thread that spins or yields as busy and one that
sleeps as a waker to run promptly; with 4096 spins and 256 yields before the first nap,
W2's two-thread call took 1.7-5 ms at load 8-9 where the per-pass hand-off (threads that
block) took 1.1-1.9, and with the short spin 1.3-1.9. The block (int64 words):
``[0]`` passes opened, ``[1]`` closed (set when the caller stops early: waiting workers
leave), ``[2]`` passes, ``[3]`` sched_yield's address, ``[4]`` the params' address, ``[5]``
nanosleep's, ``[6:8]`` its timespec, ``[HEAD + k]`` pass k's record's word offset; a record:
claimed, done, the part function's address, parts, bounds (parts + 1), the parts' table
addresses (parts).
"""
from __future__ import annotations

import ctypes
import re
from typing import NamedTuple

import numpy as np

SPINS = 512        # pauses before a wait naps (~10 us: the glue between two passes)...
YIELDS = 0         # ...then sched_yield calls before it does...
NAP_NS = 20_000    # ...and each nap (nanosleep; with the timer slack ~70 us)
HEAD = 8           # block words before the record offsets
RECORD_HEAD = 4    # claimed, done, function, parts

# Every function optnone: a light module (jit.is_light: no IR pipeline, -O0 code generation;
# 1 ms to compile where -O3 took 60): none of it is hot, the parts' stages are.
_IR = """
declare void @llvm.x86.sse2.pause()

define internal ptr @word(ptr %base, i64 %k) noinline optnone {
  %p = getelementptr i64, ptr %base, i64 %k
  ret ptr %p
}

define internal i64 @get(ptr %base, i64 %k) noinline optnone {
  %p = getelementptr i64, ptr %base, i64 %k
  %v = load i64, ptr %p
  ret i64 %v
}

; wait until *word >= target (true) or the block is closed (false): spin, then yield,
; then sleep in short naps
define internal i1 @wait(ptr %block, ptr %word, i64 %target) noinline optnone {
entry:
  %yield.i = call i64 @get(ptr %block, i64 3)
  %yield = inttoptr i64 %yield.i to ptr
  %nap.i = call i64 @get(ptr %block, i64 5)
  %nap = inttoptr i64 %nap.i to ptr
  %nap.time = call ptr @word(ptr %block, i64 6)
  %closed = call ptr @word(ptr %block, i64 1)
  br label %loop
loop:
  %n = phi i64 [0, %entry], [%n.next, %again]
  %v = load atomic i64, ptr %word acquire, align 8
  %ready = icmp sge i64 %v, %target
  br i1 %ready, label %yes, label %check
check:
  %c = load atomic i64, ptr %closed acquire, align 8
  %stop = icmp ne i64 %c, 0
  br i1 %stop, label %no, label %idle
idle:
  %spin = icmp ult i64 %n, SPINS
  br i1 %spin, label %pause, label %idle.long
pause:
  call void @llvm.x86.sse2.pause()
  br label %again
idle.long:
  %short = icmp ult i64 %n, YIELD_UNTIL
  br i1 %short, label %give, label %sleep
give:
  %r = call i32 %yield()
  br label %again
sleep:
  %s = call i32 %nap(ptr %nap.time, ptr null)
  br label %again
again:
  %n.next = add i64 %n, 1
  br label %loop
yes:
  ret i1 true
no:
  ret i1 false
}

define internal ptr @record(ptr %block, i64 %k) noinline optnone {
  %at = add i64 %k, HEAD
  %off = call i64 @get(ptr %block, i64 %at)
  %r = getelementptr i64, ptr %block, i64 %off
  ret ptr %r
}

; claim parts of a pass and run them until none is left
define internal void @claim(ptr %block, ptr %rec) noinline optnone {
entry:
  %params.i = call i64 @get(ptr %block, i64 4)
  %params = inttoptr i64 %params.i to ptr
  %fn.i = call i64 @get(ptr %rec, i64 2)
  %fn = inttoptr i64 %fn.i to ptr
  %parts = call i64 @get(ptr %rec, i64 3)
  %done = call ptr @word(ptr %rec, i64 1)
  br label %next
next:
  %p = atomicrmw add ptr %rec, i64 1 monotonic
  %left = icmp slt i64 %p, %parts
  br i1 %left, label %run, label %exit
run:
  %at = add i64 %p, RECORD_HEAD
  %begin = call i64 @get(ptr %rec, i64 %at)
  %at1 = add i64 %at, 1
  %end = call i64 @get(ptr %rec, i64 %at1)
  %at.t = add i64 %at1, %parts
  %table.i = call i64 @get(ptr %rec, i64 %at.t)
  %table = inttoptr i64 %table.i to ptr
  call void %fn(ptr %table, ptr %params, i64 %begin, i64 %end)
  %d = atomicrmw add ptr %done, i64 1 release
  br label %next
exit:
  ret void
}

; the calling thread: open pass k, run parts of it, wait until all are done
define void @"sg_caller"(ptr %block, i64 %k) noinline optnone {
  %opened = add i64 %k, 1
  store atomic i64 %opened, ptr %block release, align 8
  %rec = call ptr @record(ptr %block, i64 %k)
  call void @claim(ptr %block, ptr %rec)
  %parts = call i64 @get(ptr %rec, i64 3)
  %done = call ptr @word(ptr %rec, i64 1)
  %all = call i1 @wait(ptr %block, ptr %done, i64 %parts)
  ret void
}

; a pool worker: each pass as it opens, until the last or the block is closed
define void @"sg_worker"(ptr %block) noinline optnone {
entry:
  %passes = call i64 @get(ptr %block, i64 2)
  br label %loop
loop:
  %k = phi i64 [0, %entry], [%k.next, %run]
  %more = icmp slt i64 %k, %passes
  br i1 %more, label %wait, label %exit
wait:
  %k1 = add i64 %k, 1
  %open = call i1 @wait(ptr %block, ptr %block, i64 %k1)
  br i1 %open, label %run, label %exit
run:
  %rec = call ptr @record(ptr %block, i64 %k)
  call void @claim(ptr %block, ptr %rec)
  %k.next = add i64 %k, 1
  br label %loop
exit:
  ret void
}

define void @"sg_close"(ptr %block) noinline optnone {
  %closed = getelementptr i64, ptr %block, i64 1
  store atomic i64 1, ptr %closed release, align 8
  ret void
}
"""

_runtime: dict = {}


def text() -> str:
    """The dispatch module's IR with its constants filled in."""
    constants = {"RECORD_HEAD": RECORD_HEAD, "HEAD": HEAD, "SPINS": SPINS,
                 "YIELD_UNTIL": SPINS + YIELDS}
    return re.sub(r"\b[A-Z][A-Z_]+\b", lambda m: str(constants[m.group(0)]), _IR)


def functions():
    """(caller, worker, close) as ctypes functions, compiled (or fetched) once per process."""
    if not _runtime:
        from . import jit
        _, addrs = jit.load(text(), ["sg_caller", "sg_worker", "sg_close"])
        _runtime["caller"] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
            addrs["sg_caller"])
        _runtime["worker"] = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addrs["sg_worker"])
        _runtime["close"] = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addrs["sg_close"])
        libc = ctypes.CDLL(None)
        _runtime["yield"] = ctypes.cast(libc.sched_yield, ctypes.c_void_p).value
        _runtime["nap"] = ctypes.cast(libc.nanosleep, ctypes.c_void_p).value
    return _runtime["caller"], _runtime["worker"], _runtime["close"]


class Table(NamedTuple):
    """A part's own pointer table: the call's, with some buffers elsewhere (the part's
    accumulators, initialised by ``init`` per call as the first part's are; or a tile group's
    chunk memory for that part)."""
    table: np.ndarray
    buffers: np.ndarray    # the buffers it moves...
    where: np.ndarray      # ...and their addresses
    init: object           # the stage's sg_init, or None (a tile group's chunk memory)


class Pass(NamedTuple):
    """One parallel pass as a call runs it (``Plan.steps``)."""
    k: int                 # its index among the passes (its block record)
    inits: list            # ctypes sg_init<k> of its stages (run on the call's table first)
    tables: list           # Table of each part that has its own
    folds: list            # (buffer, accumulator, kind) of the parts after the first, in order


class Serial(NamedTuple):
    """A stage or tile group the calling thread runs alone (too little work, or one outer
    iteration)."""
    inits: list
    run: object
    extent: int


class Plan(NamedTuple):
    """A native's threaded call for one (parallel_min, threads) and one state: the steps in
    order, the block every call starts from (copied per call: its counters start at 0 and
    a late worker may still read it), the pool jobs to submit, and the memory it names."""
    steps: list            # Pass or Serial
    block: np.ndarray
    helpers: int
    keep: list             # accumulators, tables, tile-group chunk memory
    views: dict            # buffer -> (address, array there): the folds' destinations


def plan_for(native, ptrs, least: int, nt: int) -> Plan:
    """The plan for ``ptrs``'s state: made once for the native's cached state, per call for
    a concurrent call's private one."""
    if ptrs is not native.cached[0]:
        return _plan(native, ptrs, least, nt)
    key = (least, nt)
    if key not in native.dispatch:
        native.dispatch[key] = _plan(native, ptrs, least, nt)
    return native.dispatch[key]


def _plan(native, ptrs, least: int, nt: int) -> Plan:
    from . import tile_run
    from .llvm import split_bounds
    functions()
    steps, records, keep = [], [], []
    tiles, addr = native.tiles, ptrs.ctypes.data
    for k, call in enumerate(native.stages):
        if k in tiles.calls:
            group = tiles.calls[k]
            inits = [native.stages[j].init for j in group.stages]
            if group.work < least or group.extent < 2:
                steps.append(Serial(inits, group.run, group.extent))
                continue
            bounds = split_bounds(group.extent, min(nt, group.extent), False)
            made = [tile_run.thread_table(native, ptrs, group, t) if group.local else (None, None)
                    for t in range(1, len(bounds) - 1)]
            keep += made               # (tables and their chunk memory)
            tables = [_table(table, [(buf, int(table[buf])) for buf, _ in group.local], None)
                      for table, _ in made if table is not None]
            records.append((_address(group.run), bounds,
                            [addr] + [addr if table is None else table.ctypes.data
                                      for table, _ in made]))
            steps.append(Pass(len(records) - 1, inits, tables, []))
        elif k in tiles.grouped:
            continue
        elif call.work < least or call.extent0 < 2:
            steps.append(Serial([call.init], call.stage, call.extent0))
        else:
            bounds = split_bounds(call.extent0, min(nt, call.extent0), call.vector_axis)
            tables, folds, addrs = [], [], [addr]
            for _ in range(1, len(bounds) - 1):   # reductions over the split axis: each part
                part = [(buf, _accumulator(native, buf, keep), kind)   # its own accumulators
                        for buf, kind in call.partial]
                folds += part
                if not part:
                    addrs.append(addr)
                    continue
                moved = [(buf, acc.ctypes.data) for buf, acc, _ in part]
                table = _table(np.empty_like(ptrs), moved, call.init)
                tables.append(table)
                addrs.append(table.table.ctypes.data)
            records.append((_address(call.stage), bounds, addrs))
            steps.append(Pass(len(records) - 1, [call.init], tables, folds))
    helpers = max([len(b) - 2 for _, b, _ in records] + [0])
    return Plan(steps, _block(records, native.params_addr), helpers, keep + steps, {})


def _table(table: np.ndarray, moved: list, init) -> Table:
    return Table(table, np.array([b for b, _ in moved], np.intp),
                 np.array([w for _, w in moved], np.int64), init)


def _address(fn) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value


def _accumulator(native, buf: int, keep: list) -> np.ndarray:
    size, dtype = native.partial_specs[buf]
    acc = np.empty(size, np.dtype(dtype))
    keep.append(acc)
    return acc


def _block(records: list, params_addr: int) -> np.ndarray:
    """The block (module docstring) for passes of ``records`` ((function address, bounds,
    part table addresses))."""
    words = HEAD + len(records) + sum(RECORD_HEAD + 2 * len(b) - 1 for _, b, _ in records)
    block = np.zeros(words, np.int64)
    block[2], block[3], block[4] = len(records), _runtime["yield"], params_addr
    block[5], block[6], block[7] = _runtime["nap"], 0, NAP_NS   # nanosleep, its timespec
    at = HEAD + len(records)
    for k, (fn, bounds, tables) in enumerate(records):
        parts = len(bounds) - 1
        block[HEAD + k] = at
        block[at + 2], block[at + 3] = fn, parts
        block[at + RECORD_HEAD: at + RECORD_HEAD + parts + 1] = bounds
        block[at + RECORD_HEAD + parts + 1: at + RECORD_HEAD + 2 * parts + 1] = tables
        at += RECORD_HEAD + 2 * parts + 1
    return block


def execute(native, plan: Plan, ptrs, pool):
    """Run a threaded call by ``plan`` with ``ptrs`` (its table, filled for this call);
    ``pool()``: the thread pool."""
    from .llvm import _COMBINE
    caller, worker, close = functions()
    block = plan.block.copy()
    block_addr = block.ctypes.data
    addr, params = ptrs.ctypes.data, native.params_addr
    passes, submitted = 0, False
    try:
        for step in plan.steps:
            for init in step.inits:
                init(addr, params)
            if type(step) is Serial:
                step.run(addr, params, 0, step.extent)
                continue
            for table, buffers, where, init in step.tables:
                np.copyto(table, ptrs)
                table[buffers] = where
                if init is not None:
                    init(table.ctypes.data, params)
            if not submitted and plan.helpers:
                submitted = _submit(pool, worker, block, plan.helpers)
            caller(block_addr, step.k)
            passes += 1
            for buf, acc, kind in step.folds:   # the other parts' partials, in part order
                mine = _partials(native, plan.views, buf, int(ptrs[buf]))
                _COMBINE[kind](mine, acc, out=mine)
    finally:
        if submitted and passes < int(block[2]):   # stopped early: waiting workers leave
            close(block_addr)


def _partials(native, views: dict, buf: int, addr: int) -> np.ndarray:
    """The call's own partial results of ``buf`` (at ``addr``) as an array: made once per
    address (a 0-d result's scratch cell, a workspace buffer; an output array's is new per
    call)."""
    view = views.get(buf)
    if view is None or view[0] != addr:
        from .llvm import _memory
        size, dtype = native.partial_specs[buf]
        view = views[buf] = (addr, _memory(addr, size, dtype))
    return view[1]


def _work(worker, block):
    worker(block.ctypes.data)   # (the job holds the block alive while a late worker reads it)


def _submit(pool, worker, block, helpers: int) -> bool:
    """One job per helper thread; whether any was taken (none at interpreter shutdown: the
    calling thread then runs every part)."""
    taken = 0
    try:
        executor = pool()
        for _ in range(helpers):
            executor.submit(_work, worker, block)
            taken += 1
    except RuntimeError:
        pass
    return taken > 0
