"""The hot path in native code: one Python builtin per signature that checks the arguments,
allocates the outputs (or takes ``out=``'s arrays) and runs the kernel without running Python
bytecode (``entry_for``).

``codegen.call_plan``'s Python plan costs ~1.3 us around the kernel at W3: two
buffer-protocol addresses, the checks, a lock, ``np.empty`` and a ctypes call. This module
compiles one small generic function, ``sg_enter`` (``codegen.entry_ir``, machine code cached
like any kernel), and makes a builtin of it per signature with ``PyCFunction_NewEx``: its
``self`` is a :class:`Descriptor`, a ctypes array of 8-byte slots saying what the call
expects (per argument: float or array, dtype object, shape; per top-level result: what an
``out=`` array for it must be) and where things go (the kernel's pointer table, scalar
cells). Called as ``entry(args)`` or ``entry(args, out)`` (the plan interface of
``symgrad.backends``), it

1. checks every argument: a ``float``, or an ``ndarray`` (exact type) whose dtype object is
   the signature's, whose shape is the signature's and whose memory is C-contiguous and
   aligned. Anything else returns ``MISS`` before anything is allocated or written: the full
   path then raises the clear error or copies what needs copying;
2. with ``out``, checks it as the full path (``Native._out_arrays``) reads it: a tuple with
   one entry per top-level result, or one array for a single one; each entry an ``ndarray``
   (exact type) of the result's dtype object and shape, C-contiguous, aligned and writeable,
   and, for an array the kernel writes, overlapping no array argument's bytes (the same
   comparison of byte ranges the full path makes). Wherever the full path would raise, copy
   through a fresh array or fill a container, the entry returns ``MISS`` instead, before
   anything is written, and the full path does what it does;
3. without ``out``, allocates the array outputs (``PyArray_Empty``; a failure propagates its
   MemoryError);
4. fills the pointer table and scalar cells, runs the kernel, reads its guard flags (a
   guarded signature's: ``symgrad.guards``, bools the kernel computes beside the results)
   and, where one is true, releases what it allocated and returns ``MISS``: the full path
   then raises the guard's error (NumPy's LinAlgError at the user's line) or grows the
   loop's cap and runs again; else reads the 0-d results;
5. only then makes the Python floats and the result tuple; with ``out``, stores the 0-d
   results into their arrays (in the full path's order) and returns ``out`` itself, as the
   full path does, having allocated nothing.

A guarded signature's full path delivers ``out=`` after its guards passed
(``runtime.write_out``: a bare array only for a single result, no overlap check, each entry
written in order), so with ``out`` and guards the entry does the same: the kernel writes
fresh arrays (step 3), and only after step 4 found no guard fired are they copied into
``out=``'s arrays and the 0-d results stored, entry by entry in order. A call whose guard
fired writes nothing the caller sees, as on the full path.

Why that order: an allocation can run the garbage collector, and a finalizer can call the same
function again (re-entering this entry on this thread). Steps 4-5's shared memory (the table,
the cells) is therefore written and read between allocations, never across one.

Why no lock: the entry runs only kernels below the parallel threshold and never releases the
GIL, so no other thread runs Python (or this entry) meanwhile; its table, cells and workspace
are its own (not the ``Native``'s, which the full path uses with the GIL released). On a
free-threaded CPython, or wherever :func:`available` finds the object layouts it reads
different from what it expects, there is no entry and the Python plan serves.

What it reads of CPython and NumPy objects: ``ob_type``, a tuple's size and items, a float's
value, an ndarray's data, nd, dimensions, descr and flags (the fields NumPy's ABI keeps
stable), a ctypes object's buffer pointer; each offset is checked once against live objects
(:func:`available`) before any entry is made.
"""
from __future__ import annotations

import ctypes
import sys

import numpy as np

from symgrad.backends import MISS
from symgrad.runtime import top_level

from . import jit
from .entry_ir import (ARG_RECORD, ARRAY_DATA, ARRAY_DESCR, ARRAY_DIMS, ARRAY_FLAGS, ARRAY_ND,
                       CDATA_POINTER, FLOAT_VALUE, KIND_ARRAY, KIND_FLOAT, MAX_RESULTS,
                       METH_FASTCALL, OB_TYPE, OUT_RECORD, SCALAR_RECORD, SLOT, SLOTS,
                       TUPLE_ITEMS, TUPLE_SIZE, entry_text)

# -- what the entry relies on, checked once per process -------------------------------------------

_runtime: dict = {}


def available() -> bool:
    """Whether this process can use native entries (a GIL-holding 64-bit CPython whose objects
    have the layouts this module reads); decided once."""
    if "ok" not in _runtime:
        try:
            _runtime.update(_c_api())
            _runtime["ok"] = _layouts_match()
        except (AttributeError, OSError, ValueError, ImportError):
            _runtime["ok"] = False
    return _runtime["ok"]


def _c_api() -> dict:
    """The addresses the entry calls and compares with: C API functions, NumPy's
    ``PyArray_Empty`` (slot 184 of its ABI-stable API table; slot 2 is ``PyArray_Type``, which
    :func:`_layouts_match` checks), and ``PyCFunction_NewEx`` to make the builtins."""
    # a free-threaded build ("t" ABI, 3.13+), even with its GIL on: other object headers
    free_threaded = "t" in getattr(sys, "abiflags", "") or \
        not getattr(sys, "_is_gil_enabled", lambda: True)()
    if sys.implementation.name != "cpython" or sys.maxsize != 2 ** 63 - 1 or free_threaded:
        raise ValueError("not a GIL-holding 64-bit CPython")
    api = ctypes.pythonapi

    def address(name):
        return ctypes.cast(getattr(api, name), ctypes.c_void_p).value

    # private prototypes: setting restype/argtypes on ctypes.pythonapi's shared function
    # objects would change them for every other user in the process
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", api))
    try:
        from numpy._core import _multiarray_umath as multiarray
    except ImportError:                      # NumPy 1.x
        from numpy.core import _multiarray_umath as multiarray
    table = get_pointer(multiarray._ARRAY_API, None)
    array_api = (ctypes.c_void_p * 185).from_address(table)
    make = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p)(
        ("PyCFunction_NewEx", api))
    return dict(array_type=array_api[2], array_empty=array_api[184], make_function=make,
                incref=address("Py_IncRef"), decref=address("Py_DecRef"),
                float_from_double=address("PyFloat_FromDouble"),
                tuple_new=address("PyTuple_New"))


def _at(address: int, ctype):
    return ctype.from_address(address).value


def _layouts_match() -> bool:
    a = np.empty((2, 3))
    t = (1.5, a)
    x = 2.25
    cells = (ctypes.c_int64 * 1)()
    empty = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_int)(_runtime["array_empty"])
    dims = (ctypes.c_int64 * 2)(4, 5)
    dt = np.dtype(np.float32)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(dt))      # PyArray_Empty steals one
    made = empty(2, ctypes.addressof(dims), id(dt), 0)
    return (_runtime["array_type"] == id(np.ndarray)
            and _at(id(a) + OB_TYPE, ctypes.c_void_p) == id(np.ndarray)
            and _at(id(a) + ARRAY_DATA, ctypes.c_void_p) == a.ctypes.data
            and _at(id(a) + ARRAY_ND, ctypes.c_int32) == 2
            and tuple((ctypes.c_int64 * 2).from_address(
                _at(id(a) + ARRAY_DIMS, ctypes.c_void_p))) == (2, 3)
            and _at(id(a) + ARRAY_DESCR, ctypes.c_void_p) == id(a.dtype)
            and _at(id(a) + ARRAY_FLAGS, ctypes.c_int32) == a.flags.num
            and _at(id(t) + OB_TYPE, ctypes.c_void_p) == id(tuple)
            and _at(id(t) + TUPLE_SIZE, ctypes.c_int64) == 2
            and _at(id(t) + TUPLE_ITEMS + 8, ctypes.c_void_p) == id(a)
            and _at(id(x) + OB_TYPE, ctypes.c_void_p) == id(float)
            and _at(id(x) + FLOAT_VALUE, ctypes.c_double) == 2.25
            and _at(id(cells) + CDATA_POINTER, ctypes.c_void_p) == ctypes.addressof(cells)
            and type(made) is np.ndarray and made.shape == (4, 5) and made.dtype == dt)


def loaded() -> bool:
    """Whether ``sg_enter``'s machine code is loaded in this process already."""
    return bool(_runtime.get("enter"))


def ready(compile: bool) -> bool:
    """Whether ``sg_enter``'s machine code is loaded: from memory or the disk cache, else,
    when ``compile``, compiled now (tens of milliseconds: see ``call_plan``'s countdown)."""
    if _runtime.get("enter") is None and available():
        text = _runtime.get("text") or _runtime.setdefault("text", entry_text())
        _, addrs = jit.load(text, ["sg_enter"], compile=compile)
        _runtime["enter"] = None if addrs is None else addrs["sg_enter"]
    return bool(_runtime.get("enter"))


# -- one entry per signature ------------------------------------------------------------------------

class Descriptor(ctypes.Array):
    """Base of the per-entry slot arrays (see ``entry_for``): what the builtin's ``self`` is;
    its ``keep`` holds what the slots point to, so it all lives as long as the builtin."""
    _type_ = ctypes.c_int64
    _length_ = 0


def builds(native) -> bool:
    """Whether an entry can serve this signature: this process has entries, the results are
    ones the entry builds (arrays and float64 0-d results, alone or as a flat tuple) and its
    guard flags (if any) are 0-d bools."""
    results = native.outs[:_results(native)]
    return available() and _result_picks(native) is not None and all(
        spec.dtype == np.float64 for spec in results if spec is not None and spec.slot is not None
    ) and all(native.outs[t].slot is not None and native.outs[t].dtype == np.bool_
              for t in native.guard_outputs)


def _results(native) -> int:
    """How many of the graph's outputs are the result's (the rest are guard flags)."""
    return len(native.outs) - native.guard_flags


def entry_for(native, arg_specs, state):
    """A builtin ``entry(args) -> result or MISS`` for the plan's argument specs (see
    ``call_plan.argument_specs``), using ``state`` (a ``Native._state()`` of its own); ``None``
    unless :func:`builds` and the machine code is :func:`loaded`."""
    if not (loaded() and builds(native)):
        return None
    picks = _result_picks(native)
    _, scratch, (_, cells, table), _, scalar_in, scalar_out = state
    n_results = _results(native)
    float_cells = {i: ctypes.addressof(cell) + 8 * k for i, cell, k in scalar_in}
    layout = Layout(len(SLOTS))
    args = [[KIND_FLOAT, float_cells[i], 0, 0, 0, 0] if buf is None else
            [KIND_ARRAY, buf, id(dt), len(shape), layout.dims(shape), _bytes(shape, dt)]
            for i, (buf, shape, dt, _, _) in enumerate(arg_specs)]
    outs = [[t, buf, id(dt), len(shape), layout.dims(shape)]
            for t, buf, shape, dt in native.array_outs]
    scalars = [[t, ctypes.addressof(cell) + 8 * k] for t, cell, k in scalar_out
               if t < n_results]
    # the cell of each guard flag (a bool in its first byte)
    flags = [[scratch.ctypes.data + 8 * native.outs[t].slot] for t in native.guard_outputs]
    # what out= must hold, per top-level result (a tuple's items, or the single result)
    top_indices = top_level(native.result_tree)
    tops = [native.outs[t] for t in top_indices]
    top = [[t, id(spec.dtype), len(spec.shape), layout.dims(spec.shape),
            _bytes(spec.shape, spec.dtype), KIND_ARRAY if spec.slot is None else KIND_FLOAT]
           for t, spec in zip(top_indices, tops)]
    at = dict(args_at=layout.records(args), outs_at=layout.records(outs),
              scalars_at=layout.records(scalars), top_at=layout.records(top),
              guards_at=layout.records(flags))
    # a single array as out= stands for a 1-tuple where the full path reads it so: always
    # for the kernel's own out= (Native._out_arrays), only for a single result where the
    # result is delivered afterwards (runtime.write_out, a guarded signature's)
    out_alone = isinstance(native.result_tree, int) if native.guard_flags else len(top) == 1
    name = ctypes.create_string_buffer(f"symgrad_entry_{native.graph.name}".encode())
    rt = _runtime
    descriptor = layout.descriptor(dict(
        ml_name=ctypes.addressof(name), ml_meth=rt["enter"], ml_flags=METH_FASTCALL, ml_doc=0,
        nargs=len(arg_specs), miss=id(MISS), tuple_type=id(tuple),
        ndarray_type=id(np.ndarray), float_type=id(float),
        table=ctypes.addressof(table), params=native.params_addr,
        run=ctypes.cast(native.run, ctypes.c_void_p).value,
        array_empty=rt["array_empty"], incref=rt["incref"], decref=rt["decref"],
        float_from_double=rt["float_from_double"], tuple_new=rt["tuple_new"],
        n_outs=len(outs), n_scalars=len(scalars), n_pick=len(picks), n_top=len(top),
        n_guards=len(flags), out_alone=int(out_alone), **at))
    # what the slots point into: the Native (params, kernel), the state (table, cells,
    # workspace), the dtype objects, the method's name
    dtypes = tuple(dt for _, _, _, dt in native.array_outs) + tuple(s[2] for s in arg_specs) + \
        tuple(spec.dtype for spec in tops)
    descriptor.keep = (native, state, dtypes, name)
    return rt["make_function"](ctypes.addressof(descriptor), descriptor, None)


def _bytes(shape, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def _result_picks(native) -> list | None:
    """The entry's result: ``[]`` for the single result itself, else the result indices of a
    flat tuple (each result once); ``None`` for what the entry does not build."""
    tree, n = native.result_tree, _results(native)
    if n > MAX_RESULTS or any(t < n for t, _ in native.repeats):
        return None
    if tree == 0 and n == 1:
        return []
    if type(tree) is tuple and sorted(t for t in tree if type(t) is int) == list(range(n)) \
            and len(tree) == n:
        return list(tree)
    return None


class Layout:
    """The descriptor's slots after its ``head``: shapes and records, each at the slot index
    ``dims`` / ``records`` return (the body only grows, so an index stays valid)."""

    def __init__(self, head: int):
        self.head = head
        self.body: list[int] = []

    def _append(self, values) -> int:
        at = self.head + len(self.body)
        self.body.extend(values)
        return at

    def dims(self, shape) -> int:
        return self._append(shape)

    def records(self, records: list[list[int]]) -> int:
        return self._append(v for rec in records for v in rec)

    def descriptor(self, head_values: dict) -> Descriptor:
        size = self.head + len(self.body)
        descriptor = type("EntryDescriptor", (Descriptor,), {"_length_": size})()
        for slot, value in head_values.items():
            descriptor[SLOT[slot]] = value
        descriptor[self.head:size] = self.body
        return descriptor
