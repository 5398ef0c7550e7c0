"""Float max/min reductions accumulated in a register as integer keys of the values' order
(codegen.loop_body.ordered_key): the result is IEEE 754-2019 maximum/minimum's (LLVM's
llvm.maximum/minimum, what the loops called per element before), bit for bit: NumPy's value,
a NaN wherever NumPy has one, and signed zeros ordered -0 below +0 (NumPy's max returns
whichever zero comes first), on every axis, in float64 and float32, on one thread and split
across threads; and the stage's IR accumulates an integer (llvm.smax/smin), not
llvm.maximum/minimum per element."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import llvm
from symgrad.codegen.loop_body import ordered_key_value


def total_max(x):
    return np.max(x)


def total_min(x):
    return np.min(x)


def row_max(x):
    return np.max(x, axis=1)


def column_min(x):
    return np.min(x, axis=0)


def max_minus_min(x):
    return np.max(x) - np.min(x) + np.sum(x)


def special(x, case, rng):
    """x with the case's special values at random places."""
    x = x.copy()
    flat = x.reshape(-1)
    pick = rng.integers(flat.size)
    if case == "all -0":
        flat[:] = -0.0
    elif case == "+0 among -0":
        flat[:] = -0.0
        flat[pick] = 0.0
    elif case == "-0 among +0":
        flat[:] = 0.0
        flat[pick] = -0.0
    elif case == "nan":
        flat[pick] = np.nan
    elif case == "-nan":
        flat[pick] = -np.nan
    elif case == "-inf":
        flat[:] = -np.inf
    elif case == "+inf":
        flat[:] = np.inf
    elif case == "infs":
        flat[pick] = np.inf
        flat[(pick + 1) % flat.size] = -np.inf
    return x


CASES = ["normal", "all -0", "+0 among -0", "-0 among +0", "nan", "-nan", "-inf", "+inf", "infs"]


def same(got, want, zero_signs=True):
    """Equal values with equal signs (zeros), NaN where NumPy has NaN."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), (got, want)
    assert np.array_equal(got[~nan], want[~nan]), (got, want)
    if zero_signs:
        assert np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan])), (got, want)


def ieee(numpy_fn, largest: bool):
    """NumPy's max or min with -0 ordered below +0 (a zero result is +0 for max if any +0 is
    there, -0 for min if any -0 is)."""
    def reference(x, **axis):
        m = numpy_fn(x, **axis)
        zero = x == 0
        has = np.any(zero & (np.signbit(x) != largest), **axis)
        signed = np.where(has, 0.0 if largest else -0.0, -0.0 if largest else 0.0)
        return np.where(m == 0, signed.astype(x.dtype), m).astype(x.dtype)
    return reference


IEEE_MAX, IEEE_MIN = ieee(np.max, True), ieee(np.min, False)


@pytest.fixture(params=[1, 2], ids=["one-thread", "two-threads"])
def threads(request, monkeypatch):
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", str(request.param))
    monkeypatch.setattr(llvm, "PARALLEL_MIN", 1)
    return request.param


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn,ref,shape", [
    (total_max, IEEE_MAX, (1,)), (total_max, IEEE_MAX, (37,)), (total_max, IEEE_MAX, (4099,)),
    (total_min, IEEE_MIN, (5,)), (total_min, IEEE_MIN, (4099,)),
    (row_max, lambda x: IEEE_MAX(x, axis=1), (7, 131)),
    (column_min, lambda x: IEEE_MIN(x, axis=0), (131, 7)),
])
def test_extrema_are_ieee_maximum_minimum_bit_for_bit(fn, ref, shape, dtype, threads):
    rng = np.random.default_rng(sum(shape))
    f = sg.differentiate(fn)
    for case in CASES:
        x = special(rng.normal(size=shape).astype(dtype), case, rng)
        with np.errstate(invalid="ignore"):
            same(f(x), ref(x))


@pytest.mark.parametrize("fn, fill, other, want_sign", [
    (total_max, -0.0, 0.0, False), (total_min, 0.0, -0.0, True)])
@pytest.mark.parametrize("where", [0, -1])
def test_the_thread_split_keeps_the_order_of_signed_zeros(monkeypatch, fn, fill, other,
                                                          want_sign, where):
    """The threads' partial max/min fold as IEEE maximum/minimum (codegen.llvm._COMBINE):
    the zero that wins is the same whichever thread's half holds it."""
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", "2")
    monkeypatch.setattr(llvm, "PARALLEL_MIN", 1)
    x = np.full(4099, fill)
    x[where] = other
    assert np.signbit(sg.differentiate(fn)(x)) == want_sign


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_max_and_min_in_one_loop_and_the_reference(dtype, threads):
    rng = np.random.default_rng(7)
    f = sg.differentiate(max_minus_min)
    py = sg.differentiate(max_minus_min, target="python")
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for case in ("normal", "infs", "nan"):
        x = special(rng.normal(size=3001).astype(dtype), case, rng)
        with np.errstate(invalid="ignore", divide="ignore"):
            got, want = f(x), py(x)
            if np.isnan(want):
                assert np.isnan(got)
            else:
                np.testing.assert_allclose(got, want, rtol=tol)
            np.testing.assert_allclose(f.grad(x), py.grad(x), rtol=tol, atol=tol)


def test_keys_order_as_the_values():
    for dtype in ("float64", "float32"):
        fi = np.finfo(dtype)
        tiny, big = float(fi.smallest_subnormal), float(fi.max)
        values = [-np.inf, -big, -1.0, -tiny, -0.0, 0.0, tiny, 1.0, big, np.inf]
        keys = [ordered_key_value(v, dtype) for v in values]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_the_loop_accumulates_an_integer_key():
    x = np.zeros(4099)
    text = sg.differentiate(total_max).llvm_ir(x)
    assert "llvm.smax.i64" in text and "llvm.maximum" in text   # (once, after the loop)
    text = sg.differentiate(total_min).llvm_ir(x.astype(np.float32))
    assert "llvm.smin.i32" in text
