"""W1 on the GPU: the elementwise gradient of ``x*sin(y) + exp(-x*x)*log1p(y*y) + tanh(x*y)``
with respect to x and y, at 10^8 points, float32 and float64, against the device-to-device
copy bandwidth and (when installed) CuPy, JAX and PyTorch. Run by ``benchmarks/gpu_check.sh``;
appends a Markdown section to ``benchmarks/RESULTS.md``.

Times are CUDA-event medians over repeated calls with inputs and outputs already on the device
(``out=`` device arrays: no allocation, no host transfer), after one warm-up call that compiles.
"Effective bandwidth" counts the bytes W1 must move: two inputs read, two gradients written.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import symgrad as sg  # noqa: E402
from symgrad.codegen.cuda import Device, DeviceArray  # noqa: E402


def w1(x, y):
    return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(x * y)


def w1_grad_numpy(x, y):
    t = np.tanh(x * y)
    e = np.exp(-x * x)
    return (np.sin(y) - 2 * x * e * np.log1p(y * y) + (1 - t * t) * y,
            x * np.cos(y) + e * 2 * y / (1 + y * y) + (1 - t * t) * x)


class Events:
    """Time GPU work on the legacy default stream with CUDA events."""

    def __init__(self, dev: Device):
        self.dev, d = dev, dev.drv
        self.start = dev.call(d.cuEventCreate, 0)
        self.stop = dev.call(d.cuEventCreate, 0)

    def time_ms(self, fn, reps: int, batch: int = 10) -> float:
        """Median per-call time over ``reps`` batches of ``batch`` back-to-back calls (the host
        queues the next launch while the GPU runs the last, as a real loop would)."""
        d, dev = self.dev.drv, self.dev
        samples = []
        for _ in range(reps):
            dev.call(d.cuEventRecord, self.start, dev.stream)
            for _ in range(batch):
                fn()
            dev.call(d.cuEventRecord, self.stop, dev.stream)
            dev.call(d.cuEventSynchronize, self.stop)
            samples.append(dev.call(d.cuEventElapsedTime, self.start, self.stop) / batch)
        return statistics.median(samples)


def copy_bandwidth(dev: Device, ev: Events, nbytes: int, reps: int) -> float:
    """Device-to-device copy bandwidth in GB/s (read + write bytes)."""
    src, dst = dev.alloc(nbytes), dev.alloc(nbytes)
    d = dev.drv
    try:
        def copy():
            dev.call(d.cuMemcpyDtoDAsync, d.CUdeviceptr(dst), d.CUdeviceptr(src), nbytes, dev.stream)
        copy()
        ms = ev.time_ms(copy, reps)
    finally:
        dev.free(src, nbytes)
        dev.free(dst, nbytes)
    return 2 * nbytes / ms / 1e6


def bench_symgrad(dev, ev, x, y, reps):
    g = sg.grad(w1, wrt=(0, 1), target="cuda")
    dx, dy = DeviceArray.from_host(x), DeviceArray.from_host(y)
    ox, oy = DeviceArray.from_host(np.empty_like(x)), DeviceArray.from_host(np.empty_like(y))
    t0 = time.perf_counter()
    g(dx, dy, out=(ox, oy))
    dev.synchronize()
    first = time.perf_counter() - t0
    k = min(x.size, 10 ** 6)   # spot check against NumPy on a prefix
    want = w1_grad_numpy(x[:k].astype(np.float64), y[:k].astype(np.float64))
    rtol = 1e-4 if x.dtype == np.float32 else 1e-12
    got = (ox.get()[:k], oy.get()[:k])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
    ms = ev.time_ms(lambda: g(dx, dy, out=(ox, oy)), reps)
    return ms, f"first call (trace + compile + JIT + run) {first:.2f} s; matches NumPy"


def bench_cupy(dev, ev, x, y, reps):
    import cupy
    ctype = "float" if x.dtype == np.float32 else "double"
    kernel = cupy.ElementwiseKernel(
        "T x, T y", "T gx, T gy",
        "T t = tanh(x * y); T e = exp(-x * x); T s = 1 - t * t;"
        "gx = sin(y) - 2 * x * e * log1p(y * y) + s * y;"
        "gy = x * cos(y) + e * 2 * y / (1 + y * y) + s * x;", "w1_grad")
    cx, cy = cupy.asarray(x), cupy.asarray(y)
    gx, gy = cupy.empty_like(cx), cupy.empty_like(cy)
    kernel(cx, cy, gx, gy)
    cupy.cuda.runtime.deviceSynchronize()
    ms = ev.time_ms(lambda: kernel(cx, cy, gx, gy), reps)
    return ms, f"hand-written ElementwiseKernel ({ctype}), CuPy {cupy.__version__}"


def bench_jax(dev, ev, x, y, reps):
    import jax
    import jax.numpy as jnp
    if x.dtype == np.float64:
        jax.config.update("jax_enable_x64", True)

    def f(a, b):
        return a * jnp.sin(b) + jnp.exp(-a * a) * jnp.log1p(b * b) + jnp.tanh(a * b)
    g = jax.jit(jax.vmap(jax.grad(f, argnums=(0, 1))))
    jx, jy = jax.device_put(x), jax.device_put(y)
    jax.block_until_ready(g(jx, jy))
    samples = []
    for _ in range(reps):   # JAX runs on its own stream: wall clock around blocking batches
        t0 = time.perf_counter()
        for _ in range(10):
            out = g(jx, jy)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - t0) * 1e3 / 10)
    return statistics.median(samples), f"jit(vmap(grad)), JAX {jax.__version__} (wall clock)"


def bench_torch(dev, ev, x, y, reps):
    import torch
    tx, ty = torch.as_tensor(x, device="cuda"), torch.as_tensor(y, device="cuda")

    def grad():
        t = torch.tanh(tx * ty)
        e = torch.exp(-tx * tx)
        s = 1 - t * t
        return (torch.sin(ty) - 2 * tx * e * torch.log1p(ty * ty) + s * ty,
                tx * torch.cos(ty) + e * 2 * ty / (1 + ty * ty) + s * tx)
    grad()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(10):
            grad()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e3 / 10)
    return statistics.median(samples), f"eager hand gradient, PyTorch {torch.__version__} (wall clock)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10 ** 8)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "RESULTS.md"))
    ap.add_argument("--tests", default="", help="a line summarising the GPU test run")
    args = ap.parse_args()

    dev = Device.get()
    ev = Events(dev)
    driver = dev.call(dev.drv.cuDriverGetVersion)
    rows, notes = [], []
    for dtype in ("float32", "float64"):
        item = np.dtype(dtype).itemsize
        x = np.linspace(-2.0, 2.0, args.n, dtype=dtype)
        y = np.linspace(0.5, 3.0, args.n, dtype=dtype)[::-1].copy()
        copy_bw = copy_bandwidth(dev, ev, args.n * item * 2, args.reps)
        moved = 4 * args.n * item
        rows.append((f"device-to-device copy ({2 * args.n * item / 1e9:.1f} GB)", dtype,
                     2 * args.n * item * 2 / copy_bw / 1e6, copy_bw, 100.0))
        for name, fn in (("symgrad target=cuda", bench_symgrad), ("CuPy", bench_cupy),
                         ("JAX", bench_jax), ("PyTorch", bench_torch)):
            try:
                ms, note = fn(dev, ev, x, y, args.reps)
            except ImportError as e:
                notes.append(f"{name} ({dtype}): not installed ({e})")
                continue
            except Exception as e:   # noqa: BLE001 - a peer failing must not hide our numbers
                notes.append(f"{name} ({dtype}): failed: {type(e).__name__}: {str(e)[:300]}")
                if name.startswith("symgrad"):
                    raise
                continue
            bw = moved / ms / 1e6
            rows.append((name, dtype, ms, bw, 100 * bw / copy_bw))
            notes.append(f"{name} ({dtype}): {note}")
        print(f"{dtype} done", flush=True)

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"\n## GPU: W1 gradient at {args.n:.0e} points ({stamp})\n",
             f"{dev.name} ({dev.arch}, {dev.sms} SMs), CUDA driver {driver // 1000}.{driver % 1000 // 10}, "
             f"Python {platform.python_version()}; median of {args.reps} batches of 10 calls, inputs and outputs "
             "on the device. Effective bandwidth = 2 inputs read + 2 gradients written.\n"]
    if args.tests:
        lines.append(f"GPU tests: {args.tests}\n")
    lines += ["| implementation | dtype | ms | effective GB/s | % of copy bandwidth |",
              "|---|---|---|---|---|"]
    lines += [f"| {n} | {d} | {ms:.3f} | {bw:.0f} | {pct:.0f}% |" for n, d, ms, bw, pct in rows]
    lines += [""] + [f"- {n}" for n in notes] + [""]
    target = [r for r in rows if r[0].startswith("symgrad") and r[1] == "float32"]
    if target:
        ok = target[0][4] >= 80
        lines.append(f"Target (W1 float32 >= 80% of copy bandwidth): {'met' if ok else 'NOT met'} "
                     f"({target[0][4]:.0f}%).\n")
    text = "\n".join(lines)
    print(text)
    with open(args.results, "a") as f:
        f.write(text)


if __name__ == "__main__":
    main()
