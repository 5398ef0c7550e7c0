"""Functions that are the same in every module that calls them (the blocked matmul kernels,
the strided copy loop), compiled once per process as a library module of their own instead of
once per module: a module declares the function under its public ``symgrad_`` name, the math
target (``CPUMath.add_library``) holds the library's text until ``jit.load`` links it with the
first module that declares it (compiled in the same pool of threads as that module's parts,
disk-cached under its own key, so once per machine with the disk cache).
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir


def library_function(km, public: str, declare: Callable[[ir.Module, str], ir.Function],
                     emit: Callable[[ir.Function], None]) -> ir.Function:
    """The declaration in ``km``'s module of the library function ``public``: ``declare``
    makes its declaration in a module under a name, ``emit`` its body (run only when the
    library is neither linked nor pending: building it costs Python time)."""
    if public in km.module.globals:
        return km.module.globals[public]
    if not km.math.has_library(public):
        library = ir.Module(name=public)
        fn = declare(library, "sg_" + public)
        emit(fn)
        km.math.add_library(public, str(library), fn.name)
    return declare(km.module, public)
