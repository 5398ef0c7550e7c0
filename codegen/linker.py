"""Where jit's machine code is linked, and the one table of symbols it resolves against.

:func:`link` loads a module's objects with ``codegen.elf_load`` (ctypes and mmap: no LLVM, so
a disk-cache hit never imports ``llvmlite.binding``); an object that loader declines is linked
by LLVM's MCJIT engine as it always was, made on that first decline. Symbols resolve across
the two both ways: elf_load finds what the engine linked (``get_global_value_address``), and
the engine is given (``llvm.add_symbol``) every address elf_load defined or codegen bound
before it links. The lookup order is the engine's: the objects linked before, the addresses
codegen bound (``CPUMath.addresses``: C math functions, library functions), the process.
Callers hold ``jit._lock``.
"""
from __future__ import annotations

import ctypes
from typing import Callable

from . import elf_load

# Load machine code with codegen.elf_load (False: always with LLVM's engine, as tests do to
# compare the two).
USE_ELF_LOADER = True

_symbols: dict[str, int] = {}     # global symbols of the objects elf_load loaded
_pushed: set[str] = set()         # names given to LLVM's engine (llvm.add_symbol)
_state: dict = {}                 # "engine": LLVM's MCJIT engine, once made; "process"


def link(objs: list[bytes], names: list[str], math, machine: Callable) -> tuple[list[int], bool]:
    """Link ``objs`` and return the addresses of ``names`` (0: not defined), and whether
    elf_load declined them. ``math``: the CPUMath whose addresses kernels call;
    ``machine()``: the target machine LLVM's engine would be made for."""
    if USE_ELF_LOADER:
        try:
            defined = elf_load.load(objs, lambda name: _resolve(name, math))
        except elf_load.Declined:
            pass                      # (LLVM's engine links it, as it always did)
        else:
            for name, address in defined.items():
                _symbols.setdefault(name, address)
            return [defined.get(name, 0) for name in names], False
    return _link_mcjit(objs, names, math, machine), USE_ELF_LOADER


def has_engine() -> bool:
    return "engine" in _state


def _resolve(name: str, math) -> int | None:
    """The address of a symbol an object does not define (None: unknown)."""
    address = _symbols.get(name) or math.addresses.get(name)
    if not address and "engine" in _state:
        address = _state["engine"].get_global_value_address(name)
    return address or _process_symbol(name, math) or None


def _process_symbol(name: str, math) -> int | None:
    """``name`` in the process (libc's memset) or libmvec."""
    if "process" not in _state:
        _state["process"] = ctypes.CDLL(None)
    libraries = (_state["process"],) + ((math.libmvec,) if math.libmvec is not None else ())
    for library in libraries:
        try:
            return ctypes.cast(library[name], ctypes.c_void_p).value
        except AttributeError:
            continue
    return None


def _link_mcjit(objs: list[bytes], names: list[str], math, machine: Callable) -> list[int]:
    """Link ``objs`` into LLVM's engine, given every address codegen knows first."""
    import llvmlite.binding as llvm

    if "engine" not in _state:
        if math.libmvec is not None:
            llvm.load_library_permanently(math.libmvec._name)
        _state["engine"] = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine())
    engine = _state["engine"]
    for table in (math.addresses, _symbols):
        for name, address in list(table.items()):
            if name not in _pushed:
                llvm.add_symbol(name, address)
                _pushed.add(name)
    for o in objs:
        engine.add_object_file(llvm.ObjectFileRef.from_data(o))
    engine.finalize_object()
    return [engine.get_function_address(name) for name in names]
