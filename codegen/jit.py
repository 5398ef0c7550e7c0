"""Optimise, compile and load LLVM modules for the host CPU, with an in-memory and on-disk
cache of machine code keyed by the hash of the (size-free) IR text.

Cache key: sha256 of the IR text + target triple + CPU name + CPU features + symgrad version
+ this module's format version. Entries live in ``$SYMGRAD_CACHE_DIR`` (default
``~/.cache/symgrad``) as ``<key>.o``, authenticated with a per-user secret and read only from a
directory and files this user alone can write (``codegen.diskcache`` has the rules). Files are
written to a temporary name and renamed (atomic on POSIX), so concurrent processes never read a
half-written entry; an entry that fails a check is ignored and recompiled.
``SYMGRAD_NO_CACHE=1`` disables the disk cache. Clear it with ``rm -rf ~/.cache/symgrad`` (or
the directory you set).

``SYMGRAD_PRECISE_MATH=1`` (read once per process) compiles transcendental functions as calls
to glibc's scalar libm (< 1 ulp except tanh 2.1; glibc's cos is 8 ulp off at its hardest huge
argument) instead of our own vectorised float64 sin/cos/tan/log1p/tanh/exp/expm1 (<= 1.7 ulp) and
libmvec's SIMD versions of the rest: slower, for users who want libm's results.
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
import time

import llvmlite.binding as llvm

from symgrad import settings

from . import diskcache
from .mathlib import CPUMath, finish_cpu_module

FORMAT = "symgrad-cpu-5"

_lock = threading.RLock()     # LLVM and the kernel table; see _fork_* below
_state: dict = {}
STATS = {"compiles": 0, "disk_hits": 0, "memory_hits": 0, "disk_writes": 0,
         "disk_rejects": 0, "compile_seconds": 0.0}


def _init():
    if _state:
        return _state
    with _lock:
        if _state:
            return _state
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        triple = llvm.get_process_triple()
        cpu = llvm.get_host_cpu_name()
        features = llvm.get_host_cpu_features().flatten()
        target = llvm.Target.from_triple(triple)
        tm = target.create_target_machine(cpu=cpu, features=features, opt=3,
                                          reloc="static", codemodel="jitdefault")
        math = CPUMath(features, precise=settings.read("SYMGRAD_PRECISE_MATH"))
        if math.libmvec is not None:
            llvm.load_library_permanently(math.libmvec._name)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        tm_light = target.create_target_machine(cpu=cpu, features=features, opt=0,
                                                reloc="static", codemodel="jitdefault")
        _state.update(tm=tm, tm_light=tm_light, math=math, engine=engine, triple=triple,
                      cpu=cpu, features=features, kernels={})
        return _state


def _fork_prepare():
    """Before a fork: wait for a compile in another thread to finish, so that the child never
    inherits LLVM's engine (or the kernel table) half updated, nor a lock no thread of its own
    will release."""
    _lock.acquire()


def _fork_parent():
    _lock.release()


def _fork_child():
    global _lock
    _lock = threading.RLock()


os.register_at_fork(before=_fork_prepare, after_in_parent=_fork_parent, after_in_child=_fork_child)


def target():
    return _init()


def cache_dir() -> str | None:
    if settings.read("SYMGRAD_NO_CACHE"):
        return None
    return settings.read("SYMGRAD_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "symgrad")


def finish_text(module) -> str:
    """The printed module with SIMD math variants attached (the text that is hashed)."""
    st = _init()
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


def machine_for(text: str):
    """The target machine that compiles ``text`` (see is_light)."""
    st = _init()
    return st["tm_light"] if is_light(text) else st["tm"]


def optimize(text: str):
    st = _init()
    mod = llvm.parse_assembly(text)
    mod.triple = st["triple"]
    mod.data_layout = str(st["tm"].target_data)
    mod.verify()
    if is_light(text):
        return mod
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_interleaving = True
    # Runtime unrolling doubles compile time and code size for no measured gain on top of the
    # vectoriser's own interleaving (GMM gradient: 6.3 s -> 2.9 s to compile).
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(st["tm"], pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def key_of(text: str) -> str:
    from symgrad import __version__
    st = _init()
    h = hashlib.sha256()
    for part in (FORMAT, __version__, st["triple"], st["cpu"], st["features"], text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def load(text: str, symbols: list[str], compile: bool = True) -> tuple[str, dict | None]:
    """Compile (or fetch) ``text`` and return ``(key, {symbol: address})``; with
    ``compile=False``, ``(key, None)`` instead of compiling what no cache holds.

    Symbols in the text start with ``sg_``; they are renamed to ``k<key>_`` so that every
    kernel can live in one execution engine.
    """
    st = _init()
    key = key_of(text)
    with _lock:
        hit = st["kernels"].get(key)
        if hit is not None:
            STATS["memory_hits"] += 1
            return key, hit
        prefix = f"k{key[:20]}_"
        st["math"].bind(text, llvm.add_symbol)   # the C functions it calls, before linking
        obj = _read_disk(key)
        if obj is None and not compile:
            return key, None
        if obj is None:
            t0 = time.perf_counter()
            mod = optimize(text.replace('@"sg_', f'@"{prefix}'))
            obj = machine_for(text).emit_object(mod)
            STATS["compiles"] += 1
            STATS["compile_seconds"] += time.perf_counter() - t0
            _write_disk(key, obj)
        else:
            STATS["disk_hits"] += 1
        st["engine"].add_object_file(llvm.ObjectFileRef.from_data(obj))
        st["engine"].finalize_object()
        addrs = {s: st["engine"].get_function_address(prefix + s[3:]) for s in symbols}
        if not all(addrs.values()):
            raise RuntimeError(f"internal: symbols missing from compiled kernel {key[:12]}")
        st["kernels"][key] = addrs
        return key, addrs


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
