"""Running symgrad's PTX on an NVIDIA GPU through the CUDA driver API (``cuda-bindings``).

``target="cuda"`` (``BACKEND``) calls :func:`run_cuda`: the signature's kernels (``codegen.ptx``)
are compiled for the present GPU's architecture, loaded once per process (the driver
JIT-compiles the PTX), and launched on the legacy default stream in plan order. Launch sizes come from the device: blocks
of ``ptx.BLOCK`` threads, and as many blocks as the occupancy calculator says fit on all SMs
(grid-stride loops cover the rest).

NumPy inputs are copied to the device and results come back as NumPy arrays. Arrays exposing
``__cuda_array_interface__`` (CuPy, PyTorch, Numba, :class:`DeviceArray`) are used in place
(zero-copy), and then results stay on the device: CuPy or PyTorch arrays when the inputs were,
otherwise :class:`DeviceArray`. Device memory is recycled through a small per-size pool, so a
call in a loop does not pay for ``cuMemAlloc``.

A traced index out of range (a gather, a scatter-add) cannot raise inside a kernel: the kernel
reads a position in bounds and notes it in the call's error word (``ptx_plan.add_error_word``),
which the launcher zeroes before the kernels and reads after them, raising target='cpu''s
IndexError (``symgrad.guards.KERNEL_ERRORS``).

``cuda-bindings`` is the optional extra ``symgrad[cuda]``; without it, a driver, or a GPU,
:class:`CudaUnavailable` (a ``RuntimeError``) says which is missing.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from symgrad.backends import Backend
from symgrad.guards import kernel_error
from symgrad.runtime import deliver, finish_flat, zero_standin

from . import ptx as ptxmod
from .dtypes import ctype, storage
from .ptx_plan import BY_VALUE



class CudaUnavailable(RuntimeError):
    """target='cuda' cannot run here: no cuda-bindings, no driver, or no GPU."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise CudaUnavailable(
            "target='cuda' needs the CUDA driver API bindings: pip install 'symgrad[cuda]' "
            f"(the cuda-bindings package); import failed: {e}") from None
    return driver


_np_dtype = storage   # a buffer's bytes (bool: uint8)


class Device:
    """The process's CUDA device 0: primary context, properties, loaded modules, memory pool."""

    _instance = None
    _failure = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> "Device":
        if cls._instance is None:
            with cls._lock:
                if cls._instance is None:
                    if cls._failure is not None:
                        raise CudaUnavailable(cls._failure)
                    try:
                        cls._instance = cls()
                    except CudaUnavailable as e:
                        cls._failure = str(e)
                        raise
        inst = cls._instance
        inst.make_current()
        return inst

    def __init__(self):
        d = self.drv = _driver()
        try:
            err, = d.cuInit(0)
        except Exception as e:   # noqa: BLE001 - cuda-bindings raises when libcuda.so is absent
            raise CudaUnavailable(f"target='cuda': the NVIDIA driver (libcuda) could not be "
                                  f"loaded: {type(e).__name__}: {e}") from None
        if err != d.CUresult.CUDA_SUCCESS:
            raise CudaUnavailable(f"target='cuda': cuInit failed ({self.error_name(err)}); is an "
                                  "NVIDIA GPU present and its driver loaded?")
        count = self.call(d.cuDeviceGetCount)
        if count < 1:
            raise CudaUnavailable("target='cuda': the CUDA driver reports no GPU")
        self.device = self.call(d.cuDeviceGet, 0)
        self.context = self.call(d.cuDevicePrimaryCtxRetain, self.device)
        self.make_current()
        A = d.CUdevice_attribute
        attr = lambda a: self.call(d.cuDeviceGetAttribute, a, self.device)   # noqa: E731
        self.cc = (attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                   attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.sms = attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.max_threads = attr(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        self.name = self.call(d.cuDeviceGetName, 256, self.device).split(b"\0")[0].decode()
        self.arch = f"sm_{self.cc[0]}{self.cc[1]}"
        self.stream = d.CUstream(0)     # the legacy default stream: ordered with CuPy/PyTorch defaults
        self.modules = {}               # (ptx text) -> {kernel name: (CUfunction, max blocks)}
        self.consts = {}                # (program id, buffer) -> allocation of a constant array
        self.pool: dict[int, list] = {}
        self.pool_lock = threading.Lock()

    # -- driver calls --------------------------------------------------------------------------
    def error_name(self, err) -> str:
        try:
            _, name = self.drv.cuGetErrorName(err)
            return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:   # noqa: BLE001
            return str(err)

    def call(self, fn, *args):
        res = fn(*args)
        err, rest = res[0], res[1:]
        if err != self.drv.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA driver call {fn.__name__} failed: {self.error_name(err)}")
        return rest[0] if len(rest) == 1 else rest

    def make_current(self):
        self.call(self.drv.cuCtxSetCurrent, self.context)

    @property
    def ptx_arch(self) -> str:
        """The architecture to compile for: the device's, or the newest older one LLVM knows
        (the driver JIT-compiles older PTX for newer GPUs)."""
        mine = self.cc[0] * 10 + self.cc[1]
        known = [a for a in ptxmod.KNOWN_ARCHS if int(a[3:]) <= mine]
        return self.arch if self.arch in ptxmod.KNOWN_ARCHS else (known[-1] if known else ptxmod.DEFAULT_ARCH)

    # -- modules -------------------------------------------------------------------------------
    def functions(self, prog: ptxmod.PtxProgram) -> dict:
        got = self.modules.get(prog.ptx)
        if got is None:
            image = np.frombuffer(prog.ptx.encode() + b"\0", dtype=np.uint8)
            try:
                module = self.call(self.drv.cuModuleLoadData, image.ctypes.data)
            except RuntimeError as e:
                raise RuntimeError(f"{e} while loading PTX for {prog.arch} on {self.name} "
                                   f"({self.arch})") from None
            got = {}
            for _, k in ptxmod.all_kernels(prog.plan):   # with the loop bodies' kernels
                fn = self.call(self.drv.cuModuleGetFunction, module, k.name.encode())
                per_sm = self.call(self.drv.cuOccupancyMaxActiveBlocksPerMultiprocessor,
                                   fn, ptxmod.BLOCK, 0)
                got[k.name] = (fn, max(1, per_sm) * self.sms)
            self.modules[prog.ptx] = got
        return got

    # -- memory --------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        nbytes = max(int(nbytes), 1)
        with self.pool_lock:
            free = self.pool.get(nbytes)
            if free:
                return free.pop()
        try:
            return int(self.call(self.drv.cuMemAlloc, nbytes))
        except RuntimeError:
            self.release_pool()
            return int(self.call(self.drv.cuMemAlloc, nbytes))

    def free(self, ptr: int, nbytes: int):
        with self.pool_lock:
            self.pool.setdefault(max(int(nbytes), 1), []).append(ptr)

    def release_pool(self):
        with self.pool_lock:
            pools, self.pool = self.pool, {}
        self.call(self.drv.cuCtxSynchronize)
        for ptrs in pools.values():
            for p in ptrs:
                self.call(self.drv.cuMemFree, self.drv.CUdeviceptr(p))

    def to_device(self, array: np.ndarray, ptr: int | None = None) -> int:
        array = np.ascontiguousarray(array)
        if ptr is None:
            ptr = self.alloc(array.nbytes)
        if array.nbytes:
            self.call(self.drv.cuMemcpyHtoD, self.drv.CUdeviceptr(ptr), array.ctypes.data, array.nbytes)
        return ptr

    def to_host(self, ptr: int, shape, dtype: str) -> np.ndarray:
        out = np.empty(shape, _np_dtype(dtype))
        if out.nbytes:
            self.call(self.drv.cuMemcpyDtoH, out.ctypes.data, self.drv.CUdeviceptr(ptr), out.nbytes)
        return out.view(bool) if dtype == "bool" else out

    def synchronize(self):
        self.call(self.drv.cuStreamSynchronize, self.stream)

    # -- launching -----------------------------------------------------------------------------
    def launch(self, fn, blocks: int, args: list):
        """Launch with ``args``: ints are device pointers, ctypes scalars pass by value."""
        holders = [a if isinstance(a, ctypes._SimpleCData) else ctypes.c_void_p(a) for a in args]
        params = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
        self.call(self.drv.cuLaunchKernel, fn, blocks, 1, 1, ptxmod.BLOCK, 1, 1, 0, self.stream,
                  ctypes.addressof(params), 0)


class DeviceArray:
    """A C-contiguous array in GPU memory (returned when the inputs were device arrays).

    It exposes ``__cuda_array_interface__`` (so ``cupy.asarray``/``torch.as_tensor`` take it
    without a copy) and ``__array__``/``get()`` to copy it to the host."""

    def __init__(self, ptr: int, shape, dtype: str, device: Device | None = None, owned=True):
        self.ptr, self.shape, self.dtype_name = int(ptr), tuple(shape), dtype
        self.dtype = np.dtype(bool) if dtype == "bool" else np.dtype(dtype)
        self._device, self._owned = device, owned

    @classmethod
    def from_host(cls, array) -> "DeviceArray":
        dev = Device.get()
        array = np.ascontiguousarray(array)
        name = array.dtype.name
        return cls(dev.to_device(array.view(np.uint8) if name == "bool" else array),
                   array.shape, name, dev)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": None, "version": 3, "stream": 1}

    def get(self) -> np.ndarray:
        dev = self._device or Device.get()
        dev.synchronize()
        return dev.to_host(self.ptr, self.shape, self.dtype_name)

    copy_to_host = get

    def __array__(self, dtype=None, copy=None):
        a = self.get()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype_name})"

    def __del__(self):
        if self._owned and self._device is not None:
            try:
                self._device.free(self.ptr, self.nbytes)
            except Exception:   # noqa: BLE001 - interpreter shutdown
                pass


def device_arch() -> str | None:
    """``"sm_XY"`` of the present GPU, or None (no bindings, driver or GPU); never raises."""
    try:
        return Device.get().ptx_arch
    except Exception:   # noqa: BLE001 - any failure means "no usable GPU"
        return None


def is_device_array(value) -> bool:
    return hasattr(value, "__cuda_array_interface__") and not isinstance(value, np.ndarray)


def host_standins(values) -> list:
    """Device arrays replaced by zero-memory NumPy arrays of the same shape and dtype: the
    tracer needs only shapes and dtypes, and must not copy device data to the host."""
    out = []
    for v in values:
        if is_device_array(v):
            cai = v.__cuda_array_interface__
            v = zero_standin(np.dtype(cai["typestr"]), cai["shape"])
        out.append(v)
    return out


def _device_pointer(value, dtype: str, shape, dev: Device, what: str) -> int:
    cai = value.__cuda_array_interface__
    dt = np.dtype(cai["typestr"])
    if dt.name != dtype or tuple(cai["shape"]) != tuple(shape):
        raise TypeError(f"{what}: device array of {dt} {tuple(cai['shape'])} does not match the "
                        f"compiled signature {dtype} {tuple(shape)}")
    strides = cai.get("strides")
    if strides is not None and tuple(strides) != tuple(np.empty(shape, dt).strides) and np.prod(shape) > 1:
        raise ValueError(f"{what}: device arrays must be C-contiguous (copy it first)")
    stream = cai.get("stream")
    if stream not in (None, 1) and cai.get("version", 0) >= 3:
        dev.call(dev.drv.cuStreamSynchronize, dev.drv.CUstream(stream))   # producer's work first
    return int(cai["data"][0])


def _wrap_like(arrays, values):
    """Device results as the inputs' array type (CuPy, PyTorch), else DeviceArray."""
    for v in values:
        mod = type(v).__module__.split(".")[0]
        if mod == "cupy":
            import cupy
            return [cupy.asarray(a) for a in arrays]
        if mod == "torch":
            import torch
            return [torch.as_tensor(a, device=v.device) for a in arrays]
    return arrays


def scalar_argument(dtype: str, value):
    """A 0-d argument (a Python float, int or bool, a NumPy scalar, a 0-d array) as the ctypes
    value a kernel takes by value."""
    v = np.asarray(value).astype(bool if dtype == "bool" else dtype)
    return ctype(dtype)(v.item())


def kernel_arguments(p, kernel, addr: dict) -> list:
    """``kernel``'s launch arguments from ``addr`` (buffer -> device address, or a ctypes value
    for a buffer passed by value): a value where the kernel takes one, an address elsewhere.
    A mismatch is an internal error here rather than a wild pointer on the GPU."""
    args = []
    for b in kernel.params:
        a, kind = addr[b], p.buffers[b].kind
        if (kind in BY_VALUE) != isinstance(a, ctypes._SimpleCData) or \
                isinstance(a, ctypes.c_void_p):
            raise TypeError(f"internal: kernel {kernel.name} takes buffer {b} ({kind}) "
                            f"{'by value' if kind in BY_VALUE else 'as a pointer'}, given {a!r}")
        args.append(a)
    return args


def run_cuda(signature, values, out=None):
    """One call of ``target="cuda"`` (``signature``: see ``symgrad.backends``)."""
    dev = Device.get()
    prog = ptxmod.program(signature, dev.ptx_arch)
    fns = dev.functions(prog)
    p = prog.plan
    graph = p.graph
    on_device = any(is_device_array(v) for v in values)
    outs = out if isinstance(out, tuple) else (out,) if out is not None else None
    device_out = outs is not None and len(outs) == len(graph.outputs) and all(map(is_device_array, outs))
    shapes = {b: node.shape for node, b in zip(graph.outputs, p.outputs)}

    args: dict[int, object] = {}
    scratch: list[tuple[int, int]] = []    # (ptr, nbytes) returned to the pool afterwards
    inputs: set[int] = set()
    for buf in p.buffers:
        if buf.kind == "arg":
            node, v = graph.inputs[buf.ref], values[buf.ref]
            if is_device_array(v):
                ptr = _device_pointer(v, buf.dtype, node.shape, dev, f"argument {graph.params[buf.ref]!r}")
            else:
                host = np.ascontiguousarray(v, dtype=bool if buf.dtype == "bool" else buf.dtype)
                ptr = dev.to_device(host.view(np.uint8) if buf.dtype == "bool" else host)
                scratch.append((ptr, buf.nbytes))
            args[buf.index] = ptr
            inputs.add(ptr)
        elif buf.kind == "scalar":
            args[buf.index] = scalar_argument(buf.dtype, values[buf.ref])
        elif buf.kind == "const":
            key = (id(prog), buf.index)
            if key not in dev.consts:
                value = np.ascontiguousarray(buf.ref)
                dev.consts[key] = (dev.to_device(value.view(np.uint8) if buf.dtype == "bool" else value), prog)
            args[buf.index] = dev.consts[key][0]
        elif buf.kind == "flag":   # the error word, zeroed in stream order before the kernels
            args[buf.index] = dev.alloc(buf.nbytes)
            dev.call(dev.drv.cuMemsetD8Async, dev.drv.CUdeviceptr(args[buf.index]), 0, buf.nbytes,
                     dev.stream)
        elif buf.kind == "tmp":
            args[buf.index] = dev.alloc(buf.nbytes)
            scratch.append((args[buf.index], buf.nbytes))
    results: dict[int, DeviceArray] = {}
    if device_out:   # write straight into the caller's arrays (unless one is also an input)
        for o, b in zip(outs, p.outputs):
            ptr = _device_pointer(o, p.buffers[b].dtype, shapes[b], dev, "out=")
            if b not in args and ptr not in inputs:
                args[b] = ptr
    for buf in p.buffers:
        if buf.kind == "out" and buf.index not in args:
            args[buf.index] = dev.alloc(buf.nbytes)
            results[buf.index] = DeviceArray(args[buf.index], shapes[buf.index], buf.dtype, dev)

    def launch(k, args):
        fn, max_blocks = fns[k.name]
        for z in k.zero:
            dev.call(dev.drv.cuMemsetD8Async, dev.drv.CUdeviceptr(args[z]), 0, p.buffers[z].nbytes, dev.stream)
        work = k.count if k.kind == "block" else -(-k.count // ptxmod.BLOCK)
        dev.launch(fn, max(1, min(work, max_blocks)), kernel_arguments(p, k, args))

    def copy(dst, src, nbytes):
        dev.call(dev.drv.cuMemcpyDtoDAsync, dev.drv.CUdeviceptr(dst), dev.drv.CUdeviceptr(src),
                 nbytes, dev.stream)

    ptxmod.run_steps(p, args, launch, copy)   # loops: a launch sequence per iteration
    for ptr, nbytes in scratch:      # stream-ordered: later work on this stream reuses them safely
        dev.free(ptr, nbytes)

    if device_out:
        for o, b in zip(outs, p.outputs):
            dst = int(o.__cuda_array_interface__["data"][0])
            if dst != args[b] and p.buffers[b].nbytes:
                dev.call(dev.drv.cuMemcpyDtoDAsync, dev.drv.CUdeviceptr(dst),
                         dev.drv.CUdeviceptr(args[b]), p.buffers[b].nbytes, dev.stream)
        _check_error_word(dev, p, args)
        return out
    arrays = [results[b] for b in p.outputs]
    if on_device:
        arrays = _wrap_like(arrays, values)
    else:
        arrays = [r.get() for r in arrays]
    _check_error_word(dev, p, args)
    return deliver(finish_flat(arrays, graph, values), out)


def _check_error_word(dev: Device, p, args: dict) -> None:
    """Raise what a kernel noted in the plan's error word (``symgrad.guards.KERNEL_ERRORS``):
    NumPy's IndexError for an index out of range, as on target='cpu'. Read after the results
    came back (host results: the stream has finished, so the read waits for nothing); device
    results: the read is the one synchronisation the call makes. The word goes back to the
    pool only after it is read, so no later call zeroes it first."""
    if p.flag is None:
        return
    ptr = args[p.flag]
    code = int(dev.to_host(ptr, (1,), "int32")[0])
    dev.free(ptr, p.buffers[p.flag].nbytes)
    if code:
        raise kernel_error(p.graph.name, code)


class CudaBackend(Backend):
    """``target="cuda"``: PTX per signature and GPU architecture (cached by ``codegen.ptx``
    on the signature), run through the driver; device arrays trace by shape and dtype."""
    name = "cuda"
    views = {"ptx": ptxmod.ptx}

    def prepare(self, signature):
        return signature

    def run(self, prepared, values, out):
        return run_cuda(prepared, values, out)

    @staticmethod
    def signature_values(values):
        return host_standins(values)


BACKEND = CudaBackend()
