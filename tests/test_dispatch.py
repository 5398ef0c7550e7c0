"""A threaded call's passes handed to the pool once per call (codegen.dispatch).

Checked: results bit for bit those of the per-pass hand-off codegen.llvm made before (its
algorithm, below, with the parts run one after another: the same parts, tables, accumulators
and fold order), for W2, reductions over axis 0 and the last axis, a tile-grouped GMM,
float32 and float64, sizes around the split thresholds, 2 and 3 threads; the same bits
whichever thread runs which part (no worker at all, a pool busy with another job, a pool
that takes no jobs); two Python threads calling at once (one native, and two); a call that
stops between passes (an exception in the fold) lets its workers go and the next call runs;
a kernel's guard (an index out of bounds) still raises."""
import threading

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import dispatch, llvm as cpu

from test_tiling import gmm, gmm_args


def per_pass_reference(native, ptrs):
    """codegen.llvm's threaded call before codegen.dispatch, parts run in order here."""
    least, nt = cpu.parallel_min(), cpu.num_threads()
    addr, params = ptrs.ctypes.data, native.params_addr
    if native.work < least or nt == 1:
        native.run(addr, params)
        return
    from symgrad.codegen import tile_run
    keep = []
    for k, call in enumerate(native.stages):
        if k in native.tiles.calls:
            group = native.tiles.calls[k]
            for j in group.stages:
                native.stages[j].init(addr, params)
            if group.work < least or group.extent < 2:
                group.run(addr, params, 0, group.extent)
                continue
            bounds = cpu.split_bounds(group.extent, min(nt, group.extent), False)
            tables = [(ptrs, None)] + [tile_run.thread_table(native, ptrs, group, t)
                                       for t in range(1, len(bounds) - 1)]
            for t, (table, _) in enumerate(tables):
                group.run(table.ctypes.data, params, bounds[t], bounds[t + 1])
            continue
        if k in native.tiles.grouped:
            continue
        call.init(addr, params)
        if call.work < least or call.extent0 < 2:
            call.stage(addr, params, 0, call.extent0)
            continue
        bounds = cpu.split_bounds(call.extent0, min(nt, call.extent0), call.vector_axis)
        tables, extra = [addr], []
        for t in range(1, len(bounds) - 1):
            if call.partial:
                p = ptrs.copy()
                for buf, _ in call.partial:
                    size, dtype = native.partial_specs[buf]
                    acc = np.empty(size, np.dtype(dtype))
                    p[buf] = acc.ctypes.data
                    extra.append((buf, acc))
                keep.append(p)
                call.init(p.ctypes.data, params)
                tables.append(p.ctypes.data)
            else:
                tables.append(addr)
        for t in range(len(bounds) - 1):
            call.stage(tables[t], params, bounds[t], bounds[t + 1])
        for buf, acc in extra:
            size, dtype = native.partial_specs[buf]
            mine = cpu._memory(int(ptrs[buf]), size, dtype)
            cpu._COMBINE[dict(call.partial)[buf]](mine, acc, out=mine)


def w2(x, t):
    z = x - sg.stop_gradient(np.max(x))
    return -np.sum(t * (z - np.log(np.sum(np.exp(z)))))


def axis0(a):
    return np.sum(np.max(a, axis=0) + np.sum(np.exp(a), axis=0) ** 2)


def last_axis(a):
    return np.sum(np.max(a, axis=-1) * np.sum(np.tanh(a), axis=-1))


def logsumexp0(a):
    return np.sum(np.log(np.sum(np.exp(a - np.max(a, axis=0)), axis=0)))


def _cases():
    rng = np.random.default_rng(5)
    for n in (255, 256, 257, 4099, 65536, 65537):
        for dt in (np.float32, np.float64):
            x = (rng.normal(size=n) * 3).astype(dt)
            t = rng.uniform(size=n).astype(dt)
            yield f"w2-{n}-{dt.__name__}", w2, (x, t / t.sum())
    for shape in ((300, 257), (2, 5000), (5000, 3), (3, 70000)):
        for dt in (np.float32, np.float64):
            a = rng.normal(size=shape).astype(dt)
            for fn in (axis0, last_axis, logsumexp0):
                yield f"{fn.__name__}-{shape}-{dt.__name__}", fn, (a,)
    yield "gmm-tiled", gmm, gmm_args(11, 29, 5)


CASES = list(_cases())


def _results(fn, args):
    f = sg.differentiate(fn, wrt=tuple(range(len(args) - 1)) if fn is gmm else 0)
    value, grads = f.value_and_grad(*args)
    return [np.asarray(value)] + [np.asarray(g) for g in
                                  (grads if isinstance(grads, tuple) else (grads,))]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()   # the bits, -0 and NaN too


@pytest.fixture(params=[2, 3])
def threads(request, monkeypatch):
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", str(request.param))
    monkeypatch.setattr(cpu, "PARALLEL_MIN", 256)
    return request.param


@pytest.mark.parametrize("name, fn, args", CASES, ids=[c[0] for c in CASES])
def test_bits_equal_the_per_pass_hand_off(monkeypatch, threads, name, fn, args):
    if name == "gmm-tiled":
        from symgrad.codegen import tiling
        monkeypatch.setattr(tiling, "CHUNK_BYTES", 3 * 2 * 29 * 5 * 8)   # several chunks
    passes = []
    execute = dispatch.execute

    def spy(native, plan, ptrs, pool):
        passes.append(sum(type(step) is dispatch.Pass for step in plan.steps))
        return execute(native, plan, ptrs, pool)
    monkeypatch.setattr(dispatch, "execute", spy)
    now = _results(fn, args)
    if not name.startswith(("w2-255-", "w2-256-", "w2-257-")):   # (less work than PARALLEL_MIN)
        assert passes and max(passes) > 0, "no pass ran on the threads"
    monkeypatch.setattr(cpu.Native, "_execute", lambda self, ptrs: per_pass_reference(self, ptrs))
    before = _results(fn, args)
    _same(now, before)


class _NoJobs:
    def submit(self, *args):
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")


def test_same_bits_whichever_thread_runs_a_part(monkeypatch, threads):
    """The calling thread alone (a pool that takes no job, as at interpreter shutdown), a pool
    whose only worker is busy with another job, and the pool free: the same bits."""
    cases = [c for c in CASES if c[0].startswith(("w2-65537", "axis0-(300", "gmm"))]
    free = [_results(fn, args) for _, fn, args in cases]
    monkeypatch.setattr(cpu, "_executor", lambda: _NoJobs())
    alone = [_results(fn, args) for _, fn, args in cases]
    monkeypatch.undo()
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", str(threads))
    monkeypatch.setattr(cpu, "PARALLEL_MIN", 256)
    release = threading.Event()
    busy = [cpu._executor().submit(release.wait, 60) for _ in range(threads)]
    try:
        occupied = [_results(fn, args) for _, fn, args in cases]
    finally:
        release.set()
    assert all(f.result(timeout=60) for f in busy)
    for a, b, c in zip(free, alone, occupied):
        _same(a, b)
        _same(a, c)


def test_two_python_threads_at_once(threads):
    """Two user threads calling one compiled function (one gets the native's cached state, the
    other private memory) and two different ones, many times: every result right."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=70001)
    t = rng.uniform(size=70001)
    t /= t.sum()
    a = rng.normal(size=(300, 257))
    f, g = sg.differentiate(w2), sg.differentiate(axis0)
    want_f, want_g = f.grad(x, t), g.grad(a)
    errors = []

    def hammer(fn, args, want):
        try:
            for _ in range(40):
                _same([fn(*args)], [want])
        except BaseException as e:   # (reported by the main thread)
            errors.append(e)
    one, other = (f.grad, (x, t), want_f), (g.grad, (a,), want_g)
    for pair in ([one, one], [one, other]):
        workers = [threading.Thread(target=hammer, args=job) for job in pair]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        assert not any(w.is_alive() for w in workers), "a call hung"
        assert not errors, errors[0]


def test_a_call_stopped_between_passes_lets_its_workers_go(monkeypatch, threads):
    """An exception between two passes (here in the fold of W2's max) closes the call's block:
    its waiting workers leave, the pool runs the next job, the next call is right."""
    rng = np.random.default_rng(4)
    x, t = rng.normal(size=70001), rng.uniform(size=70001)
    f = sg.differentiate(w2)
    want = f.grad(x, t)

    def broken(mine, other, out):
        raise FloatingPointError("fold failed")
    monkeypatch.setitem(cpu._COMBINE, "max", broken)
    with pytest.raises(FloatingPointError):
        f.grad(x, t)
    monkeypatch.setitem(cpu._COMBINE, "max", cpu._signed_zero_extremum(False))
    for _ in range(threads):   # every worker takes a job again (none is stuck in a block)
        assert cpu._executor().submit(lambda: 7).result(timeout=60) == 7
    _same([f.grad(x, t)], [want])


def test_guard_raises_from_a_threaded_call(threads):
    """A kernel's index guard (codegen: an out-of-bounds entry of an index array) still raises
    after its passes ran on the threads, and the next call is right."""
    def pick(x, i):
        return np.sum(np.exp(x[i]) * x[i])
    rng = np.random.default_rng(6)
    x = rng.normal(size=70000)
    good = rng.integers(0, 70000, 70000)
    bad = good.copy()
    bad[50000] = 70000
    g = sg.grad(pick)
    want = g(x, good)
    with pytest.raises(IndexError):
        g(x, bad)
    _same([g(x, good)], [want])


def test_one_thread_and_small_work_never_dispatch(monkeypatch):
    """One thread, or work under parallel_min: the kernel's sg_run alone (no plan, no pool)."""
    rng = np.random.default_rng(7)
    x, t = rng.normal(size=5000), rng.uniform(size=5000)
    f = sg.differentiate(w2)
    for threads, least in (("1", 1), ("2", 1 << 40)):
        monkeypatch.setenv("SYMGRAD_NUM_THREADS", threads)
        monkeypatch.setattr(cpu, "PARALLEL_MIN", least)
        monkeypatch.setattr(dispatch, "execute", None)   # a dispatch would fail here
        f.grad(x, t)
        monkeypatch.undo()


def test_empty_arrays_on_threads(threads):
    """Zero-size extents: no part to run, right (empty) results."""
    f = sg.grad(lambda a: np.sum(np.exp(a) * 2.0))
    out = f(np.zeros(0))
    assert out.shape == (0,)
    h = sg.grad(lambda a: np.sum(np.sum(np.exp(a), axis=1) ** 2))
    assert h(np.zeros((70000, 0))).shape == (70000, 0)
