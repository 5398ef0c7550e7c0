"""The CUDA PTX back end: a graph becomes a few GPU kernels, compiled by LLVM's NVPTX target.

The stages, one module each:

* ``codegen.ptx_plan`` — the plan: buffers, kernels and what each computes (jobs);
* ``codegen.ptx_build`` — the kernel builder: values at positions, through the tables keyed by
  op (``LOWER``, ``VIEW_INDEX``, ``COMPUTE_RULES``);
* ``codegen.ptx_kernels`` — kernel bodies per kind and the module's LLVM IR;
* here — the lowering check (:func:`plan`), NVPTX compilation with libdevice linked,
  internalized and optimised, and the entry points (:func:`program`, :func:`ptx`).

Every op is in exactly one table: ``LOWER`` (scalar ops), ``VIEW_INDEX``, ``COMPUTE_RULES``,
``KERNEL_RULES`` (ops with kernels of their own), ``IN_MEMORY`` (arguments and constant
arrays), or ``UNSUPPORTED`` (refused with a reason); :func:`lowering` says which.
"""
from __future__ import annotations

import re
import threading
import weakref
from dataclasses import dataclass

from symgrad.ir import Graph, toposort
from symgrad.loop_exits import without_exits

from . import libdevice
from .lower import LOWER
from .ptx_build import COMPUTE_RULES, VIEW_INDEX  # noqa: F401 - the lowering tables, re-exported
from .ptx_kernels import build_module  # noqa: F401 - re-exported
from .ptx_plan import (  # noqa: F401 - re-exported
    BLOCK, IN_MEMORY, KERNEL_RULES, UNSUPPORTED, WARP, FinishJob, Kernel, Plan, ReduceJob,
    ScatterJob, StoreJob, add_error_word)
from .ptx_plan import plan as _plan
from .ptx_regions import all_kernels, inline_remats, region_bodies, run_steps, without_remats  # noqa: F401 - run_steps re-exported

DEFAULT_ARCH = "sm_80"
# Architectures LLVM's NVPTX target is asked for; PTX for an older one JITs on newer GPUs.
KNOWN_ARCHS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_120")


def lowering(op: str) -> str | None:
    """Which table lowers ``op`` on target='cuda' (None: none does)."""
    for name, table in (("LOWER", LOWER), ("VIEW_INDEX", VIEW_INDEX),
                        ("COMPUTE_RULES", COMPUTE_RULES), ("KERNEL_RULES", KERNEL_RULES)):
        if op in table:
            return name
    return "IN_MEMORY" if op in IN_MEMORY else None


def plan(graph: Graph) -> Plan:
    """The plan of ``graph`` (``codegen.ptx_plan.plan``), after checking that every op has a
    lowering (in loop bodies too): a missing one is a NotImplementedError here, never a crash in
    native code. Loops and branches are steps of the launch sequence (``codegen.ptx_regions``)."""
    graph = without_remats(without_exits(graph))   # loops run every iteration here
    pending = [graph.outputs]
    while pending:
        for n in toposort(pending.pop()):
            if n.op in UNSUPPORTED:
                raise NotImplementedError(f"op {n.op!r} is not supported on target='cuda': {UNSUPPORTED[n.op]}")
            if lowering(n.op) is None:
                raise NotImplementedError(f"op {n.op!r} has no lowering on target='cuda' (no entry in "
                                          "symgrad.codegen.lower.LOWER or the tables of codegen.ptx)")
            pending.extend(inline_remats(body.results) for body in region_bodies(n))
    p = _plan(graph)
    add_error_word(p, all_kernels(p))   # out-of-range indices from data raise after the call
    return p


# ----------------------------------------------------------------------------------------------
# LLVM: NVPTX target, libdevice, optimisation, PTX

_llvm_lock = threading.Lock()
_llvm_ready = False


def _llvm():
    global _llvm_ready
    import llvmlite.binding as llvm
    if not _llvm_ready:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _llvm_ready = True
    return llvm


def check_arch(arch: str) -> str:
    if not re.fullmatch(r"sm_\d+a?", arch or ""):
        raise ValueError(f"arch must look like 'sm_80' or 'sm_90', got {arch!r}")
    return arch


def compile_ptx(text: str, arch: str, kernels) -> str:
    """Optimise an NVPTX module (linking libdevice) and emit PTX for ``arch``."""
    with _llvm_lock:   # LLVM's global state (targets, pass registry) is not thread-safe to set up
        llvm = _llvm()
        target = llvm.Target.from_triple("nvptx64-nvidia-cuda")
        tm = target.create_target_machine(cpu=arch, opt=3)
        mod = llvm.parse_assembly(text)
        mod.data_layout = str(tm.target_data)
        mod.verify()
        libdevice.link(mod, set(kernels))
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        pre = llvm.create_new_module_pass_manager()
        pre.add_global_dead_code_eliminate_pass()   # drop unused libdevice before O3 sees it
        pre.run(mod, pb)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        libdevice.check_intrinsics(str(mod), strict=False)
        return tm.emit_assembly(mod)


# ----------------------------------------------------------------------------------------------
# Entry points


@dataclass
class PtxProgram:
    """A plan compiled for one architecture."""
    plan: Plan
    arch: str
    ptx: str


_plans: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_programs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def _plan_and_text(entry):
    got = _plans.get(entry)
    if got is None:
        p = plan(entry.graph)
        got = (p, build_module(p))
        with _cache_lock:
            _plans[entry] = got
    return got


def program(entry, arch: str) -> PtxProgram:
    """The compiled program of a ``symgrad.api.Compiled`` entry for ``arch`` (cached)."""
    arch = check_arch(arch)
    progs = _programs.get(entry)
    if progs is None:
        with _cache_lock:
            progs = _programs.setdefault(entry, {})
    prog = progs.get(arch)
    if prog is None:
        p, text = _plan_and_text(entry)
        prog = PtxProgram(p, arch, compile_ptx(text, arch, [k.name for _, k in all_kernels(p)]))
        progs[arch] = prog
    return prog


def default_arch() -> str:
    """The present GPU's architecture, else sm_80."""
    try:
        from .cuda import device_arch
        arch = device_arch()
    except Exception:   # noqa: BLE001 - no driver, no bindings, no GPU: all mean "no GPU"
        arch = None
    return arch or DEFAULT_ARCH


def ptx(entry, arch: str | None = None) -> str:
    """PTX text for a ``symgrad.api.Compiled`` entry (``Function.ptx``), each kernel preceded
    by the user's lines it computes (comments; see ``codegen.source_map``)."""
    from .source_map import annotate_ptx
    prog = program(entry, arch or default_arch())
    return annotate_ptx(prog.ptx, prog.plan)


def llvm_ir(entry) -> str:
    """The kernels' LLVM IR before libdevice linking and optimisation (for inspection)."""
    return _plan_and_text(entry)[1]
