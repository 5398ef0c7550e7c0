"""target="cuda": clear errors without a GPU; on a GPU (marker ``gpu``), results equal
target="python" for the examples and every op case, with NumPy and device-array inputs."""
import os
import sys

import numpy as np
import pytest

import symgrad as sg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _gpu_arch():
    from symgrad.codegen.cuda import device_arch
    return device_arch()


HAVE_GPU = _gpu_arch() is not None
requires_gpu = pytest.mark.skipif(not HAVE_GPU, reason="needs an NVIDIA GPU, its driver and cuda-bindings")


@pytest.fixture(scope="module", autouse=True)
def ptx_compiles_in_a_child(tmp_path_factory):
    """On a GPU machine, first compile every case for the device's architecture in a child
    process: an LLVM abort then fails a test instead of killing pytest; the in-process
    compilations below repeat the same deterministic inputs."""
    if not HAVE_GPU:
        return
    import subprocess
    d = tmp_path_factory.mktemp("ptx_gpu")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "test_ptx.py"), "--emit", str(d),
                        _gpu_arch()], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]


def w1(x, y):
    return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(x * y)


def rosen(x):
    return sg.reduce_sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is present")
def test_no_gpu_is_a_clear_runtime_error():
    f = sg.grad(w1, wrt=(0, 1), target="cuda")
    x = np.linspace(0.1, 1, 5)
    with pytest.raises(RuntimeError, match="cuda-bindings|driver|GPU"):
        f(x, x)
    # and the failure is remembered, not retried into a crash
    with pytest.raises(RuntimeError, match="cuda-bindings|driver|GPU"):
        f(x, x)


def test_device_array_standins_trace_by_shape():
    from symgrad.codegen.cuda import host_standins

    class Fake:
        __cuda_array_interface__ = {"shape": (4, 3), "typestr": "<f4", "data": (0, False), "version": 3}
    (s,) = host_standins([Fake()])
    assert s.shape == (4, 3) and s.dtype == np.float32 and s.strides == (0, 0)


def _compare(f_cuda, f_py, *args, rtol):
    got, want = f_cuda(*args), f_py(*args)
    flat = lambda t: [x for e in t for x in flat(e)] if isinstance(t, tuple) else [t]  # noqa: E731
    for a, b in zip(flat(got), flat(want)):
        assert np.shape(a) == np.shape(b) and np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 1000, 300001])
def test_w1_value_and_gradient(dtype, n):
    x = np.linspace(-2, 2, n).astype(dtype)
    y = np.linspace(0.5, 3, n).astype(dtype)
    rtol = 2e-5 if dtype == "float32" else 1e-12
    _compare(sg.value_and_grad(w1, wrt=(0, 1), target="cuda"),
             sg.value_and_grad(w1, wrt=(0, 1), target="python"), x, y, rtol=rtol)
    _compare(sg.differentiate(w1, target="cuda"), sg.differentiate(w1, target="python"), x, y, rtol=rtol)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_and_rosenbrock(dtype):
    from examples import stable_softmax
    rtol = 1e-4 if dtype == "float32" else 1e-10
    rng = np.random.default_rng(0)
    x = rng.normal(size=5000).astype(dtype)
    t = rng.random(5000).astype(dtype)
    for fn in stable_softmax.VARIANTS[1:]:
        _compare(sg.value_and_grad(fn, target="cuda"), sg.value_and_grad(fn, target="python"), x, t, rtol=rtol)
    z = np.linspace(-1.5, 1.5, 1000).astype(dtype)
    _compare(sg.value_and_grad(rosen, target="cuda"), sg.value_and_grad(rosen, target="python"), z, rtol=rtol)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_op_case(dtype):
    import test_ptx
    from test_ptx_emulate import _flat, _values
    from symgrad.codegen.cuda import run_cuda
    from symgrad.runtime import finish
    from symgrad.emit_python import compile_python
    tol = 3e-5 if dtype == "float32" else 1e-11
    for name, graph in test_ptx._graphs(dtype):
        values = _values(graph)
        got = _flat(run_cuda(test_ptx._Entry(graph), values))
        fn, _ = compile_python(graph)
        want = _flat(finish(fn(*values), graph, values))
        for i, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol, err_msg=f"{name} {i}")


@pytest.mark.gpu
@requires_gpu
def test_device_arrays_zero_copy_and_out():
    from symgrad.codegen.cuda import DeviceArray
    x = np.linspace(-2, 2, 10000)
    y = np.linspace(0.5, 3, 10000)
    g = sg.grad(w1, wrt=(0, 1), target="cuda")
    want = sg.grad(w1, wrt=(0, 1), target="python")(x, y)
    dx, dy = DeviceArray.from_host(x), DeviceArray.from_host(y)
    gx, gy = g(dx, dy)
    assert isinstance(gx, DeviceArray) and gx.shape == x.shape
    np.testing.assert_allclose(gx.get(), want[0], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gy), want[1], rtol=1e-12)
    ox, oy = DeviceArray.from_host(np.zeros_like(x)), DeviceArray.from_host(np.zeros_like(y))
    assert g(dx, dy, out=(ox, oy)) == (ox, oy)
    np.testing.assert_allclose(ox.get(), want[0], rtol=1e-12)
    hx, hy = np.empty_like(x), np.empty_like(y)
    g(x, y, out=(hx, hy))
    np.testing.assert_allclose(hy, want[1], rtol=1e-12)
    try:
        import cupy
    except ImportError:
        return
    cx, cy = cupy.asarray(x), cupy.asarray(y)
    rx, _ = g(cx, cy)
    assert isinstance(rx, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(rx), want[0], rtol=1e-12)


def _gather_loss(x, i):
    return np.sum(np.sin(x[i]) * x[i])


@pytest.mark.gpu
@requires_gpu
def test_an_index_out_of_range_raises_on_the_gpu():
    """Many threads meet bad indices at once (an atomic max into the error word): the call
    raises target='cpu''s IndexError, for the value and the gradient (a scatter-add); a good
    call afterwards is right (the word is zeroed per call)."""
    from symgrad.codegen.cuda import DeviceArray
    x = np.linspace(0.5, 1.5, 1000)
    bad = np.arange(100000) % 1500 - 1200      # a third out of range, both ends
    good = bad % 1000
    for build in (sg.differentiate, sg.grad):
        with pytest.raises(IndexError) as want:
            build(_gather_loss, target="cpu")(x, bad)
        with pytest.raises(IndexError) as got:
            build(_gather_loss, target="cuda")(x, bad)
        assert str(got.value) == str(want.value)
        with pytest.raises(IndexError):            # device inputs and results
            build(_gather_loss, target="cuda")(DeviceArray.from_host(x), DeviceArray.from_host(bad))
        np.testing.assert_allclose(build(_gather_loss, target="cuda")(x, good),
                                   build(_gather_loss, target="python")(x, good), rtol=1e-10)
