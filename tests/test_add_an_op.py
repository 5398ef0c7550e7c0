"""Adding an op is entries in the tables only (tests/throwaway_op.py holds every one of a
throwaway ``cube_root``), and a missing entry is a clear Python error naming the op, never a
crash in native code."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import lower, mathlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import throwaway_op as tw  # noqa: E402


def _reference(x):
    return np.sum(np.cbrt(x) * x), np.cbrt(x) + x / (3.0 * np.cbrt(x) ** 2)


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_new_op_runs_and_differentiates(target, dtype):
    x = tw.point(dtype)
    with tw.registered():
        f = sg.value_and_grad(tw.f, target=target)
        value, grad = f(x)
        source = f.source
    want_value, want_grad = _reference(x.astype("float64"))
    tol = 1e-12 if dtype == "float64" else 2e-6
    np.testing.assert_allclose(value, want_value, rtol=tol)
    np.testing.assert_allclose(grad, want_grad, rtol=tol)
    assert grad.dtype == dtype
    assert "cube_root(x)" in source     # the spelling's own name, bound in the namespace


def test_a_new_op_runs_in_the_cuda_emulation():
    from symgrad.codegen import ptx_emulate
    x = tw.point()
    with tw.registered():
        graph = sg.value_and_grad(tw.f)._compiled([x]).graph
        value, grad = ptx_emulate.run(graph, [x])
    want_value, want_grad = _reference(x)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12)


def test_a_new_op_assembles_with_ptxas(tmp_path):
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not found")
    out = tmp_path / "cube_root.ptx"
    # a child process: LLVM's NVPTX back end aborts instead of raising on some inputs
    r = subprocess.run([sys.executable, tw.__file__, "--ptx", str(out)], capture_output=True,
                       text=True, timeout=300)
    if "LibdeviceNotFound" in r.stderr:
        pytest.skip("libdevice not found")
    assert r.returncode == 0, r.stderr[-3000:]
    text = out.read_text()
    assert ".visible .entry" in text   # kernels, with libdevice's cbrt linked in
    r = subprocess.run([ptxas, "-arch=sm_80", str(out), "-o", os.devnull], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_tables_are_as_before_after_the_throwaway_op():
    from symgrad.ir import OPS
    with tw.registered():
        assert tw.NAME in OPS and tw.NAME in lower.LOWER
    assert tw.NAME not in OPS and tw.NAME not in lower.LOWER and tw.NAME not in mathlib.MATH_NAMES


def test_a_math_rule_without_a_math_name_fails_at_import():
    with pytest.raises(ImportError, match="'no_such_op'.*MATH_NAMES"):
        lower._math("no_such_op")


def test_a_math_call_the_c_library_lacks_is_a_python_error(monkeypatch):
    math = mathlib.CPUMath("")
    with pytest.raises(NotImplementedError, match="symgrad_no_such_function.*MATH_NAMES"):
        math.bind('declare double @"symgrad_no_such_function"(double %".1")\n', lambda *a: None)
    monkeypatch.setitem(mathlib.MATH_NAMES, "no_such_op", "no_such_function")
    with pytest.raises(NotImplementedError, match="C math library has no function 'no_such_function'"):
        math.bind('declare double @"symgrad_no_such_function"(double %".1")\n', lambda *a: None)
