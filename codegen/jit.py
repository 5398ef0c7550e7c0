"""Optimise, compile and load LLVM modules for the host CPU, with an in-memory and on-disk
cache of machine code keyed by the hash of the (size-free) IR text.

Cache key: BLAKE2b-256 of the IR text + target triple + CPU name + CPU features + symgrad
version + this module's format version. (A fresh process finds the key before any IR exists
through the signature's run plan, ``codegen.plans``.) Entries live in ``$SYMGRAD_CACHE_DIR`` (default
``~/.cache/symgrad``) as ``<key>.o``, authenticated with a per-user secret and read only from a
directory and files this user alone can write (``codegen.diskcache`` has the rules). Files are
written to a temporary name and renamed (atomic on POSIX), so concurrent processes never read a
half-written entry; an entry that fails a check is ignored and recompiled.
The host's triple, CPU name and features in the key are LLVM's, kept in the disk cache too
(``codegen.host_cpu``), and objects are loaded by ``codegen.linker`` (our own ELF loader,
else LLVM's MCJIT engine): a disk hit never imports ``llvmlite.binding``.
``SYMGRAD_NO_CACHE=1`` disables the disk cache. Clear it with ``rm -rf ~/.cache/symgrad`` (or
the directory you set).

A large module is compiled as several parts (``codegen.module_split``, a function of the text
alone) on up to as many threads as the process may use CPUs, each part in its own LLVM
context and target machine (see codegen.llvm_lock); the parts' objects are one cache entry
and are linked as one image. The machine code does not depend on the thread count.

``SYMGRAD_PRECISE_MATH=1`` (read once per process) compiles transcendental functions as calls
to glibc's scalar libm (< 1 ulp except tanh 2.1; glibc's cos is 8 ulp off at its hardest huge
argument) instead of our own vectorised float64 sin/cos/tan/log1p/tanh/exp/expm1 (<= 1.7 ulp) and
libmvec's SIMD versions of the rest: slower, for users who want libm's results.
"""
from __future__ import annotations

import os
import re
import threading
import time

from symgrad import gc_pause, settings

from . import diskcache, host_cpu, linker
from .diskcache import PARTS_MAGIC, pack, unpack    # (a module's parts: one cache entry)
from .llvm_lock import PrivateLLVM
from .mathlib import CPUMath, finish_cpu_module

FORMAT = "symgrad-cpu-13"   # (-13: the matmul library skips the IR pipeline, is_tile_kernel;
#                              -12: stage bodies read their parameters from their own first
#                              slot, shared between stages of the same text;
#                              -11: float32 maths in float32 arithmetic, f32single.SINGLE_F32;
#                              -10: exp's Chebyshev fit, tanh as E / (E + 2), the matmul
#                              library's lower flag)

# Threads that compile the parts of one module; None: the CPUs this process may use. Tests
# set a number here. Any value gives the same machine code.
COMPILE_THREADS: int | None = None

_lock = threading.RLock()     # LLVM, the linker and the kernel table; see _fork_* below
_state: dict = {}             # the host (target()), then LLVM's machines (_init())
STATS = {"compiles": 0, "disk_hits": 0, "memory_hits": 0, "disk_writes": 0,
         "disk_rejects": 0, "compile_seconds": 0.0, "loader_declines": 0, "plan_hits": 0,
         "plan_writes": 0}


def _binding():
    """llvmlite.binding, imported on first use: a disk hit needs neither it (22 ms of a fresh
    process) nor LLVM's engine."""
    import llvmlite.binding as llvm
    return llvm


def target() -> dict:
    """The host as LLVM compiles for it (triple, cpu, features), its math target and the
    kernel table: without importing llvmlite.binding when the disk cache knows the CPU."""
    if "math" in _state:
        return _state
    with _lock:
        if "math" not in _state:
            (triple, cpu, features), rejected = host_cpu.llvm_view(_disk_root())
            STATS["disk_rejects"] += rejected
            math = CPUMath(features, precise=settings.read("SYMGRAD_PRECISE_MATH"))
            _state.update(triple=triple, cpu=cpu, features=features, math=math, kernels={})
        return _state


def _init():
    """target() and LLVM's target machines (llvmlite.binding imported): what compiling needs."""
    st = target()
    if "tm" in st:
        return st
    with _lock:
        if "tm" in st:
            return st
        llvm = _binding()
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        # (LLVM's loop versioning on symbolic strides stays on: it vectorises a loop reading
        # a run-time stride only for stride == 1, so ADBench BA's column loops (a vmapped
        # p[:, 6]) run scalar; turning it off process-wide vectorised those with gathers but
        # made W3 Rosenbrock's gradient 1.8x slower, 0.57 -> 1.0 us: measured, reverted.)
        machine = llvm.Target.from_triple(st["triple"])
        tm = machine.create_target_machine(cpu=st["cpu"], features=st["features"], opt=3,
                                           reloc="static", codemodel="jitdefault")
        tm_light = machine.create_target_machine(cpu=st["cpu"], features=st["features"], opt=0,
                                                 reloc="static", codemodel="jitdefault")
        tm_wide = machine.create_target_machine(cpu=st["cpu"], features=st["features"], opt=1,
                                                reloc="static", codemodel="jitdefault")
        _private.install()
        st.update(tm_light=tm_light, tm_wide=tm_wide, tm=tm)
        return st


def _fork_prepare():
    """Before a fork: wait for a compile in another thread to finish, so that the child never
    inherits LLVM's engine (or the kernel table) half updated, nor a lock no thread of its own
    will release."""
    _lock.acquire()


def _fork_parent():
    _lock.release()


def _fork_child():
    global _lock, _machines_lock
    _lock = threading.RLock()
    _machines_lock = threading.Lock()   # (a thread of the parent may have held it)


os.register_at_fork(before=_fork_prepare, after_in_parent=_fork_parent, after_in_child=_fork_child)


def cache_dir() -> str | None:
    if settings.read("SYMGRAD_NO_CACHE"):
        return None
    return settings.read("SYMGRAD_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "symgrad")


def finish_text(module) -> str:
    """The printed module with SIMD math variants attached (the text that is hashed)."""
    st = target()
    return finish_cpu_module(str(module), module.math_calls, st["math"])


_DEFINE = re.compile(r"^define ", re.M)
_DEFINE_OPTNONE = re.compile(r"^define [^\n]*\boptnone\b", re.M)


def is_light(text: str) -> bool:
    """Does every function ``text`` defines carry ``optnone``? (``codegen.kernel`` marks a
    module so when all of its stages are small: scalar code.) Such a module skips the IR
    pipeline, whose module passes still cost time around optnone functions, and is compiled
    by the -O0 code generator: fast register allocation, no post-RA scheduling (straight-line
    scalar code of 1000 statements: 1.8 s of LLVM -> 0.2 s). Its functions were unoptimised
    already; only their register allocation is simpler. A function of the text alone, so the
    cache key (the text's hash) covers the choice."""
    defines = len(_DEFINE.findall(text))
    return defines > 0 and len(_DEFINE_OPTNONE.findall(text)) == defines


_DEFINE_LINE = re.compile(r"^define [^\n]*", re.M)


def is_prevectorised(text: str) -> bool:
    """Does ``text`` define an explicitly vectorised stage body (``codegen.wide_stage``, named
    ``*.wide``) and otherwise only ``optnone`` functions and exported ones (the stages'
    wrappers and ``sg_run``: loads and calls; a shared ``*.body`` is not one of those)? Such
    a module skips the IR pipeline, as a light one does: its vector code was written for the
    host's width already, and the loop vectoriser's analysis of a body of hundreds of ops,
    its scalar remainder copy and the scalar passes over both were most of its compile time.
    Its code generator is -O1's (codegen_level). A function of the text alone (the cache key
    covers the choice)."""
    wide = False
    for line in _DEFINE_LINE.findall(text):
        if '.wide"(' in line:
            wide = True
        elif _optimised_body(line):
            return False
    return wide


_TILE_KERNEL = re.compile(r'^define [^\n]*@"?\w*symgrad_mm_', re.M)


def is_tile_kernel(text: str) -> bool:
    """Is ``text`` a matmul library module (``codegen.matmul_kernel``: every function it
    defines a ``symgrad_mm_*`` kernel)? Its IR is written as the machine code should be:
    vectors of the host's width, the register tile's accumulators in phis, the panel copy
    unit-stride. The IR pipeline found nothing to gain in it: with and without it the two
    float64 kernels ran at the same speed (256 x 256 and 512 x 512 products and their
    gradients, plain and transposed b), while it cost 190 of their 290 ms of CPU to compile
    (benchmarks/RESULTS.md). Its code generator stays -O3's. A function of the text alone
    (the cache key covers the choice)."""
    defines = len(_DEFINE.findall(text))
    return defines > 0 and len(_TILE_KERNEL.findall(text)) == defines


def _optimised_body(define_line: str) -> bool:
    """Is this a function the IR pipeline must see: an internal one, or a stage body
    several stages share (exported by codegen.kernel, named ``*.body``), not optnone?"""
    return " optnone" not in define_line and (define_line.startswith("define internal ")
                                              or '.body"(' in define_line)


def codegen_level(text: str) -> int:
    """The code generator's optimisation level for ``text``: 0 for a light module (is_light),
    1 for a prevectorised one, else 3. A wide stage's body is one basic block per step whose
    values live across calls to SIMD maths (every vector register caller-saved): -O1 skips
    the post-RA scheduler and some of -O3's machine passes, and its code is as fast
    (straight-line code of 1000 statements on a vector: the gradient's code generation 0.49
    -> 0.39 s, its call 5.0 -> 4.9 ms). -O0 takes 0.19 s, but its fast register allocation
    gives every spilled value a stack slot of its own: its calls were 11-15% slower. Every
    level gives the same results to the bit: the IR fixes every IEEE operation and its
    order, and carries no fast-math flag a combine could use."""
    if is_light(text):
        return 0
    return 1 if is_prevectorised(text) else 3


def machine_for(text: str):
    """The target machine that compiles ``text`` (see codegen_level)."""
    st = _init()
    return st[_MACHINES[codegen_level(text)]]


_MACHINES = {0: "tm_light", 1: "tm_wide", 3: "tm"}   # level -> _init's target machine


def optimize(text: str):
    """The module after the -O3 pipeline, in LLVM's global context (for display and for a
    module compiled whole on the calling thread)."""
    return _optimize(text, _init()["tm"])


def _optimize(text: str, tm, context=None):
    st = _init()
    llvm = _binding()
    mod = llvm.parse_assembly(text, context)
    mod.triple = st["triple"]
    mod.data_layout = str(tm.target_data)
    mod.verify()
    if is_light(text) or is_prevectorised(text) or is_tile_kernel(text):
        return mod
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_interleaving = True
    # Runtime unrolling doubles compile time and code size for no measured gain on top of the
    # vectoriser's own interleaving (GMM gradient: 6.3 s -> 2.9 s to compile).
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    mpm.run(mod, pb)
    for obj in (mpm, pb, pto):    # now, while this thread may touch LLVM (llvm_lock)
        obj.close()
    return mod


def key_of(text: str) -> str:
    from symgrad import __version__
    st = target()
    h = diskcache.hasher()
    for part in (FORMAT, __version__, st["triple"], st["cpu"], st["features"], text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def load(text: str, symbols: list[str], compile: bool = True) -> tuple[str, dict | None]:
    """Compile (or fetch) ``text`` and return ``(key, {symbol: address})``; with
    ``compile=False``, ``(key, None)`` instead of compiling what no cache holds.

    Symbols in the text start with ``sg_``; they are renamed to ``k<key>_`` so that every
    kernel can live in one namespace. A library the text declares and the math target
    holds pending (``CPUMath.add_library``: the copy loop, the matmul kernels, the far and
    out-of-line maths), and any the library declares in turn, is linked first: compiled in
    the same pool of threads as the text's own parts, or fetched from the disk cache under
    its own key. Machine code is loaded by codegen.elf_load (no LLVM at all on a disk hit),
    else, where that declines an object, by LLVM's MCJIT engine; the symbols of either
    resolve in both.
    """
    st = target()
    key = key_of(text)
    with _lock:
        hit = st["kernels"].get(key)
        if hit is not None:
            STATS["memory_hits"] += 1
            return key, hit
        libraries = st["math"].pending_in(text)       # each after the libraries it calls
        for t in [lib.text for lib in libraries] + [text]:
            st["math"].bind(t)      # the C functions it calls, before linking
        module = _Job(text, symbols, key=key)
        if module.obj is None and not compile:
            return key, None
        jobs = [_Job(lib.text, sorted(lib.public.values()), lib.public) for lib in libraries]
        jobs.append(module)
        todo = [job for job in jobs if job.obj is None]
        if todo:
            t0 = time.perf_counter()
            for job, objs in zip(todo, compile_many([job.renamed() for job in todo])):
                job.obj = pack(objs)
                _write_disk(job.key, job.obj)
            STATS["compiles"] += len(todo)
            STATS["compile_seconds"] += time.perf_counter() - t0
        STATS["disk_hits"] += len(jobs) - len(todo)
        for job in jobs:
            addrs = job.link()
            st["kernels"][job.key] = addrs
            for public, local in job.public.items():
                st["math"].linked(public, addrs[local])
            if job.public:
                from . import plans
                plans.note_library(plans.record(job.text, job.key, job.symbols, job.public))
        return key, addrs


class _Job:
    """One text jit.load links: its key, its machine code (read from the disk here, else
    compiled by jit.load), and for a library {public name: its sg_ symbol} (each bound to
    its function once linked)."""

    def __init__(self, text: str, symbols: list[str], public: dict | None = None,
                 key: str | None = None):
        self.text, self.symbols, self.public = text, symbols, public or {}
        self.key = key or key_of(text)
        self.prefix = f"k{self.key[:20]}_"
        self.obj = _read_disk(self.key)

    def renamed(self) -> str:
        return self.text.replace('@"sg_', f'@"{self.prefix}')

    def link(self) -> dict:
        return link_object(self.key, self.symbols, self.obj)


def link_object(key: str, symbols: list[str], obj: bytes) -> dict:
    """Link the cache entry ``obj`` of ``key``: ``{symbol: address}`` of its sg_ symbols
    (renamed ``k<key>_`` in the machine code)."""
    prefix = f"k{key[:20]}_"
    names = [prefix + s[3:] for s in symbols]
    found, declined = linker.link(unpack(obj), names, target()["math"], lambda: _init()["tm"])
    STATS["loader_declines"] += declined
    addrs = dict(zip(symbols, found))
    if not all(addrs.values()):
        raise RuntimeError(f"internal: symbols missing from compiled kernel {key[:12]}")
    return addrs


def compile_many(texts: list[str]) -> list[list[bytes]]:
    """compile_objects of each text, all their parts in one pool of threads."""
    _init()        # (here: the helper threads must find LLVM initialised, not wait for _lock)
    from . import module_split
    if len(texts) == 1:
        return [compile_objects(texts[0])]
    split = [module_split.split(t) for t in texts]
    flat = [p for parts in split for p in parts]
    try:
        objs = _compile_parts(flat, min(len(flat), compile_threads()))
    except Exception as part_error:
        for t in texts:
            compile_objects(t)     # raises the error of the text that fails on its own
        raise RuntimeError("internal: a part failed to compile although every text compiles "
                           "on its own") from part_error
    out, k = [], 0
    for parts in split:
        out.append(objs[k:k + len(parts)])
        k += len(parts)
    return out


def compile_objects(text: str) -> list[bytes]:
    """Machine code for ``text``: one object, or one per part of a large module
    (``module_split``), the parts compiled on up to ``compile_threads()`` threads. A part
    that fails makes the whole text compile on this thread, which raises the error a whole
    module gives (a parse or verifier message with its line in ``text``)."""
    from . import module_split
    _init()
    parts = module_split.split(text)
    if len(parts) == 1:
        return [_compile_whole(text)]
    try:
        return _compile_parts(parts, min(len(parts), compile_threads()))
    except Exception as part_error:
        _compile_whole(text)      # raises its error
        raise RuntimeError("internal: a part of a split module failed to compile although "
                           "the whole module compiles") from part_error


def _compile_whole(text: str) -> bytes:
    """``text`` as one object, on this thread (its machine chosen once: codegen_level reads
    the whole text)."""
    tm = machine_for(text)
    return _emit(_optimize(text, tm), tm)


def compile_threads() -> int:
    if COMPILE_THREADS is not None:
        return COMPILE_THREADS
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


def _emit(mod, tm) -> bytes:
    return tm.emit_object(mod)


def _compile_private(text: str) -> bytes:
    """One part, in an LLVM context of its own and a target machine no other thread is
    using: what lets threads compile at the same time (see codegen.llvm_lock)."""
    llvm = _binding()
    opt = codegen_level(text)
    with _private.calls():
        tm = _take_machine(opt)
        context = llvm.create_context()
        mod = None
        try:
            mod = _optimize(text, tm, context)
            obj = _emit(mod, tm)
        except BaseException:
            tm.close()
            raise
        finally:
            if mod is not None:
                mod.close()
            context.close()
        _give_back(opt, tm)
        return obj


# Target machines the parts' threads compile with, free for the next part: one is made for
# each thread that needs one at once and then reused (creating one costs ~0.7 ms a part).
# A machine is used by one thread at a time; its code for a text is the same as a new one's.
_machines: dict[int, list] = {}
_machines_lock = threading.Lock()


def _take_machine(opt: int):
    with _machines_lock:
        free = _machines.setdefault(opt, [])
        if free:
            return free.pop()
    st = _init()
    return _binding().Target.from_triple(st["triple"]).create_target_machine(
        cpu=st["cpu"], features=st["features"], opt=opt, reloc="static",
        codemodel="jitdefault")


def _give_back(opt: int, tm) -> None:
    with _machines_lock:
        _machines[opt].append(tm)


def _compile_parts(parts: list[str], threads: int) -> list[bytes]:
    """The parts' objects in part order; ``threads - 1`` helper threads and this one take
    parts costliest first (a library and a module's parts share the pool: the longest one
    starts at once, the short ones fill the other threads). The first failing part (in part
    order) raises."""
    from . import module_split
    results: list = [None] * len(parts)
    failures: dict[int, BaseException] = {}
    queue = iter(sorted(range(len(parts)), key=lambda k: (-module_split.cost(parts[k]), k)))
    take = threading.Lock()

    def work():
        while True:
            with take:
                k = next(queue, None)
            if k is None:
                return
            try:
                results[k] = _compile_private(parts[k])
            except Exception as e:     # re-raised on the calling thread below
                failures[k] = e

    helpers = [threading.Thread(target=work, name=f"symgrad-llvm{t}", daemon=True)
               for t in range(1, threads)]
    # No cycle collection while threads call LLVM without llvmlite's lock: a collection run
    # inside that window could finalise another owner's llvmlite object unlocked (reference
    # counting frees only what a thread itself drops: its own part's objects). gc_pause's
    # pause, shared with concurrent compiles: none of them can end it while these run.
    with gc_pause.paused():
        for t in helpers:
            t.start()
        work()
        for t in helpers:
            t.join()
    if failures:
        raise failures[min(failures)]
    return results


_private = PrivateLLVM()     # see codegen.llvm_lock


def _disk_root() -> str | None:
    """The cache directory, if the disk cache is on and the directory is safe to use."""
    root = cache_dir()
    return root if root is not None and diskcache.usable_root(root) else None


def _read_disk(key: str) -> bytes | None:
    root = _disk_root()
    if root is None:
        return None
    obj, rejected = diskcache.read(root, key)
    if rejected:
        STATS["disk_rejects"] += 1      # corrupt, truncated, foreign or unsafe: recompile
    return obj


def _write_disk(key: str, obj: bytes):
    root = _disk_root()
    if root is not None and diskcache.write(root, key, obj):
        STATS["disk_writes"] += 1


def assembly(text: str) -> str:
    return machine_for(text).emit_assembly(optimize(text))
