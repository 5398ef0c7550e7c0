"""Loops whose bodies slice with the loop index (windows ``x[i:i + k]``, symgrad.numpy_indexing)
stay loop regions: reads ``x[i:i + k]``, ``x[i:i + k, :]``, ``x[:, j:j + k]``, image patches
``X[i:i + k, j:j + k]`` in nested loops, strided ``x[s * i:s * i + k]``, trailing
``x[i - k + 1:i + 1]``, stepped ``x[i:i + 2 * k - 1:2]``, windows of a carried array, and writes
``y[i:i + k] = v`` / ``y[i:i + k] += v`` (overlap-add), and a loop index beside a window
(``X[i, i:i + 3]``). Each program is checked on
target="python" and target="cpu", float64 and float32, against NumPy for values and central
differences for gradients, and through the CUDA plan under the emulation
(codegen.ptx_emulate); the PTX of a few assembles with ptxas. A window the loop's range cannot
show to lie inside the array (Python would clamp it or read it from the end) keeps the loop
unrolled, which gives NumPy's answer.
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import symgrad as sg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptx_child import assemble_in_child  # noqa: E402
from user_program_check import central_difference, check_cuda, check_float32  # noqa: E402

TARGETS = ("python", "cpu")


# ---------------------------------------------------------------------------------------------
# The programs

def conv1d(x, w):
    n, k = x.shape[0], w.shape[0]
    out = np.zeros(n - k + 1)
    for i in range(n - k + 1):
        out[i] = np.dot(x[i:i + k], w)
    return np.sum(np.maximum(out, 0) ** 2)


def row_windows(X, W):
    k = W.shape[0]
    acc = 0.0
    for i in range(X.shape[0] - k + 1):
        acc = acc + np.sum(np.tanh(X[i:i + k, :] * W))
    return acc


def column_windows(X, w):
    k = w.shape[0]
    out = []
    for j in range(X.shape[1] - k + 1):
        out.append(np.sin(X[:, j:j + k]) @ w)
    return np.sum(np.stack(out) ** 2)


def conv2d(X, K):
    k = K.shape[0]
    n, m = X.shape[0] - k + 1, X.shape[1] - k + 1
    out = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            out[i, j] = np.sum(X[i:i + k, j:j + k] * K)
    return np.sum(np.tanh(out))


def strided(x, w):
    k, s = w.shape[0], 2
    acc = 0.0
    for i in range((x.shape[0] - k) // s + 1):
        acc = acc + np.dot(x[s * i:s * i + k], w) ** 2
    return acc


def trailing(x, w):
    k = w.shape[0]
    out = np.zeros(x.shape[0])
    for i in range(k - 1, x.shape[0]):
        out[i] = np.dot(x[i - k + 1:i + 1], w)
    return np.sum(out ** 2)


def stepped(x, w):
    k = w.shape[0]
    acc = 0.0
    for i in range(x.shape[0] - 2 * k + 2):
        acc = acc + np.sum(np.cos(x[i:i + 2 * k - 1:2] * w))
    return acc


def carried(x, a):
    y = x * 1.0
    for i in range(x.shape[0] - 3):
        y[i + 1:i + 4] = y[i + 1:i + 4] + a * np.tanh(y[i:i + 3])
    return np.sum(y ** 2)


def overlap_add(x, w):   # a transposed convolution, stride 2
    k, s = w.shape[0], 2
    y = np.zeros(s * (x.shape[0] - 1) + k)
    for i in range(x.shape[0]):
        y[s * i:s * i + k] += x[i] * w
    return np.sum(np.sin(y))


def set_window(x, v):
    y = np.zeros(x.shape[0] + 3)
    for i in range(x.shape[0]):
        y[i:i + 3] = x[i] * v
    return np.sum(y ** 3)


def column_overlap_add(X, w):
    k = w.shape[0]
    Y = np.zeros((X.shape[0], X.shape[1] + k - 1))
    for j in range(X.shape[1]):
        Y[:, j:j + k] += np.outer(X[:, j], w)
    return np.sum(np.tanh(Y))


def band(X, w):         # an integer loop index beside a window: X[i, i:i + 3]
    acc = 0.0
    for i in range(X.shape[0] - 2):
        acc = acc + np.dot(X[i, i:i + 3], w) ** 2
    return acc


def band_write(x, w):
    Y = np.zeros((x.shape[0], x.shape[0] + 2))
    for i in range(x.shape[0]):
        Y[i, i:i + 3] = x[i] * w
    return np.sum(np.sin(Y) * np.arange(Y.size).reshape(Y.shape))


def _vec(rng, *shape):
    return rng.normal(size=shape)


PROGRAMS = {
    "conv1d": (conv1d, lambda r: [_vec(r, 12), _vec(r, 3)]),
    "row_windows": (row_windows, lambda r: [_vec(r, 9, 3), _vec(r, 3, 3)]),
    "column_windows": (column_windows, lambda r: [_vec(r, 3, 9), _vec(r, 3)]),
    "conv2d": (conv2d, lambda r: [_vec(r, 8, 8), _vec(r, 3, 3)]),
    "strided": (strided, lambda r: [_vec(r, 15), _vec(r, 3)]),
    "trailing": (trailing, lambda r: [_vec(r, 10), _vec(r, 3)]),
    "stepped": (stepped, lambda r: [_vec(r, 14), _vec(r, 3)]),
    "carried": (carried, lambda r: [_vec(r, 10), 0.3]),
    "overlap_add": (overlap_add, lambda r: [_vec(r, 7), _vec(r, 3)]),
    "set_window": (set_window, lambda r: [_vec(r, 8), _vec(r, 3)]),
    "column_overlap_add": (column_overlap_add, lambda r: [_vec(r, 3, 7), _vec(r, 3)]),
    "band": (band, lambda r: [_vec(r, 8, 10), _vec(r, 3)]),
    "band_write": (band_write, lambda r: [_vec(r, 7), _vec(r, 3)]),
}


def _args(name, dtype=np.float64):
    args = PROGRAMS[name][1](np.random.default_rng(sorted(PROGRAMS).index(name)))
    return [a.astype(dtype) if isinstance(a, np.ndarray) else a for a in args]


def _wrt(args):
    return tuple(i for i, a in enumerate(args) if isinstance(a, (np.ndarray, float)))


# ---------------------------------------------------------------------------------------------
# Values and gradients

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_and_gradients(name, target):
    fn, args = PROGRAMS[name][0], _args(name)
    wrt = _wrt(args)
    f = sg.differentiate(fn, wrt=wrt, target=target)
    np.testing.assert_allclose(f(*args), fn(*args), rtol=1e-12)
    for i, g in zip(wrt, f.grad(*args)):
        np.testing.assert_allclose(g, central_difference(fn, args, i), rtol=1e-6, atol=1e-7,
                                   err_msg=f"{name} d/d{i} on {target}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_float32(name, target):
    args32 = _args(name, np.float32)
    check_float32(PROGRAMS[name][0], args32, _args(name), _wrt(args32), target, name)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_cuda_plan_under_the_emulation(name, dtype):
    fn, args = PROGRAMS[name][0], _args(name, dtype)
    f = sg.differentiate(fn, wrt=_wrt(args), target="python")
    check_cuda(f.grad, args, f.grad(*args), 1e-11 if dtype == np.float64 else 1e-5)


_PTX_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import symgrad as sg
import test_window_slices as t
for path, name in zip(sys.argv[1:], ["conv1d", "conv2d", "overlap_add", "stepped"]):
    fn, args = t.PROGRAMS[name][0], t._args(name)
    open(path, "w").write(sg.grad(fn, wrt=t._wrt(args), target="python").ptx(*args, arch="ARCH"))
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_window_gradients_assemble_with_ptxas(tmp_path, arch):
    files = [tmp_path / f"window{i}.ptx" for i in range(4)]
    assemble_in_child(_PTX_SCRIPT.replace("ARCH", arch), files, arch=arch)


# ---------------------------------------------------------------------------------------------
# Higher orders, forward mode and vmap through a window loop

def _directional(fn, args, d, h=1e-5):
    up, down = [args[0] + h * d, *args[1:]], [args[0] - h * d, *args[1:]]
    return (np.asarray(fn(*up)) - np.asarray(fn(*down))) / (2 * h)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["conv1d", "overlap_add", "conv2d"])
def test_hessian_jvp_and_vmap(name, target):
    fn, args = PROGRAMS[name][0], _args(name)
    x, rest = args[0], args[1:]
    rng = np.random.default_rng(7)
    d = rng.normal(size=x.shape)
    value, tangent = sg.jvp(fn, wrt=0, target=target)(*args, d)
    np.testing.assert_allclose(value, fn(*args), rtol=1e-12)
    np.testing.assert_allclose(tangent, _directional(fn, args, d), rtol=1e-6, atol=1e-8)
    grad = sg.grad(fn, wrt=0, target="python")
    hessian = np.reshape(sg.hessian(fn, wrt=0, target=target)(*args), (x.size, x.size))
    np.testing.assert_allclose(hessian @ d.reshape(-1), _directional(grad, args, d).reshape(-1),
                               rtol=1e-5, atol=1e-7)
    xs = rng.normal(size=(3,) + x.shape)
    in_axes = (0,) + (None,) * len(rest)
    np.testing.assert_allclose(sg.vmap(fn, in_axes=in_axes, target=target)(xs, *rest),
                               [fn(v, *rest) for v in xs], rtol=1e-12)
    np.testing.assert_allclose(sg.vmap(sg.grad(fn, wrt=0), in_axes=in_axes, target=target)(xs, *rest),
                               [grad(v, *rest) for v in xs], rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# The loop is a region, and does not grow with the trip count

def _normalised(text: str) -> str:
    return re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", text)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_traced_as_a_loop_region(name):
    fn, args = PROGRAMS[name][0], _args(name)
    f = sg.differentiate(fn, wrt=_wrt(args), target="python")
    assert "= loop(" in f.ir_for(*args)
    source = f.grad.source_for(*args)
    assert re.search(r"^\s*for \w+ in reversed\(range\(", source, re.M), source


def test_conv2d_is_two_nested_loops():
    args = _args("conv2d")
    assert sg.differentiate(conv2d, target="python").ir_for(*args).count("= loop(") == 2


@pytest.mark.parametrize("name", ["conv1d", "overlap_add", "strided"])
def test_ir_and_source_do_not_grow_with_n(name):
    fn = PROGRAMS[name][0]
    sizes = []
    for n in (20, 400):
        args = [np.random.default_rng(0).normal(size=n), np.random.default_rng(1).normal(size=3)]
        f = sg.differentiate(fn, wrt=(0, 1), target="python")
        sizes.append((len(_normalised(f.ir_for(*args))), len(_normalised(f.grad.source_for(*args)))))
    assert sizes[0] == sizes[1]


# ---------------------------------------------------------------------------------------------
# Edges: the first and last windows, zero trips, windows that cannot be shown inside

def first_and_last(x, w):
    k, out = w.shape[0], []
    for i in range(x.shape[0] - k + 1):
        out.append(x[i:i + k] * w)
    return np.stack(out)


def window_sum(x, w):
    k = w.shape[0]
    acc = 0.0
    for i in range(x.shape[0] - k + 1):
        acc = acc + np.dot(x[i:i + k], w)
    return acc


def clamped(x):        # the last windows are shorter (x[6:9] of 8 elements): unrolled
    acc = 0.0
    for i in range(x.shape[0]):
        acc = acc + np.sum(x[i:i + 3] ** 2) * (i + 1)
    return acc


def from_the_end(x):   # x[-2:1] and x[-1:2] are empty (a negative start counts from the end)
    acc = 0.0
    for i in range(x.shape[0]):
        acc = acc + np.sum(np.sin(x[i - 2:i + 1])) * (i + 1)
    return acc


def growing(x):        # x[i:2 * i]: the length depends on i
    acc = 0.0
    for i in range(x.shape[0] // 2):
        acc = acc + np.sum(x[i:2 * i] ** 2)
    return acc


def reversed_windows(x):   # x[i + 2:i - 1:-1]: at i = 0 the stop -1 is the last element (empty)
    acc = 0.0
    for i in range(x.shape[0] - 2):
        acc = acc + np.sum(np.cos(x[i + 2:i - 1:-1])) * (i + 1)
    return acc


@pytest.mark.parametrize("target", TARGETS)
def test_first_and_last_windows(target):
    x, w = _args("conv1d")
    got = sg.differentiate(first_and_last, target=target)(x, w)
    np.testing.assert_array_equal(got[0], x[:3] * w)
    np.testing.assert_array_equal(got[-1], x[-3:] * w)
    np.testing.assert_allclose(got, first_and_last(x, w), rtol=0)


@pytest.mark.parametrize("target", TARGETS)
def test_zero_trips_when_the_window_is_longer_than_the_array(target):
    x, w = np.arange(3.0), np.ones(5)
    f = sg.differentiate(window_sum, wrt=(0, 1), target=target)
    assert f(x, w) == 0.0
    gx, gw = f.grad(x, w)
    np.testing.assert_array_equal(gx, np.zeros(3))
    np.testing.assert_array_equal(gw, np.zeros(5))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [clamped, from_the_end, growing, reversed_windows],
                         ids=lambda f: f.__name__)
def test_windows_not_shown_inside_unroll_with_numpys_answer(fn, target):
    x = np.random.default_rng(3).normal(size=8)
    f = sg.differentiate(fn, target=target)
    assert "= loop(" not in f.ir_for(x)   # unrolled: every slice static, NumPy's own
    np.testing.assert_allclose(f(x), fn(x), rtol=1e-12)
    np.testing.assert_allclose(f.grad(x), central_difference(fn, [x], 0), rtol=1e-6, atol=1e-7)


def reversed_inside(x):    # x[i + 2:i - 1:-1] for i >= 1: always inside, a region
    acc = 0.0
    for i in range(1, x.shape[0] - 2):
        acc = acc + np.sum(np.cos(x[i + 2:i - 1:-1]) * np.arange(3.0))
    return acc


@pytest.mark.parametrize("target", TARGETS)
def test_a_reversed_window_inside_the_array_is_a_region(target):
    x = np.random.default_rng(4).normal(size=9)
    f = sg.differentiate(reversed_inside, target=target)
    assert "= loop(" in f.ir_for(x)
    np.testing.assert_allclose(f(x), reversed_inside(x), rtol=1e-12)
    np.testing.assert_allclose(f.grad(x), central_difference(reversed_inside, [x], 0),
                               rtol=1e-6, atol=1e-7)


def data_window(x):
    j = np.argmax(x)
    return np.sum(x[j:j + 2])


def test_a_window_at_a_position_from_data_is_still_refused():
    with pytest.raises(sg.UnsupportedSyntaxError, match="slice bounds that depend on data"):
        sg.differentiate(data_window)(np.arange(5.0))


TABLE = [0.5, 1.5, -2.0, 3.0, 0.25, 1.0, 2.0, -1.0]


def list_window(x):    # a window of a Python list: its items are static, so the loop unrolls
    acc = 0.0
    for i in range(x.shape[0] - 1):
        acc = acc + np.sum(np.array(TABLE[i:i + 2]) * x[i:i + 2])
    return acc


@pytest.mark.parametrize("target", TARGETS)
def test_a_window_of_a_list_unrolls(target):
    x = np.random.default_rng(5).normal(size=7)
    f = sg.differentiate(list_window, target=target)
    np.testing.assert_allclose(f(x), list_window(x), rtol=1e-12)
    np.testing.assert_allclose(f.grad(x), central_difference(list_window, [x], 0), rtol=1e-6,
                               atol=1e-7)


def _windows_of(trips):
    def windows(x, w):
        acc = 0.0
        for i in range(trips):
            acc = acc + np.dot(x[i:i + 3], w) ** 2
        return acc
    return windows


def test_a_new_trip_count_reuses_the_machine_code():
    from symgrad.codegen import llvm
    x, w = np.random.default_rng(6).normal(size=40), np.random.default_rng(7).normal(size=3)
    texts = [re.sub(r";.*", "", sg.grad(_windows_of(n)).llvm_ir(x, w)) for n in (20, 30)]
    assert texts[0] == texts[1]   # the trip count is a run-time parameter (comments name it)
    sg.grad(_windows_of(20))(x, w)
    compiles = llvm.stats()["compiles"]
    g = sg.grad(_windows_of(37))(x, w)
    assert llvm.stats()["compiles"] == compiles
    np.testing.assert_allclose(g, sg.grad(_windows_of(37), target="python")(x, w), rtol=1e-12)


def backwards(x, w):   # the index runs down: the window's range is read from the range's
    k = w.shape[0]
    acc = 0.0
    for i in range(x.shape[0] - k, -1, -1):
        acc = acc * 0.5 + np.dot(x[i:i + k], w)
    return acc


@pytest.mark.parametrize("target", TARGETS)
def test_a_window_over_a_range_that_runs_down(target):
    x, w = _args("conv1d")
    f = sg.differentiate(backwards, wrt=(0, 1), target=target)
    assert "= loop(" in f.ir_for(x, w)
    np.testing.assert_allclose(f(x, w), backwards(x, w), rtol=1e-12)
    for i, g in enumerate(f.grad(x, w)):
        np.testing.assert_allclose(g, central_difference(backwards, [x, w], i), rtol=1e-6,
                                   atol=1e-7)


def write_through_window_view(x):
    y = x * 1.0
    for i in range(x.shape[0] - 2):
        v = y[i:i + 2]   # a view of y, as a static slice is
        v += 1.0
    return np.sum(y)


def test_a_write_through_a_window_view_is_refused_as_for_a_static_slice():
    with pytest.raises(sg.UnsupportedSyntaxError, match="may share memory with 'y'"):
        sg.differentiate(write_through_window_view)(np.arange(8.0))
