"""Source map: the LLVM IR and PTX that ``f.llvm_ir``/``f.ptx`` show name the user's file and
line of each fused loop; the text the machine-code cache hashes does not (identical kernels from
different files share one cache entry)."""
import inspect
import os
import shutil
import subprocess

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import jit
from symgrad.codegen.llvm import CpuProgram


def softplus_grad_source(x):
    hot = np.log1p(np.exp(x * 3.0))
    return np.sum(hot)


HOT = "hot = np.log1p(np.exp(x * 3.0))"
X = np.linspace(-1.0, 1.0, 16)


def _line_of(fn) -> int:
    return fn.__code__.co_firstlineno + 1


def test_llvm_ir_names_the_line_of_a_known_statement():
    g = sg.grad(softplus_grad_source)
    expected = f"test_source_map.py:{_line_of(softplus_grad_source)}: {HOT}"
    for optimized in (False, True):
        text = g.llvm_ir(X, optimized=optimized)
        comments = [line for line in text.splitlines() if line.startswith(";")]
        assert any(expected in c for c in comments), (optimized, comments)
        assert any(f"grad of {HOT}" in c for c in comments)
        # the comment block stands right before a stage's loop function
        block = text.split(expected)[1].splitlines()[1:]
        assert next(line for line in block if not line.startswith(";")).startswith("define")


def test_ptx_names_the_line_and_still_assembles(tmp_path):
    g = sg.grad(softplus_grad_source)
    try:
        text = g.ptx(X, arch="sm_80")
    except (FileNotFoundError, RuntimeError) as e:   # no libdevice on this machine
        pytest.skip(f"no PTX toolchain: {e}")
    expected = f"test_source_map.py:{_line_of(softplus_grad_source)}: {HOT}"
    comments = [line for line in text.splitlines() if line.startswith("//")]
    assert any(expected in c for c in comments), comments
    ptxas = shutil.which("ptxas")
    if ptxas is not None:
        path = tmp_path / "k.ptx"
        path.write_text(text)
        subprocess.run([ptxas, "-arch=sm_80", str(path), "-o", os.devnull], check=True,
                       capture_output=True, text=True)


def test_the_cached_text_carries_no_source_lines(tmp_path):
    """The same function in another file, at another line: one cache key."""
    import importlib.util
    source = "import numpy as np\n\n\n\n" + inspect.getsource(softplus_grad_source)
    (tmp_path / "elsewhere.py").write_text(source)
    spec = importlib.util.spec_from_file_location("elsewhere", tmp_path / "elsewhere.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    a = sg.grad(softplus_grad_source)._inspect_entry(X).graph
    b = sg.grad(module.softplus_grad_source)._inspect_entry(X).graph
    text_a, text_b = CpuProgram(a).text, CpuProgram(b).text
    assert "test_source_map.py" not in text_a and HOT not in text_a
    assert jit.key_of(text_a) == jit.key_of(text_b)
    assert "elsewhere.py" in sg.grad(module.softplus_grad_source).llvm_ir(X)
