"""A throwaway unary op, ``cube_root``, registered in ONE place: this module's ENTRIES are every
entry a new op needs (the op table row with its shape rule, NumPy reference, VJP, JVP and spelling;
the C math name; the lowering rule; the front end's NumPy name). ``tests/test_add_an_op.py``
checks that with these entries alone it runs on every target and differentiates; the PTX
child process imports this module too (``python tests/throwaway_op.py --ptx FILE``).

A permanent op is the same entries written in place (NumPy's cbrt is one: ``cbrt``), e.g.
``_u("cube_root", np.cbrt, vjp)`` in
symgrad/elementwise.py (the op table row; its NumPy name reaches the front end from there),
``"cube_root": "cbrt"`` in codegen/mathlib.py MATH_NAMES and ``"cube_root": _math("cube_root")``
in codegen/lower.py LOWER. Here they are made at run time and removed afterwards, so the front
end's entry (numpy_api.CALLABLES, derived from the op table at import) is added by hand too,
for a function of this module (``cube_root``), since np.cbrt already has its own.
"""
from __future__ import annotations

import contextlib
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "cube_root"


def entries() -> list:
    """(table, key, make value) in the order they must be made: the lowering rule checks, when
    it is made, that its math name exists."""
    from symgrad.codegen import lower, mathlib
    from symgrad import numpy_api, spelling as sp
    from symgrad.ir import OPS, OpDef, make
    from symgrad.op_base import _elementwise, to_float

    def build(x):
        return make(NAME, (to_float(x),))

    opdef = OpDef(NAME, "elementwise", infer=_elementwise(float_only=True),
                  numpy=lambda x, attrs: np.cbrt(x),
                  vjp=lambda g, n: (g / (3.0 * n * n),),           # d cbrt(x) = 1 / (3 cbrt(x)^2)
                  jvp=lambda t, n: None if t[0] is None else t[0] / (3.0 * n * n),
                  python=sp.call("cube_root"), names={"cube_root": np.cbrt})
    return [
        (OPS, NAME, lambda: opdef),
        (mathlib.MATH_NAMES, NAME, lambda: "cbrt"),
        (lower.LOWER, NAME, lambda: lower._math(NAME)),
        (numpy_api.CALLABLES, cube_root, lambda: numpy_api._dual(cube_root, build, NAME)),
    ]


@contextlib.contextmanager
def registered():
    """The op exists inside the block, and every table is as before after it."""
    added = []
    try:
        for table, key, value in entries():
            assert key not in table, key
            table[key] = value()
            added.append((table, key))
        yield
    finally:
        for table, key in reversed(added):
            del table[key]


def cube_root(x):
    """What user code calls (NumPy's own np.cbrt is a permanent op already): the eager form."""
    return np.cbrt(x)


def f(x):
    return np.sum(cube_root(x) * x)


def point(dtype="float64"):
    return np.linspace(0.5, 3.0, 7).astype(dtype)


if __name__ == "__main__":   # --ptx FILE: the value-and-gradient kernels' PTX (for ptxas)
    sys.path.insert(0, ROOT)
    import symgrad as sg
    from symgrad.codegen import ptx
    with registered():
        entry = sg.value_and_grad(f)._compiled([point()])
        with open(sys.argv[2], "w") as out:
            out.write(ptx.ptx(entry, arch="sm_80"))
