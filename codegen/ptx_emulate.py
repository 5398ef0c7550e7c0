"""Run a CUDA plan on the CPU, one thread for the whole grid: a check of the GPU back end's
kernels without a GPU.

The kernels are built by the same code as the PTX (``codegen.ptx.build_module``), with the
special registers fixed to one block of one thread (every grid-stride loop then covers all the
work), no barriers or warp shuffles, address space 0, and glibc math instead of libdevice. Buffers,
kernel order, parameter lists, split reductions, index maps, region branches, gathers and atomic
scatters, and the error word an out-of-range index sets, are exactly those the GPU runs, so the tests compare this against ``target="python"``
for every op. What it cannot check: warp shuffles, shared memory across threads, barriers, and
libdevice's own accuracy.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from symgrad.guards import kernel_error
from symgrad.runtime import finish_flat

from . import ptx as ptxmod
from .cuda import kernel_arguments, scalar_argument
from .dtypes import ctype, storage
from .ptx_plan import BY_VALUE

_lock = threading.Lock()
_state: dict = {}


def _init():
    with _lock:
        if not _state:
            import llvmlite.binding as llvm
            from .mathlib import CPUMath
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            math = CPUMath("")
            tm = llvm.Target.from_default_triple().create_target_machine(opt=2, codemodel="jitdefault")
            _state.update(llvm=llvm, math=math, tm=tm, engines=[])
    return _state


def compile_plan(graph):
    """(plan, {kernel name: ctypes function}) for a graph."""
    st = _init()
    llvm = st["llvm"]
    p = ptxmod.plan(graph)
    text = ptxmod.build_module(p, emulate_with=st["math"])
    with _lock:
        st["math"].link_pending(text)            # the far maths it calls (mathlib)
        st["math"].bind(text, llvm.add_symbol)   # the C functions it calls, before linking
    mod = llvm.parse_assembly(text)
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, st["tm"])
    engine.finalize_object()
    st["engines"].append(engine)   # keep the machine code alive
    fns = {}
    for _, k in ptxmod.all_kernels(p):
        types = [ctype(p.buffers[b].dtype) if p.buffers[b].kind in BY_VALUE else ctypes.c_void_p
                 for b in k.params]
        fns[k.name] = ctypes.CFUNCTYPE(None, *types)(engine.get_function_address(k.name))
    return p, fns


def run(graph, values, compiled=None, memory=None):
    """Evaluate ``graph`` on ``values`` through the CUDA plan; NumPy results as target='python'
    returns them (``symgrad.runtime.finish_flat``). ``memory``: a dict filled with every
    buffer's contents afterwards (by index), for tests of what ran."""
    p, fns = compiled or compile_plan(graph)
    store = {}
    for buf in p.buffers:
        dt = storage(buf.dtype)
        if buf.kind == "arg":
            a = np.ascontiguousarray(values[buf.ref], dtype=bool if buf.dtype == "bool" else buf.dtype)
            store[buf.index] = a.view(np.uint8) if buf.dtype == "bool" else a.copy()
        elif buf.kind == "scalar":   # by value, packed as the GPU launcher packs it
            store[buf.index] = scalar_argument(buf.dtype, values[buf.ref])
        elif buf.kind == "flag":     # the error word: zeroed before the call
            store[buf.index] = np.zeros(buf.size, np.int32)
        elif buf.kind == "const":
            a = np.ascontiguousarray(buf.ref)
            store[buf.index] = a.view(np.uint8) if buf.dtype == "bool" else a.copy()
        else:   # garbage, as on the GPU: a kernel that forgets to write shows up
            store[buf.index] = np.full(buf.size, 0x5A, np.uint8).view(dt) if dt.itemsize == 1 else \
                np.frombuffer(np.full(buf.size * dt.itemsize, 0x7F, np.uint8).tobytes(), dt).copy()
    addr = {b: v if p.buffers[b].kind == "scalar" else v.ctypes.data for b, v in store.items()}

    def launch(k, addr):
        for z in k.zero:
            ctypes.memset(addr[z], 0, p.buffers[z].nbytes)
        fns[k.name](*kernel_arguments(p, k, addr))

    ptxmod.run_steps(p, addr, launch, ctypes.memmove)   # loops: per iteration (ptx_regions)
    if p.flag is not None and store[p.flag][0]:
        raise kernel_error(p.graph.name, int(store[p.flag][0]))
    if memory is not None:
        memory.update(store)
    outs = []
    for node, b in zip(graph.outputs, p.outputs):
        a = store[b][:node.size]
        a = a.view(bool) if node.dtype == "bool" else a
        outs.append(a.reshape(node.shape).copy())
    return finish_flat(outs, graph, values)
