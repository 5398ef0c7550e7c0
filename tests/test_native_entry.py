"""The native entry (symgrad.codegen.native_entry): a hot CPU function's calls run through one
builtin that checks the arguments in machine code. Every check of the full path still holds
after many hot calls (wrong dtype, shape, arity, type: a clear error or a correct new
signature, never a crash, never a write to a caller's array), under threads, with the
garbage collector re-entering the function, across the disk cache, and over its lifetime."""
import gc
import os
import subprocess
import sys
import sysconfig
import threading
import weakref

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends import MISS
from symgrad.codegen import call_plan as cp
from symgrad.codegen import native_entry

pytestmark = pytest.mark.skipif(bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
                                reason="no native entries on a free-threaded CPython (by design)")


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def mixed(x, s):
    return np.sum(np.sin(x) * s) + s * s, x * s


def reference(fn, *args, **kw):
    return sg.differentiate(fn, target="python", **kw)


@pytest.fixture(autouse=True)
def compiled_entry():
    assert native_entry.available()      # a 64-bit GIL CPython: the layouts are checked
    assert native_entry.ready(compile=True)


def hot_entry(f, *args):
    for _ in range(3):
        f(*args)
    assert type(f._hot[0]).__name__ == "builtin_function_or_method"
    return f._hot[0]


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_wrong_arguments_after_hot_calls_are_clear_errors(target):
    g = sg.differentiate(rosenbrock, target=target).grad
    x = np.linspace(-1.0, 1.0, 11)
    if target == "cpu":
        hot_entry(g, x)
    else:
        for _ in range(3):
            g(x)
    with pytest.raises(TypeError, match="int64"):
        g(np.arange(11))                              # integer data: not differentiable
    with pytest.raises(TypeError):
        g(x, x)                                       # arity
    with pytest.raises(TypeError):
        g()
    with pytest.raises(TypeError):
        g("x")
    with pytest.raises(TypeError):
        g(list(x))                                    # a pytree: traced, the user's error
    with pytest.raises(ValueError):
        g(x, out=np.empty(3))                         # the full path's out= check
    np.testing.assert_allclose(g(x), reference(rosenbrock).grad(x), rtol=1e-13)
    if target == "cpu":
        assert type(g._hot[0]).__name__ == "builtin_function_or_method"


class Sub(np.ndarray):
    pass


def test_other_signatures_and_layouts_after_hot_calls():
    g = sg.differentiate(rosenbrock).grad
    ref = reference(rosenbrock).grad
    x = np.linspace(-1.0, 1.0, 11)
    hot_entry(g, x)
    wide = np.linspace(-1.0, 1.0, 22)
    column = np.linspace(-1.0, 1.0, 11).reshape(11, 1)
    fortran = np.asfortranarray(np.linspace(-1.0, 1.0, 22).reshape(11, 2))[:, 0]
    unaligned = np.ndarray(11, np.float64, np.zeros(11 * 8 + 1, np.uint8).data, 1)
    unaligned[:] = x
    for arg in (x.astype(np.float32), wide, wide[::2], fortran, unaligned,
                x.copy().view(Sub), x):
        before = np.array(arg, copy=True)
        want = ref(np.array(arg, dtype=np.asarray(arg).dtype.newbyteorder("=")))
        np.testing.assert_allclose(g(arg), want, rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(arg), before)   # never written
    np.testing.assert_allclose(g(column), ref(column), rtol=1e-13)   # 2-d: a new signature
    with pytest.raises(TypeError, match=">f8"):
        g(x.astype(">f8"))                            # byte-swapped: refused, never misread


def test_entry_declines_every_other_argument():
    g = sg.differentiate(rosenbrock).grad
    x = np.linspace(0.0, 1.0, 9)
    entry = hot_entry(g, x)
    for args in ((x.astype(np.float32),), (np.ones(10),), (list(x),), (x, x), (), (x[::2],),
                 (np.linspace(0, 1, 18)[::2],), (1.0,), (None,), (x.reshape(3, 3),)):
        assert entry(args) is MISS
    assert entry([x]) is MISS                          # not a tuple
    assert entry() is MISS and entry((x,), x, x) is MISS  # (entry(args, out): see the out= tests)
    np.testing.assert_array_equal(entry((x,)), g(x))


def scalar(x, s):
    return np.sum(np.sin(x) * s) + s * s


def test_floats_in_and_out_and_tuples():
    x = np.linspace(-1.0, 2.0, 7)
    for s in (0.5, -3.0):
        for f, ref in ((sg.differentiate(mixed), reference(mixed)),          # (float, array)
                       (sg.value_and_grad(scalar), reference(scalar).value_and_grad),
                       (sg.grad(scalar), reference(scalar).grad)):
            hot_entry(f, x, s)
            got, want = f(x, s), ref(x, s)
            if isinstance(want, tuple):
                assert type(got) is tuple and len(got) == len(want)
                assert type(got[0]) is float and got[0] == pytest.approx(want[0], rel=1e-13)
                np.testing.assert_allclose(got[1], want[1], rtol=1e-13)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-13)


def test_float_results_are_python_floats():
    def w(a, b):
        return a * np.sin(b) + np.exp(-a * a)

    g = sg.grad(w, wrt=(0, 1))
    hot_entry(g, 0.3, 0.7)
    got = g(0.3, 0.7)
    assert type(got) is tuple and all(type(v) is float for v in got)
    want = sg.grad(w, wrt=(0, 1), target="python")(0.3, 0.7)
    assert got == pytest.approx(want, rel=1e-14)
    with pytest.raises(TypeError):
        g(0.3, "0.7")
    with pytest.raises(TypeError, match="static"):
        g(0.3, 2)                                     # an int: static, not differentiable
    assert g(np.float64(0.3), 0.7) == pytest.approx(want, rel=1e-14)


def test_hot_entry_under_threads_beside_full_path_calls():
    g = sg.differentiate(rosenbrock).grad
    ref = reference(rosenbrock).grad
    xs = [np.linspace(-1, 1, 40) * (k + 1) for k in range(4)]
    want = [ref(x) for x in xs]
    hot_entry(g, xs[0])
    errors = []

    def worker(k):
        out = np.empty(40)
        for n in range(400):
            got = g(xs[k], out=out) if n % 3 == 0 else g(xs[k])   # full path, GIL released
            if not np.allclose(got, want[k], rtol=1e-13):
                errors.append(k)
            if n % 50 == 0:
                try:
                    g(xs[k].astype(np.int32))
                except TypeError:
                    pass
                else:
                    errors.append("no error")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# -- out=: the entry writes into the caller's arrays exactly where the full path would ----------

def swap(x, s):
    return x * s, np.sum(x) * s


def scale(m):
    return m * 2.0 + 1.0


def two_floats(a, b):
    return a * np.sin(b) + np.exp(-a * a)


class OutCase:
    """A hot function, a fresh copy of its arguments, and ``out`` factories by case name."""

    def __init__(self, f, ref, make_args, outs):
        self.f, self.ref, self.make_args, self.outs = f, ref, make_args, outs


def out_cases():
    x11 = lambda: (np.linspace(-1.0, 1.0, 11),)
    x7s = lambda: (np.linspace(-1.0, 2.0, 7), 0.75)
    unaligned = lambda: np.ndarray(11, np.float64, np.zeros(11 * 8 + 1, np.uint8).data, 1)
    return {
        "rosenbrock": OutCase(sg.grad(rosenbrock), reference(rosenbrock).grad, x11, {
            "array": lambda a: np.full(11, np.nan), "1-tuple": lambda a: (np.full(11, np.nan),)}),
        "mixed": OutCase(sg.differentiate(mixed), reference(mixed), x7s, {   # (0-d, array)
            "tuple": lambda a: (np.full((), np.nan), np.full(7, np.nan))}),
        "swap": OutCase(sg.differentiate(swap), reference(swap), x7s, {       # (array, 0-d)
            "tuple": lambda a: (np.full(7, np.nan), np.full((), np.nan))}),
        "value_and_grad": OutCase(sg.value_and_grad(scalar), reference(scalar).value_and_grad,
                                  x7s, {"tuple": lambda a: (np.full((), np.nan), np.full(7, 0.0))}),
        "two floats": OutCase(sg.grad(two_floats, wrt=(0, 1)),
                              reference(two_floats, wrt=(0, 1)).grad, lambda: (0.3, 0.7), {
            "tuple": lambda a: (np.full((), np.nan), np.full((), np.nan))}),
        "scale": OutCase(sg.differentiate(scale), reference(scale),
                         lambda: (np.arange(12.0).reshape(3, 4),), {
            "array": lambda a: np.full((3, 4), np.nan)}),
    }, unaligned


def hot_out_entry(f, args, out):
    """``f``'s native entry, hot (after plain calls and out= calls)."""
    entry = hot_entry(f, *args)
    for _ in range(3):
        assert f(*args, out=out) is out
    assert f._hot[0] is entry
    return entry


@pytest.mark.parametrize("name", ["rosenbrock", "mixed", "swap", "value_and_grad", "two floats",
                                  "scale"])
def test_out_through_the_entry_equals_the_full_path_and_the_reference(name):
    case = out_cases()[0][name]
    for kind, make_out in case.outs.items():
        args = case.make_args()
        before = [np.array(a, copy=True) for a in args]
        out = make_out(args)
        entry = hot_out_entry(case.f, args, make_out(args))
        assert entry(args, out) is out                 # the entry took it: no MISS
        full = make_out(args)
        case.f._hot = None                             # the full path, as before the entry
        assert case.f(*args, out=full) is full
        want = case.ref(*args)
        got_items = out if isinstance(out, tuple) else (out,)
        for got, same, ref in zip(got_items, full if isinstance(full, tuple) else (full,),
                                  want if isinstance(out, tuple) and isinstance(want, tuple)
                                  else (want,)):
            np.testing.assert_array_equal(got, same)
            np.testing.assert_allclose(got, ref, rtol=1e-13)
        for a, b in zip(args, before):
            np.testing.assert_array_equal(a, b)      # arguments never written
        python_out = make_out(args)
        assert case.ref(*args, out=python_out) is python_out   # target="python" alike
        for got, ref in zip(got_items, python_out if isinstance(python_out, tuple)
                            else (python_out,)):
            np.testing.assert_allclose(got, ref, rtol=1e-13)


def outcome(call, args, out):
    """What a call did: its error (type and message), or that it returned ``out`` itself, with
    every argument and out= array as it is afterwards."""
    try:
        result = call(*args, out=out)
        what = ("returned out", result is out) if result is not None else ("returned None",)
    except Exception as e:                             # the comparison is of any error
        what = (type(e), str(e))
    items = out if isinstance(out, (tuple, list)) else (out,)
    return what, [np.array(a, copy=True) for a in args], \
        [np.array(o, copy=True) if isinstance(o, np.ndarray) else o for o in items]


def assert_same_outcome(a, b):
    (what_a, args_a, outs_a), (what_b, args_b, outs_b) = a, b
    assert what_a == what_b
    for u, v in zip(args_a + outs_a, args_b + outs_b, strict=True):
        if isinstance(u, np.ndarray):
            assert u.dtype == v.dtype and u.shape == v.shape
            np.testing.assert_array_equal(u, v)
        else:
            assert u == v


def wrong_outs(unaligned):
    """Per case, the out= values the entry must decline (the full path raises, copies through
    a fresh array, or fills a container), each made fresh from the case's arguments."""
    def read_only(shape):
        a = np.full(shape, np.nan)
        a.flags.writeable = False
        return a

    return {
        "rosenbrock": {
            "float32": lambda a: np.zeros(11, np.float32),
            "shape": lambda a: np.zeros(12),
            "2-d": lambda a: np.zeros((11, 1)),
            "byte-swapped": lambda a: np.zeros(11, ">f8"),
            "read-only": lambda a: read_only(11),
            "strided": lambda a: np.full(22, np.nan)[::2],
            "unaligned": lambda a: unaligned(),
            "subclass": lambda a: np.full(11, np.nan).view(Sub),
            "the argument itself": lambda a: a[0],
            "2-tuple": lambda a: (np.zeros(11), np.zeros(11)),
            "empty tuple": lambda a: (),
            "list": lambda a: [np.zeros(11)],
            "not an array": lambda a: "out",
            "tuple holding a list": lambda a: ([0.0] * 11,),
        },
        "scale": {
            "Fortran order": lambda a: np.full((3, 4), np.nan, order="F"),
            "transposed": lambda a: np.full((4, 3), np.nan).T,
            "the argument itself": lambda a: a[0],
            "a view of the argument": lambda a: a[0][:, :],
        },
        "mixed": {
            "0-d read-only": lambda a: (read_only(()), np.full(7, np.nan)),
            "array read-only": lambda a: (np.full((), np.nan), read_only(7)),
            "0-d float32": lambda a: (np.zeros((), np.float32), np.zeros(7)),
            "0-d of shape (1,)": lambda a: (np.zeros(1), np.zeros(7)),
            "0-d a float": lambda a: (0.0, np.zeros(7)),
            "0-d subclass": lambda a: (np.full((), np.nan).view(Sub), np.full(7, np.nan)),
            "array the argument": lambda a: (np.full((), np.nan), a[0]),
            "swapped": lambda a: (np.zeros(7), np.zeros(())),
            "1-tuple": lambda a: (np.zeros(()),),
            "3-tuple": lambda a: (np.zeros(()), np.zeros(7), np.zeros(7)),
            "list": lambda a: [np.full((), np.nan), np.full(7, np.nan)],
            "array alone": lambda a: np.zeros(7),
        },
        "two floats": {
            "the same 0-d twice": lambda a: (lambda s: (s, s))(np.full((), np.nan)),
            "second read-only": lambda a: (np.full((), np.nan), read_only(())),
        },
    }


def test_wrong_out_after_hot_calls_is_what_the_full_path_does():
    cases, unaligned = out_cases()
    for name, wrong in wrong_outs(unaligned).items():
        case = cases[name]
        args = case.make_args()
        good = next(iter(case.outs.values()))
        entry = hot_out_entry(case.f, args, good(args))
        for label, make_out in wrong.items():
            hot_args, full_args = case.make_args(), case.make_args()
            hot_out, full_out = make_out(hot_args), make_out(full_args)
            if label != "the same 0-d twice":
                probe_args = case.make_args()
                assert entry(probe_args, make_out(probe_args)) is MISS, (name, label)
            hot_entry(case.f, *hot_args)
            hot = outcome(case.f, hot_args, hot_out)       # hot: the entry, then the full path
            case.f._hot = None
            full = outcome(case.f, full_args, full_out)    # the full path alone, as before
            assert_same_outcome(hot, full)
            if hot[0][0] == "returned out" and label != "the same 0-d twice":
                got = hot_out[0] if isinstance(hot_out, tuple) and len(hot_out) == 1 else hot_out
                want = case.ref(*case.make_args())
                for g, w in zip(got if isinstance(got, tuple) else (got,),
                                want if isinstance(want, tuple) else (want,)):
                    np.testing.assert_allclose(g, w, rtol=1e-13)
        good_out = good(args)                          # and hot out= calls still go native
        assert case.f(*args, out=good_out) is good_out
        assert entry(args, good_out) is good_out


def test_out_overlapping_an_argument_in_part_is_copied_as_on_the_full_path():
    def setup():                  # the argument and out= share 9 of their 11 elements
        buf = np.linspace(-1.0, 1.0, 13)
        return (buf[2:],), buf[:11]

    g = sg.grad(rosenbrock)
    args, out = setup()
    want = reference(rosenbrock).grad(np.array(args[0]))
    entry = hot_out_entry(g, (np.array(args[0]),), np.empty(11))
    assert entry(args, out) is MISS
    hot = outcome(g, *setup())
    g._hot = None
    assert_same_outcome(hot, outcome(g, *setup()))
    args, out = setup()
    assert g(*args, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-13)   # read the argument before writing


def test_same_zero_d_out_twice_gets_the_later_result_as_on_the_full_path():
    f = sg.grad(two_floats, wrt=(0, 1))
    s = np.full((), np.nan)
    entry = hot_out_entry(f, (0.3, 0.7), (np.empty(()), np.empty(())))
    out = (s, s)
    assert entry((0.3, 0.7), out) is out
    assert float(s) == f(0.3, 0.7)[1]


def test_out_calls_alone_hand_over_to_the_entry(monkeypatch):
    """A function only ever called with out=: the Python plan's countdown counts those calls,
    so they reach the entry too."""
    monkeypatch.setattr(cp, "NATIVE_SOON", 2)
    g = sg.grad(rosenbrock)
    x = np.linspace(0.0, 1.0, 6)
    out = np.empty(6)
    for _ in range(5):
        assert g(x, out=out) is out
    assert type(g._hot[0]).__name__ == "builtin_function_or_method"
    assert g._hot[0]((x,), out) is out
    np.testing.assert_allclose(out, reference(rosenbrock).grad(x), rtol=1e-13)


def test_out_none_and_other_keywords_after_hot_calls():
    def f(x, out):                                     # a parameter named out: no out=
        return np.sum(x * out)

    g = sg.grad(rosenbrock)
    x = np.linspace(0.0, 1.0, 6)
    hot_entry(g, x)
    np.testing.assert_array_equal(g(x, out=None), g(x))   # out=None: a fresh result
    np.testing.assert_array_equal(g(x=x), g(x))
    h = sg.grad(f, wrt=1)
    hot_entry(h, x, x * 2.0)
    np.testing.assert_allclose(h(x, out=x * 2.0), x, rtol=1e-15)
    with pytest.raises(TypeError):
        g(x, out=np.empty(6), extra=1)


def test_out_on_a_guarded_signature_through_the_entry():
    """(More in test_guard_entry.py.) The entry takes out= of a guarded signature too: the
    kernel writes fresh arrays, copied into out= once no guard fired."""
    def until(x):
        while np.sum(x) < 100.0:
            x = x * 2.0
        return x

    f = sg.differentiate(until)
    x = np.linspace(1.0, 2.0, 4)
    entry = hot_entry(f, x)
    assert f._hot[2] is True
    out = np.empty(4)
    assert f(x, out=out) is out
    np.testing.assert_allclose(out, reference(until)(x), rtol=1e-13)
    assert entry((x,), out) is out
    np.testing.assert_allclose(out, reference(until)(x), rtol=1e-13)


class Reenters:
    """A cyclic object whose finalizer calls the hot function: the garbage collector may run
    it inside the entry's own allocations."""
    def __init__(self, fn, args, log):
        self.fn, self.args, self.log, self.me = fn, args, log, self

    def __del__(self):
        self.log.append(self.fn(*self.args))


def test_garbage_collector_reentering_the_entry():
    v = sg.value_and_grad(scalar)
    x, y = np.linspace(-1.0, 2.0, 7), np.linspace(3.0, 4.0, 7)
    want_x, want_y = reference(scalar).value_and_grad(x, 0.5), \
        reference(scalar).value_and_grad(y, 1.5)
    hot_entry(v, x, 0.5)
    inner = []
    threshold = gc.get_threshold()
    gc.collect()
    try:
        gc.set_threshold(1)                       # a collection at (nearly) every allocation
        for _ in range(200):
            Reenters(v, (y, 1.5), inner)
            got = v(x, 0.5)
            assert got[0] == pytest.approx(want_x[0], rel=1e-13)
            np.testing.assert_allclose(got[1], want_x[1], rtol=1e-13)
    finally:
        gc.set_threshold(*threshold)
    gc.collect()
    assert inner
    for got in inner:
        assert got[0] == pytest.approx(want_y[0], rel=1e-13)
        np.testing.assert_allclose(got[1], want_y[1], rtol=1e-13)


def test_entry_keeps_what_it_uses_alive_and_is_freed_with_it():
    g = sg.differentiate(rosenbrock).grad
    x = np.linspace(0.0, 1.0, 6)
    entry = hot_entry(g, x)
    native = weakref.ref(g._cache[g._last_key].prepared["cpu"])
    want = g(x)
    del g
    gc.collect()
    assert native() is not None                   # the entry still holds it
    np.testing.assert_array_equal(entry((x,)), want)
    del entry
    gc.collect()
    assert native() is None


def test_python_plan_hands_over_to_the_entry_after_its_countdowns(monkeypatch):
    """A process that has not loaded the entry: a Python plan first, a look in the disk cache
    after NATIVE_SOON calls (here: nothing there), a compile after NATIVE_AFTER more."""
    real_ready, is_loaded, looks = native_entry.ready, [False], []

    def ready(compile):
        looks.append(compile)
        is_loaded[0] = compile and real_ready(True)
        return is_loaded[0]

    monkeypatch.setattr(native_entry, "ready", ready)
    monkeypatch.setattr(native_entry, "loaded", lambda: is_loaded[0])
    monkeypatch.setattr(cp, "NATIVE_SOON", 2)
    monkeypatch.setattr(cp, "NATIVE_AFTER", 3)
    g = sg.differentiate(rosenbrock).grad
    x = np.linspace(0.0, 1.0, 6)
    kinds, results = [], []
    for _ in range(8):
        results.append(g(x))
        kinds.append(type(g._hot[0]).__name__)
    assert looks == [False, True]
    assert kinds[:5] == ["function"] * 5 and kinds[-1] == "builtin_function_or_method"
    for r in results:
        np.testing.assert_array_equal(r, results[0])


def test_no_entry_where_the_layouts_are_not_known(monkeypatch):
    monkeypatch.setattr(native_entry, "_runtime", {"ok": False})
    g = sg.differentiate(rosenbrock).grad
    x = np.linspace(0.0, 1.0, 6)
    for _ in range(3):
        g(x)
    assert type(g._hot[0]).__name__ == "function"
    assert native_entry.entry_for(g._cache[g._last_key].prepared["cpu"], (), None) is None


def test_results_the_entry_does_not_build_keep_the_python_plan():
    def nested(x):
        return {"a": x * 2.0, "b": np.sum(x)}

    def f32_scalar(x):
        return np.sum(x)

    f = sg.differentiate(nested)
    x = np.linspace(0.0, 1.0, 5)
    for _ in range(3):
        got = f(x)
    assert type(f._hot[0]).__name__ == "function"
    np.testing.assert_array_equal(got["a"], x * 2.0)
    v = sg.value_and_grad(mixed, wrt=(0, 1))          # ((value, value), (grad, grad))
    for _ in range(3):
        got = v(x, 0.5)
    assert type(v._hot[0]).__name__ == "function"
    assert got[1][1] == pytest.approx(reference(mixed, wrt=(0, 1)).value_and_grad(x, 0.5)[1][1])
    h = sg.differentiate(f32_scalar)
    x32 = x.astype(np.float32)
    for _ in range(3):
        got = h(x32)
    assert type(h._hot[0]).__name__ == "function"
    assert got == pytest.approx(np.sum(x32)) and got.dtype == np.float32


SCRIPT = """
import sys
import numpy as np
import symgrad as sg
from symgrad.codegen import call_plan, jit
sys.path.insert(0, {here!r})
from test_native_entry import rosenbrock
call_plan.NATIVE_SOON, call_plan.NATIVE_AFTER = 1, 2
g = sg.grad(rosenbrock)
x = np.linspace(0.0, 1.0, 7)
kinds = []
for _ in range(5):
    g(x)
    kinds.append(type(g._hot[0]).__name__)
print(kinds[0], kinds[-1], jit.STATS["disk_hits"], jit.STATS["compiles"])
"""


def test_disk_cache_gives_later_processes_the_entry_at_once(tmp_path):
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("SYMGRAD_NO_CACHE", None)
    script = SCRIPT.format(here=os.path.dirname(os.path.abspath(__file__)))

    def run():
        out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                             capture_output=True, text=True)
        return out.stdout.split()

    first_kind, last_kind, hits, compiles = run()
    assert (first_kind, last_kind) == ("function", "builtin_function_or_method")
    # the kernel, the entry and the libraries the kernel calls (the strided copy loop)
    assert int(hits) == 0 and int(compiles) >= 2
    compiled = int(compiles)
    first_kind, last_kind, hits, compiles = run()   # loaded from the disk after 1 call
    assert (first_kind, last_kind) == ("function", "builtin_function_or_method")
    assert (int(hits), int(compiles)) == (compiled, 0)
