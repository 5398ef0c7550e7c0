"""libdevice: NVIDIA's bitcode math library, and the math target that calls it.

LLVM's NVPTX back end cannot lower ``llvm.exp``/``llvm.log``/``llvm.sin``/``llvm.pow`` (and
friends) on ``double``; it does not raise, it *aborts the process*. So GPU code never asks LLVM
for a math intrinsic: :class:`LibdeviceMath` resolves the shared math table
(``codegen.mathlib.MATH_NAMES``) to libdevice functions (``exp`` -> ``__nv_exp`` /
``__nv_expf``), :func:`link` links the bitcode into the kernel module and internalizes it, and
:func:`check_intrinsics` refuses any intrinsic outside a list known to lower on NVPTX, with a
Python exception instead of a dead interpreter.

libdevice is found through ``$CUDA_HOME``/``$CUDA_PATH``, ``/usr/local/cuda*``, ``/opt/cuda``
and the ``nvidia-cuda-nvcc``/``nvidia-nvvm`` wheels (``pip install symgrad[cuda]``).
"""
from __future__ import annotations

import functools
import glob
import os
import re
import sys

from .mathlib import INTRINSICS, MATH_NAMES, MathTarget


def libdevice_names(cname: str) -> tuple[str, str]:
    """(float64 function, float32 function) of a C math name: libdevice spells every C99 math
    function ``__nv_<name>`` / ``__nv_<name>f``, so a new math op needs one entry in
    codegen.mathlib.MATH_NAMES and nothing here."""
    return f"__nv_{cname}", f"__nv_{cname}f"


# op -> (float64 function, float32 function), for reading; LibdeviceMath reads MATH_NAMES itself,
# so an entry added at run time (a test's throwaway op) resolves too.
LIBDEVICE = {op: libdevice_names(c) for op, c in MATH_NAMES.items() if op not in INTRINSICS}

# LLVM intrinsics that the NVPTX back end lowers for both float32 and float64 (checked with
# ptxas for sm_80 and sm_90 by tests/test_ptx.py). Anything else is refused before LLVM sees it.
SAFE_INTRINSICS = ("llvm.nvvm.", "llvm.fabs.", "llvm.sqrt.", "llvm.maximum.", "llvm.minimum.",
                   "llvm.fma.", "llvm.copysign.", "llvm.smax.", "llvm.smin.", "llvm.umax.",
                   "llvm.umin.", "llvm.floor.", "llvm.ceil.", "llvm.rint.", "llvm.trunc.")


class LibdeviceNotFound(RuntimeError):
    pass


class LibdeviceMath(MathTarget):
    """Math calls resolve to libdevice (``__nv_exp`` for float64, ``__nv_expf`` for float32)."""

    name = "libdevice"

    def symbol(self, cname: str, dtype: str) -> str:
        if cname not in MATH_NAMES.values():
            raise NotImplementedError(f"no libdevice function for {cname!r}: not in "
                                      "symgrad.codegen.mathlib.MATH_NAMES")
        return libdevice_names(cname)[dtype == "float32"]


def _toolkit_roots() -> list[str]:
    roots = [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT") if os.environ.get(v)]
    return roots + ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True) + ["/opt/cuda"]


def _candidates(roots=None, search_path=None) -> list[str]:
    """libdevice files in CUDA toolkits (``roots``), then in the nvidia wheels installed on
    ``search_path`` (default sys.path): nvidia-nvvm puts it in ``nvidia/cu13/nvvm/libdevice``,
    nvidia-cuda-nvcc-cu12 in ``nvidia/cuda_nvcc/nvvm/libdevice``."""
    found = []
    for root in _toolkit_roots() if roots is None else roots:
        found += sorted(glob.glob(os.path.join(root, "nvvm", "libdevice", "libdevice*.bc")))
    for base in sys.path if search_path is None else search_path:
        nv = os.path.join(base, "nvidia")
        if os.path.isdir(nv):
            for depth in ("", "*", os.path.join("*", "*")):
                found += sorted(glob.glob(os.path.join(nv, depth, "nvvm", "libdevice", "libdevice*.bc")))
    return found


@functools.lru_cache(maxsize=None)
def find_libdevice() -> str:
    """The path of ``libdevice.10.bc`` (raises :class:`LibdeviceNotFound` with what to do)."""
    for path in _candidates():
        if os.path.isfile(path):
            return path
    raise LibdeviceNotFound(
        "libdevice (libdevice.10.bc) was not found: it is needed to compile math functions for "
        "the GPU. Set CUDA_HOME to a CUDA toolkit, or `pip install nvidia-cuda-nvcc` (or "
        "nvidia-nvvm); searched $CUDA_HOME, $CUDA_PATH, /usr/local/cuda*, /opt/cuda and the "
        "nvidia wheels on sys.path.")


@functools.lru_cache(maxsize=None)
def _bitcode(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


_DECLARE = re.compile(r'^declare [^@]*@"?([\w.$]+)"?\(', re.M)


def declared(text: str) -> list[str]:
    """Names of the functions a textual module declares (calls without a body)."""
    return _DECLARE.findall(text)


# Math intrinsics that NVPTX cannot lower for some type (it aborts): refused even after libdevice
# is linked and the module optimised, in case an optimisation recreated one.
_FATAL = re.compile(r"llvm\.(exp|exp2|exp10|log|log2|log10|sin|cos|tan|asin|acos|atan|atan2|sinh|"
                    r"cosh|tanh|pow|powi|sincos|frexp|ldexp|lrint|llrint|lround|llround)\.")


def check_intrinsics(text: str, strict: bool = True) -> None:
    """Raise NotImplementedError for a declaration NVPTX could not lower, instead of letting LLVM
    abort. ``strict`` (symgrad's own kernels): only known-safe intrinsics and libdevice; after
    linking libdevice (whose own intrinsics are fine): no math intrinsic of the fatal kind."""
    for name in declared(text):
        if name.startswith("llvm."):
            if strict and not name.startswith(SAFE_INTRINSICS) or _FATAL.match(name):
                raise NotImplementedError(
                    f"the CUDA back end would call the LLVM intrinsic {name}, which the NVPTX "
                    "back end cannot lower (it aborts instead of raising); route it through "
                    "symgrad.codegen.libdevice")
        elif strict and not name.startswith("__nv_"):
            raise NotImplementedError(f"the CUDA back end cannot call the external function {name}")


def link(module, keep) -> None:
    """Link libdevice into ``module`` (an llvmlite ModuleRef) when it calls ``__nv_*``, then
    internalize every definition except the kernels named in ``keep``, so that global DCE drops
    the library functions nothing calls."""
    if any(f.is_declaration and f.name.startswith("__nv_") for f in module.functions):
        import llvmlite.binding as llvm
        lib = llvm.parse_bitcode(_bitcode(find_libdevice()))
        lib.triple = module.triple
        lib.data_layout = module.data_layout
        module.link_in(lib)
        missing = [f.name for f in module.functions
                   if f.is_declaration and f.name.startswith("__nv_")]
        if missing:
            raise NotImplementedError(f"libdevice does not define {', '.join(missing)}")
    for f in module.functions:
        if not f.is_declaration and f.name not in keep:
            f.linkage = "internal"
    for g in module.global_variables:
        if not g.is_declaration:
            g.linkage = "internal"
