"""A loop's index is a Python int: in float32 loops it promotes weakly, as NumPy promotes it.

``x * t`` with ``x`` float32 and ``t`` from ``range`` is float32 in NumPy (NEP 50: a Python
number takes the array's dtype). In a loop region the index is a traced int64 value, which
promoted like an int64 array (to float64) and made the loop fall back to unrolling. Now the
index, counters stepped by the body (``count += 1``), Python numbers carried through the loop
and Python arithmetic on them (``t + 1``, ``t * dt``) promote as the Python numbers they stand
for (symgrad.op_base.weak_scope): float32 loops stay float32 loop regions.

Each program is checked on target="python" and target="cpu": its value (dtype and numbers)
against the plain function, its gradient (float32) against central differences of the plain
function in float64, and that it is traced as one loop whose IR does not grow with the trip
count.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import symgrad as sg

TARGETS = ("python", "cpu")
TRIPS = 12


def index_times_value(x, n):
    for t in range(n):
        x = 0.9 * x + np.sin(x) * t * 0.01
    return np.sum(x)


def time_steps(x, n):
    dt = 0.05
    for t in range(n):
        x = x + dt * np.cos(x + t * dt)
    return np.sum(x * x)


def divided_by_index(x, n):
    for t in range(n):
        x = x - x / (t + 1) * 0.5 + 0.1
    return np.sum(x)


def index_as_exponent(x, n):
    acc = x * 0
    for t in range(n):
        acc = acc + x ** t / (t + 1.0)
    return np.sum(acc)


def index_arithmetic(w, xs):
    n = xs.shape[0]
    acc = w * 0.0
    for t in range(n - 1):
        acc = acc * 0.5 + xs[t] * xs[n - 1 - t] * w + xs[t + 1] * (t % 3) + xs[t // 2] * -t
    return np.sum(acc * acc)


def strided_range_and_counter(x, n):
    count = 0
    for t in range(3, 3 * n + 3, 3):
        count += 1
        x = x * 0.95 + np.tanh(x) * (t - count) * 0.01
    return np.sum(x)


def python_number_carried(x, n):
    s = 0.5
    for t in range(n):
        s = s * 0.9 + t          # a Python float in every iteration
        x = x + np.sin(x) * s * 0.01
    return np.sum(x)


def enumerated_rows(w, xs):
    acc = w * 0.0
    for t, x in enumerate(xs):
        acc = np.tanh(acc + x * w) * (1.0 + t / len(xs))
    return np.sum(acc)


def builtin_of_index(x, n):
    for t in range(n):
        x = x * 0.9 + np.sin(x) * abs(t - 3) * 0.01 + max(t, 2) * 1e-3
    return np.sum(x)


def numpy_value_of_index(x, n):
    for t in range(n):
        x = x * 0.9 + np.asarray(t) * 0.01 * np.sin(x)   # a NumPy int64: promotes to float64
    return np.sum(x)


def _vector(rng):
    return np.linspace(-1.3, 1.1, 5) + 0.1 * rng.standard_normal(5)


def _rows(rng, n):
    return rng.standard_normal((n, 5)) * 0.5


# name -> (function, arguments for a trip count, index of the argument differentiated)
PROGRAMS = {
    "t": (index_times_value, lambda rng, n: (_vector(rng), n)),
    "t*dt": (time_steps, lambda rng, n: (_vector(rng), n)),
    "x/(t+1)": (divided_by_index, lambda rng, n: (_vector(rng), n)),
    "x**t": (index_as_exponent, lambda rng, n: (_vector(rng), n)),
    "xs[index arithmetic]": (index_arithmetic, lambda rng, n: (_vector(rng), _rows(rng, n))),
    "range(3, .., 3) and count += 1": (strided_range_and_counter, lambda rng, n: (_vector(rng), n)),
    "Python float carried": (python_number_carried, lambda rng, n: (_vector(rng), n)),
    "enumerate": (enumerated_rows, lambda rng, n: (_vector(rng), _rows(rng, n))),
    "abs(t - 3), max(t, 2)": (builtin_of_index, lambda rng, n: (_vector(rng), n)),
}


def _float32(args):
    return tuple(a.astype(np.float32) if isinstance(a, np.ndarray) else a for a in args)


def _directional(fn, args, d, h=1e-4):
    """Central difference (4th order) of ``fn`` along ``d`` in its first argument, in float64."""
    def at(s):
        return float(fn(args[0] + s * d, *args[1:]))
    return (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_float32_loop_using_its_index_matches_numpy(name, target):
    fn, make_args = PROGRAMS[name]
    rng = np.random.default_rng(0)
    args64 = make_args(rng, TRIPS)
    args = _float32(args64)
    f = sg.differentiate(fn, wrt=0, target=target)
    expected = fn(*args)
    assert np.asarray(expected).dtype == np.float32   # the premise: NumPy keeps float32
    value, grad = f.value_and_grad(*args)
    assert np.asarray(value).dtype == np.float32
    np.testing.assert_allclose(value, expected, rtol=2e-6, atol=1e-6)
    assert grad.dtype == np.float32 and grad.shape == args[0].shape
    d = rng.standard_normal(args[0].shape)
    numeric = _directional(fn, args64, d)
    np.testing.assert_allclose(np.dot(grad.astype(np.float64), d), numeric,
                               rtol=1e-4, atol=1e-4 * max(1.0, abs(numeric)))


def _shape_of(text: str) -> str:
    """A listing with its numbers (trip counts, shapes) replaced: what is left is its size."""
    return re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", text)


@pytest.mark.parametrize("name", PROGRAMS)
def test_float32_loop_using_its_index_is_one_loop_region(name):
    """A loop region, not an unrolled loop: one loop node in the value's IR and the IR and the
    gradient's source the same size for 12 and 60 trips."""
    fn, make_args = PROGRAMS[name]
    listings, sources = [], []
    for trips in (TRIPS, 5 * TRIPS):
        args = _float32(make_args(np.random.default_rng(0), trips))
        f = sg.differentiate(fn, wrt=0, target="python")
        ir = f.ir_for(*args)
        assert ir.count("= loop(") == 1, ir
        assert "float32" in ir
        listings.append(_shape_of(ir))
        sources.append(_shape_of(f.grad.source_for(*args)))
    assert listings[0] == listings[1]
    assert sources[0] == sources[1]


@pytest.mark.parametrize("target", TARGETS)
def test_numpy_value_made_of_the_index_promotes_strongly(target):
    """``np.asarray(t)`` is a NumPy int64, not a Python int: the loop becomes float64 as in
    NumPy (the traced index node is returned as it is, so it is recast to drop its weak type)."""
    x = _float32((_vector(np.random.default_rng(0)),))[0]
    f = sg.differentiate(numpy_value_of_index, wrt=0, target=target)
    expected = numpy_value_of_index(x, TRIPS)
    assert np.asarray(expected).dtype == np.float64
    value = f(x, TRIPS)
    assert np.asarray(value).dtype == np.float64
    np.testing.assert_allclose(value, expected, rtol=1e-6)


# A Python number made by a loop (or chosen by an if on data) is still a Python number after
# it: NumPy keeps a float32 array times it float32. These were float64 (the loop's result, a
# carry starting as another loop's result, and a choice between two Python numbers were typed
# strongly).

def weak_after_the_loop(x):
    acc = 0.0
    for i in range(5):
        acc = acc + 1.5 * i
    return np.sum(acc * x)


def weak_through_nested_loops(x):
    acc = 0.0
    for i in range(5):
        for j in range(6):
            acc = acc + 0.5 * i * j
    return np.sum(acc * x)


def weak_through_a_while_on_data(x):
    t = 0.0
    s = np.sum(x)
    while s > 0.1:
        s = s * 0.5
        t = t + 1.0
    return np.sum(t * x) + s


def weak_through_a_triangular_loop(x):
    acc = 0.0
    for i in range(6):
        for j in range(i + 1, 6):
            acc = acc + 0.25 * j
    return np.sum(acc * x)


def weak_chosen_on_data(x):
    scale = 2.0 if np.sum(x) > 0 else 0.5
    return np.sum(scale * x * x)


def strong_once_an_element_is_added(x):   # NumPy: a float32 scalar, not a Python float
    acc = 0.0
    for i in range(6):
        acc = acc + x[i % 4]
    return np.sum(acc * x)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [weak_after_the_loop, weak_through_nested_loops,
                                weak_through_a_while_on_data, weak_through_a_triangular_loop,
                                weak_chosen_on_data, strong_once_an_element_is_added])
def test_python_number_made_by_a_loop_stays_weak_after_it(fn, target):
    x = np.linspace(1.0, 2.0, 4).astype(np.float32)
    expected = fn(x)
    f = sg.differentiate(fn, target=target)
    value, grad = f.value_and_grad(x)
    assert np.asarray(value).dtype == np.asarray(expected).dtype == np.float32
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    assert grad.dtype == np.float32
    numeric = _directional(fn, (x.astype(np.float64),), np.ones(4))
    np.testing.assert_allclose(float(np.sum(grad)), numeric, rtol=1e-4)
