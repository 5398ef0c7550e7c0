"""The matmul library kernel's lower flag (codegen.matmul_kernel.lower_applies): a Gram product
``x^T @ (s * x)`` (symmetric in exact arithmetic, symgrad.gram_pull.symmetric_gram) computes
the tiles on or below the diagonal and mirrors the lower triangle. Checked: the lower triangle
is the full kernel's bit for bit, the result exactly symmetric and NumPy's within rounding, at
sizes around the tile, the row block and the k block, in float32 and float64, on one thread
and several; not used where the product is not a Gram product or has no batch axis."""
import re

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import llvm as cpu
from symgrad.codegen import matmul_kernel as mk


def gram(x, s):
    return np.transpose(x, (0, 2, 1)) @ (s[:, :, None] * x)


def gram_negated(x, s):
    return np.transpose(x, (0, 2, 1)) @ -(2.0 * (s[:, :, None] * x))


def cross(x, s, y):
    """x^T @ (s * y): not symmetric."""
    return np.transpose(x, (0, 2, 1)) @ (s[:, :, None] * y)


def column_scaled(x, s):
    """x^T @ (x * s) with s one factor per column: x^T x diag(s), not symmetric."""
    return np.transpose(x, (0, 2, 1)) @ (x * s[:, None, :])


def unbatched(x, s):
    """No batch axis: the threads split the rows, the full kernel runs."""
    return x.T @ (s[:, None] * x)


TOL = {np.float64: dict(rtol=1e-12, atol=1e-12), np.float32: dict(rtol=2e-4, atol=2e-4)}
# (k, n, d): d around the tile's MR rows and 2-vector columns, past the row block MC; n past
# the k block KC (the accumulators reloaded) and n = 1
SHAPES = [(2, 50, 3), (3, 40, 2), (2, 30, 5), (2, 30, mk.MR), (2, 30, mk.MR + 1), (3, 80, 16),
          (2, 70, 17), (4, 100, 20), (2, mk.KC + 7, 33), (2, 300, 64), (1, 40, mk.MC + 4),
          (3, 1, 9)]


def uses_lower(f, *args) -> bool:
    """A call of the library kernel with its last argument, the lower flag, set."""
    calls = re.findall(r'call void @"symgrad_mm_float\d+_\d+"\(([^)]*)\)', f.llvm_ir(*args))
    assert calls
    return any(c.rstrip().endswith("i64 1") for c in calls)


def rand(shape, dtype, seed):
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


def _full_kernel(monkeypatch, fn, args):
    with monkeypatch.context() as m:
        m.setattr(mk, "lower_applies", lambda stage: False)
        f = sg.differentiate(fn)
        assert not uses_lower(f, *args)
        return f(*args)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k,n,d", SHAPES)
def test_lower_triangle_is_the_full_kernels_and_mirrored(monkeypatch, k, n, d, dtype):
    x, s = rand((k, n, d), dtype, 1), rand((k, n), dtype, 2)
    f = sg.differentiate(gram)
    assert uses_lower(f, x, s)
    got = f(x, s)
    full = _full_kernel(monkeypatch, gram, (x, s))
    below = np.tril(np.ones((d, d), dtype=bool))
    assert np.array_equal(got[:, below], full[:, below])
    assert np.array_equal(got, np.transpose(got, (0, 2, 1)))
    np.testing.assert_allclose(got, gram(x, s), **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_negated_and_scaled_gram(dtype):
    x, s = rand((3, 90, 13), dtype, 3), rand((3, 90), dtype, 4)
    f = sg.differentiate(gram_negated)
    assert uses_lower(f, x, s)
    got = f(x, s)
    assert np.array_equal(got, np.transpose(got, (0, 2, 1)))
    np.testing.assert_allclose(got, gram_negated(x, s), **TOL[dtype])


@pytest.mark.parametrize("threads", ["1", "3"])
def test_threads_split_the_batch(monkeypatch, threads):
    monkeypatch.setattr(cpu, "PARALLEL_MIN", 1)
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", threads)
    x, s = rand((7, 120, 21), np.float64, 5), rand((7, 120), np.float64, 6)
    got = sg.differentiate(gram)(x, s)
    assert np.array_equal(got, np.transpose(got, (0, 2, 1)))
    np.testing.assert_allclose(got, gram(x, s), **TOL[np.float64])


@pytest.mark.parametrize("fn,args", [
    (cross, [(3, 60, 12), (3, 60), (3, 60, 12)]),
    (column_scaled, [(3, 60, 12), (3, 12)]),
    (unbatched, [(60, 12), (60,)]),
])
def test_not_a_batched_gram_product(fn, args):
    values = [rand(shape, np.float64, 7 + i) for i, shape in enumerate(args)]
    f = sg.differentiate(fn)
    assert not uses_lower(f, *values)
    np.testing.assert_allclose(f(*values), fn(*values), **TOL[np.float64])
