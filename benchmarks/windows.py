"""Loops that slice with the loop index (windows ``x[i:i + k]``): first gradient and per-call
gradient time on target="cpu", one fresh process per measurement, the machine-code cache off
(``SYMGRAD_NO_CACHE=1``), symgrad byte-compiled first as an installed copy is
(startup.byte_compile).

Cases:
  conv1d_N     ``for i in range(n - k + 1): out[i] = np.dot(x[i:i + k], w)``, k = 5, n = N
               (tests/test_user_programs_models.py); loss ``sum(maximum(out, 0) ** 2)``
  convolve_N   the same loss written with ``np.convolve(x, w[::-1], mode="valid")``
  conv2d_32    ``out[i, j] = np.sum(X[i:i + 3, j:j + 3] * K)`` over a 32x32 image, two loops
  pdist_N      a distance matrix of N points in 3-d with length-scales w, two loops,
               ``D[i, j] = np.sqrt(np.sum(((X[i] - X[j]) * w) ** 2) + 1e-9)``; loss ``sum(D)``
  elman_T      an Elman RNN storing its states, ``h = tanh(W @ h + u * x[t]); hs[t] = h``,
               16 units, T steps; loss ``sum(hs ** 2)``

With several ``--tree LABEL=DIR`` (each run by its own .venv, ``make .venv/.installed`` there),
the trees' processes alternate run by run, so that a change of load touches each alike.
Prints medians over ``--runs`` processes (first gradient: decorator to the first gradient's
result; per call: the median of 21 calls after a warm-up, in each process) and the load
average before and after.

    python benchmarks/windows.py [--runs 3] [--cases conv1d_300,...] [--tree new=. --tree old=DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = ["conv1d_300", "convolve_300", "conv1d_3000", "convolve_3000", "conv2d_32", "elman_1000",
         "pdist_100"]


def conv1d(x, w):
    n, k = x.shape[0], w.shape[0]
    out = np.zeros(n - k + 1)
    for i in range(n - k + 1):
        out[i] = np.dot(x[i:i + k], w)
    return np.sum(np.maximum(out, 0) ** 2)


def convolve(x, w):
    return np.sum(np.maximum(np.convolve(x, w[::-1], mode="valid"), 0) ** 2)


def conv2d(X, K):
    k = K.shape[0]
    n, m = X.shape[0] - k + 1, X.shape[1] - k + 1
    out = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            out[i, j] = np.sum(X[i:i + k, j:j + k] * K)
    return np.sum(np.tanh(out))


def pdist(X, w):
    n = X.shape[0]
    D = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            D[i, j] = np.sqrt(np.sum(((X[i] - X[j]) * w) ** 2) + 1e-9)
    return np.sum(D)


def elman(x, W, u):
    T, H = x.shape[0], W.shape[0]
    hs = np.zeros((T, H))
    h = np.zeros(H)
    for t in range(T):
        h = np.tanh(W @ h + u * x[t])
        hs[t] = h
    return np.sum(hs ** 2)


def _case(name):
    kind, size = name.rsplit("_", 1)
    rng = np.random.default_rng(0)
    if kind == "elman":
        return elman, [rng.normal(size=int(size)), 0.3 * rng.normal(size=(16, 16)),
                       rng.normal(size=16)]
    if kind == "pdist":
        return pdist, [rng.normal(size=(int(size), 3)), 1.0 + 0.1 * rng.normal(size=3)]
    if kind == "conv2d":
        return conv2d, [rng.normal(size=(int(size), int(size))), rng.normal(size=(3, 3))]
    return {"conv1d": conv1d, "convolve": convolve}[kind], [rng.normal(size=int(size)),
                                                            rng.normal(size=5)]


def measure_one(name: str) -> dict:
    """In this (fresh) process: decorator to first gradient, then the per-call median."""
    import symgrad as sg
    fn, args = _case(name)
    t = time.perf_counter()
    f = sg.grad(fn, wrt=(0, 1), target="cpu")
    g = f(*args)
    first = time.perf_counter() - t
    want = sg.grad(fn, wrt=(0, 1), target="python")(*args)
    for a, b in zip(g, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    times = []
    for _ in range(22):
        t = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - t)
    return {"first": first, "per_call": float(np.median(times[1:]))}


def run_child(name: str, tree: str, timeout: float) -> dict | None:
    own = os.path.join(tree, ".venv", "bin", "python")
    env = dict(os.environ, PYTHONPATH=tree, SYMGRAD_NO_CACHE="1")
    cmd = [own if os.path.exists(own) else sys.executable, os.path.abspath(__file__), "--one", name]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if run.returncode != 0:
        raise RuntimeError(f"{name} in {tree}: {run.stderr.strip()[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--tree", action="append", metavar="LABEL=DIR")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds per process; a case past it is reported as '> timeout'")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one)))
        return
    sys.path.insert(0, HERE)
    import startup
    trees = dict(t.split("=", 1) for t in args.tree) if args.tree else {"": ROOT}
    for root in trees.values():
        startup.byte_compile(root)
    print(f"load average before: {os.getloadavg()}")
    for name in args.cases.split(","):
        rows = {label: [] for label in trees}
        given_up = set()
        for _ in range(args.runs):
            for label, tree in trees.items():
                if label in given_up:
                    continue
                r = run_child(name, tree, args.timeout)
                if r is None:
                    given_up.add(label)
                else:
                    rows[label].append(r)
        for label in trees:
            if not rows[label]:
                print(f"{name:14s} {label:6s} first > {args.timeout:.0f} s (timed out)")
                continue
            first = [r["first"] for r in rows[label]]
            per = [r["per_call"] * 1e3 for r in rows[label]]
            print(f"{name:14s} {label:6s} first {np.median(first):8.3f} s "
                  f"[{min(first):.3f}-{max(first):.3f}]  per call {np.median(per):8.4f} ms "
                  f"[{min(per):.4f}-{max(per):.4f}]  ({len(first)} runs)", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
