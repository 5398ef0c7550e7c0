"""Tile groups (codegen.tiling): consecutive stages sharing an outer axis run chunk by chunk of
it, and the buffers only they use hold one chunk.

Checked: ADBench's GMM (as its definition reads) and its gradient equal target="python" and
central differences with the stages tiled, with chunks that do not divide the outer axis;
1, 2 and 3 threads give the same bits; the schedule's groups (which stages, the chunk, the
chunk-local buffers and their size; a cheap operand two groups read computed in each);
accesses that are not row aligned (a reversed or shifted
read, a reduction over the outer axis) keep stages out of a group; a stage that shares
nothing with a group is moved before it, one that reads its result is not; concurrent calls
of a tiled kernel."""
import math
import threading

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import llvm as cpu
from symgrad.codegen import tiling
from symgrad.codegen.schedule import Schedule


def lower_triangles(icf, d):
    """(K, d, d) strictly lower-triangular factors from icf[:, d:], column by column."""
    k = icf.shape[0]
    cols, start = [], d
    for i in range(d):
        count = d - i - 1
        cols.append(np.concatenate([np.zeros((k, i + 1)), icf[:, start:start + count]], axis=1))
        start += count
    return np.stack(cols, axis=2)


def logsumexp_rows(a):
    mx = np.max(a, axis=0)
    return np.log(np.sum(np.exp(a - mx[None, :]), axis=0)) + mx


def gmm(alphas, means, icf, x):
    """ADBench's GMM objective (without its constants), as its definition reads."""
    n, d = x.shape
    qdiags = np.exp(icf[:, :d])
    sum_qs = np.sum(icf[:, :d], axis=1)
    ls = lower_triangles(icf, d)
    xcentered = x[None, :, :] - means[:, None, :]
    lx = qdiags[:, None, :] * xcentered + xcentered @ np.transpose(ls, (0, 2, 1))
    sqsum = np.sum(lx * lx, axis=2)
    inner = (alphas + sum_qs)[:, None] - 0.5 * sqsum
    mx = np.max(alphas)
    return (np.sum(logsumexp_rows(inner)) - n * (np.log(np.sum(np.exp(alphas - mx))) + mx)
            + 0.5 * np.sum(qdiags * qdiags) + 0.5 * np.sum(icf[:, d:] * icf[:, d:]))


def gmm_args(k, n, d, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(k), rng.uniform(0, 1, (k, d)),
            rng.uniform(0, 1, (k, d + d * (d - 1) // 2)) * 0.1, rng.standard_normal((n, d)))


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few rows even for test-sized arrays (room for 3 rows of two of the GMM's
    (n, d) blocks)."""
    def rows_of(k, n, d):
        monkeypatch.setattr(tiling, "CHUNK_BYTES", 3 * 2 * n * d * 8)
    return rows_of


def schedule_of(fn, args, grad=False):
    f = sg.differentiate(fn, wrt=tuple(range(len(args) - 1)))
    g = f.grad if grad else f
    return Schedule(g._inspect_entry(*args).graph)


def native_of(fn, args):
    (fn(*args))
    return fn._inspect_entry(*args).prepared["cpu"]


@pytest.mark.parametrize("k, n, d", [(7, 13, 3), (11, 29, 5), (5, 64, 8)])
def test_tiled_gmm_equals_python_and_finite_differences(small_chunks, k, n, d):
    small_chunks(k, n, d)
    args = gmm_args(k, n, d)
    f = sg.differentiate(gmm, wrt=(0, 1, 2))
    ref = sg.differentiate(gmm, wrt=(0, 1, 2), target="python")
    for fn, groups in ((f, 1), (f.grad, 2)):
        native = native_of(fn, args)
        assert len(native.program.schedule.tile_groups) == groups
        # chunks of a few rows, the last one shorter
        assert all(1 < g.rows < k and k % g.rows for g in native.program.schedule.tile_groups)
    np.testing.assert_allclose(f(*args), ref(*args), rtol=1e-13)
    for a, b in zip(f.grad(*args), ref.grad(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)
    grads = f.grad(*args)
    rng = np.random.default_rng(3)
    for i in range(3):
        direction = rng.standard_normal(args[i].shape)
        h = 1e-6
        up = [a.copy() for a in args]
        down = [a.copy() for a in args]
        up[i] += h * direction
        down[i] -= h * direction
        numeric = (f(*up) - f(*down)) / (2 * h)
        assert math.isclose(numeric, float(np.sum(grads[i] * direction)), rel_tol=1e-6, abs_tol=1e-6)


def test_groups_and_chunk_local_buffers(small_chunks):
    """The objective's (K, n, d) stages from x - means to the sum of squares are one group;
    every buffer only they use (the product, the triangles) holds one chunk of rows."""
    k, n, d = 7, 13, 3
    small_chunks(k, n, d)
    args = gmm_args(k, n, d)
    native = native_of(sg.differentiate(gmm, wrt=(0, 1, 2)), args)
    s = native.program.schedule
    (group,) = s.tile_groups
    members = [s.stages[j] for j in group.stages]
    assert group.stages == list(range(group.stages[0], group.stages[-1] + 1))
    assert group.extent == k and all(st.shape[0] == k for st in members)
    assert any(st.kind == "matmul" for st in members)
    assert tiling.grouped(s) == set(group.stages)
    product = next(st for st in members if st.kind == "matmul").sinks[0].dest.buf
    assert product in group.local
    for buf, row in group.local.items():
        assert s.buffers[buf].kind == "tmp" and s.buffers[buf].size == group.rows * row
    assert product not in dict(native.tmp) or dict(native.tmp)[product] == group.rows * n * d * 8
    # the product of the whole batch would be k / rows times as large
    untiled = sum(st.size for st in members if st.kind == "matmul") // d
    assert s.buffers[product].size * k // group.rows == untiled


def _gmm_gradient_groups(small_chunks, k, n, d):
    """The GMM gradient's native at (k, n, d) in small chunks: (native, its schedule, its
    tile groups, the first group's forward matmul stage)."""
    small_chunks(k, n, d)
    native = native_of(sg.differentiate(gmm, wrt=(0, 1, 2)).grad, gmm_args(k, n, d))
    s = native.program.schedule
    first = s.tile_groups[0]
    forward = next(st for st in (s.stages[j] for j in first.stages) if st.kind == "matmul")
    return native, s, s.tile_groups, forward


def test_the_gradient_keeps_what_crosses_the_logsumexp(small_chunks):
    """The gradient's groups: the forward stages, and the backward ones after the logsumexp
    over K; the product the backward reads again is a whole buffer, the backward's own
    products chunk-local. ``x - means``, which both groups' matmuls read, is computed again
    at the head of the second group: each group's copy holds one chunk. The (K,) stage
    between them is moved before the second group. (n < 4 d: the backward reads the product
    itself, not the Gram product symgrad.gram_pull forms from 4 d rows on.)"""
    k, n, d = 7, 11, 3
    native, s, (first, second), forward = _gmm_gradient_groups(small_chunks, k, n, d)
    product = forward.sinks[0].dest.buf
    assert product not in first.local   # read again after the logsumexp
    backward = [s.stages[j] for j in second.stages if s.stages[j].kind == "matmul"]
    assert len(backward) == 2
    assert any(st.sinks[0].dest.buf in second.local for st in backward)
    # x - means: stored by each group for its own matmuls
    xc_first = forward.sinks[0].operands[0].buf
    head = s.stages[second.stages[0]]
    (store,) = head.sinks
    assert xc_first in first.local and store.dest.buf in second.local
    assert head.ssa == [store.node] and store.node.op == "sub" and store.node.shape == (k, n, d)
    assert any(store.dest.buf in {v.buf for v in st.sinks[0].operands} for st in backward)
    assert not any(xc_first in {v.buf for v in st.sinks[0].operands} for st in backward)
    # the only whole (K, n, d) scratch left is that product
    big = [buf for buf, nbytes in native.tmp if nbytes >= k * n * d * 8]
    assert big == [product]
    assert [st.index for st in s.stages] == list(range(len(s.stages)))


def test_the_gram_form_keeps_nothing_across_the_logsumexp(small_chunks):
    """From n >= 4 d rows the backward reduces through the Gram product x^T diag(s) x
    (symgrad.gram_pull): the forward product is chunk-local in the first group (nothing reads
    it after the logsumexp) and no whole (K, n, d) scratch is left."""
    k, n, d = 7, 13, 3
    native, s, (first, second), forward = _gmm_gradient_groups(small_chunks, k, n, d)
    assert forward.sinks[0].dest.buf in first.local
    assert not [buf for buf, nbytes in native.tmp if nbytes >= k * n * d * 8]


@pytest.mark.parametrize("threads", ["2", "3"])
def test_threads_give_the_same_bits(small_chunks, monkeypatch, threads):
    """The threads split a group's rows; each row is computed as on one thread. (The
    groups run on the threads, the stages outside them with sums over the split axis on one:
    those combine per-thread partial sums, which may differ in the last bit.)"""
    k, n, d = 11, 29, 5
    small_chunks(k, n, d)
    args = gmm_args(k, n, d, seed=4)
    monkeypatch.setattr(cpu, "PARALLEL_MIN", 2000)
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", "1")
    f1 = sg.differentiate(gmm, wrt=(0, 1, 2))
    single = (f1(*args),) + f1.grad(*args)
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", threads)
    f2 = sg.differentiate(gmm, wrt=(0, 1, 2))
    multi = (f2(*args),) + f2.grad(*args)
    for fn in (f2, f2.grad):
        native = native_of(fn, args)
        assert native.parallel and native.tiles.calls
        assert all(g.work >= cpu.PARALLEL_MIN for g in native.tiles.calls.values())
        assert all(call.work < cpu.PARALLEL_MIN for j, call in enumerate(native.stages)
                   if j not in native.tiles.grouped and call.partial)
    for a, b in zip(single, multi):
        np.testing.assert_array_equal(a, b)


def test_tiled_equals_untiled(small_chunks, monkeypatch):
    """Chunking changes no bit: the same function with tiling off."""
    k, n, d = 11, 29, 5
    args = gmm_args(k, n, d, seed=5)
    monkeypatch.setattr(tiling, "CHUNK_BYTES", 1 << 40)   # one chunk: no group
    f0 = sg.differentiate(gmm, wrt=(0, 1, 2))
    plain = (f0(*args),) + f0.grad(*args)
    assert not native_of(f0.grad, args).program.schedule.tile_groups
    small_chunks(k, n, d)
    f1 = sg.differentiate(gmm, wrt=(0, 1, 2))
    tiled = (f1(*args),) + f1.grad(*args)
    assert native_of(f1.grad, args).program.schedule.tile_groups
    for a, b in zip(plain, tiled):
        np.testing.assert_array_equal(a, b)


def _chain(shifted):
    def f(a, b):
        y = np.exp(a[:, :, None] * b[:, None, :])          # (K, m, p), stored
        z = y @ np.transpose(y, (0, 2, 1))                  # (K, m, m)
        r = np.sum(np.sin(shifted(z)) * z, axis=2)       # (K, m), row by row
        return np.sum(r * r)
    return f


@pytest.mark.parametrize("name, shifted, grouped", [
    ("rows", lambda z: z * 2.0, True),
    ("reversed", lambda z: z[::-1] * 2.0, False),
    ("rolled", lambda z: np.concatenate([z[1:], z[:1]], axis=0) * 2.0, False),
])
def test_only_row_aligned_reads_join_a_group(monkeypatch, name, shifted, grouped):
    """A stage reading row t of what an earlier one wrote may run chunk by chunk after it;
    one reading other rows (reversed, rolled) needs the whole array first."""
    monkeypatch.setattr(tiling, "CHUNK_BYTES", 64)
    rng = np.random.default_rng(6)
    args = (rng.uniform(-1, 1, (9, 6)), rng.uniform(-1, 1, (9, 5)))
    fn = _chain(shifted)
    f = sg.differentiate(fn, wrt=(0, 1))
    ref = sg.differentiate(fn, wrt=(0, 1), target="python")
    np.testing.assert_allclose(f(*args), ref(*args), rtol=1e-12)
    for a, b in zip(f.grad(*args), ref.grad(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
    s = native_of(f, args).program.schedule
    matmul = next(st for st in s.stages if st.kind == "matmul")
    members = tiling.grouped(s)
    consumer = [st for st in s.stages if st.index > matmul.index and st.index in members]
    assert bool(matmul.index in members and consumer) == grouped


def test_a_reduction_over_the_outer_axis_ends_a_group(monkeypatch):
    monkeypatch.setattr(tiling, "CHUNK_BYTES", 64)

    def f(a):
        y = np.exp(a)                              # (K, m, p)
        z = y @ np.transpose(y, (0, 2, 1))         # (K, m, m)
        return np.sum(np.max(z, axis=0) * np.sum(z, axis=0))
    a = np.random.default_rng(7).uniform(-1, 1, (8, 5, 4))
    s = native_of(sg.differentiate(f), (a,)).program.schedule
    for group in s.tile_groups:
        for j in group.stages:
            assert not any(sk.kind == "reduce" and sk.dest.strides[0] == 0
                           for sk in s.stages[j].sinks)
    np.testing.assert_allclose(sg.differentiate(f)(a), sg.differentiate(f, target="python")(a),
                               rtol=1e-12)


def test_concurrent_calls_of_a_tiled_kernel(small_chunks, monkeypatch):
    """A call while another runs gets its own workspace, chunks included."""
    k, n, d = 11, 29, 5
    small_chunks(k, n, d)
    monkeypatch.setattr(cpu, "PARALLEL_MIN", 1)
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", "2")
    f = sg.differentiate(gmm, wrt=(0, 1, 2))
    inputs = [gmm_args(k, n, d, seed=s) for s in range(4)]
    expected = [f.grad(*a) for a in inputs]
    errors = []

    def worker(t):
        for _ in range(20):
            got = f.grad(*inputs[t])
            if not all(np.array_equal(x, y) for x, y in zip(got, expected[t])):
                errors.append(t)
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_no_access_pass_without_a_tileable_stage(small_chunks, monkeypatch):
    """A schedule with no stage that could be chunked (1-d code) forms no group and reads no
    stage's accesses (straight-line code of thousands of statements: a pass over each stage's
    views twice); a 2-d one still forms its groups."""
    calls = []
    original = tiling.stage_accesses
    monkeypatch.setattr(tiling, "stage_accesses", lambda s, st: calls.append(st) or
                        original(s, st))

    def line(x):
        y = np.sin(x) * 0.5 + x
        return np.sum(np.tanh(y) * y + np.exp(-x * y))

    x = np.random.default_rng(3).uniform(-1, 1, 500)
    f = sg.differentiate(line)
    s = Schedule(f.grad._inspect_entry(x).graph)
    assert not s.tile_groups and not calls
    np.testing.assert_allclose(f.grad(x), sg.differentiate(line, target="python").grad(x),
                               rtol=1e-12)
    small_chunks(5, 40, 3)
    s = schedule_of(gmm, gmm_args(5, 40, 3), grad=True)
    assert s.tile_groups and calls
