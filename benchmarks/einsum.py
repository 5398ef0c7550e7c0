"""Contractions on the CPU back end against NumPy: ``einsum`` (matmul-shaped, batched and a
three-operand chain), ``tensordot`` and ``matmul``, at n = 64, 256, 512, float64. symgrad's
compiled function (target="cpu", forward value only) against ``np.einsum(..., optimize=True)``,
``np.tensordot`` and ``np.matmul`` (BLAS) on the same inputs, alternated call by call.

Usage: python benchmarks/einsum.py [n ...]   (medians of 7 runs after a warm-up; prints the
load average, since on a shared machine every figure moves with it)
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

import symgrad as sg


def mm_einsum(a, b):
    return np.einsum("ij,jk->ik", a, b)


def batched_einsum(a, b):
    return np.einsum("bij,bjk->bik", a, b)


def chain_einsum(a, b):
    return np.einsum("ij,jk,kl->il", a, b, a)


def tensordot2(a, b):
    return np.tensordot(a, b, axes=([1], [0]))


def matmul(a, b):
    return a @ b


def _numpy(fn):
    if fn is mm_einsum:
        return lambda a, b: np.einsum("ij,jk->ik", a, b, optimize=True)
    if fn is batched_einsum:
        return lambda a, b: np.einsum("bij,bjk->bik", a, b, optimize=True)
    if fn is chain_einsum:
        return lambda a, b: np.einsum("ij,jk,kl->il", a, b, a, optimize=True)
    return fn


def _inputs(fn, n, rng):
    if fn is batched_einsum:
        return rng.standard_normal((8, n, n)), rng.standard_normal((8, n, n))
    return rng.standard_normal((n, n)), rng.standard_normal((n, n))


def side_by_side(ours, theirs, args, runs=7):
    ours(*args), theirs(*args)   # compile / warm up
    t_ours, t_theirs = [], []
    for _ in range(runs):
        for f, times in ((ours, t_ours), (theirs, t_theirs)):
            t0 = time.perf_counter()
            f(*args)
            times.append(time.perf_counter() - t0)
    return float(np.median(t_ours)), float(np.median(t_theirs))


def main(sizes):
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cores; float64; medians of 7")
    print(f"{'case':16s} {'n':>5s} {'symgrad ms':>11s} {'numpy ms':>9s} {'ratio':>6s}")
    rng = np.random.default_rng(0)
    for fn in (mm_einsum, batched_einsum, chain_einsum, tensordot2, matmul):
        compiled = sg.differentiate(fn, target="cpu")
        for n in sizes:
            args = _inputs(fn, n, rng)
            np.testing.assert_allclose(compiled(*args), _numpy(fn)(*args), rtol=1e-9, atol=1e-9 * n)
            ours, theirs = side_by_side(compiled, _numpy(fn), args)
            print(f"{fn.__name__:16s} {n:5d} {ours * 1e3:11.3f} {theirs * 1e3:9.3f} {ours / theirs:6.2f}",
                  flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [64, 256, 512])
