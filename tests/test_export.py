"""``sg.export``: standalone NumPy modules, C99 (+ header) and LLVM IR.

The C is compiled with ``gcc -std=c99 -O2 -Wall -Werror`` (skipped only where gcc is absent)
and called through ctypes on the op table's cases, against the reference back end
(``target="python"``); the ``.py`` module is imported in a fresh interpreter."""
import ctypes
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad.emit_c import C_TYPES, unsupported_ops

from test_derivatives import ARRAY_FUNCTIONS, BINARY, NUMPY_BINARY, NUMPY_UNARY, UNARY

ROOT = pathlib.Path(__file__).resolve().parents[1]
GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc is not installed")
CFLAGS = ["-std=c99", "-O2", "-Wall", "-Werror", "-Wextra", "-pedantic", "-Wshadow", "-Wconversion"]
_CTYPES = {"float64": ctypes.c_double, "float32": ctypes.c_float, "int64": ctypes.c_int64,
           "int32": ctypes.c_int32, "bool": ctypes.c_bool}


def _compile_shared(c_path: pathlib.Path, opt: str = "-O2") -> ctypes.CDLL:
    so = c_path.with_suffix(".so")
    flags = [opt if f == "-O2" else f for f in CFLAGS]
    subprocess.run([GCC, *flags, "-shared", "-fPIC", str(c_path), "-o", str(so), "-lm"],
                   check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(so))


_counter = iter(range(10 ** 6))   # one library file per call: dlopen caches by path


def _call_c(f, tmp_path, *args, opt="-O2"):
    """Export ``f`` for ``args``, compile it (gcc ``opt``), call it: the outputs as a list of
    arrays."""
    path = tmp_path / f"f{next(_counter)}.c"
    sg.export(f, path, *args)
    assert path.with_suffix(".h").exists()
    lib = _compile_shared(path, opt)
    graph = f._inspect_entry(*args).graph
    call = []
    for x, value in zip(graph.inputs, args):
        if x is None:
            continue
        if x.ndim:
            a = np.ascontiguousarray(value, dtype=x.dtype)
            call.append(a.ctypes.data_as(ctypes.c_void_p))
            call.append(a)   # kept alive below
        else:
            call.append(_CTYPES[x.dtype](value))
    outs = [np.zeros(max(o.size, 1), dtype=o.dtype) for o in graph.outputs]
    pointers = [c for c in call if not isinstance(c, np.ndarray)]
    pointers += [o.ctypes.data_as(ctypes.c_void_p) for o in outs]
    fn = getattr(lib, _c_name(graph))
    fn.restype = ctypes.c_int
    assert fn(*pointers) == 0
    return [o.reshape(g.shape) for o, g in zip(outs, graph.outputs)]


def _c_name(graph):
    from symgrad.emit_python import function_name
    return function_name(graph)


def _flat(result):
    if isinstance(result, tuple):
        out = []
        for r in result:
            out.extend(_flat(r))
        return out
    return [np.asarray(result)]


def _compare(f, tmp_path, *args, rtol=1e-12):
    got = _call_c(f, tmp_path, *args)
    want = _flat(f(*args))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-14)


def test_every_op_has_a_c_rule():
    assert unsupported_ops() == []


@needs_gcc
@pytest.mark.parametrize("name, fn, low, high", UNARY, ids=[u[0] for u in UNARY])
def test_unary_gradient_in_c(name, fn, low, high, tmp_path):
    x = np.random.default_rng(0).uniform(low, high, (2, 3))
    _compare(sg.grad(fn, target="python"), tmp_path, x)


@needs_gcc
@pytest.mark.parametrize("name, fn, low, high", BINARY, ids=[b[0] for b in BINARY])
def test_binary_gradient_in_c(name, fn, low, high, tmp_path):
    rng = np.random.default_rng(1)
    x, y = rng.uniform(low, high, (3, 1)), rng.uniform(low, high, (4,))   # broadcasting
    _compare(sg.grad(fn, wrt=(0, 1), target="python"), tmp_path, x, y)
    _compare(sg.value_and_grad(fn, wrt=(0, 1), target="python"), tmp_path,
             float(x[0, 0]), float(y[1]))


@needs_gcc
@pytest.mark.parametrize("name, fn, shape", ARRAY_FUNCTIONS, ids=[a[0] for a in ARRAY_FUNCTIONS])
def test_array_gradient_in_c(name, fn, shape, tmp_path):
    x = np.random.default_rng(4).uniform(0.5, 1.5, shape)
    _compare(sg.grad(fn, target="python"), tmp_path, x)


@needs_gcc
def test_float32_and_integer_data_in_c(tmp_path):
    def lookup(table, labels, scale):
        return np.sum(np.tanh(table[labels] * scale) ** 2)
    table = np.random.default_rng(7).standard_normal((3, 4)).astype(np.float32)
    labels = np.array([2, 0, 2], dtype=np.int64)
    g = sg.grad(lookup, target="python")
    got = _call_c(g, tmp_path, table, labels, np.float32(1.5))
    assert got[0].dtype == np.float32
    np.testing.assert_allclose(got[0], g(table, labels, np.float32(1.5)), rtol=2e-6, atol=1e-7)


@needs_gcc
def test_static_arguments_are_baked(tmp_path):
    def power_sum(x, k):
        return np.sum(x ** k)
    g = sg.grad(power_sum, target="python")
    x = np.linspace(0.5, 1.5, 5)
    got = _call_c(g, tmp_path, x, 3)
    np.testing.assert_allclose(got[0], 3 * x ** 2, rtol=1e-14)
    (source,) = tmp_path.glob("f*.c")
    assert "k" in source.read_text().split("Static")[1].splitlines()[0]


@needs_gcc
@pytest.mark.parametrize("example", ["quickstart", "softmax"])
def test_examples_in_c_with_the_demo_main(example, tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    if example == "quickstart":
        from quickstart_defs import f
        g, args = f.grad, (1.0, 2.0)
    else:
        import stable_softmax
        g = sg.grad(stable_softmax.stop_gradient_max)
        args = (np.array([1.0, 2.0, 0.5, -1.0]) + 1000.0, np.array([0.0, 1.0, 0.0, 0.0]))
    path = sg.export(g, tmp_path / "grad.c", *args)
    exe = tmp_path / "grad"
    subprocess.run([GCC, *CFLAGS, "-DSYMGRAD_DEMO_MAIN", str(path), "-o", str(exe), "-lm"],
                   check=True, capture_output=True, text=True)
    printed = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    values = [float(v) for line in printed.splitlines() for v in line.split(":")[1].split()]
    want = np.concatenate([np.ravel(r) for r in _flat(g(*args))])
    np.testing.assert_allclose(values, want, rtol=1e-13)
    assert '#include "grad.h"' in path.read_text()
    assert "int grad_" in (tmp_path / "grad.h").read_text()


def test_python_module_imports_in_a_fresh_interpreter(tmp_path):
    def f(x):
        w = np.arange(100.0).reshape(10, 10) / 7.0   # a constant larger than the literal limit
        c = np.array([1.0, -2.0, 0.5])
        return np.sum(np.tanh(x @ w)) + np.sum(c * x[:3])
    g = sg.grad(f, target="python")
    x = np.linspace(-1, 1, 10)
    path = sg.export(g, tmp_path / "grad.py", x)
    np.save(tmp_path / "x.npy", x)
    script = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import numpy as np; import grad; "
              f"np.save({str(tmp_path / 'out.npy')!r}, grad.grad_f(np.load({str(tmp_path / 'x.npy')!r}))); "
              "print(sorted(m for m in sys.modules if m.split('.')[0] == 'symgrad'))")
    run = subprocess.run([sys.executable, "-I", "-c", script], cwd=tmp_path, check=True,
                         capture_output=True, text=True)
    assert run.stdout.strip() == "[]"            # needs only NumPy
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), g(x))
    assert "import numpy as np" in path.read_text()


def test_llvm_ir_export_parses(tmp_path):
    from llvmlite import binding as llvm
    g = sg.grad(lambda x: np.sum(np.sin(x) * x))
    path = sg.export(g, tmp_path / "grad.ll", np.ones(4))
    module = llvm.parse_assembly(path.read_text())
    module.verify()
    assert "sg_run" in [f.name for f in module.functions]


def test_export_uses_the_last_call_and_rejects_unknown_suffixes(tmp_path):
    g = sg.grad(lambda x: x * x, target="python")
    g(3.0)
    assert "double x" in sg.export(g, tmp_path / "g.c").read_text()
    with pytest.raises(ValueError, match=r"\.c, \.ll, \.py"):
        sg.export(g, tmp_path / "g.txt")


def _updates(x):
    y = np.zeros_like(x)
    y[1:4] = x[:3] * 2.0
    y[0] += x[4]
    y[::2] += np.sin(x[:3])
    return np.sum(y * y * x)


@needs_gcc
def test_array_updates_in_c(tmp_path):
    x = np.linspace(0.2, 1.2, 6)
    _compare(sg.grad(_updates, target="python"), tmp_path, x)
    _compare(sg.differentiate(_updates, target="python"), tmp_path, x)


def test_command_line_export(tmp_path):
    out = tmp_path / "grad.py"
    run = subprocess.run([sys.executable, "-m", "symgrad", str(ROOT / "examples" / "quickstart_defs.py"),
                          "f", "--wrt", "0,1", "--arg", "1.0", "--arg", "2.0", "--export", str(out)],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    assert str(out) in run.stdout
    namespace = {}
    exec(out.read_text(), namespace)
    assert namespace["grad_f"](1.0, 2.0) == pytest.approx((-0.13355916312076843, -0.0511924587568241), rel=1e-15)


@needs_gcc
@pytest.mark.parametrize("name, fn, low, high", UNARY, ids=[u[0] for u in UNARY])
def test_unary_gradient_in_c_float32(name, fn, low, high, tmp_path):
    x = np.random.default_rng(3).uniform(low, high, 6).astype(np.float32)
    g = sg.grad(fn, target="python")
    got = _call_c(g, tmp_path, x)
    assert got[0].dtype == np.float32
    np.testing.assert_allclose(got[0], g(x), rtol=1e-5, atol=1e-6)


@needs_gcc
def test_reductions_to_one_element_in_one_scope(tmp_path):
    """Several keepdims reductions whose results are all length-1 axes: no loop around them,
    each accumulator still in a block of its own."""
    def f(x):
        return np.sum(x * np.sum(x, keepdims=True) + np.max(x, keepdims=True) * np.min(x, axis=(0, 1), keepdims=True))
    x = np.random.default_rng(5).uniform(-1, 1, (3, 4))
    _compare(sg.grad(f, target="python"), tmp_path, x)
    _compare(sg.differentiate(f, target="python"), tmp_path, x)


@needs_gcc
def test_boolean_and_int32_data_in_c(tmp_path):
    def masked(x, mask, idx):
        return np.sum(np.where(mask, np.sin(x), x * x)[idx] * 2.0)
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, 6)
    mask = x > 0
    idx = np.array([5, 0, -1, 3], dtype=np.int32)
    g = sg.grad(masked, target="python")
    got = _call_c(g, tmp_path, x, mask, idx)
    np.testing.assert_allclose(got[0], g(x, mask, idx), rtol=1e-14)


@pytest.mark.parametrize("name, fn, shape", ARRAY_FUNCTIONS, ids=[a[0] for a in ARRAY_FUNCTIONS])
def test_python_module_matches_the_reference(name, fn, shape):
    """The exported module's text, run on its own, computes what target="python" does."""
    from symgrad.export import python_module
    from symgrad.emit_python import function_name
    g = sg.grad(fn, target="python")
    x = np.random.default_rng(4).uniform(0.5, 1.5, shape)
    graph = g._inspect_entry(x).graph
    namespace = {}
    exec(compile(python_module(graph), "<exported>", "exec"), namespace)
    np.testing.assert_array_equal(namespace[function_name(graph)](x), g(x))


if GCC is not None:
    from hypothesis import given, settings, strategies as st

    from test_random_programs import _load, program_text

    @settings(max_examples=15, deadline=None)
    @given(text=program_text(), seed=st.integers(0, 2 ** 16))
    def test_random_programs_in_c(tmp_path_factory, text, seed):
        """Random source programs: the exported C of value_and_grad against target="python"."""
        tmp = tmp_path_factory.mktemp("c_programs")
        fn = _load(text, tmp)
        rng = np.random.default_rng(seed)
        x = rng.uniform(-1.5, 1.5, 4) + np.array([0.0123, -0.0234, 0.0345, -0.0456])   # no ties
        y = float(rng.uniform(-1.5, 1.5)) + 0.00567
        vg = sg.value_and_grad(fn, wrt=(0, 1), target="python")
        got, want = _call_c(vg, tmp, x, y), _flat(vg(x, y))
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13, err_msg=text)


@needs_gcc
@pytest.mark.parametrize("name, fn, low, high", NUMPY_UNARY, ids=[u[0] for u in NUMPY_UNARY])
def test_numpy_unary_value_and_gradient_in_c(name, fn, low, high, tmp_path):
    """The NumPy-coverage functions (issue 12) through the C back end: libm names, rounding,
    signed zeros of % and //."""
    x = np.random.default_rng(2).uniform(low, high, (2, 3))
    _compare(sg.value_and_grad(fn, target="python"), tmp_path, x)


@needs_gcc
@pytest.mark.parametrize("name, fn, low, high", NUMPY_BINARY, ids=[b[0] for b in NUMPY_BINARY])
def test_numpy_binary_value_and_gradient_in_c(name, fn, low, high, tmp_path):
    rng = np.random.default_rng(3)
    x, y = rng.uniform(low, high, (3, 1)), rng.uniform(low, high, (4,))
    _compare(sg.value_and_grad(fn, wrt=(0, 1), target="python"), tmp_path, x, y)
