"""A broadcast elementwise value that must live in memory (a matmul reads it) is recomputed from
its small operands by the other loops that read it, instead of being streamed back
(codegen.schedule.Schedule._recompute_beats_load): the GMM's ``centered = x[None] - mu[:, None]``.
Results agree with the NumPy reference back end on odd sizes, size 1, broadcasting and float32."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen.schedule import Schedule


def centered_products(x, mu, L):
    c = x[None, :, :] - mu[:, None, :]             # (k, n, d), from (n, d) and (k, d)
    q = c @ np.transpose(L, (0, 2, 1)) + 2.0 * c   # the matmul needs c in memory
    return np.sum(np.tanh(q) * c)


def scaled_rows(x, s, w):
    y = x * s[:, None]                             # (m, k), one operand is a column
    return np.sum(np.sin(y @ w)) + np.sum(y[:, :1] * y)


def same_size(x, w):
    y = x * 3.0                                    # operand as large as y: loaded, not recomputed
    return np.sum(np.cos(y @ w)) + np.sum(y * y)


TOL = {np.float64: dict(rtol=1e-12, atol=1e-12), np.float32: dict(rtol=2e-4, atol=2e-5)}


def rand(shape, dtype, seed):
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


def graph(fn, *args):
    return sg.grad(fn, wrt=tuple(range(len(args))))._inspect_entry(*args).graph


def stages_computing(sched, op, shape):
    return [st.index for st in sched.stages for n in st.ssa if n.op == op and n.shape == shape]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k,n,d", [(3, 7, 5), (1, 1, 1), (2, 1, 3), (4, 13, 1), (5, 33, 10)])
def test_centered_products_match_the_reference(k, n, d, dtype):
    args = rand((n, d), dtype, 1), rand((k, d), dtype, 2), rand((k, d, d), dtype, 3)
    f = sg.differentiate(centered_products, wrt=(0, 1, 2))
    want = sg.differentiate(centered_products, wrt=(0, 1, 2), target="python")
    np.testing.assert_allclose(f(*args), want(*args), **TOL[dtype])
    for g, w in zip(f.grad(*args), want.grad(*args)):
        np.testing.assert_allclose(g, w, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m,k,n", [(9, 4, 3), (1, 5, 2), (17, 1, 6)])
def test_scaled_rows_match_the_reference(m, k, n, dtype):
    args = rand((m, k), dtype, 4), rand((m,), dtype, 5), rand((k, n), dtype, 6)
    got = sg.grad(scaled_rows, wrt=(0, 1, 2))(*args)
    want = sg.grad(scaled_rows, wrt=(0, 1, 2), target="python")(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOL[dtype])


def test_the_broadcast_is_recomputed_where_it_is_read_again():
    """c is stored once (for the matmuls) and computed again in the loops after them."""
    args = rand((7, 5), np.float64, 1), rand((3, 5), np.float64, 2), rand((3, 5, 5), np.float64, 3)
    sched = Schedule(graph(centered_products, *args))
    homes = stages_computing(sched, "sub", (3, 7, 5))
    assert len(homes) >= 2, homes
    c_loaded = [st.index for st in sched.stages if st.kind == "loop"
                for n in st.ssa for x in n.inputs if x.op == "sub" and x.shape == (3, 7, 5)
                and x not in st.ssa]
    assert not c_loaded, c_loaded


def test_an_operand_as_large_as_the_value_is_not_a_reason_to_recompute():
    x, w = rand((6, 4), np.float64, 7), rand((4, 5), np.float64, 8)
    sched = Schedule(graph(same_size, x, w))
    assert len(stages_computing(sched, "mul", (6, 4))) >= 1
    y = [n for st in sched.stages for n in st.ssa if n.op == "mul" and n.shape == (6, 4)
         and any(i.op == "arg" for i in n.inputs) and any(i.op == "const" for i in n.inputs)]
    assert len(set(y)) == 1 and sum(1 for st in sched.stages if y[0] in st.ssa) == 1
    got = sg.grad(same_size, wrt=(0, 1))(x, w)
    want = sg.grad(same_size, wrt=(0, 1), target="python")(x, w)
    for g, v in zip(got, want):
        np.testing.assert_allclose(g, v, rtol=1e-12, atol=1e-12)
