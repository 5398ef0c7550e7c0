"""Compile time and call time of the gradients of np.linalg's factorisations (det, inv, solve,
cholesky) at several matrix sizes, each measured in a fresh process with the disk cache off
(SYMGRAD_NO_CACHE=1): "first" is define -> first gradient (trace, differentiate, compile, one
call), "call" the median of later calls.

    python benchmarks/linalg_compile.py [--sizes 3 8 32 100] [--repeat 3] [--timeout 600]

One measurement: python benchmarks/linalg_compile.py --one det 8 (prints a JSON line).
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

OPS = ("det", "inv", "solve", "cholesky")


def _loss(op: str, n: int):
    weights = np.linspace(0.5, 1.5, n * n).reshape(n, n)
    rhs = np.linspace(-1.0, 1.0, n * 2).reshape(n, 2)
    if op == "det":
        return lambda a: np.linalg.slogdet(a)[1] + np.linalg.det(a / 4.0)
    if op == "inv":
        return lambda a: np.sum(np.linalg.inv(a) * weights)
    if op == "solve":
        return lambda a: np.sum(np.linalg.solve(a, rhs) * rhs)
    return lambda a: np.sum(np.linalg.cholesky(a @ a.T + n * np.eye(n)) * weights)


def measure_one(op: str, n: int, target: str) -> dict:
    import symgrad as sg
    x = np.random.default_rng(0).uniform(-1, 1, (n, n)) + 2.0 * np.eye(n)
    start = time.perf_counter()
    grad = sg.grad(_loss(op, n), target=target)
    g = grad(x)
    first = time.perf_counter() - start
    calls = []
    for _ in range(max(5, min(200, int(0.5 / max(first, 1e-3) * 50)))):
        t = time.perf_counter()
        grad(x)
        calls.append(time.perf_counter() - t)
    assert np.all(np.isfinite(g))
    return {"op": op, "n": n, "first_s": first, "call_s": statistics.median(calls)}


def measure(op: str, n: int, target: str, timeout: float) -> dict | None:
    env = dict(os.environ, SYMGRAD_NO_CACHE="1")
    cmd = [sys.executable, __file__, "--one", op, str(n), "--target", target]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as error:
        print(error.stderr, file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--one", nargs=2)
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--sizes", nargs="+", type=int, default=[3, 8, 32, 100])
    parser.add_argument("--ops", nargs="+", default=list(OPS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one[0], int(args.one[1]), args.target)))
        return
    print(f"| op | n | first gradient (s, median of {args.repeat}) | gradient call (ms) |")
    print("|---|---|---|---|")
    for op in args.ops:
        for n in args.sizes:
            runs = [measure(op, n, args.target, args.timeout) for _ in range(args.repeat)]
            done = [r for r in runs if r is not None]
            if not done:
                print(f"| {op} | {n} | > {args.timeout:.0f} (not finished) | - |", flush=True)
                continue
            first = statistics.median(r["first_s"] for r in done)
            call = statistics.median(r["call_s"] for r in done)
            print(f"| {op} | {n} | {first:.2f} | {call * 1e3:.3f} |", flush=True)


if __name__ == "__main__":
    main()
