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
    from symgrad.codegen.ptx_plan import BY_VALUE
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
        kernel = next(k for _, k in ptx.all_kernels(plan) if k.name == name)   # loop bodies too
        assert bx == ptx.BLOCK and gx >= 1 and extra == 0
        slots = (ctypes.c_void_p * len(kernel.params)).from_address(params)
        args = []
        for b, slot in zip(kernel.params, slots):
            buf = plan.buffers[b]
            if buf.kind in BY_VALUE:   # a 0-d argument, a loop body's index
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


def _same_index_error(build, *args):
    """``build(target)``'s call on ``args`` raises on target='cuda' the IndexError it raises
    on target='cpu', message and all."""
    with pytest.raises(IndexError) as want:
        build("cpu")(*args)
    with pytest.raises(IndexError) as got:
        build("cuda")(*args)
    assert str(got.value) == str(want.value) and "out of bounds" in str(got.value)


def _gather_loss(x, i):
    return np.sum(np.sin(x[i]) * x[i])


def _takes(x, i, rows):
    return np.sum(np.take(x, i) + np.take_along_axis(rows, i[:, None] % 3, axis=1)[:, 0])


def _writes(x, i):
    y = np.ones(5)
    y[i] = x
    z = np.zeros(5)
    z[i] += x * x
    np.add.at(z, i, x)
    return y, z


def _loop_gather(x, i):             # a gather in a loop body: a kernel of the body's plan
    total = x[0] * 0.0
    for k in range(i.shape[0]):
        total = total + x[i[k]] * x[k]
    return total


def test_out_of_range_indices_raise_index_error_as_on_the_cpu(fake_gpu):
    """A traced index out of range: the kernels clamp it (memory stays safe) and note it in
    the call's error word, and the launcher raises the CPU target's IndexError after the
    kernels, for values, gradients and vmap; the next call with good indices is right."""
    x, rows = np.linspace(0.5, 1.5, 5), np.arange(15.0).reshape(5, 3)
    good, high, low = np.array([0, 4, -5, 2, 2]), np.array([0, 5, 1, 1, 1]), np.array([-6, 0, 1, 1, 1])
    for bad in (high, low):
        _same_index_error(lambda t: sg.differentiate(_gather_loss, target=t), x, bad)
        _same_index_error(lambda t: sg.grad(_gather_loss, target=t), x, bad)   # a scatter-add
        _same_index_error(lambda t: sg.differentiate(_takes, target=t), x, bad, rows)
        _same_index_error(lambda t: sg.differentiate(_writes, target=t), x, bad)
        _same_index_error(lambda t: sg.grad(_loop_gather, target=t), x, bad)
        batch = np.stack([good, bad])
        _same_index_error(lambda t: sg.vmap(_gather_loss, in_axes=(None, 0), target=t), x, batch)
        _same_index_error(lambda t: sg.vmap(sg.grad(_gather_loss), in_axes=(None, 0), target=t),
                          x, batch)
    for build, args in ((lambda t: sg.value_and_grad(_gather_loss, target=t), (x, good)),
                        (lambda t: sg.differentiate(_takes, target=t), (x, good, rows)),
                        (lambda t: sg.differentiate(_writes, target=t), (x, good)),
                        (lambda t: sg.grad(_loop_gather, target=t), (x, good))):
        got, want = build("cuda")(*args), build("python")(*args)
        for a, b in zip(_flat(got), _flat(want), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12)


def _flat(t):
    return [x for e in t for x in _flat(e)] if isinstance(t, tuple) else [t]


def test_the_error_word_of_device_results(fake_gpu):
    """With device arrays in and out the launcher still reads the error word (the call's one
    synchronisation) and raises; a good call after it is right (the word is zeroed per call)."""
    from symgrad.codegen.cuda import DeviceArray
    x = np.linspace(0.5, 1.5, 5)
    g = sg.grad(_gather_loss, target="cuda")
    dx = DeviceArray.from_host(x)
    with pytest.raises(IndexError, match="out of bounds"):
        g(dx, DeviceArray.from_host(np.array([0, 9, 1])))
    got = g(dx, DeviceArray.from_host(np.array([0, 4, 1])))
    assert isinstance(got, DeviceArray)
    np.testing.assert_allclose(got.get(), sg.grad(_gather_loss, target="python")(x, np.array([0, 4, 1])),
                               rtol=1e-12)


def _halvings(x):
    t = x * 1.0
    n = 0.0
    while np.max(t) > 1.0:         # 40 trips for 2**40: more than the first cap (16)
        t = t * 0.5
        n = n + 1.0
    return n + np.sum(t * t)


def _inverse_sum(A):
    return np.sum(np.linalg.inv(A) * A)


def test_the_guards_raise_on_cuda_as_on_the_cpu(fake_gpu):
    """The other run-time checks are hidden outputs of the graph (symgrad.guards), computed by
    the kernels like any value: a while loop's cap grows, a singular matrix raises NumPy's
    LinAlgError, the side of an ``if`` on data that raised while tracing raises when taken."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_branch_errors import X, index_in_else
    x = np.array([2.0 ** 40, 3.0])
    for build in (sg.differentiate, sg.grad):
        np.testing.assert_allclose(build(_halvings, target="cuda")(x),
                                   build(_halvings, target="python")(x), rtol=1e-12)
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    for build in (sg.differentiate, sg.grad):
        with pytest.raises(np.linalg.LinAlgError) as want:
            build(_inverse_sum, target="cpu")(singular)
        with pytest.raises(np.linalg.LinAlgError) as got:
            build(_inverse_sum, target="cuda")(singular)
        assert str(got.value) == str(want.value)
        np.testing.assert_allclose(build(_inverse_sum, target="cuda")(singular + np.eye(2)),
                                   build(_inverse_sum, target="python")(singular + np.eye(2)))
    _same_index_error(lambda t: sg.differentiate(index_in_else, target=t), -np.ones(3), X)
    np.testing.assert_allclose(sg.differentiate(index_in_else, target="cuda")(np.ones(3), X), 9.0)


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
