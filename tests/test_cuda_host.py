"""The host side of target="cuda" (codegen.cuda) against a stand-in for the CUDA driver API:
device memory is host memory and a launched kernel runs its CPU emulation
(codegen.ptx_emulate). This checks what a GPU run would check on the host: the sequence of
driver calls, parameter packing by address, pointers and scalars by value, the memory pool,
zeroing for scatters, zero-copy device inputs, ``out=`` and result conversion, without a GPU."""
import ctypes
import enum
import os
import sys
import types

import numpy as np
import pytest

import symgrad as sg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Result(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1


def _fake_driver(calls):
    from symgrad.codegen import ptx, ptx_emulate
    d = types.SimpleNamespace()
    d.CUresult = _Result
    d.CUdevice_attribute = types.SimpleNamespace(
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR=75, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR=76,
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT=16, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK=1)
    attrs = {75: 9, 76: 0, 16: 132, 1: 1024}
    memory, modules = {}, {}
    ok = _Result.CUDA_SUCCESS

    def log(name, fn):
        def wrapped(*a):
            calls.append(name)
            return fn(*a)
        wrapped.__name__ = name
        return wrapped

    def alloc(n):
        buf = ctypes.create_string_buffer(n)
        memory[ctypes.addressof(buf)] = buf
        return ok, ctypes.addressof(buf)

    def load(image):
        text = ctypes.string_at(image).decode()
        for progs in list(ptx._programs.values()):
            for prog in progs.values():
                if prog.ptx == text:
                    modules[len(modules) + 1] = ptx_emulate.compile_plan(prog.plan.graph)
                    return ok, len(modules)
        return _Result.CUDA_ERROR_INVALID_VALUE, None

    def launch(fn, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        (plan, fns), name = fn
        kernel = next(k for k in plan.kernels if k.name == name)
        assert bx == ptx.BLOCK and gx >= 1 and extra == 0
        slots = (ctypes.c_void_p * len(kernel.params)).from_address(params)
        args = []
        for b, slot in zip(kernel.params, slots):
            buf = plan.buffers[b]
            if buf.kind == "scalar":
                from symgrad.codegen.dtypes import ctype
                args.append(ctype(buf.dtype).from_address(slot).value)
            else:
                args.append(ctypes.c_void_p.from_address(slot).value)
        fns[name](*args)
        return (ok,)

    for name, fn in {
        "cuInit": lambda flags: (ok,),
        "cuDeviceGetCount": lambda: (ok, 1),
        "cuDeviceGet": lambda i: (ok, 100 + i),
        "cuDevicePrimaryCtxRetain": lambda dev: (ok, "ctx"),
        "cuCtxSetCurrent": lambda ctx: (ok,),
        "cuDeviceGetAttribute": lambda a, dev: (ok, attrs[a]),
        "cuDeviceGetName": lambda n, dev: (ok, b"Fake H200\0\0"),
        "cuGetErrorName": lambda err: (ok, err.name.encode()),
        "cuModuleLoadData": load,
        "cuModuleGetFunction": lambda m, name: (ok, (modules[m], name.decode())),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor": lambda fn, bs, sh: (ok, 8),
        "cuMemAlloc": alloc,
        "cuMemFree": lambda p: (memory.pop(int(p)) and ok,),
        "cuMemcpyHtoD": lambda dst, src, n: (ctypes.memmove(int(dst), src, n) and ok,),
        "cuMemcpyDtoH": lambda dst, src, n: (ctypes.memmove(dst, int(src), n) and ok,),
        "cuMemcpyDtoDAsync": lambda dst, src, n, s: (ctypes.memmove(int(dst), int(src), n) and ok,),
        "cuMemsetD8Async": lambda p, v, n, s: (ctypes.memset(int(p), v, n) and ok,),
        "cuStreamSynchronize": lambda s: (ok,),
        "cuCtxSynchronize": lambda: (ok,),
        "cuLaunchKernel": launch,
        "cuEventCreate": lambda flags: (ok, object()),
        "cuEventRecord": lambda ev, s: (ok,),
        "cuEventSynchronize": lambda ev: (ok,),
        "cuEventElapsedTime": lambda a, b: (ok, 1.5),
        "cuDriverGetVersion": lambda: (ok, 12080),
    }.items():
        setattr(d, name, log(name, fn))
    d.CUstream = lambda h: h
    d.CUdeviceptr = lambda p: int(p)
    return d


@pytest.fixture
def fake_gpu(monkeypatch):
    from symgrad.codegen import cuda, ptx
    calls = []
    monkeypatch.setattr(cuda, "_driver", lambda: _fake_driver(calls))
    # No NVPTX code generation in this process (it can abort; test_ptx runs it in a child):
    # the stand-in driver runs the emulation, so PTX is only a unique name for the program.
    counter = iter(range(10 ** 9))
    monkeypatch.setattr(ptx, "compile_ptx", lambda text, arch, kernels: f"// {arch} {kernels} #{next(counter)}")
    monkeypatch.setattr(ptx, "_programs", __import__("weakref").WeakKeyDictionary())
    monkeypatch.setattr(cuda.Device, "_instance", None)
    monkeypatch.setattr(cuda.Device, "_failure", None)
    yield calls
    cuda.Device._instance = None


def w1(x, y):
    return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(x * y)


def test_numpy_inputs_give_numpy_results(fake_gpu):
    from symgrad.codegen import cuda
    assert cuda.device_arch() == "sm_90"
    x, y = np.linspace(-2, 2, 1001), np.linspace(0.5, 3, 1001)
    for dt, tol in (("float64", 1e-12), ("float32", 2e-5)):
        a, b = x.astype(dt), y.astype(dt)
        got = sg.value_and_grad(w1, wrt=(0, 1), target="cuda")(a, b)
        want = sg.value_and_grad(w1, wrt=(0, 1), target="python")(a, b)
        assert isinstance(got[1][0], np.ndarray) and got[1][0].dtype == dt
        for g, w in zip([got[0], *got[1]], [want[0], *want[1]]):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    assert "cuLaunchKernel" in fake_gpu and fake_gpu.count("cuModuleLoadData") == 2


def test_scalars_reductions_scatter_and_out(fake_gpu):
    def loss(w, x, labels, scale):
        z = x @ w
        z = z - sg.stop_gradient(sg.reduce_max(z, axis=1, keepdims=True))
        p = np.exp(z) / sg.reduce_sum(np.exp(z), axis=1, keepdims=True)
        return -scale * sg.reduce_mean(np.take(np.log(p), labels, axis=1))
    rng = np.random.default_rng(0)
    w, x = rng.normal(size=(5, 3)), rng.normal(size=(40, 5))
    labels = rng.integers(0, 3, 40)
    f_cuda = sg.value_and_grad(loss, target="cuda")
    f_py = sg.value_and_grad(loss, target="python")
    got, want = f_cuda(w, x, labels, 0.5), f_py(w, x, labels, 0.5)
    assert isinstance(got[0], float)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10)
    out = np.empty((5, 3))
    g = sg.grad(loss, target="cuda")
    assert g(w, x, labels, 0.5, out=out) is out
    np.testing.assert_allclose(out, want[1], rtol=1e-10)

    def gather(t, k):
        return sg.reduce_sum(t[k] * t[k])   # gradient: scatter-add with repeated indices
    t, k = rng.normal(size=6), np.array([0, 2, 2, 5, -1])
    np.testing.assert_allclose(sg.grad(gather, target="cuda")(t, k), sg.grad(gather, target="python")(t, k))
    assert "cuMemsetD8Async" in fake_gpu


def test_device_arrays_zero_copy_and_device_out(fake_gpu):
    from symgrad.codegen.cuda import DeviceArray
    x, y = np.linspace(-2, 2, 777), np.linspace(0.5, 3, 777)
    want = sg.grad(w1, wrt=(0, 1), target="python")(x, y)
    g = sg.grad(w1, wrt=(0, 1), target="cuda")
    dx, dy = DeviceArray.from_host(x), DeviceArray.from_host(y)
    copies = fake_gpu.count("cuMemcpyHtoD")
    gx, gy = g(dx, dy)
    assert fake_gpu.count("cuMemcpyHtoD") == copies          # inputs used in place
    assert isinstance(gx, DeviceArray) and gx.shape == (777,) and gx.dtype == np.float64
    np.testing.assert_allclose(gx.get(), want[0], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gy), want[1], rtol=1e-12)
    ox, oy = DeviceArray.from_host(np.zeros(777)), DeviceArray.from_host(np.zeros(777))
    assert g(dx, dy, out=(ox, oy)) == (ox, oy)
    np.testing.assert_allclose(ox.get(), want[0], rtol=1e-12)
    np.testing.assert_allclose(oy.get(), want[1], rtol=1e-12)
    with pytest.raises(TypeError, match="does not match"):
        g(dx, dy, out=(DeviceArray.from_host(np.zeros(777, np.float32)), oy))
    # the source and ptx of a function called with device arrays are still inspectable
    assert "np.sin" in g.source or "sin" in g.source
    # memory comes back to the pool: a second call allocates nothing new
    g(dx, dy, out=(ox, oy))
    allocs = fake_gpu.count("cuMemAlloc")
    g(dx, dy, out=(ox, oy))
    assert fake_gpu.count("cuMemAlloc") == allocs


def test_gpu_bench_script_end_to_end(fake_gpu, tmp_path, monkeypatch):
    """benchmarks/gpu_bench.py (run by gpu_check.sh) on the stand-in: checks results against
    NumPy, times, and appends a Markdown table; peers that are not installed are noted."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import gpu_bench
    results = tmp_path / "RESULTS.md"
    monkeypatch.setattr(sys, "argv", ["gpu_bench.py", "--n", "3000", "--reps", "2",
                                      "--results", str(results), "--tests", "9 passed"])
    gpu_bench.main()
    text = results.read_text()
    assert "| symgrad target=cuda | float32 |" in text and "| symgrad target=cuda | float64 |" in text
    assert "device-to-device copy" in text and "GPU tests: 9 passed" in text and "Fake H200" in text
