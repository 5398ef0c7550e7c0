"""Command line: show what symgrad generates for a function in a file.

    symgrad path/to/module.py function_name [--wrt 0] [--arg 3] [--arg 2x3] [--arg 2.5] [--show source,ir,llvm]
    symgrad path/to/module.py function_name --arg 3 --export grad.c     # or grad.py, grad.ll

``--arg`` gives one example argument per parameter: a shape like ``3`` or ``2x3`` for a float64
array (``f32:3`` for float32), ``int:4`` for a static int, or a float such as ``2.5``.
"""
from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys

import numpy as np


def _example(spec: str):
    if spec.startswith("int:"):
        return int(spec[4:])
    dtype = np.float64
    if spec.startswith("f32:"):
        dtype, spec = np.float32, spec[4:]
    if "x" in spec or spec.isdigit():
        shape = tuple(int(d) for d in spec.split("x"))
        return np.linspace(0.1, 0.9, int(np.prod(shape))).reshape(shape).astype(dtype)
    return float(spec)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="symgrad", description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("function")
    parser.add_argument("--wrt", default="0", help="argument index or name, comma-separated for several")
    parser.add_argument("--arg", action="append", default=[], help="example argument (see module doc)")
    parser.add_argument("--show", default=None, help="comma-separated: source, ir, llvm, asm, ptx "
                        "(default: source, unless --export is given)")
    parser.add_argument("--export", metavar="PATH", help="write the gradient as a standalone file: "
                        "PATH ending .py (NumPy only), .c (+ .h beside it; C99 + libm) or .ll")
    ns = parser.parse_args(argv)

    import symgrad as sg
    path = pathlib.Path(ns.path).resolve()
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    fn = getattr(module, ns.function)
    wrt_items = [int(w) if w.lstrip("-").isdigit() else w for w in ns.wrt.split(",")]
    wrt = wrt_items[0] if len(wrt_items) == 1 else tuple(wrt_items)
    g = sg.grad(fn, wrt=wrt)
    args = [_example(a) for a in ns.arg]
    if ns.export:
        written = sg.export(g, ns.export, *args)
        extra = f" and {written.with_suffix('.h')}" if written.suffix == ".c" else ""
        print(f"wrote {written}{extra}")
    show = ns.show if ns.show is not None else ("" if ns.export else "source")
    for what in filter(None, show.split(",")):
        print(f"# ---- {what} ----")
        if what == "source":
            print(g.source_for(*args) if args else g.source)
        elif what == "ir":
            print(g.ir_for(*args) if args else g.ir)
        elif what == "llvm":
            print(g.llvm_ir(*args))
        elif what == "asm":
            print(g.asm(*args))
        elif what == "ptx":
            print(g.ptx(*args))
        else:
            parser.error(f"unknown --show item {what!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
