"""The hot call path (symgrad.codegen.call_plan): a plan serves exactly the calls of its
signature and hands every other call to the full path unchanged, so the full path's checks,
copies and errors still hold after a function has become hot. Every test runs with both
kinds of plan: the Python plan and the native entry (codegen.native_entry)."""
import sysconfig
import threading

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends import MISS
from symgrad.codegen import call_plan as cp
from symgrad.codegen import native_entry


@pytest.fixture(autouse=True, params=["python", "native"])
def plan_kind(request, monkeypatch):
    """Which plan a hot CPU function gets: the Python plan (native entries switched off as
    where the process lacks them), or the native entry (compiled up front)."""
    if request.param == "python":
        monkeypatch.setattr(native_entry, "_runtime", {"ok": False})
    elif sysconfig.get_config_var("Py_GIL_DISABLED"):
        pytest.skip("no native entries on a free-threaded CPython (by design)")
    else:
        assert native_entry.ready(compile=True)
    return request.param


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def two_outputs(a, b):
    return a * b, np.sum(a - b)


def hot(fn, *args, **kw):
    """A CPU function already called once with ``args``, so its plan is installed."""
    f = sg.differentiate(fn, **kw)
    f(*args)
    assert f._hot is not None
    return f


def reference(fn, *args, **kw):
    return sg.differentiate(fn, target="python", **kw)(*args)


def test_plan_is_installed_and_matches_the_reference():
    x = np.linspace(-1.0, 1.5, 17)
    g = sg.differentiate(rosenbrock).grad
    first = g(x)
    assert g._hot is not None
    again = g(x)
    assert again is not first        # a fresh output every call
    np.testing.assert_allclose(again, sg.grad(rosenbrock, target="python")(x), rtol=1e-13)


def test_plan_alone_declines_other_signatures_without_running(plan_kind):
    x = np.linspace(0.0, 1.0, 9)
    g = sg.differentiate(rosenbrock).grad
    g(x)
    plan = g._hot[0]
    assert plan((x.astype(np.float32),)) is MISS
    assert plan((np.ones(10),)) is MISS
    assert plan((list(x),)) is MISS
    assert plan((x[::2].copy(), )) is MISS
    assert plan((x, x)) is MISS
    assert plan(()) is MISS
    strided = np.linspace(0.0, 1.0, 18)[::2]
    assert plan((strided,)) is MISS            # not C-contiguous: the full path copies
    readonly = x.copy()
    readonly.flags.writeable = False
    if plan_kind == "python":
        assert plan((readonly,)) is MISS       # (from_buffer needs a writeable buffer)
    else:                                      # the entry reads its address directly
        np.testing.assert_array_equal(plan((readonly,)), g(x))
    np.testing.assert_array_equal(readonly, x)
    np.testing.assert_array_equal(plan((x,)), g(x))


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_hot_function_still_rejects_bad_arguments(target):
    g = sg.differentiate(rosenbrock, target=target).grad
    g(np.ones(5))
    with pytest.raises(TypeError):
        g(np.ones(5), np.ones(5))
    with pytest.raises(TypeError):
        g("not an array")
    # a new dtype or shape is a new signature, still correct after the plan
    for x in (np.ones(5, np.float32), np.linspace(0, 1, 7)):
        np.testing.assert_allclose(g(x), sg.grad(rosenbrock, target="python")(x), rtol=1e-5)


class Sub(np.ndarray):
    pass


def test_alternating_signatures_and_layouts():
    g = sg.differentiate(rosenbrock).grad
    ref = sg.grad(rosenbrock, target="python")
    a, b = np.linspace(-1, 1, 8), np.linspace(-2, 2, 33)
    strided = np.linspace(-1, 1, 66)[::2]
    readonly = np.linspace(0, 2, 8)
    readonly.flags.writeable = False
    sub = np.linspace(0, 1, 8).view(Sub)
    for x in (a, b, a, strided, readonly, a, sub, b):
        before = np.array(x)
        np.testing.assert_allclose(g(x), ref(np.asarray(x)), rtol=1e-13)
        np.testing.assert_array_equal(x, before)      # caller arrays never written


def test_out_and_keywords_take_the_full_path():
    x = np.linspace(-1, 1, 12)
    g = sg.differentiate(rosenbrock).grad
    g(x)
    out = np.empty_like(x)
    assert g(x, out=out) is out
    np.testing.assert_allclose(out, g(x), rtol=1e-15)
    np.testing.assert_allclose(g(x=x), g(x), rtol=1e-15)
    with pytest.raises(ValueError):
        g(x, out=np.empty(3))


def test_several_outputs_and_arguments():
    a, b = np.linspace(-1, 1, 6), np.linspace(2, 3, 6)
    f = hot(two_outputs, a, b)
    for _ in range(2):
        got, want = f(a, b), reference(two_outputs, a, b)
        assert isinstance(got, tuple) and len(got) == 2
        np.testing.assert_allclose(got[0], want[0], rtol=1e-15)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-14)
    with pytest.raises(ValueError, match="broadcast"):
        f(a, b[:3])                      # a new signature, traced: the user's error
    g = f.grad
    g(a, b)
    np.testing.assert_allclose(g(a, b), sg.differentiate(two_outputs, target="python").grad(a, b),
                               rtol=1e-14)


SCALE = 2.0


def scaled(x):
    return np.sum(x * SCALE)


def test_rebound_global_is_seen_by_a_hot_function():
    global SCALE
    x = np.ones(4)
    g = sg.differentiate(scaled).grad
    g(x)
    g(x)
    try:
        SCALE = 5.0
        np.testing.assert_array_equal(g(x), np.full(4, 5.0))
    finally:
        SCALE = 2.0
    np.testing.assert_array_equal(g(x), np.full(4, 2.0))


def test_empty_arrays():
    g = sg.differentiate(rosenbrock).grad
    for n in (0, 1, 0):
        assert g(np.ones(n)).shape == (n,)


def test_concurrent_hot_calls():
    g = sg.differentiate(rosenbrock).grad
    xs = [np.linspace(-1, 1, 50) * (k + 1) for k in range(4)]
    want = [sg.grad(rosenbrock, target="python")(x) for x in xs]
    g(xs[0])
    errors = []

    def worker(k):
        for _ in range(300):
            got = g(xs[k])
            if not np.allclose(got, want[k], rtol=1e-13):
                errors.append(k)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_what_needs_the_full_path_gets_no_plan():
    def with_int(x, k):
        return np.sum(x) * k

    def with_float(x, s):
        return np.sum(x * s)

    f = sg.differentiate(with_int)
    f(np.ones(3), 2)
    assert f._hot is None             # a static int is part of the key: no plan
    assert f(np.ones(3), 3) == 9.0
    native = f._cache[f._last_key].prepared["cpu"]
    assert cp.argument_specs(native, ("array", "int")) is None
    h = sg.differentiate(with_float)
    h(np.ones(3), np.float64(2.0))    # a NumPy scalar: no plan
    assert h._hot is None


def test_python_float_arguments_are_planned():
    def with_float(x, s):
        return np.sum(x * s) + s

    f = sg.differentiate(with_float, wrt=(0, 1))
    x = np.linspace(0, 1, 5)
    f(x, 2.0)
    assert f._hot is not None
    for s in (3.0, -1.5):
        assert f(x, s) == pytest.approx(np.sum(x) * s + s, rel=1e-15)
        gx, gs = f.grad(x, s)
        np.testing.assert_allclose(gx, np.full(5, s))
        assert gs == pytest.approx(np.sum(x) + 1.0)
    assert f._hot[0]((x, 2)) is MISS          # an int is another signature (static value)
    assert f(x, 2) == pytest.approx(np.sum(x) * 2 + 2)
    with pytest.raises(TypeError):
        f(x, "2.0")
