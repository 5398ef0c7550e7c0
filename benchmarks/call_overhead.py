"""Where a call of a compiled CPU function spends its time (issue 13, item 2).

W3 (the Rosenbrock gradient, n = 1000) and a scalar-free 8-element version of it, timed per
call, next to each step of the hot path alone: the plan (``codegen.call_plan``: the native
entry where the process has one) without the API, the Python plan that serves where it has
not, the kernel alone through ctypes, and the primitives a Python plan cannot avoid
(``np.empty``, the buffer-protocol data address, an empty ctypes call). Medians of REPS
batches, the rows interleaved batch by batch so that machine load hits every row alike.

    python benchmarks/call_overhead.py [--reps 9] [--calls 20000]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import symgrad as sg  # noqa: E402
from workloads import w1, w3, w3_grad_numpy  # noqa: E402


def rows_for(n: int) -> dict:
    g = sg.differentiate(w3).grad
    x = np.random.default_rng(0).random(n)
    for _ in range(200):   # past the countdown after which a process loads the native entry
        g(x)
    native = g._cache[g._last_key].prepared["cpu"]
    plan = native.plan(("array",)) if hasattr(native, "plan") else None   # (older checkouts)
    python_plan = _python_plan(native)
    keep = np.empty(n)     # the kernel alone writes here, a live array (never a freed one)
    _, _, (_, _, table), ptrs_addr, _, _ = native.cached
    # the other rows leave their (since freed) outputs in the table: point it at live arrays
    # (precomputed addresses, so the row times the table stores and the call)
    fills = [(buf, x.ctypes.data) for _, buf, _, _ in native.array_args] + \
        [(buf, keep.ctypes.data) for _, buf, _, _ in native.array_outs]
    run, params_addr = native.run, native.params_addr

    def kernel_only(live=(x, keep)):   # keeps the arrays behind `fills` alive
        for buf, addr in fills:
            table[buf] = addr
        run(ptrs_addr, params_addr)

    out = np.empty(n)

    def with_out(a, o=out):
        return g(a, out=o)

    rows = {
        f"n={n}: f.grad(x), the whole call": (g, (x,)),
        f"n={n}: f.grad(x, out=o), the whole call": (with_out, (x,)),
        f"n={n}: the plan alone (no API frame)": (plan, ((x,),)),
        f"n={n}: the plan alone with out (no API frame)": (plan, ((x,), out)),
        f"n={n}: the Python plan alone (no native entry)": (python_plan, ((x,),)),
        f"n={n}: Native(values), the full path": (native, ((x,),)),
        f"n={n}: the kernel alone (table stores + ctypes call, GIL released)": (kernel_only, ()),
        f"n={n}: NumPy hand gradient": (w3_grad_numpy, (x,)),
    }
    return {name: row for name, row in rows.items() if row[0] is not None}


def _python_plan(native):
    """The Python plan of this signature, as where native entries are unavailable."""
    try:
        from symgrad.codegen import call_plan, native_entry
    except ImportError:       # (older checkouts)
        return None
    saved = native_entry._runtime
    native_entry._runtime = {"ok": False}
    try:
        return call_plan.call_plan(native, ("array",), holding_gil=True)
    finally:
        native_entry._runtime = saved


def numba_rows(n: int) -> dict:
    """Numba's njit of the hand gradient (run_all's), the issue's reference, when installed."""
    try:
        import run_all
    except ImportError:
        return {}
    kernels = run_all.numba_kernels()
    if not kernels:
        return {}
    x = np.random.default_rng(0).random(n)
    kernels["w3"](x)
    return {f"n={n}: Numba njit, hand gradient": (kernels["w3"], (x,))}


def scalar_rows() -> dict:
    """W1's gradient at one point: two Python floats in, two out."""
    g = sg.differentiate(w1, wrt=(0, 1)).grad
    for _ in range(200):
        g(0.3, 0.7)
    out = (np.empty(()), np.empty(()))

    def with_out(x, y, o=out):
        return g(x, y, out=o)

    return {"W1 gradient at a point (2 floats in, 2 out)": (g, (0.3, 0.7)),
            "W1 gradient at a point, out= two 0-d arrays": (with_out, (0.3, 0.7))}


def primitives() -> dict:
    x = np.empty(1000)
    libc = ctypes.CDLL(None)
    noop = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
        ctypes.cast(libc.labs, ctypes.c_void_p).value)
    return {
        "np.empty(1000)": (np.empty, (1000,)),
        "data address: addressof(c_char.from_buffer(a))":
            (lambda a: ctypes.addressof(ctypes.c_char.from_buffer(a)), (x,)),
        "data address: a.ctypes.data": (lambda a: a.ctypes.data, (x,)),
        "ctypes call, 2 pointers, GIL held (labs)": (noop, (0, 0)),
        "empty Python call": (lambda a: None, (x,)),
    }


def measure(rows: dict, reps: int, calls: int) -> dict:
    times = {name: [] for name in rows}
    for _ in range(reps):
        for name, (fn, args) in rows.items():
            t = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            times[name].append((time.perf_counter() - t) / calls * 1e6)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    rows = {**rows_for(1000), **numba_rows(1000), **rows_for(8), **scalar_rows(),
            **primitives()}
    load = os.getloadavg()[0]
    result = measure(rows, args.reps, args.calls)
    print(f"load average at start {load:.2f}; medians of {args.reps} x {args.calls} calls")
    print("| step | median per call |\n|---|---|")
    for name, us in result.items():
        print(f"| {name} | {us:.2f} µs |")


if __name__ == "__main__":
    main()
