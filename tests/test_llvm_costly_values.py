"""Values of math-library functions (exp, log, sin, ...) are computed in one loop and stored,
never recomputed by the loops that read them again (codegen.fusion.computed_once), and an
output may be written over the buffer of an intermediate its own loop is the last to read
(codegen.fusion.output_over_intermediate): W2's softmax cross-entropy gradient
``sum(t) / sum(e) * e - t`` with ``e = exp(x - max(x))`` computes e once, in the loop of its
sum, into the gradient's array, and the gradient's loop updates that array in place.

Checked by the schedule's content and by values against the NumPy reference back end, on
one thread and split across threads (the split must not change a value)."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import fusion, llvm
from symgrad.codegen.schedule import Schedule

N = 4 * fusion.COSTLY_MIN + 37     # above the size from which exp is stored, not a vector multiple


def softmax_xent(x, t):
    z = x - sg.stop_gradient(np.max(x))
    return -np.sum(t * (z - np.log(np.sum(np.exp(z)))))


def softmax_then_more(x, t):
    """e is read again after the gradient's loop (by e * sum(g * g)): its buffer must survive
    it; the last loop reading it, a 0-d sum's, has no array to write over it."""
    e = np.exp(x - np.max(x))
    g = np.sum(t) / np.sum(e) * e - t
    return g, np.sum(e * np.sum(g * g))


def softmax_then_scaled(x, t):
    """e is read last by the loop of the second output, which may write over it."""
    e = np.exp(x - np.max(x))
    g = np.sum(t) / np.sum(e) * e - t
    return g, e * np.sum(g * g)


def softmax_and_a_view(x, t):
    """Views of e are outputs too: each is copied from e's buffer by a loop placed later."""
    e = np.exp(x - np.max(x))
    g = np.sum(t) / np.sum(e) * e - t
    return g, e[::-1], e.reshape(1, -1)


def sines_twice(x):
    s = np.sin(x)
    return np.sum(s) * s + np.cos(x)


def inputs(n, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.uniform(size=n)
    return (rng.normal(size=n) * 3).astype(dtype), (t / t.sum()).astype(dtype)


def homes(sched, op):
    return [st.index for st in sched.stages for n in st.ssa if n.op == op]


def store_sinks(sched, op):
    return [(st.index, sk.dest.buf) for st in sched.stages for sk in st.sinks
            if sk.kind == "store" and sk.node.op == op]


@pytest.fixture(params=[1, 2], ids=["one-thread", "two-threads"])
def threads(request, monkeypatch):
    """Run every stage on one thread, or split each across two (whatever the machine has)."""
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", str(request.param))
    monkeypatch.setattr(llvm, "PARALLEL_MIN", 1)
    return request.param


def test_softmax_gradient_computes_exp_once_into_the_gradients_array():
    x, t = inputs(N)
    sched = Schedule(sg.grad(softmax_xent)._inspect_entry(x, t).graph)
    assert len(homes(sched, "exp")) == 1, homes(sched, "exp")
    [(k, buf)] = store_sinks(sched, "exp")
    assert sched.buffers[buf].kind == "out" and sched.outputs == [buf]
    # the gradient's loop reads e there and stores the gradient over it; no scratch array
    # of N elements is left
    last = [st for st in sched.stages if any(sk.dest.buf == buf for sk in st.sinks)][-1]
    assert last.index > k and "exp" not in [n.op for n in last.ssa]
    assert not [b for b in sched.buffers if b.kind == "tmp" and b.size == N]


def test_a_small_exp_is_still_recomputed():
    """Below COSTLY_MIN elements recomputing is cheaper than a store and a load."""
    x, t = inputs(fusion.COSTLY_MIN // 2)
    sched = Schedule(sg.grad(softmax_xent)._inspect_entry(x, t).graph)
    assert len(homes(sched, "exp")) == 2
    assert not store_sinks(sched, "exp")


@pytest.mark.parametrize("n", [N, fusion.COSTLY_MIN, 3 * fusion.COSTLY_MIN + 1])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_softmax_gradient_matches_the_reference(n, dtype, threads):
    x, t = inputs(n, dtype, seed=n)
    got = sg.grad(softmax_xent)(x, t)
    want = sg.grad(softmax_xent, target="python")(x, t)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    f = sg.differentiate(softmax_xent)
    value, grad = f.value_and_grad(x, t)
    np.testing.assert_allclose(grad, got, rtol=0, atol=0)
    np.testing.assert_allclose(value, sg.differentiate(softmax_xent, target="python")(x, t),
                               rtol=tol)


def test_the_gradient_does_not_depend_on_the_thread_split(monkeypatch):
    x, t = inputs(N, seed=3)
    grads = []
    for nt in (1, 2, 3):
        monkeypatch.setenv("SYMGRAD_NUM_THREADS", str(nt))
        monkeypatch.setattr(llvm, "PARALLEL_MIN", 1)
        grads.append(sg.grad(softmax_xent)(x, t))
    # the sums are split with the threads (their partial sums add in another order), so the
    # scalar factor may differ in its last bit; every element is that factor times the same e
    for g in grads[1:]:
        np.testing.assert_allclose(g, grads[0], rtol=1e-15, atol=1e-18)


@pytest.mark.parametrize("fn", [softmax_then_more, softmax_and_a_view])
def test_an_intermediate_read_later_keeps_its_own_buffer(fn, threads):
    x, t = inputs(N, seed=5)
    f = sg.differentiate(fn)
    sched = Schedule(f._inspect_entry(x, t).graph)
    [(_, buf)] = store_sinks(sched, "exp")
    assert sched.buffers[buf].kind == "tmp"
    for got, want in zip(f(x, t), sg.differentiate(fn, target="python")(x, t)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_the_last_reader_of_the_intermediate_writes_over_it(threads):
    x, t = inputs(N, seed=6)
    f = sg.differentiate(softmax_then_scaled)
    sched = Schedule(f._inspect_entry(x, t).graph)
    [(k, buf)] = store_sinks(sched, "exp")
    g_buf, scaled_buf = sched.outputs
    assert scaled_buf == buf != g_buf
    assert max(st.index for st in sched.stages if any(sk.dest.buf == g_buf for sk in st.sinks)) \
        < max(st.index for st in sched.stages if any(sk.dest.buf == buf for sk in st.sinks))
    for got, want in zip(f(x, t), sg.differentiate(softmax_then_scaled, target="python")(x, t)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_sin_is_stored_once_and_the_output_reuses_its_buffer(threads):
    x = np.linspace(0.1, 3.0, N)          # (a sum without cancellation)
    f = sg.differentiate(sines_twice)
    sched = Schedule(f._inspect_entry(x).graph)
    assert len(homes(sched, "sin")) == 1
    [(_, buf)] = store_sinks(sched, "sin")
    assert sched.outputs == [buf]
    np.testing.assert_allclose(f(x), sg.differentiate(sines_twice, target="python")(x),
                               rtol=1e-13, atol=1e-13)
