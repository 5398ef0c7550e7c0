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

from symgrad.ir import is_float

from .dtypes import memory_type
from .loops import close_loop, open_loop

I64 = ir.IntType(64)
PTR = ir.PointerType()


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


def declare_copy(module: ir.Module, name: str) -> ir.Function:
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR] + [I64] * 5), name)
    fn.attributes.add("nounwind")
    for a, nm in zip(fn.args, ("dst", "src", "params", "ext", "dstride", "sstride", "begin", "end")):
        a.name = nm
    fn.args[0].add_attribute("noalias")
    fn.args[1].add_attribute("noalias")
    return fn


def copy_body(fn: ir.Function, dtype: str, d: int, mode: str) -> None:
    """One loop nest: ``dst[i] = src[i]`` or ``dst[i] += src[i]`` over the extents in the
    params slots ``ext``, with the strides in slots ``dstride`` and ``sstride``."""
    dst, src, params, ext_slot, dst_slot, src_slot, begin, end = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def row(slot, name):
        return [b.load(b.gep(params, [b.add(slot, ir.Constant(I64, j))], source_etype=I64),
                       typ=I64, name=f"{name}{j}") for j in range(d)]
    ext, ds, ss = row(ext_slot, "n"), row(dst_slot, "ds"), row(src_slot, "ss")
    ty = memory_type(dtype)
    levels = [open_loop(b, begin if j == 0 else ir.Constant(I64, 0), end if j == 0 else ext[j],
                        tuple(f"copy{j}.{s}" for s in ("head", "body", "exit")), f"i{j}")
              for j in range(d)]
    idx = [loop.index for loop in levels]
    offs = []
    for strides in (ds, ss):
        off = ir.Constant(I64, 0)
        for i, s in zip(idx, strides):
            off = b.add(off, b.mul(i, s))
        offs.append(off)
    pd = b.gep(dst, [offs[0]], source_etype=ty)
    v = b.load(b.gep(src, [offs[1]], source_etype=ty), typ=ty)
    if mode == "accum":
        old = b.load(pd, typ=ty)
        v = (b.fadd(old, v) if is_float(dtype) else b.or_(old, v) if dtype == "bool"
             else b.add(old, v))
    b.store(v, pd)
    for loop in reversed(levels):
        close_loop(b, loop)
    b.ret_void()
