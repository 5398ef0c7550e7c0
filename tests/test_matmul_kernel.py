"""The blocked matmul kernel (symgrad.codegen.matmul_kernel) against NumPy on target="cpu":
sizes around the tile, block and vector widths, empty dimensions, transposed and strided
operands, batches with broadcasting, both float dtypes, one thread and several."""
import re

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import llvm as cpu
from symgrad.codegen import matmul_kernel as mk


def matmul(a, b):
    return a @ b


def matmul_t(a, b):
    return a.T @ b


def matmul_bt(a, b):
    return a @ b.T


def matmul_sliced(a, b):
    return a[:, 1:] @ b[1:, ::1]


def loss(a, b):
    return np.sum(np.tanh(a @ b))


TOL = {np.float64: dict(rtol=1e-12, atol=1e-12), np.float32: dict(rtol=2e-4, atol=2e-4)}
# around the tile (MR rows, 2 vectors of 4-16 lanes), the row block MC and the k block KC
# and the narrower column tiles (one vector, half a vector) of GMM-like widths 10, 12, 20;
# every remainder of rows past the last full tile (1 ... MR - 1, repeated rows) and column
# tails of more and of less than one vector for 4, 8 and 16 lanes
SIZES = [(1, 1, 1), (5, 3, 7), (6, 16, 16), (7, 17, 33), (13, 257, 31), (97, 64, 65),
         (31, 9, 10), (12, 20, 20), (19, 1000, 12), (40, 7, 4),
         (mk.MR * 3 + 1, mk.KC + 3, 49), (200, 2 * mk.KC + 1, 70),
         (2, 1000, 2), (10, 1000, 10), (20, 300, 20), (mk.MC + 5, 11, 13), (mk.MC - 2, 3, 7),
         (3, 40, 28), (4, 9, 47)]


def rand(shape, dtype, seed):
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m,k,n", SIZES)
def test_matches_numpy(m, k, n, dtype):
    a, b = rand((m, k), dtype, 1), rand((k, n), dtype, 2)
    got = sg.differentiate(matmul)(a, b)
    assert got.dtype == dtype and got.shape == (m, n)
    np.testing.assert_allclose(got, a @ b, **TOL[dtype])


def test_the_blocked_kernel_is_what_runs():
    a = np.ones((8, 8))
    assert "symgrad_mm_float64_" in sg.differentiate(matmul).llvm_ir(a, a)
    assert "symgrad_mm_float32_" in sg.differentiate(matmul).llvm_ir(a.astype(np.float32),
                                                                     a.astype(np.float32))
    assert "_bstrided" in sg.differentiate(matmul_bt).llvm_ir(a, a)
    # integers keep the plain loop nest
    assert "symgrad_mm" not in sg.differentiate(matmul).llvm_ir(a.astype(np.int64),
                                                                a.astype(np.int64))


def test_the_kernel_is_a_library_compiled_once_per_process():
    """A module declares the kernel without epilogue (it is the same for every module of a
    dtype and layout); the first module that needs it links the library, later ones compile
    only themselves."""
    from symgrad.codegen import jit

    def first(a, b):
        return np.tanh(a @ b)

    def second(a, b):
        return (a @ b) * 2.0 + 1.0

    a = rand((9, 7), "float64", 1)
    b = rand((7, 5), "float64", 2)
    text = sg.differentiate(first).llvm_ir(a, b)
    assert re.search(r'^declare void @"symgrad_mm_float64_\d+"', text, re.M)
    assert not re.search(r'^define [^\n]*symgrad_mm', text, re.M)
    np.testing.assert_allclose(sg.differentiate(first)(a, b), np.tanh(a @ b), rtol=1e-13)
    before = jit.STATS["compiles"] + jit.STATS["disk_hits"]
    np.testing.assert_allclose(sg.differentiate(second)(a, b), (a @ b) * 2.0 + 1.0, rtol=1e-13)
    assert jit.STATS["compiles"] + jit.STATS["disk_hits"] == before + 1


@pytest.mark.parametrize("shape_a,shape_b", [((0, 4), (4, 5)), ((3, 0), (0, 5)), ((3, 4), (4, 0)),
                                             ((2, 0, 3), (3, 4)), ((0, 2, 3), (0, 3, 1))])
def test_empty_dimensions(shape_a, shape_b):
    a, b = np.ones(shape_a), np.ones(shape_b)
    got = sg.differentiate(matmul)(a, b)
    np.testing.assert_array_equal(got, a @ b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn,shape_a,shape_b", [
    (matmul_t, (37, 23), (37, 41)),       # a transposed: read one scalar at a time
    (matmul_bt, (23, 37), (41, 37)),      # b transposed: gathered into the packed panel
    (matmul_sliced, (19, 40), (40, 35)),  # offsets into both operands
    (matmul_bt, (10, 30), (10, 30)),      # a transposed b's tail columns, rows repeated
    (matmul_t, (300, 10), (300, 10)),     # the GMM's (d, n) @ (n, d) shape
])
def test_transposed_and_sliced_operands(fn, shape_a, shape_b, dtype):
    a, b = rand(shape_a, dtype, 3), rand(shape_b, dtype, 4)
    want = sg.differentiate(fn, target="python")(a, b)
    np.testing.assert_allclose(sg.differentiate(fn)(a, b), want, **TOL[dtype])


def test_non_contiguous_arguments():
    a = rand((40, 60), np.float64, 5)[:, ::2]
    b = np.asfortranarray(rand((30, 50), np.float64, 6))
    np.testing.assert_allclose(sg.differentiate(matmul)(a, b), a @ b, **TOL[np.float64])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape_a,shape_b", [((3, 7, 20), (3, 20, 33)), ((4, 1, 9, 19), (5, 19, 17)),
                                             ((13, 20), (2, 3, 20, 35)), ((2, 1, 6, 8), (1, 3, 8, 16))])
def test_batched_with_broadcasting(shape_a, shape_b, dtype):
    a, b = rand(shape_a, dtype, 7), rand(shape_b, dtype, 8)
    np.testing.assert_allclose(sg.differentiate(matmul)(a, b), a @ b, **TOL[dtype])


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("shape_a,shape_b", [((70, 50), (50, 45)), ((5, 30, 40), (5, 40, 33))])
def test_threads_split_rows_and_batches(monkeypatch, threads, shape_a, shape_b):
    monkeypatch.setattr(cpu, "PARALLEL_MIN", 1)
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", str(threads))
    a, b = rand(shape_a, np.float64, 9), rand(shape_b, np.float64, 10)
    np.testing.assert_allclose(sg.differentiate(matmul)(a, b), a @ b, **TOL[np.float64])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gradient_through_the_kernel(dtype):
    a, b = rand((21, 34), dtype, 11), rand((34, 18), dtype, 12)
    got = sg.grad(loss, wrt=(0, 1))(a, b)
    want = sg.grad(loss, wrt=(0, 1), target="python")(a, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL[dtype])


def test_vector_width_follows_the_host_features():
    assert mk.lanes("+sse2,+avx2,-avx512f", "float64") == 4
    assert mk.lanes("+avx2,+avx512f", "float64") == 8
    assert mk.lanes("+avx2,+avx512f", "float32") == 16


@pytest.mark.parametrize("k", [0, 1, 300])
def test_writes_every_output_element_without_a_fill(k):
    """The kernel overwrites its output (no zero fill first): garbage in an out= array, or a
    product with k = 0, must still give exactly a @ b."""
    a, b = rand((15, k), np.float64, 13), rand((k, 21), np.float64, 14)
    f = sg.differentiate(matmul)
    out = np.full((15, 21), np.nan)
    assert f(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, **TOL[np.float64])
    np.testing.assert_allclose(f(a, b), a @ b, **TOL[np.float64])
