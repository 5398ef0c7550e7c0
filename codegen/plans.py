"""Run plans on disk: a fresh process's disk-cache hit without a schedule or any LLVM IR.

A kernel's machine code is keyed by its IR text (``codegen.jit.key_of``), which costs a
fresh process the scheduler, the IR builders (``llvmlite.ir``, the emitters) and the
printing before it can even look. Beside the machine code, each signature's *run plan* is
kept under a key of the graph itself (:func:`plan_key`, ``codegen.program_key``): the
text's key, the keys of the libraries it links (each after those it calls), the C math
functions each calls, and what ``codegen.llvm.Native`` needs (:func:`run_plan`:
parameters, buffers, stages). A plan is looked up before any IR exists; the machine code,
found by the text's key as always, still serves every graph that lowers to that text
(another size, another constant). An entry ``<key>.plan`` is authenticated like the
machine code (``codegen.diskcache``); one that fails a check, whose machine code is gone,
or whose recorded code generator settings differ from this process's, is a miss: the
signature takes the IR path and its plan is written again.
"""
from __future__ import annotations

import pickle

import numpy as np

from . import diskcache, jit, program_key
from .mathlib import declared, private_declared

PLAN_FORMAT = "symgrad-plan-1"   # (in the key of a run plan, ``<key>.plan``: see plan_key)

# public name -> the record of the library defining it, for each library jit.load (or a
# plan) linked in this process: a plan lists the ones its kernel needs, whichever kernel
# linked them first
_libraries: dict[str, dict] = {}


def record(text: str, key: str, symbols: list, public: dict | None = None) -> dict:
    """What linking ``text``'s machine code (cache key ``key``) takes without the text:
    its symbols, for a library its public names, the C math functions (``cnames``) and
    every function (``declared``) it declares."""
    return {"key": key, "symbols": list(symbols), "public": dict(public or {}),
            "cnames": private_declared(text), "declared": declared(text)}


def note_library(entry: dict) -> None:
    """A library (its :func:`record`) is linked in this process (jit.load calls this)."""
    _libraries.update((name, entry) for name in entry["public"])


def plan_key(graph, extra: str = "") -> str | None:
    """The key of ``graph``'s run plan (``extra``: what else the back end's preparation
    takes), or None: no disk cache, or a graph program_key cannot encode."""
    if jit._disk_root() is None:
        return None
    import llvmlite

    from symgrad import __version__
    st = jit.target()
    h = diskcache.hasher()
    for part in (PLAN_FORMAT, jit.FORMAT, __version__, llvmlite.__version__, st["triple"],
                 st["cpu"], st["features"], f"precise={st['math'].precise}", extra,
                 program_key.code_fingerprint()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest() if program_key.graph_digest(graph, h) else None


def _needed_libraries(kernel: dict) -> list[dict]:
    """The library records ``kernel`` needs, each after those it needs: an
    iterative depth-first walk over the names each declares."""
    order, placed = [], set()
    libraries = _libraries
    stack = [(None, [n for n in kernel["declared"] if n in libraries])]
    while stack:
        record, names = stack[-1]
        if names:
            lib = libraries[names.pop(0)]
            if lib["key"] not in placed and all(lib is not r for r, _ in stack):
                stack.append((lib, [n for n in lib["declared"]
                                    if n in libraries and n not in lib["public"]]))
            continue
        stack.pop()
        if record is not None:
            placed.add(record["key"])
            order.append(record)
    return order


def write(key: str | None, text: str, text_key: str, symbols: list, plan: dict) -> None:
    """Keep ``plan`` (:func:`run_plan`) for the graph of ``key`` (plan_key), beside
    the machine code of ``text`` jit.load just linked. Not written by a process whose
    code generator settings differ from their source's (program_key.knobs_at_defaults)."""
    root = jit._disk_root()
    if key is None or root is None or not program_key.knobs_at_defaults():
        return
    kernel = record(text, text_key, symbols)
    with jit._lock:
        libraries = _needed_libraries(kernel)
    entry = {"jobs": libraries + [kernel], "plan": dict(plan, key=text_key),
             "knobs": program_key.knobs()}
    if diskcache.write(root, key, pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL),
                       suffix=".plan"):
        jit.STATS["plan_writes"] += 1


def find(key: str | None) -> tuple[dict, dict] | None:
    """``(plan, {symbol: address})`` of the graph of ``key`` (plan_key) from the disk cache,
    its libraries and kernel linked; None when no complete, current plan is there."""
    root = jit._disk_root()
    if key is None or root is None:
        return None
    data, rejected = diskcache.read(root, key, suffix=".plan")
    jit.STATS["disk_rejects"] += rejected
    if data is None:
        return None
    entry = pickle.loads(data)     # (authenticated: written by this user's symgrad)
    if not program_key.knobs_match(entry["knobs"]):
        return None
    addrs = _link_planned(entry["jobs"])
    if addrs is None:
        return None
    jit.STATS["plan_hits"] += 1
    return entry["plan"], addrs


def _link_planned(jobs: list[dict]) -> dict | None:
    """Link a plan's libraries (those not linked here yet) and kernel from the disk cache:
    the kernel's addresses, or None (and nothing linked) if an object is missing."""
    st = jit.target()
    math = st["math"]
    kernel = jobs[-1]
    with jit._lock:
        hit = st["kernels"].get(kernel["key"])
        if hit is not None:
            jit.STATS["memory_hits"] += 1
            return hit
        todo = [job for job in jobs[:-1] if not all(name in math.bound for name in job["public"])]
        for job in [job for job in todo if job["key"] in st["kernels"]]:
            addrs = st["kernels"][job["key"]]     # linked here before, then unbound: rebind
            for public, local in job["public"].items():
                math.linked(public, addrs[local])
        todo = [job for job in todo if job["key"] not in st["kernels"]] + [kernel]
        objs = [jit._read_disk(job["key"]) for job in todo]
        if any(obj is None for obj in objs):
            return None
        publics = {name for job in jobs for name in job["public"]}
        for job, obj in zip(todo, objs):
            # (a library's public names are bound by linking it, before what calls them)
            math.bind_symbols([n for n in job["cnames"] if n not in publics])
            addrs = jit.link_object(job["key"], job["symbols"], obj)
            st["kernels"][job["key"]] = addrs
            for public, local in job["public"].items():
                math.linked(public, addrs[local])
            if job["public"]:
                note_library(job)
        jit.STATS["disk_hits"] += len(todo)
        return addrs


def run_plan(prog) -> dict:
    """What a ``codegen.llvm.Native`` needs of a scheduled and lowered graph (a
    ``codegen.llvm.CpuProgram``) besides the machine code, as plain data (no schedule, no
    IR): kept on disk under the graph's key, so that a fresh process builds neither."""
    sched, graph = prog.schedule, prog.graph
    bufs = sched.buffers
    stages = [(info.shape[0] if info.shape else 1, 0 if info.serial else st.size,
               info.partial, len(info.shape) == 1)
              for st, info in zip(sched.stages, prog.km.stage_info)]
    tiles = [(g.stages, g.extent, sum(sched.stages[j].size for j in g.stages),
              [(buf, bufs[buf].nbytes) for buf in g.local]) for g in sched.tile_groups]
    # 0-d arguments and outputs live in 8-byte slots of one scratch array
    slots = [b.index for b in bufs if b.kind in ("scalar", "flag") or (
        b.kind == "out" and not graph.outputs[b.ref].ndim)]
    slot = {buf: k for k, buf in enumerate(slots)}
    outs = []
    for k, buf in enumerate(sched.outputs):
        o = graph.outputs[k]
        outs.append(None if buf is None else (buf, np.dtype(o.dtype).str, o.shape, slot.get(buf)))
    partial = {buf for info in prog.km.stage_info for buf, _ in info.partial}
    return {
        "tmp": [(b.index, b.size * np.dtype(b.dtype).itemsize) for b in bufs if b.kind == "tmp"],
        "nbuf": len(bufs),
        "stages": stages,
        "tiles": tiles,
        "work": max([st.size for st in sched.stages] + [t[2] for t in tiles] + [0]),
        "params": [int(p) for p in prog.km.params],
        "slot": slot,
        "flag": None if sched.flag is None else slot[sched.flag],
        "consts": [(b.index, np.ascontiguousarray(b.ref)) for b in bufs if b.kind == "const"],
        "array_args": [(b.ref, b.index, np.dtype(graph.inputs[b.ref].dtype).str)
                       for b in bufs if b.kind == "arg"],
        "scalar_args": [(b.ref, slot[b.index], np.dtype(b.dtype).str) for b in bufs
                        if b.kind == "scalar"],
        "outs": outs,
        "repeats": [(t, graph.outputs.index(graph.outputs[t]))
                    for t, spec in enumerate(outs) if spec is None],
        "partial_specs": {buf: (bufs[buf].size, bufs[buf].dtype) for buf in sorted(partial)},
    }
