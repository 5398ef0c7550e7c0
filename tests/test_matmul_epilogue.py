"""A loop right after a float matmul, over the product's shape, doing arithmetic on the product
and summing it over the rows or storing it, is the matmul's epilogue
(codegen.schedule.Schedule._fuse_matmul_epilogues): the blocked kernel applies it to each tile
in registers (codegen.matmul_kernel). The GMM gradient's ``sum_n(q * g + g @ L)`` is one.

Checked: values and gradients equal target="python" (float32/float64; sizes that are not
multiples of the tile's rows or of any vector width; k beyond one k block; one and two batch
axes; operands broadcast along rows or columns; constants; sums and stores), and the
schedule: the loop is gone, its work is the matmul stage's epilogue."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen.schedule import Schedule


def row_sums(g, L, q):
    return np.sum(q[:, None, :] * g + g @ L, axis=1)


def row_sums_scaled(g, L, q):
    return np.sum((g @ L) * 0.25 - g / 3.0 + q[:, None, :], axis=1) * 2.0


def column_broadcast(g, L, c):
    """A value per row (broadcast along the columns) and a stored result."""
    p = -(g @ L) * c[:, :, None]
    return np.sum(p, axis=1), p


def stored_product(g, L, q):
    return g @ L + q[:, None, :], np.sum(g @ L - g, axis=1)


CASES = {
    # square products (q * g needs g's columns): k is the columns too
    "row_sums": (row_sums, lambda K, m, k, n: [(K, m, k), (K, k, k), (K, k)]),
    "row_sums_scaled": (row_sums_scaled, lambda K, m, k, n: [(K, m, k), (K, k, k), (K, k)]),
    "column_broadcast": (column_broadcast, lambda K, m, k, n: [(K, m, k), (K, k, n), (K, m)]),
    "stored_product": (stored_product, lambda K, m, k, n: [(K, m, n), (K, n, n), (K, n)]),
}
SIZES = [(1, 2, 1, 1), (3, 7, 5, 3), (2, 13, 9, 17), (4, 33, 20, 20), (2, 300, 260, 13)]


def _args(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, size=s).astype(dtype) for s in shapes]


def _close(a, b, dtype):
    rtol = 1e-12 if dtype == "float64" else 3e-5
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        # float32 sums of hundreds of products cancel: errors scale with the largest value
        scale = max(1.0, float(np.max(np.abs(y)))) if np.size(y) else 1.0
        np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("size", SIZES, ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_equal_target_python(name, size, dtype):
    fn, shapes = CASES[name]
    args = _args(shapes(*size), dtype, sum(size))
    cpu, py = sg.differentiate(fn), sg.differentiate(fn, target="python")
    _close(cpu(*args), py(*args), dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("size", SIZES, ids=str)
def test_gradients_equal_target_python(size, dtype):
    """The gradient of a product summed over rows has products whose loops are epilogues."""
    def loss(g, L, q):
        return np.sum(row_sums(g, L, q) ** 2) + np.sum((g @ L) ** 2 * q[:, None, :])
    args = _args(CASES["row_sums"][1](*size), dtype, 7)
    cpu = sg.differentiate(loss, wrt=(0, 1, 2))
    py = sg.differentiate(loss, wrt=(0, 1, 2), target="python")
    _close(cpu(*args), py(*args), dtype)
    for a, b in zip(cpu.grad(*args), py.grad(*args)):
        _close(a, b, dtype)


def test_two_batch_axes():
    def f(g, L, q):
        return np.sum(q[:, :, None, :] * g + g @ L, axis=2)
    rng = np.random.default_rng(3)
    args = [rng.normal(size=s) for s in ((2, 3, 7, 9), (2, 3, 9, 9), (2, 3, 9))]
    _close(sg.differentiate(f)(*args), sg.differentiate(f, target="python")(*args), "float64")


def _stages(fn, *args):
    return Schedule(sg.differentiate(fn)._inspect_entry(*args).graph).stages


def test_the_loop_after_the_matmul_is_its_epilogue():
    g, L, q = np.ones((3, 7, 4)), np.ones((3, 4, 4)), np.ones((3, 4))
    stages = _stages(row_sums, g, L, q)
    matmuls = [st for st in stages if st.kind == "matmul"]
    assert len(matmuls) == 1 and matmuls[0].epilogue is not None
    assert [sk.kind for sk in matmuls[0].epilogue.sinks] == ["reduce"]
    # no loop over the (3, 7, 4) product is left
    assert not [st for st in stages if st.kind == "loop" and st.shape == (3, 7, 4)]
    assert [st.index for st in stages] == list(range(len(stages)))


def test_a_sum_over_columns_is_not_an_epilogue():
    """Only sums over the rows (one row vector a matrix) are applied to the tiles."""
    def f(g, L):
        return np.sum(g @ L * 2.0, axis=2)
    stages = _stages(f, np.ones((3, 7, 5)), np.ones((3, 5, 4)))
    assert all(st.epilogue is None for st in stages if st.kind == "matmul")


@pytest.mark.parametrize("threads", [1, 3])
def test_threads_splitting_the_batch_keep_each_matrix_sums(monkeypatch, threads):
    """The threads split the batch axis; each matrix's row sums are its own."""
    from symgrad.codegen import llvm as cpu
    monkeypatch.setattr(cpu, "PARALLEL_MIN", 1)
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", str(threads))
    args = _args(CASES["row_sums"][1](7, 29, 13, 13), "float64", 5)
    for name in ("row_sums", "stored_product"):
        fn = CASES[name][0]
        _close(sg.differentiate(fn)(*args), sg.differentiate(fn, target="python")(*args),
               "float64")
