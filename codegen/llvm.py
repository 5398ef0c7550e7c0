"""The CPU back end (``target="cpu"``): ``BACKEND`` (the ``symgrad.backends`` interface),
``llvm_ir``, ``assembly`` and ``stats``.

Per argument signature a :class:`Native` is prepared once (``BACKEND.prepare``): the graph is scheduled (``codegen.schedule``), lowered to LLVM IR with every size as a
run-time parameter (``codegen.kernel``), and compiled or fetched from the machine-code cache
(``codegen.jit``), keyed by the IR text, so a new array size reuses the machine code. A call
then only fills a pointer table, allocates the outputs and calls the kernel through ctypes,
which releases the GIL. Large stages are split across a thread pool.

Environment (validated by ``symgrad.settings``; read when a kernel is first prepared or the
back end initialises):

* ``SYMGRAD_CACHE_DIR``: machine-code cache directory (default ``~/.cache/symgrad``; delete it
  to clear the cache); ``SYMGRAD_NO_CACHE=1`` disables the disk cache;
* ``SYMGRAD_NUM_THREADS``: threads for large stages (default: the CPUs this process may use);
* ``SYMGRAD_PARALLEL_MIN``: loop iterations below which a stage stays on the calling thread
  (default 65536);
* ``SYMGRAD_PRECISE_MATH=1``: scalar glibc libm (< 1 ulp) instead of SIMD libmvec (see jit).
"""
from __future__ import annotations

import ctypes
import operator
import os
import threading
import weakref
from typing import NamedTuple

import numpy as np

from symgrad.backends import Backend
from symgrad.guards import kernel_error
from symgrad.ir import Graph
from symgrad.runtime import top_level, unflatten_tree, write_out

from symgrad import settings

from . import dispatch, jit, plans, tile_run
from .call_plan import call_plan
from .workspace import Workspace, workspace_bytes

# Work (loop iterations) below which a stage runs on the calling thread: a thread hand-off
# costs tens of microseconds, and parallel code collapses when the other core is busy. None:
# SYMGRAD_PARALLEL_MIN (read when used, so that a bad value is an error at the first call
# that names the variable, not a failed import); tests may set a number here.
PARALLEL_MIN: int | None = None

_RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_STAGE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def _signed_zero_extremum(minimum: bool):
    """IEEE minimum or maximum of two partial results, in place: np.minimum/np.maximum return
    either operand for -0 vs +0, while the kernel's own reductions order -0 below +0
    (loop_body.ordered_key), so the sign of a zero result would depend on the thread split."""
    extremum = np.minimum if minimum else np.maximum

    def combine(mine, other, out):
        zeros = None
        if mine.dtype.kind == "f":
            both_zero = (mine == 0) & (other == 0)
            if both_zero.any():
                sign = (np.signbit(mine) | np.signbit(other) if minimum
                        else np.signbit(mine) & np.signbit(other))
                zeros = both_zero, np.where(sign, -0.0, 0.0).astype(mine.dtype)
        extremum(mine, other, out=out)
        if zeros is not None:
            np.copyto(out, zeros[1], where=zeros[0])
        return out
    return combine


_COMBINE = {"add": np.add, "mul": np.multiply, "max": _signed_zero_extremum(False),
            "min": _signed_zero_extremum(True)}
_pool = None
_pool_lock = threading.Lock()


def parallel_min() -> int:
    return settings.read("SYMGRAD_PARALLEL_MIN") if PARALLEL_MIN is None else PARALLEL_MIN


def num_threads() -> int:
    """Threads for large stages: ``SYMGRAD_NUM_THREADS``, else the CPUs this process may use."""
    env = settings.read("SYMGRAD_NUM_THREADS")
    if env is not None:
        return env
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


def _executor():
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                # imported here: concurrent.futures (and the logging it imports) costs a few ms
                # of every process's first call, and small kernels never need a pool
                from concurrent.futures import ThreadPoolExecutor
                _pool = ThreadPoolExecutor(max(1, num_threads() - 1), thread_name_prefix="symgrad")
    return _pool


def stats() -> dict:
    """Counters: ``compiles`` (LLVM runs), ``memory_hits``, ``disk_hits``, ``disk_writes``,
    ``disk_rejects`` (corrupt/foreign cache files), ``compile_seconds``."""
    return dict(jit.STATS)


class CpuProgram:
    """A graph scheduled and lowered: the IR text and its run-time parameters."""

    def __init__(self, graph: Graph):
        # (imported here: a signature whose run plan is on disk needs neither the scheduler
        # nor the IR builders, llvmlite.ir among them: ~10 ms of a fresh process)
        from .kernel import KernelModule
        from .schedule import Schedule

        self.schedule = Schedule(graph)
        self.graph = self.schedule.graph   # with regions expanded, as the schedule saw it
        self.km = KernelModule(self.schedule, jit.target()["math"], name=graph.name)
        self.text = jit.finish_text(self.km.module)
        self.symbols = ["sg_run"] + [f"sg_{kind}{k}" for k in range(len(self.schedule.stages))
                                     for kind in ("stage", "init")] + tile_run.symbols(self.schedule)


class StageCall(NamedTuple):
    """One stage as the run time calls it; the loop shape is the one after axis merging."""
    stage: object          # ctypes sg_stage<k>(ptrs, params, begin, end)
    init: object           # ctypes sg_init<k>(ptrs, params)
    extent0: int           # outermost extent: what the threads split
    work: int              # iterations if splittable, else 0 (a serial stage)
    partial: list          # (buffer, combine kind) of reductions over the split axis
    vector_axis: bool      # the split axis is the vectorised (innermost) one


class OutputSpec(NamedTuple):
    """Where a graph output's values come from."""
    buffer: int
    dtype: np.dtype
    shape: tuple
    slot: int | None       # scratch cell of a 0-d output; None: an array the kernel writes


class Native:
    """Everything a call needs for one signature, prepared once. ``guard_flags``: how many
    bool guard flags end the graph's outputs (``symgrad.guards``; its ``out_tree`` is then
    ``(result tree, (flag, ...))``), which the call plans check (``codegen.call_plan``)."""

    def __init__(self, graph: Graph, guard_flags: int = 0):
        self._program = None
        plan_key = plans.plan_key(graph, f"guard_flags={guard_flags}")
        found = plans.find(plan_key)       # (plan, addresses) from the disk cache, or None
        if found is None:
            prog = self._program = CpuProgram(graph)
            plan = plans.run_plan(prog)
            workspace = Workspace(workspace_bytes(plan["tmp"]))   # touched while LLVM runs
            key, addrs = jit.load(prog.text, prog.symbols)
            plans.write(plan_key, prog.text, key, prog.symbols, plan)
        else:
            plan, addrs = found
            workspace = Workspace(workspace_bytes(plan["tmp"]))
        self.graph = graph
        self.key = plan["key"] if found is not None else key
        self.tmp = plan["tmp"]
        self.nbuf = plan["nbuf"]
        self.partial_specs = plan["partial_specs"]
        self.run = _RUN(addrs["sg_run"])
        self.stages = [StageCall(_STAGE(addrs[f"sg_stage{k}"]), _RUN(addrs[f"sg_init{k}"]), *info)
                       for k, info in enumerate(plan["stages"])]
        self.tiles = tile_run.Tiles(plan["tiles"], addrs, _STAGE)   # the tile groups' calls
        self.work = plan["work"]
        self.params = np.array(plan["params"] or [0], dtype=np.int64)
        self.params_addr = self.params.ctypes.data
        self.slot = plan["slot"]
        self.flag = plan["flag"]
        self.consts = plan["consts"]
        self.array_args = [(i, buf, graph.inputs[i], np.dtype(dt)) for i, buf, dt in plan["array_args"]]
        self.scalar_args = [(i, slot, np.dtype(dt)) for i, slot, dt in plan["scalar_args"]]
        self.outs: list[OutputSpec | None] = [   # per graph output; None: a repeat
            None if spec is None else OutputSpec(spec[0], np.dtype(spec[1]), spec[2], spec[3])
            for spec in plan["outs"]]
        self.array_outs = [(t, spec.buffer, spec.shape, spec.dtype) for t, spec in enumerate(self.outs)
                           if spec is not None and spec.slot is None]
        self.repeats = plan["repeats"]
        least, nt = parallel_min(), num_threads()   # both read: a bad value fails here
        self.parallel = self.work >= least and nt > 1
        self.top = top_level(graph.out_tree)
        self.guard_flags = guard_flags
        # the result without the guard flags: its tree, and the outputs holding each flag
        self.result_tree = graph.out_tree[0] if guard_flags else graph.out_tree
        first = dict(self.repeats)
        self.guard_outputs = [first.get(t, t) for t in range(len(self.outs) - guard_flags,
                                                              len(self.outs))]
        self.out_checks = [(o.shape, np.dtype(o.dtype),
                            spec is not None and spec.slot is None)   # an array the kernel writes
                           for o, spec in zip(graph.outputs, self.outs)]
        self.pick = _picker(graph.out_tree)              # the full path's result
        self.pick_result = _picker(self.result_tree)     # the plans': without guard flags
        self.lock = threading.Lock()
        self.cached = self._state(workspace.memory())
        self.plans: dict = {}     # argument kinds -> the hot path's plan (codegen.call_plan)
        self.dispatch: dict = {}  # (parallel_min, threads) -> the threaded call's plan
        _natives.add(self)

    @property
    def program(self) -> CpuProgram:
        """The scheduled and lowered graph (built here when the run plan came from disk)."""
        if self._program is None:
            self._program = CpuProgram(self.graph)
        return self._program

    def plan(self, kinds: tuple):
        if kinds not in self.plans:
            self.plans[kinds] = call_plan(self, kinds, holding_gil=self.work < parallel_min())
        return self.plans[kinds]

    def _state(self, work: np.ndarray | None = None):
        """Pointer table, scratch and workspace memory (one set per concurrent call; ``work``:
        the workspace, else a new one), with the typed scratch cells a call reads and writes
        prepared once."""
        nbuf = max(1, self.nbuf)
        table = (ctypes.c_int64 * nbuf)()      # item assignment: ~3x cheaper than NumPy's
        ptrs = np.frombuffer(table, dtype=np.int64)
        # 8-byte cells; a ctypes array because its item access is the cheapest from Python
        cells = (ctypes.c_double * max(1, len(self.slot)))()
        scratch = np.frombuffer(cells, dtype=np.float64)
        for buf, k in self.slot.items():
            ptrs[buf] = scratch.ctypes.data + 8 * k
        if work is None:
            work = Workspace(workspace_bytes(self.tmp), touch=False).memory()
        base = (work.ctypes.data + 63) // 64 * 64
        for buf, size in self.tmp:
            ptrs[buf] = base
            base += (size + 63) // 64 * 64
        for buf, arr in self.consts:
            ptrs[buf] = arr.ctypes.data
        def cell(dt):
            return cells if dt == np.float64 else scratch.view(dt)
        scalar_in = [(i, cell(dt), k * (8 // dt.itemsize)) for i, k, dt in self.scalar_args]
        scalar_out = [(t, cell(spec.dtype), spec.slot * (8 // spec.dtype.itemsize))
                      for t, spec in enumerate(self.outs) if spec is not None and spec.slot is not None]
        return ptrs, scratch, (work, cells, table), ptrs.ctypes.data, scalar_in, scalar_out

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, values, out=None):
        if self.lock.acquire(blocking=False):
            try:
                return self._call(self.cached, values, out)
            finally:
                self.lock.release()
        return self._call(self._state(), values, out)   # a concurrent call: private memory

    def _call(self, state, values, out):
        ptrs, scratch, (_, _, table), ptrs_addr, scalar_in, scalar_out = state
        keep = None
        for i, buf, node, dt in self.array_args:
            a = values[i]
            if type(a) is not np.ndarray or a.dtype != dt or a.shape != node.shape:
                a = self._check_array(i, a, node, dt)
            try:       # succeeds exactly for writeable C-contiguous arrays: the common case
                table[buf] = _addressof(_from_buffer(a))
                continue
            except (TypeError, ValueError, BufferError):
                pass
            if not a.flags.c_contiguous:
                a = np.ascontiguousarray(a)
                keep = (keep or []) + [a]
            table[buf] = a.ctypes.data
        for i, cell, k in scalar_in:
            cell[k] = values[i]
        # a dict/list/namedtuple out= (a pytree result) is filled from the result afterwards
        structured = out is not None and (
            type(self.graph.out_tree) not in (int, tuple) or
            (type(out) is not tuple and not isinstance(out, np.ndarray)))
        flat_out = self._out_arrays(out, values) if out is not None and not structured else None
        results = [None] * len(self.outs)
        for t, buf, shape, dt in self.array_outs:
            arr = flat_out[t] if flat_out is not None and flat_out[t] is not None \
                else np.empty(shape, dt)
            table[buf] = _address(arr)
            results[t] = arr
        if self.flag is not None:
            scratch[self.flag] = 0
        if self.parallel:
            self._execute(ptrs)
        else:
            self.run(ptrs_addr, self.params_addr)
        if self.flag is not None and scratch.view(np.int64)[self.flag]:
            raise kernel_error(self.graph.name, int(scratch.view(np.int64)[self.flag]))
        for t, cell, k in scalar_out:
            results[t] = cell[k]    # a Python float from the ctypes cells, else a NumPy scalar
        for t, first in self.repeats:
            results[t] = _copy(results[first])
        del keep
        tree = self.graph.out_tree
        if structured:
            return write_out(self.pick(results), out)
        if out is not None:
            if all(given is not None for t, given in zip(self.top, flat_out) if type(t) is int) \
                    and all(type(t) is int for t in self.top):
                return out                      # every output was written in place
            return _write_back(results, tree, out, flat_out)
        return self.pick(results)

    def _check_array(self, i, a, node, dt):
        if isinstance(a, np.ndarray) and a.shape == node.shape:
            if a.dtype == dt:
                return a   # an ndarray subclass: its memory is still a plain strided array
            if a.dtype.newbyteorder("=") == dt:   # the other byte order (a big-endian file's
                return a.astype(dt)               # data): the kernel reads a native copy
        raise TypeError(f"{self.graph.name}: argument {self.graph.params[i]!r} must be a "
                        f"{node.dtype} array of shape {node.shape}, got "
                        f"{getattr(a, 'dtype', type(a).__name__)} {np.shape(a)}")

    def _out_arrays(self, out, values):
        """Caller arrays the kernel may write directly (C-contiguous, exact type, no overlap
        with an argument); ``None`` entries get fresh arrays and are copied at the end."""
        outs = out if type(out) is tuple else (out,)
        top = self.top
        if len(outs) != len(top):
            raise ValueError(f"out= needs {len(top)} arrays, got {len(outs)}")
        flat = [None] * len(self.outs)
        # only array arguments can overlap an output while the kernel runs (0-d arguments are
        # read into scalar cells first); their address ranges were noted by the caller, and
        # comparing ranges is ~20x cheaper than np.may_share_memory per pair
        ranges = None
        for t, o in zip(top, outs):
            if type(t) is not int:
                continue
            if not isinstance(o, np.ndarray):
                raise ValueError(f"out= entries must be NumPy arrays, got {type(o).__name__}")
            shape, dt, direct = self.out_checks[t]
            if o.shape != shape or o.dtype != dt:   # (dtype.name is slow)
                raise ValueError(f"out= array must have shape {shape} and dtype {dt}, got "
                                 f"{o.shape} {o.dtype}")
            if not direct or not o.flags.c_contiguous or not o.flags.writeable:
                continue
            if ranges is None:
                ranges = [_span(v) for v in values if isinstance(v, np.ndarray) and v.ndim]
            lo, hi = _span(o)
            if any(lo < b and a < hi for a, b in ranges):
                continue
            flat[t] = o
        return flat

    def _execute(self, ptrs):
        least, nt = parallel_min(), num_threads()
        if self.work < least or nt == 1:
            self.run(ptrs.ctypes.data, self.params_addr)
            return
        dispatch.execute(self, dispatch.plan_for(self, ptrs, least, nt), ptrs, _executor)


def _picker(tree):
    """``pick(results)``: ``tree`` with each output index replaced by its result."""
    flat_tuple = type(tree) is tuple and len(tree) > 1 and all(isinstance(t, int) for t in tree)
    return (operator.itemgetter(tree) if isinstance(tree, int) else
            operator.itemgetter(*tree) if flat_tuple else
            (lambda results: unflatten_tree(tree, results)))


# Thread boundaries on a vectorised axis fall on multiples of this many iterations: more than
# any x86 vector width times LLVM's interleave (8 float64 lanes x 4, 16 float32 lanes x 4).
SPLIT_ALIGN = 128


def split_bounds(extent: int, parts: int, vector_axis: bool) -> list[int]:
    """``parts + 1`` increasing bounds splitting ``range(extent)`` for the threads.

    On the vectorised (innermost) axis every inner bound is a multiple of SPLIT_ALIGN, so each
    thread's range starts where a vector iteration of the whole range would, and every element
    is computed by the same SIMD or scalar code as on one thread: a SIMD math function may
    differ from the scalar one in the last bit, and results must not depend on the number of
    threads. Fewer parts are returned where the extent is too short to give each one a block."""
    if not vector_axis:
        return [extent * t // parts for t in range(parts + 1)]
    blocks = extent // SPLIT_ALIGN
    parts = max(1, min(parts, blocks))
    inner = [blocks * t // parts * SPLIT_ALIGN for t in range(1, parts)]
    return [0] + inner + [extent]


_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _address(a: np.ndarray) -> int:
    """The data address of a C-contiguous array; the buffer protocol is ~4x cheaper than
    ``a.ctypes.data`` but needs a writeable, non-empty array."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


def _memory(addr: int, size: int, dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    return np.frombuffer((ctypes.c_char * (size * dt.itemsize)).from_address(addr), dt)


def _copy(v):
    return np.array(v) if isinstance(v, np.ndarray) else v


def _span(a: np.ndarray) -> tuple[int, int]:
    """The byte range an array's elements can touch (conservative for strided views)."""
    if a.flags.c_contiguous:
        lo = _address(a)
        return lo, lo + a.nbytes
    return _byte_bounds(a)


_byte_bounds = getattr(np, "byte_bounds", None) or np.lib.array_utils.byte_bounds


def _write_back(results, tree, out, flat_out):
    value = unflatten_tree(tree, results)
    # arrays the kernel wrote in place are already there; the rest are copied
    outs = out if isinstance(out, tuple) else (out,)
    vals = value if isinstance(tree, tuple) else (value,)
    for o, v in zip(outs, vals):
        if v is not o:
            write_out(v, o)
    return out


_natives: "weakref.WeakSet[Native]" = weakref.WeakSet()   # for their locks after a fork


def _after_fork_in_child():
    """A forked child has only the thread that forked: the pool's workers and any thread that
    held one of our locks are gone. Without this, the first large call in the child waited
    forever for workers that do not exist (multiprocessing's "fork" pools, Dask, joblib)."""
    global _pool, _pool_lock
    _pool = None                       # the child starts its own workers when it needs them
    _pool_lock = threading.Lock()
    for native in list(_natives):
        native.lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def llvm_ir(signature, optimized: bool = False) -> str:
    """The kernel's LLVM IR (sizes are run-time parameters), optionally after ``-O3``, with
    the user's lines of each stage as comments (display only: see ``codegen.source_map``)."""
    from .source_map import annotate_llvm
    prog = CpuProgram(signature.graph)
    text = str(jit.optimize(prog.text)) if optimized else prog.text
    return annotate_llvm(text, prog.schedule)


def assembly(signature) -> str:
    return jit.assembly(CpuProgram(signature.graph).text)


class CpuBackend(Backend):
    """``target="cpu"``: a :class:`Native` per signature, called with the values."""
    name = "cpu"
    views = {"llvm_ir": llvm_ir, "asm": assembly}

    def prepare(self, signature) -> Native:
        return Native(signature.graph, signature.guard_flags)

    def run(self, prepared: Native, values, out):
        return prepared(values, out)

    def call_plan(self, prepared: Native, kinds: tuple):
        return prepared.plan(kinds)


BACKEND = CpuBackend()
