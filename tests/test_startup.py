"""What a fresh process pays before its first result: what ``import symgrad`` and the first
CPU call load, and how the CPU back end finds its C libraries. (Times live in the
benchmarks; these tests pin the mechanisms.)"""
import ctypes
import subprocess
import sys

import pytest

from symgrad.codegen import mathlib

FIRST_GRADIENT = """
import ctypes.util
import sys
import numpy as np
import symgrad as sg
from workload import rosenbrock


def no_search(name):
    raise AssertionError("find_library runs ldconfig in a subprocess: load by soname first")


if {glibc}:
    ctypes.util.find_library = no_search
assert 'sympy' not in sys.modules and 'llvmlite' not in sys.modules
g = sg.grad(rosenbrock)(np.linspace(0.0, 1.0, 5))
assert 'llvmlite' in sys.modules
print(' '.join(sorted(sys.modules)))
"""


WORKLOAD = """
import numpy as np


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
"""


def test_a_first_cpu_gradient_imports_no_sympy_and_no_pool(tmp_path):
    (tmp_path / "workload.py").write_text(WORKLOAD)
    run = subprocess.run([sys.executable, "-c", FIRST_GRADIENT.format(glibc=_glibc())],
                         cwd=tmp_path, check=True, capture_output=True, text=True)
    loaded = run.stdout.split()
    assert "sympy" not in loaded and "symgrad.sympy_form" not in loaded
    assert "concurrent.futures" not in loaded      # a small kernel never makes the pool


def _glibc() -> bool:
    """Whether libm and libmvec load by their glibc sonames here (else find_library may be
    needed, and is allowed)."""
    try:
        ctypes.CDLL("libm.so.6")
        ctypes.CDLL("libmvec.so.1")
    except OSError:
        return False
    return True


def test_libraries_load_by_soname_else_through_find_library(monkeypatch):
    assert mathlib._load_library("libm.so.6", "m")._name == "libm.so.6"
    # a soname this system lacks: the search by short name finds the library instead
    found = mathlib._load_library("libm-not-a-soname.so.99", "m")
    assert found._name != "libm-not-a-soname.so.99" and hasattr(found, "cos")
    with pytest.raises(OSError):
        mathlib._load_library("libsymgrad-nothing.so.1", "symgrad-nothing")


def test_loaded_libm_is_the_process_libm():
    libm = mathlib._load_library("libm.so.6", "m")
    cos = libm.cos
    cos.restype, cos.argtypes = ctypes.c_double, [ctypes.c_double]
    assert cos(0.0) == 1.0
