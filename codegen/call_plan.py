"""The CPU back end's hot call path: one precomputed plan per signature (``call_plan``).

``Native.__call__`` handles every case (scalars, ``out=``, index checks, threads, concurrent
calls, read-only or strided arrays). Most calls are none of these: positional, C-contiguous,
writeable arrays of exactly the signature's dtypes and shapes (and Python floats), on a kernel
small enough for one thread. For those, the plan does only what such a call needs: check each
argument (type, dtype, shape, and that its buffer is C-contiguous and writeable), fill the
pointer table and scalar cells, allocate the outputs and call the kernel (and, for a
signature with guards, ``symgrad.guards``, check their flags: a true one returns ``MISS``,
the full path raising the error or growing the cap). Anything else returns ``MISS`` before
native code runs, and the API takes the full path, which raises the clear errors (wrong dtype or shape)
or copies what needs copying. Caller arrays are never written: outputs are always fresh (a
call with ``out=`` is the native entry's, which writes only there, or the full path's).

What bounds a call then (measured in ``benchmarks/call_overhead.py``): the argument checks
and the buffer-protocol address of each array (~0.2-0.3 us each: ``ctypes.c_char.from_buffer``
is the cheapest route from Python to a NumPy data pointer; ``a.ctypes.data`` is ~5x slower),
``np.empty`` per output (~0.1 us), the ctypes call itself (~0.2 us) and the kernel.

A plan for a kernel that runs holding the GIL is therefore, where the process allows it, a
native entry (``codegen.native_entry``): the same checks and steps in machine code, called
as a builtin. Its machine code is one small generic function, cached on disk like a kernel.
Until this process has loaded it, a Python plan serves: after ``NATIVE_SOON`` calls it loads
the entry from the disk cache, and where no cache holds it, compiles it (tens of ms) after
``NATIVE_AFTER`` more, so a function called a few times pays for neither.
"""
from __future__ import annotations

import ctypes

import numpy as np

from symgrad.backends import MISS

from . import native_entry

# Hot calls a Python plan serves before it looks for the native entry's machine code in the
# disk cache (loading it costs ~1 ms, most of a fresh process's first-call budget: a function
# called a few times never pays it) ...
NATIVE_SOON = 64
# ... and, where no cache holds it, the further calls before it is compiled: compiling costs
# ~20-100 ms, ~1 us saved per call earns that back only over many calls (and with the disk
# cache on, later processes just load it).
NATIVE_AFTER = 2000

# The kernel of a small call, run holding the GIL: releasing and retaking it costs more than
# such a kernel runs (and only calls below the parallel threshold, i.e. short ones, use it).
_RUN_HOLDING_GIL = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)

_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof
_ndarray = np.ndarray
_empty = np.empty
_BUFFER_ERRORS = (TypeError, ValueError, BufferError)


def argument_specs(native, kinds: tuple):
    """Per parameter, what the plan checks and where the value goes: ``(buf, shape, dtype,
    None, 0)`` for an array (its pointer-table entry), ``(None, None, None, cell, k)`` for a
    Python float (its scratch cell); ``None`` when a plan cannot cover the signature: a
    parameter that is neither (a static int, a pytree, a NumPy scalar), one the kernel does
    not read (a plan could not check it), or work a plan leaves out (index checks, repeated
    outputs, threads)."""
    results = len(native.outs) - native.guard_flags     # (repeated guard flags are read
    if native.flag is not None or native.parallel or any(   # where their first one is)
            t < results for t, _ in native.repeats):
        return None
    arrays = {i: (buf, node.shape, dt, None, 0) for i, buf, node, dt in native.array_args}
    _, _, _, _, scalar_in, _ = native.cached
    floats = {i: (None, None, None, cell, k) for (i, cell, k), (_, _, dt)
              in zip(scalar_in, native.scalar_args) if dt == np.float64}
    specs = []
    for i, kind in enumerate(kinds):
        spec = arrays.get(i) if kind == "array" else floats.get(i) if kind == "float" else None
        if spec is None:
            return None
        specs.append(spec)
    if len(arrays) + len(native.scalar_args) != len(kinds):   # (a parameter read twice)
        return None
    return tuple(specs)


def call_plan(native, kinds: tuple, holding_gil: bool):
    """``plan(args, out=None)``: the call's result, or ``MISS`` (nothing run, nothing written
    that the caller can see) when ``args`` are not exactly what the plan was made for, or
    ``out`` is given (only the native entry writes into ``out=``); ``None`` when the signature
    needs the full path (see :func:`argument_specs`)."""
    arg_specs = argument_specs(native, kinds)
    if arg_specs is None:
        return None
    entry_possible = holding_gil and native_entry.builds(native)
    if entry_possible and native_entry.loaded():
        return native_entry.entry_for(native, arg_specs, native._state())
    # (calls before the next look for the entry, whether that look may compile it)
    calls_left, may_compile = (NATIVE_SOON, False) if entry_possible else (None, False)
    arity = len(kinds)
    ptrs, scratch, (_, _, table), ptrs_addr, scalar_in, scalar_out = native.cached
    out_specs = tuple((t, buf, shape, dt) for t, buf, shape, dt in native.array_outs)
    n_results = len(native.outs)
    params_addr = native.params_addr
    run = _RUN_HOLDING_GIL(ctypes.cast(native.run, ctypes.c_void_p).value) if holding_gil \
        else native.run
    pick = native.pick_result
    guards = native.guard_outputs   # the outputs holding the guard flags: a true one is a MISS
    single = out_specs[0] if (len(out_specs) == 1 and n_results == 1 and not scalar_out
                              and native.graph.out_tree == 0) else None

    def plan(args, out=None):
        nonlocal calls_left, may_compile
        if len(args) != arity:
            return MISS
        if calls_left is not None:   # (out= calls count too: the entry takes them)
            calls_left -= 1
            if calls_left <= 0:
                if _install_native_entry(native, kinds, arg_specs, may_compile):
                    calls_left = None
                    return MISS   # nothing run: the full path runs it and takes the entry
                calls_left, may_compile = (None, False) if may_compile else (NATIVE_AFTER, True)
        if out is not None:
            return MISS           # out= is the native entry's (or the full path's)
        lock = native.lock        # read each call: a forked child replaces it
        if not lock.acquire(False):
            return MISS           # a concurrent call: the full path gives it private memory
        try:
            for a, (buf, shape, dt, cell, k) in zip(args, arg_specs):
                if buf is None:   # a Python float: its scratch cell
                    if type(a) is not float:
                        return MISS
                    cell[k] = a
                    continue
                if type(a) is not _ndarray or a.dtype != dt or a.shape != shape:
                    return MISS
                try:              # succeeds exactly for writeable C-contiguous non-empty arrays
                    table[buf] = _addressof(_from_buffer(a))
                except _BUFFER_ERRORS:
                    return MISS
            if single is not None:
                _, buf, shape, dt = single
                result = _empty(shape, dt)
                table[buf] = _address(result)
                run(ptrs_addr, params_addr)
                return result
            results = [None] * n_results
            for t, buf, shape, dt in out_specs:
                arr = results[t] = _empty(shape, dt)
                table[buf] = _address(arr)
            run(ptrs_addr, params_addr)
            for t, cell, k in scalar_out:
                results[t] = cell[k]
            if guards and any(results[t] for t in guards):
                return MISS       # the full path raises the guard's error or grows its cap
            return pick(results)
        finally:
            lock.release()

    return plan


def _install_native_entry(native, kinds, arg_specs, may_compile: bool) -> bool:
    """Install the native entry as this signature's plan, its machine code loaded from a
    cache or (``may_compile``) compiled; False where there is none."""
    if not native_entry.ready(compile=may_compile):
        return False
    entry = native_entry.entry_for(native, arg_specs, native._state())
    if entry is None:
        return False
    native.plans[kinds] = entry
    return True


def _address(a: np.ndarray) -> int:
    try:
        return _addressof(_from_buffer(a))
    except _BUFFER_ERRORS:      # an empty array exports no writeable buffer
        return a.ctypes.data
