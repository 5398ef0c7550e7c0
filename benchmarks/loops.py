"""Loops on the CPU back end (issue 10): first gradient (trace + schedule + compile, in a fresh
process with the machine-code cache off) and per-call gradient time of

* a tanh RNN, H = 64, 40 and 400 steps (``h = tanh(W @ h + b)``, loss ``sum(h)``);
* an explicit Euler integrator on 3 scalars, 10 / 100 / 1000 / 10000 steps (compile time must be
  flat in the trip count: the loop is one node, its body one function, n a run-time parameter);
* a 200-step heat-equation stencil on 40 points.

Each is run with native loops (``codegen.regions``) and, where it finishes in reasonable time,
with every loop unrolled first (``codegen.regions.NATIVE = False``: the back end before native
regions), plus target="python" per call for reference.

Usage: python benchmarks/loops.py [--quick]   (medians: first gradient of 3 fresh processes
(unrolled: one), per call of 21 calls after a warm-up; prints the load average, since on a
shared machine every figure moves with it)
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

import symgrad as sg


def rnn_of(steps):
    def rnn(W, b, h):
        for _ in range(steps):
            h = np.tanh(W @ h + b)
        return np.sum(h)
    return rnn


def euler_of(steps):
    def euler(y):
        a, b, c = y[0], y[1], y[2]
        for _ in range(steps):
            a, b, c = a + 0.001 * b, b - 0.001 * a * c, c + 0.001 * np.sin(a)
        return a * b + c
    return euler


def heat_of(steps):
    def heat(u, k):
        for _ in range(steps):
            inner = u[1:-1] + k * (u[2:] - 2.0 * u[1:-1] + u[:-2])
            u = np.concatenate([u[:1], inner, u[-1:]])
        return np.sum(u * u)
    return heat


def _inputs(case):
    rng = np.random.default_rng(0)
    if case == "rnn":
        return rng.normal(size=(64, 64)) * 0.1, rng.normal(size=64) * 0.1, rng.normal(size=64)
    if case == "euler":
        return (np.array([0.3, 0.2, 0.1]),)
    return rng.uniform(size=40), np.float64(0.2)


PROGRAMS = {"rnn": rnn_of, "euler": euler_of, "heat": heat_of}
# (case, trips, unrolled too?) — the unrolled back end is measured only where it finishes
CASES = [("rnn", 40, True), ("rnn", 400, False), ("euler", 10, True), ("euler", 100, True),
         ("euler", 1000, False), ("euler", 10000, False), ("heat", 200, True)]


def first_gradient(case: str, trips: int, unrolled: bool) -> tuple[float, float]:
    """Run in a fresh process: seconds from decorating to the first gradient's result, and
    the median per call after it."""
    from symgrad.codegen import regions
    regions.NATIVE = not unrolled
    args = _inputs(case)
    t0 = time.perf_counter()
    f = sg.differentiate(PROGRAMS[case](trips)).grad
    f(*args)
    first = time.perf_counter() - t0
    return first, per_call(f, args)


def fresh_first_gradient(case, trips, unrolled, runs=3, timeout=600):
    """(median first gradient, median per call) over ``runs`` fresh processes, cache off."""
    env = dict(os.environ, SYMGRAD_NO_CACHE="1")
    firsts, calls = [], []
    for _ in range(runs):
        cmd = [sys.executable, __file__, "--first", case, str(trips)] + (["--unrolled"] if unrolled else [])
        try:
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=True)
        except subprocess.TimeoutExpired:
            return None, None
        first, call = map(float, out.stdout.split()[-2:])
        firsts.append(first)
        calls.append(call)
    return float(np.median(firsts)), float(np.median(calls))


def per_call(f, args, runs=21) -> float:
    f(*args)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(quick: bool):
    runs = 1 if quick else 3
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cores; float64; first gradient: "
          f"median of {runs} fresh processes (cache off); per call: median of 21")
    print(f"{'case':6s} {'steps':>6s} {'first s':>8s} {'call us':>9s} {'unrolled first s':>17s} "
          f"{'unrolled call us':>17s} {'python call us':>15s}")
    for case, trips, unrolled in CASES:
        args = _inputs(case)
        native = sg.differentiate(PROGRAMS[case](trips)).grad
        python = sg.differentiate(PROGRAMS[case](trips), target="python").grad
        np.testing.assert_allclose(native(*args), python(*args), rtol=1e-9, atol=1e-12)
        first, _ = fresh_first_gradient(case, trips, False, runs)
        call = per_call(native, args)
        u_first = u_call = None
        if unrolled:   # one fresh process: the unrolled compile takes up to minutes
            u_first, u_call = fresh_first_gradient(case, trips, True, 1)
        py_call = per_call(python, args, runs=5 if trips >= 1000 else 21)

        def fmt(v, scale, width, digits):
            return f"{'-':>{width}s}" if v is None else f"{v * scale:{width}.{digits}f}"
        print(f"{case:6s} {trips:6d} {fmt(first, 1, 8, 3)} {fmt(call, 1e6, 9, 1)} "
              f"{fmt(u_first, 1, 17, 3)} {fmt(u_call, 1e6, 17, 1)} {fmt(py_call, 1e6, 15, 1)}",
              flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--first"]:
        print(*first_gradient(sys.argv[2], int(sys.argv[3]), "--unrolled" in sys.argv))
    else:
        main("--quick" in sys.argv)
