"""Per-call time of guarded signatures (issue 13, call overhead): the error guards of
``np.linalg.inv`` / ``solve`` / ``cholesky`` and a ``while`` on data (a Newton iteration until
converged), value and gradient, next to W3 (the Rosenbrock gradient, n = 1000, unguarded).

Each row is timed in batches of CALLS calls after warm-up calls past the native entry's
countdown, rows interleaved batch by batch; per row the median of REPS batches and their
10th percentile (on a loaded machine, the batches no other process interrupted). With ``--compare A
B ...`` (Python interpreters, each a virtual environment with one checkout installed) it
runs itself in fresh processes of each in turn (``--rounds`` each, one row table per
process) and prints each row's median over the rounds side by side, with the machine's load
(``os.getloadavg``) before and after.

    python benchmarks/guard_overhead.py [--reps 200] [--calls 1000]
    python benchmarks/guard_overhead.py --compare main/.venv/bin/python .venv/bin/python
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def inv3(a):
    return np.linalg.inv(a)


def solve3(a, b):
    return np.linalg.solve(a, b)


def cholesky_sum(a):
    return np.sum(np.linalg.cholesky(a))


def newton_sqrt(a):
    # the square roots of a's entries, Newton's iteration until every one converged
    x = a
    while np.max(np.abs(x * x - a)) > 1e-12:
        x = 0.5 * (x + a / x)
    return np.sum(x)


def det3(a):
    return np.linalg.det(a)


def with_out(f, out):
    return lambda *args: f(*args, out=out)


def rows():
    import symgrad as sg
    sys.path.insert(0, HERE)
    from workloads import w3
    rng = np.random.default_rng(0)
    m = rng.random((3, 3)) + 3.0 * np.eye(3)
    spd = m @ m.T
    b = rng.random(3)
    x = rng.random(1000)
    roots = np.array([2.0, 3.0, 5.0, 7.0])
    return {
        "inv 3x3": (sg.differentiate(inv3), (m,)),
        "inv 3x3, out=": (with_out(sg.differentiate(inv3), np.empty((3, 3))), (m,)),
        "solve 3x3": (sg.differentiate(solve3), (m, b)),
        "cholesky 3x3 gradient": (sg.grad(cholesky_sum), (spd,)),
        "while (Newton) value": (sg.differentiate(newton_sqrt), (roots,)),
        "while (Newton) gradient": (sg.grad(newton_sqrt), (roots,)),
        "W3 gradient n=1000": (sg.grad(w3), (x,)),
    }


def time_rows(reps: int, calls: int, only=None) -> dict:
    table = {name: row for name, row in rows().items() if only is None or only in name}
    for fn, args in table.values():
        for _ in range(3000):      # past the countdowns to the native entry
            fn(*args)
    times = {name: [] for name in table}
    for _ in range(reps):
        for name, (fn, args) in table.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    # the median, and the 10th percentile: on a loaded machine the lower batches are the
    # ones no other process interrupted
    return {name: (statistics.median(t), sorted(t)[len(t) // 10]) for name, t in times.items()}


def first_gradient_ms() -> float:
    """det's first gradient (trace, differentiate, compile, call) in this process, in ms."""
    import symgrad as sg
    a = np.random.default_rng(1).random((3, 3)) + np.eye(3)
    start = time.perf_counter()
    sg.grad(det3)(a)
    return (time.perf_counter() - start) * 1e3


def compare(pythons: list, rounds: int, reps: int, calls: int, only=None):
    results = {python: [] for python in pythons}
    load = [os.getloadavg()]
    for _ in range(rounds):
        for python in pythons:
            out = subprocess.run([python, os.path.abspath(__file__), "--child", "--reps",
                                  str(reps), "--calls", str(calls)] +
                                 ([] if only is None else ["--only", only]),
                                 capture_output=True, text=True, check=True)
            results[python].append(json.loads(out.stdout.splitlines()[-1]))
    load.append(os.getloadavg())
    names = list(results[pythons[0]][0])
    labels = [chr(ord("A") + k) for k in range(len(pythons))]
    print(f"load average before {load[0]}, after {load[1]}; {rounds} alternating processes each,"
          f" medians of {reps} batches of {calls} calls")
    print(f"{'row (us per call): median, p10':32s}" +
          "".join(f" {label:>15s}" for label in labels))
    for name in names:
        cells = [(statistics.median(r[name][0] for r in results[python]),
                  statistics.median(r[name][1] for r in results[python])) for python in pythons]
        print(f"{name:32s}" + "".join(f" {m:7.3f} {p:7.3f}" for m, p in cells))
    for label, python in zip(labels, pythons):
        print(f"{label} = {python}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--compare", nargs="+", metavar="PYTHON")
    p.add_argument("--child", action="store_true")
    p.add_argument("--only", help="the rows whose name contains this")
    p.add_argument("--first-gradient", action="store_true")
    args = p.parse_args()
    if args.first_gradient:
        print(json.dumps({"det first gradient ms": first_gradient_ms()}))
    elif args.compare:
        compare(args.compare, args.rounds, args.reps, args.calls, args.only)
    elif args.child:
        print(json.dumps(time_rows(args.reps, args.calls, args.only)))
    else:
        for name, (median, p10) in time_rows(args.reps, args.calls, args.only).items():
            print(f"{name:32s} median {median:7.3f} us, 10th percentile {p10:7.3f} us")


if __name__ == "__main__":
    main()
