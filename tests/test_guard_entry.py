"""Guarded signatures (symgrad.guards: the error guards of np.linalg.inv / solve / cholesky and
the caps of while loops on data) through the native entry (symgrad.codegen.native_entry): hot
calls run in machine code, which reads the guard flags after the kernel; a fired flag
declines the call (MISS) before anything the caller sees is written, and the full path raises
the guard's LinAlgError or grows the loop's cap and runs again. Every result, error and
message equals the full path's (a fresh function's first call) and target="python"'s, through
grad, jvp, hessian, vmap, checkpoint and loops, with out= (never written by a call that
raises), on first and later calls, after a cap grew, and from two threads."""
from __future__ import annotations

import inspect
import sysconfig
import threading
import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad import guards
from symgrad.backends import MISS
from symgrad.codegen import call_plan as cp
from symgrad.codegen import native_entry

pytestmark = pytest.mark.skipif(bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
                                reason="no native entries on a free-threaded CPython (by design)")


@pytest.fixture(autouse=True)
def compiled_entry_and_fresh_caps():
    assert native_entry.available() and native_entry.ready(compile=True)
    saved = dict(guards.CAPS)
    guards.CAPS.clear()           # every test starts from the first caps
    yield
    guards.CAPS.clear()
    guards.CAPS.update(saved)


# ----------------------------------------------------------------------------------------------
# The programs

def inv_of(a):
    return np.linalg.inv(a)


def inv_sum(a):
    return np.sum(np.linalg.inv(a) * np.arange(a.shape[-1]))


def solve_of(a, b):
    return np.linalg.solve(a, b)


def cholesky_sum(a):
    return np.sum(np.linalg.cholesky(a))


def checkpointed(a):
    return sg.checkpoint(inv_sum)(a) + 1.0


def looped(a):
    total = 0.0
    for t in range(12):          # a loop region: singular where a - t I is
        total = total + np.sum(np.linalg.inv(a - t * np.eye(2)))
    return total


def two_guards(a):
    # two error guards of different kinds on different lines, and a tuple result
    c = np.linalg.cholesky(a)
    return np.sum(c), np.linalg.inv(a - np.eye(3)) * 2.0


def newton(a):
    x = a
    while np.max(np.abs(x * x - a)) > 1e-12 * np.max(a):
        x = 0.5 * (x + a / x)
    return np.sum(x)


def scaled(x, limit):
    t = 0.0 * limit
    y = x
    while t < limit:             # `limit` trips: a few hundred need the cap to grow
        y = 0.999 * y + 0.001 * np.cos(x)
        t = t + 1.0
    return y


OK3 = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]])   # positive definite
SINGULAR3 = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
NOT_PD3 = np.diag([1.0, -1.0, 2.0])
OK2, SINGULAR2 = np.diag([6.5, 20.5]), np.diag([6.0, 20.0])
B3 = np.array([1.0, -2.0, 0.5])


def _line(fn, text):
    lines, first = inspect.getsourcelines(fn)
    at = next(i for i, line in enumerate(lines) if text in line)
    return f"{fn.__code__.co_filename}:{first + at}:"


# name -> (make(target) -> Function, good arguments, arguments that fire a guard, the error's
# line: None for a while, whose firing grows the cap)
CASES = {
    "inv": (lambda t: sg.differentiate(inv_of, target=t), (OK3,), (SINGULAR3,),
            _line(inv_of, "np.linalg.inv")),
    "inv_grad": (lambda t: sg.grad(inv_sum, target=t), (OK3,), (SINGULAR3,),
                 _line(inv_sum, "np.linalg.inv")),
    "solve": (lambda t: sg.differentiate(solve_of, target=t), (OK3, B3), (SINGULAR3, B3),
              _line(solve_of, "np.linalg.solve")),
    "solve_grad_both": (lambda t: sg.grad(solve_of, wrt=(0, 1), target=t), (OK3, B3),
                        (SINGULAR3, B3), _line(solve_of, "np.linalg.solve")),
    "cholesky": (lambda t: sg.differentiate(cholesky_sum, target=t), (OK3,), (NOT_PD3,),
                 _line(cholesky_sum, "np.linalg.cholesky")),
    "cholesky_grad": (lambda t: sg.grad(cholesky_sum, target=t), (OK3,), (NOT_PD3,),
                      _line(cholesky_sum, "np.linalg.cholesky")),
    "value_and_grad": (lambda t: sg.value_and_grad(inv_sum, target=t), (OK3,), (SINGULAR3,),
                       _line(inv_sum, "np.linalg.inv")),
    "jvp": (lambda t: sg.jvp(inv_sum, target=t), (OK3, np.ones((3, 3))),
            (SINGULAR3, np.ones((3, 3))), _line(inv_sum, "np.linalg.inv")),
    "hessian": (lambda t: sg.hessian(inv_sum, target=t), (OK3,), (SINGULAR3,),
                _line(inv_sum, "np.linalg.inv")),
    "vmap": (lambda t: sg.vmap(sg.grad(inv_sum, target=t)), (np.stack([OK3, 2 * OK3]),),
             (np.stack([OK3, SINGULAR3]),), _line(inv_sum, "np.linalg.inv")),
    "checkpoint_grad": (lambda t: sg.grad(checkpointed, target=t), (OK3,), (SINGULAR3,),
                        _line(inv_sum, "np.linalg.inv")),
    "loop": (lambda t: sg.grad(looped, target=t), (OK2,), (SINGULAR2,),
             _line(looped, "np.linalg.inv")),
    # both fire (the first line's error, as NumPy raises), the second alone
    "two_guards_both": (lambda t: sg.differentiate(two_guards, target=t), (OK3 + np.eye(3),),
                        (np.diag([1.0, -1.0, 2.0]),), _line(two_guards, "np.linalg.cholesky")),
    "two_guards_second": (lambda t: sg.differentiate(two_guards, target=t), (OK3 + np.eye(3),),
                          (np.diag([2.0, 1.0, 3.0]),), _line(two_guards, "np.linalg.inv")),
    "while_value": (lambda t: sg.differentiate(newton, target=t), (np.array([2.0, 3.0, 5.0]),),
                    (np.array([1e30, 2.0, 3.0]),), None),
    "while_grad": (lambda t: sg.grad(newton, target=t), (np.array([2.0, 3.0, 5.0]),),
                   (np.array([1e30, 2.0, 3.0]),), None),
    "while_two_arguments": (lambda t: sg.differentiate(scaled, target=t),
                            (np.linspace(0.1, 1.0, 4), 5.5), (np.linspace(0.1, 1.0, 4), 700.5),
                            None),
}


def _hot(f, args):
    for _ in range(3):
        f(*args)
    return f._hot[0] if f._hot is not None else None


def _is_entry(plan) -> bool:
    return type(plan).__name__ == "builtin_function_or_method"


def _outcome(call):
    """What a call gives: ("value", result) or ("error", type, message)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # the kernel computed inf / nan
        try:
            return ("value", call())
        except Exception as e:  # noqa: BLE001 - compared below, type and message
            return ("error", type(e), str(e))


def _leaves(value):
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _assert_same(got, want, exact: bool):
    assert got[0] == want[0], (got, want)
    if got[0] == "error":
        assert got[1:] == want[1:]
        return
    a, b = _leaves(got[1]), _leaves(want[1])
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert type(x) is type(y) and np.shape(x) == np.shape(y)
        if exact:
            np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-11, atol=1e-14)


def _full_path(name, args):
    """The outcome of a fresh CPU function's first call (the full path, no plan yet)."""
    make = CASES[name][0]
    guards.CAPS.clear()
    return _outcome(lambda: make("cpu")(*args))


# ----------------------------------------------------------------------------------------------
# The table

def test_the_guarded_signatures_get_the_native_entry():
    for name in CASES:
        make, good, _, _ = CASES[name]
        assert _is_entry(_hot(make("cpu"), good)), name


@pytest.mark.parametrize("name", sorted(CASES))
def test_results_errors_and_messages_are_the_full_path_s_and_python_s(name):
    make, good, bad, line = CASES[name]
    want_good, want_bad = _full_path(name, good), _full_path(name, bad)
    guards.CAPS.clear()
    ref = make("python")
    _assert_same(_outcome(lambda: ref(*good)), want_good, exact=False)
    _assert_same(_outcome(lambda: ref(*bad)), want_bad, exact=False)
    if line is not None and want_bad[0] == "error":
        assert want_bad[1] is np.linalg.LinAlgError and want_bad[2].startswith(line)
    guards.CAPS.clear()
    f = make("cpu")
    _assert_same(_outcome(lambda: f(*good)), want_good, exact=True)       # the first call
    entry = _hot(f, good)
    for _ in range(2):                                                   # fired, then fine
        _assert_same(_outcome(lambda: f(*bad)), want_bad, exact=True)
        _assert_same(_outcome(lambda: f(*good)), want_good, exact=True)
    assert _is_entry(entry)
    again = _hot(f, good)
    assert _is_entry(again)              # (a while's cap grew: a new signature, a new entry)
    _assert_same(_outcome(lambda: f(*good)), want_good, exact=True)
    if line is not None:                 # an error guard: the entry itself declines
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            assert again(tuple(bad)) is MISS


def _sentinel_out(result):
    """Arrays (a tuple for a tuple result) shaped like ``result``, full of a marker value."""
    if isinstance(result, tuple):
        return tuple(_sentinel_out(r) for r in result)
    return np.full(np.shape(result), -7.25)


@pytest.mark.parametrize("name", sorted(CASES))
def test_out_is_written_when_right_and_never_by_a_call_that_raises(name):
    make, good, bad, line = CASES[name]
    want_good = _full_path(name, good)[1]
    want_bad = _full_path(name, bad)
    guards.CAPS.clear()
    f = make("cpu")
    _hot(f, good)
    for _ in range(2):
        out = _sentinel_out(want_good)
        assert f(*good, out=out) is out
        _assert_same(("value", out), ("value", _leaves_as(want_good, out)), exact=True)
        out = _sentinel_out(want_good)
        got = _outcome(lambda: f(*bad, out=out))
        if want_bad[0] == "error":
            _assert_same(got, want_bad, exact=True)
            for o in _leaves(out):
                assert np.all(o == -7.25)                    # untouched
        else:                                                # a cap grew: written right
            assert got[1] is out
            _assert_same(("value", out), ("value", _leaves_as(want_bad[1], out)), exact=True)
        _hot(f, good)


def _leaves_as(value, out):
    """``value`` as ``out=`` holds it: 0-d arrays for floats."""
    if isinstance(value, tuple):
        return tuple(_leaves_as(v, o) for v, o in zip(value, out))
    return np.asarray(value)


def test_out_overlapping_the_argument_gets_the_result_of_the_argument_before():
    """The result is copied into out= after the run (as runtime.write_out does), so out= may
    be the argument itself."""
    f = sg.differentiate(inv_of)
    _hot(f, (OK3,))
    a = OK3.copy()
    assert f(a, out=a) is a
    np.testing.assert_array_equal(a, sg.differentiate(inv_of)(OK3))
    s = SINGULAR3.copy()
    with pytest.raises(np.linalg.LinAlgError):
        f(s, out=s)
    np.testing.assert_array_equal(s, SINGULAR3)


def test_out_of_the_wrong_form_is_what_the_full_path_does():
    v = sg.value_and_grad(inv_sum)
    _hot(v, (OK3,))
    with pytest.raises(ValueError):
        v(OK3, out=np.empty((3, 3)))                 # a tuple result: a bare array refused
    with pytest.raises(ValueError):
        v(OK3, out=(np.empty(()), np.empty((3, 2))))
    out = (np.empty(()), np.empty((3, 3)))
    assert v(OK3, out=out) is out
    want = sg.value_and_grad(inv_sum, target="python")(OK3)
    assert out[0] == pytest.approx(want[0], rel=1e-13)
    np.testing.assert_allclose(out[1], want[1], rtol=1e-13)
    f = sg.differentiate(inv_of)
    _hot(f, (OK3,))
    one = (np.empty((3, 3)),)
    assert f(OK3, out=one) is one                    # a 1-tuple for a single result
    strided = np.empty((3, 6))[:, ::2]
    assert f(OK3, out=strided) is strided            # (the full path copies into it)
    np.testing.assert_array_equal(strided, one[0])


def test_the_entry_declines_a_fired_guard_before_writing_out():
    f = sg.differentiate(inv_of)
    entry = _hot(f, (OK3,))
    assert _is_entry(entry)
    out = np.full((3, 3), -7.25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert entry((SINGULAR3,), out) is MISS
        assert entry((SINGULAR3,)) is MISS
    assert np.all(out == -7.25)
    assert entry((OK3,), out) is out
    np.testing.assert_array_equal(out, entry((OK3,)))


def test_the_cap_grows_through_the_entry_and_the_new_signature_gets_one():
    """A hot while: each call needing more trips than the cap declines in the entry, the full
    path grows the cap; the next hot calls use an entry of the grown cap."""
    f = sg.differentiate(scaled)
    ref = sg.differentiate(scaled, target="python")
    x = np.linspace(0.1, 1.0, 4)
    first = _hot(f, (x, 5.5))
    assert _is_entry(first)
    for limit in (100.5, 900.5, 5.5, 3000.5):
        got = f(x, limit)
        np.testing.assert_allclose(got, ref(x, limit), rtol=1e-12)
        entry = _hot(f, (x, limit))
        assert _is_entry(entry)
        np.testing.assert_array_equal(entry((x, limit)), got)
    assert max(guards.CAPS.values()) >= 3001


def test_the_python_plan_checks_the_guards_too(monkeypatch):
    """Where the process has no entry loaded yet, the Python plan serves, checking the flags."""
    monkeypatch.setattr(native_entry, "loaded", lambda: False)
    monkeypatch.setattr(cp, "NATIVE_SOON", 10 ** 9)
    f = sg.differentiate(inv_of)
    plan = _hot(f, (OK3,))
    assert type(plan).__name__ == "function"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert plan((SINGULAR3,)) is MISS
    want = _full_path("inv", (SINGULAR3,))
    _assert_same(_outcome(lambda: f(SINGULAR3)), want, exact=True)
    np.testing.assert_array_equal(f(OK3), plan((OK3,)))


def repeated(a):
    # the same matrix inverted on two lines: the first line's error (as NumPy raises first)
    return np.linalg.inv(a) + 2.0 * np.linalg.inv(a)


def test_a_repeated_guard_condition():
    want = _full_path_of(repeated, (SINGULAR3,))
    assert want[0] == "error" and want[2].startswith(_line(repeated, "np.linalg.inv"))
    f = sg.differentiate(repeated)
    _hot(f, (OK3,))
    _assert_same(_outcome(lambda: f(SINGULAR3)), want, exact=True)
    _assert_same(_outcome(lambda: sg.differentiate(repeated, target="python")(SINGULAR3)), want,
                 exact=True)
    np.testing.assert_array_equal(f(OK3), sg.differentiate(repeated)(OK3))


def _full_path_of(fn, args):
    return _outcome(lambda: sg.differentiate(fn)(*args))


def test_two_threads_calling_with_firing_and_passing_arguments():
    f = sg.grad(inv_sum)
    w = sg.differentiate(newton)
    want_ok = sg.grad(inv_sum)(OK3)
    want_bad = _full_path("inv_grad", (SINGULAR3,))
    roots = [np.array([2.0, 3.0, 5.0]), np.array([1e30, 2.0, 3.0]), np.array([1e100, 7.0, 1.0])]
    want_roots = [sg.differentiate(newton, target="python")(r) for r in roots]
    guards.CAPS.clear()
    _hot(f, (OK3,))
    _hot(w, (roots[0],))
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(300):
            pick = rng.integers(0, 2 + len(roots))
            if pick == 0:
                got = f(OK3)
                if not np.array_equal(got, want_ok):
                    failures.append(("ok", got))
            elif pick == 1:
                got = _outcome(lambda: f(SINGULAR3))
                if got != want_bad:
                    failures.append(("bad", got))
            else:
                r = pick - 2
                got = w(roots[r])
                if got != pytest.approx(want_roots[r], rel=1e-12):
                    failures.append(("while", r, got))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert _is_entry(_hot(f, (OK3,))) and _is_entry(_hot(w, (roots[0],)))
