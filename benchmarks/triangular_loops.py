"""Triangular loops (``for j in range(i + 1, n)`` inside ``for i in range(n)``): the time to
the first gradient and per call, on target="cpu", against the vectorised form.

Each measurement runs in a fresh process of the tree's own venv (``--tree name=path``, as
``compile_profile.py`` takes them), symgrad and codegen byte-compiled first (as an installed
copy), with ``SYMGRAD_NO_CACHE=1`` (the machine code compiled, not read from the disk cache).
"first": wall time from ``sg.differentiate`` to the first ``f.grad(*args)`` returned (the
import not counted); "call": the median of 30 further calls (after 3 warm-up calls). The trees
alternate run by run; medians and ranges over ``--runs`` processes, and the load average.

    python benchmarks/triangular_loops.py --tree new=. --tree old=/tmp/base --runs 5
    python benchmarks/triangular_loops.py --cases lj20,lj200 --tree new=.
Cases: lj20, lj200 (Lennard-Jones, the pair loop, 20 / 200 particles), ljvec20, ljvec200 (the
same energy vectorised: all pairs at once, the upper triangle kept), coulomb200 (the
Coulomb energy of 200 charges, the gradient with respect to positions and charges), fsub100
(forward substitution, n = 100, the gradient with respect to L and b), fsubslice100 (the same
with the inner loop written ``L[i, :i] @ y[:i]``), cholslice30, cholslice100
(Cholesky-Banachiewicz with ``np.dot(L[i, :j], L[j, :j])``, the gradient of the sum of L), lu50
(Doolittle LU with ``np.dot(L[i, :i], U[:i, k])``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def lennard_jones(pos, eps=1.0, sigma=1.0):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            r2 = np.sum((pos[i] - pos[j]) ** 2)
            s6 = (sigma ** 2 / r2) ** 3
            e += 4 * eps * (s6 * s6 - s6)
    return e


def lennard_jones_vectorised(pos):
    n = pos.shape[0]
    diff = pos[:, None, :] - pos[None, :, :]
    r2 = np.sum(diff ** 2, axis=-1) + np.eye(n)     # (the diagonal: 1, not 0)
    s6 = (1.0 / r2) ** 3
    return np.sum(np.triu(4.0 * (s6 * s6 - s6), k=1))


def coulomb(pos, q):
    e = 0.0
    for i in range(len(q)):
        for j in range(i + 1, len(q)):
            e = e + q[i] * q[j] / np.sqrt(np.sum((pos[i] - pos[j]) ** 2))
    return e


def forward_substitution(L, b):
    n = b.shape[0]
    y = np.zeros_like(b)
    for i in range(n):
        s = b[i]
        for j in range(i):
            s -= L[i, j] * y[j]
        y[i] = s / L[i, i]
    return np.sum(y)


def forward_substitution_sliced(L, b):
    """The textbook form: the inner loop as a dot of two prefix slices."""
    n = b.shape[0]
    y = np.zeros_like(b)
    for i in range(n):
        y[i] = (b[i] - L[i, :i] @ y[:i]) / L[i, i]
    return np.sum(y)


def cholesky_sliced(A):
    """Cholesky-Banachiewicz with np.dot of two prefix slices."""
    n = A.shape[0]
    L = np.zeros_like(A)
    for i in range(n):
        for j in range(i + 1):
            s = np.dot(L[i, :j], L[j, :j])
            if i == j:
                L[i, j] = np.sqrt(A[i, i] - s)
            else:
                L[i, j] = (A[i, j] - s) / L[j, j]
    return np.sum(L)


def lu_doolittle(A):
    """Doolittle LU with np.dot of prefix slices (row i of U, then column i of L)."""
    n = A.shape[0]
    L = np.zeros_like(A)
    U = np.zeros_like(A)
    for i in range(n):
        for k in range(i, n):
            U[i, k] = A[i, k] - np.dot(L[i, :i], U[:i, k])
        L[i, i] = 1.0
        for k in range(i + 1, n):
            L[k, i] = (A[k, i] - np.dot(L[k, :i], U[:i, i])) / U[i, i]
    return np.sum(U) + np.sum(L)


def _positions(n):
    side = int(np.ceil(n ** (1 / 3)))
    grid = np.array([[k % side, (k // side) % side, k // side ** 2] for k in range(n)], float)
    return 1.2 * grid + 0.05 * np.random.default_rng(0).normal(size=(n, 3))


def case(name):
    if name.startswith("ljvec"):
        return lennard_jones_vectorised, 0, (_positions(int(name[5:])),)
    if name.startswith("coulomb"):
        n = int(name[7:])
        return coulomb, (0, 1), (_positions(n), np.random.default_rng(1).normal(size=n))
    if name.startswith("lj"):
        return lennard_jones, 0, (_positions(int(name[2:])),)
    if name.startswith("cholslice"):
        n = int(name[9:])
        m = np.random.default_rng(0).normal(size=(n, n))
        return cholesky_sliced, 0, (m @ m.T + n * np.eye(n),)
    if name.startswith("lu"):
        n = int(name[2:])
        m = np.random.default_rng(0).normal(size=(n, n))
        return lu_doolittle, 0, (m @ m.T + n * np.eye(n),)
    if name.startswith("fsub"):
        sliced = name.startswith("fsubslice")
        n = int(name[9 if sliced else 4:])
        rng = np.random.default_rng(0)
        L = np.tril(rng.normal(size=(n, n))) * 0.1 + 3 * np.eye(n)
        return forward_substitution_sliced if sliced else forward_substitution, (0, 1), \
            (L, rng.normal(size=n))
    raise SystemExit(f"unknown case {name!r}")


def measure(name):
    """In the measuring process: (seconds to the first gradient, median seconds per call)."""
    import symgrad as sg
    fn, wrt, args = case(name)
    t0 = time.perf_counter()
    g = sg.differentiate(fn, wrt=wrt).grad
    g(*args)
    first = time.perf_counter() - t0
    for _ in range(3):
        g(*args)
    calls = []
    for _ in range(30):
        t = time.perf_counter()
        g(*args)
        calls.append(time.perf_counter() - t)
    return first, statistics.median(calls)


def _child(tree, name, timeout):
    env = dict(os.environ, SYMGRAD_NO_CACHE="1", PYTHONPATH=HERE)
    python = os.path.join(tree, ".venv", "bin", "python")
    code = ("import sys, json, startup, triangular_loops as t; startup.byte_compile(sys.argv[1]); "
            "print(json.dumps(t.measure(sys.argv[2])))")
    try:
        out = subprocess.run([python, "-c", code, tree, name], env=env, cwd=tree, timeout=timeout,
                             capture_output=True, text=True, check=True).stdout
    except subprocess.TimeoutExpired:
        return None
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", default=[], help="name=path (default: new=.)")
    ap.add_argument("--cases", default="lj20,lj200,ljvec20,ljvec200,coulomb200,fsub100")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per process")
    opts = ap.parse_args()
    trees = [t.split("=", 1) for t in opts.tree] or [["new", os.path.dirname(HERE)]]
    for name in opts.cases.split(","):
        results = {t: [] for t, _ in trees}
        for _ in range(opts.runs):
            for tree, path in trees:   # alternating: the trees see the same load
                results[tree].append(_child(os.path.abspath(path), name, opts.timeout))
        for tree, runs in results.items():
            done = [r for r in runs if r is not None]
            if not done:
                print(f"{name:9s} {tree:5s} no result within {opts.timeout:.0f} s")
                continue
            first = sorted(r[0] for r in done)
            call = sorted(r[1] * 1e3 for r in done)
            print(f"{name:9s} {tree:5s} first gradient {statistics.median(first):7.3f} s "
                  f"[{first[0]:.3f}-{first[-1]:.3f}]  per call {statistics.median(call):8.3f} ms "
                  f"[{call[0]:.3f}-{call[-1]:.3f}]  ({len(done)} of {len(runs)} runs)")
        print(f"  load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
