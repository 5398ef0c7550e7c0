"""Loops written the way people write them, traced once into loop regions (symgrad.loops):
recurrences, RNN / GRU / LSTM cells, stacked outputs, rows / enumerate / zip / range(len(x)),
selects and data-dependent branches inside bodies, stop_gradient inside bodies, nested
data-sized loops, carries that start as Python numbers (peeling), float32, integrators and
a PDE stencil.

Each case is checked, on target="python" and target="cpu", against
(a) the plain Python/NumPy function for values,
(b) central differences of the plain function for gradients,
(c) central differences of the gradient for second derivatives (f.grad.grad of a scalar
    function, sg.hvp otherwise),
and its traced IR holds a loop node while the generated gradient source holds a real forward
``for`` and a ``reversed(range(...))`` backward loop whose length does not depend on the trip
count.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import symgrad as sg
from adbench_models import lstm_model, sigmoid

TARGETS = ("python", "cpu")
# Trip counts: above symgrad.loops.UNROLL_MAX (short loops are unrolled on purpose) and small
# enough that the CPU back end, which expands regions until native loops land, compiles fast.
TRIPS = 6


# ---------------------------------------------------------------------------------------------
# The programs

def scalar_recurrence(a, s, n):
    x = a
    for i in range(n):
        x = x - 0.1 * np.sin(x) * s + 0.01 * i
    return x


def tanh_rnn(W, U, b, xs):
    h = np.zeros(W.shape[0])
    for x in xs:
        h = np.tanh(W @ h + U @ x + b)
    return np.sum(h * h)


def gru(Wz, Wr, Wh, xs):
    h = np.zeros(Wz.shape[0])
    for x in xs:
        hx = np.concatenate((h, x))
        z = sigmoid(Wz @ hx)
        r = sigmoid(Wr @ hx)
        cand = np.tanh(Wh @ np.concatenate((r * h, x)))
        h = (1.0 - z) * h + z * cand
    return np.sum(h ** 2)


# ADBench's LSTM (src/python/modules/*/lstm_objective.py; its cell: adbench_models), one
# layer, the state carried instead of kept in a list of all states.
def lstm_loss(weight, bias, extra, sequence):
    hidden = np.zeros(sequence.shape[1])
    cell = np.zeros(sequence.shape[1])
    total = 0.0
    _input = sequence[0]
    for t in range(len(sequence) - 1):
        hidden, cell = lstm_model(weight, bias, hidden, cell, _input * extra[0])
        ypred = hidden * extra[1] + extra[2]
        ynorm = ypred - np.log(np.sum(np.exp(ypred)) + 2)
        ygold = sequence[t + 1]
        total += np.sum(ygold * ynorm)
        _input = ygold
    return -total / ((len(sequence) - 1) * sequence.shape[1])


def stacked_outputs(W, xs, target):
    h = np.zeros(W.shape[0])
    hs = []
    for x in xs:
        h = np.tanh(W @ h + x)
        hs.append(h)
    return np.sum((np.stack(hs) - target) ** 2)


def rows_of_matrix(w, X):
    acc = np.zeros(X.shape[1])
    for row in X:
        acc = 0.8 * acc + np.sin(row * w)
    return np.sum(acc * w)


def enumerated(w, xs):
    acc = np.zeros_like(w)
    for i, x in enumerate(xs):
        acc = acc + (i + 1) * np.tanh(x * w + 0.1 * acc)
    return np.sum(acc)


def zipped(w, xs, ys):
    loss = np.zeros(())
    for x, y in zip(xs, ys):
        loss = loss + np.sum((np.tanh(w * x) - y) ** 2)
    return loss


def range_len(x, w):
    s = w
    for i in range(len(x)):
        s = np.sin(s) * 0.5 + x[i] * w
    return s


def where_in_body(W, xs):
    h = np.zeros(W.shape[0]) + 0.1
    for x in xs:
        a = W @ h + x
        h = np.where(a > 0, a, 0.1 * a)        # leaky ReLU
    return np.sum(h ** 2)


def branch_in_body(w, xs):
    h = np.ones_like(w)
    for x in xs:
        if np.sum(h * x) > 0:
            h = np.tanh(h * w + x)
        else:
            h = np.sin(h - w * x)
    return np.sum(h)


def stopped_in_body(W, xs):
    h = np.zeros(W.shape[0])
    for x in xs:
        scale = sg.stop_gradient(np.sqrt(np.sum(h * h) + 1.0))
        h = np.tanh(W @ h + x) / scale
    return np.sum(h)


def stopped_in_body_frozen(W, xs, scales):
    """stopped_in_body with the stopped values given: its derivative is the reference."""
    h = np.zeros(W.shape[0])
    for x, scale in zip(xs, scales):
        h = np.tanh(W @ h + x) / scale
    return np.sum(h)


def stopped_scales(W, xs):
    h, scales = np.zeros(W.shape[0]), []
    for x in xs:
        scales.append(np.sqrt(np.sum(h * h) + 1.0))
        h = np.tanh(W @ h + x) / scales[-1]
    return np.array(scales)


def nested_loops(w, X):
    acc = 0.0 * w
    for row in X:
        for v in row:
            acc = 0.9 * acc + np.sin(v * w)
    return np.sum(acc * acc)


def float_carry(w, xs):
    total = 0.0
    for x in xs:
        total = total + np.sum(np.tanh(x * w))
    return total


def scalar_becomes_array(w, xs):
    h = 0.0
    for x in xs:
        h = np.tanh(h * w + x)
    return np.sum(h)


def euler_oscillator(x0, v0, k, n):
    x, v = x0, v0
    dt = 0.01
    for _ in range(n):
        a = -k * x - 0.1 * v
        x, v = x + dt * v, v + dt * a
    return x * x + v


def lorenz(state, sigma, n):
    x, y, z = state[0], state[1], state[2]
    dt = 0.002
    for _ in range(n):
        dx = sigma * (y - x)
        dy = x * (28.0 - z) - y
        dz = x * y - 8.0 / 3.0 * z
        x, y, z = x + dt * dx, y + dt * dy, z + dt * dz
    return x + y + z


def heat_equation(u, alpha, n):
    for _ in range(n):
        inner = u[1:-1] + alpha * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        u = np.concatenate((u[:1], inner, u[-1:]))
    return np.sum(u ** 3)


# ---------------------------------------------------------------------------------------------
# The table

@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    make_args: Callable           # (rng, trips) -> arguments
    wrt: object = 0
    # the function whose central differences are the reference gradient, given the arguments
    # (None: fn itself)
    reference: Callable | None = None
    second: bool = True           # check second derivatives
    fd_rtol: float = 1e-6


def _mat(rng, *shape, scale=1.0):
    return scale * rng.standard_normal(shape)


def _lstm_args(rng, n):
    b = 3
    return (_mat(rng, 4 * b, scale=0.5), _mat(rng, 4 * b, scale=0.5), _mat(rng, 3, b, scale=0.5),
            _mat(rng, n + 1, b))


def _stopped_reference(W, xs):
    scales = stopped_scales(W, xs)
    return lambda W_, xs_: stopped_in_body_frozen(W_, xs_, scales)


CASES = [
    Case("scalar_recurrence", scalar_recurrence,
         lambda rng, n: (0.7, 1.3, n), wrt=(0, 1)),
    Case("tanh_rnn", tanh_rnn,
         lambda rng, n: (_mat(rng, 3, 3, scale=0.5), _mat(rng, 3, 2), _mat(rng, 3), _mat(rng, n, 2)),
         wrt=(0, 1, 2)),
    Case("gru", gru,
         lambda rng, n: (_mat(rng, 3, 5, scale=0.5), _mat(rng, 3, 5, scale=0.5),
                         _mat(rng, 3, 5, scale=0.5), _mat(rng, n, 2)), wrt=(0, 2)),
    Case("lstm_adbench", lstm_loss, lambda rng, n: _lstm_args(rng, n), wrt=(0, 1, 2)),
    Case("stacked_outputs", stacked_outputs,
         lambda rng, n: (_mat(rng, 3, 3, scale=0.5), _mat(rng, n, 3), _mat(rng, n, 3))),
    Case("rows_of_matrix", rows_of_matrix, lambda rng, n: (_mat(rng, 4), _mat(rng, n, 4))),
    Case("enumerate", enumerated, lambda rng, n: (_mat(rng, 3), _mat(rng, n, 3))),
    Case("zip", zipped, lambda rng, n: (_mat(rng, 3), _mat(rng, n, 3), _mat(rng, n, 3))),
    Case("range_len", range_len, lambda rng, n: (_mat(rng, n), 0.6), wrt=(0, 1)),
    Case("where_in_body", where_in_body,
         lambda rng, n: (_mat(rng, 3, 3, scale=0.6), _mat(rng, n, 3))),
    Case("branch_in_body", branch_in_body, lambda rng, n: (_mat(rng, 3), _mat(rng, n, 3))),
    Case("stop_gradient_in_body", stopped_in_body,
         lambda rng, n: (_mat(rng, 3, 3, scale=0.6), _mat(rng, n, 3)),
         reference=_stopped_reference, second=False),   # the reference freezes the stops
    Case("nested_loops", nested_loops, lambda rng, n: (_mat(rng, 2), _mat(rng, n, n))),
    Case("float_carry", float_carry, lambda rng, n: (_mat(rng, 3), _mat(rng, n, 3))),
    Case("scalar_becomes_array", scalar_becomes_array,
         lambda rng, n: (_mat(rng, 3, scale=0.5), _mat(rng, n, 3))),
    Case("euler_oscillator", euler_oscillator, lambda rng, n: (1.0, -0.5, 2.0, n),
         wrt=(0, 1, 2)),
    Case("lorenz", lorenz, lambda rng, n: (np.array([1.0, 1.5, 20.0]), 10.0, n), wrt=(0, 1),
         fd_rtol=1e-5),
    Case("heat_equation", heat_equation,
         lambda rng, n: (np.sin(np.linspace(0.0, 3.0, 9)), 0.2, n), wrt=(0, 1)),
]
BY_NAME = {c.name: c for c in CASES}


# ---------------------------------------------------------------------------------------------
# Helpers

def _wrt_tuple(case):
    return case.wrt if isinstance(case.wrt, tuple) else (case.wrt,)


def _is_float_arg(a):
    return isinstance(a, float) or isinstance(a, np.ndarray) and a.dtype.kind == "f"


def _directional(fn, args, k, d, h):
    """Central difference of ``fn`` at ``args`` along ``d`` in argument k (4th order)."""
    def at(t):
        moved = list(args)
        moved[k] = args[k] + t * d if isinstance(args[k], np.ndarray) else float(args[k] + t * d)
        return np.sum(np.asarray(fn(*moved), dtype=np.float64))
    return (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h)


def _directions(rng, a):
    return rng.standard_normal(np.shape(a)) if isinstance(a, np.ndarray) else 1.0


def _close(a, b, rtol, what):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(b))) if b.size else 1.0)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    err = float(np.max(np.abs(a - b))) / scale if a.size else 0.0
    assert err <= rtol, f"{what}: relative error {err:.3g} > {rtol:g}\n{a}\n{b}"


def _grads(f, args, case):
    g = f.grad(*args)
    return g if isinstance(case.wrt, tuple) else (g,)


_compiled: dict = {}


def _function(case, target):
    key = (case.name, target)
    if key not in _compiled:
        _compiled[key] = sg.differentiate(case.fn, wrt=case.wrt, target=target)
    return _compiled[key]


# ---------------------------------------------------------------------------------------------
# (a) values, (b) gradients, (c) second derivatives

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_value_and_gradient(case, target):
    rng = np.random.default_rng(0)
    args = case.make_args(rng, TRIPS)
    f = _function(case, target)
    _close(f(*args), case.fn(*args), 1e-12, "value")
    grads = _grads(f, args, case)
    reference = case.reference(*args) if case.reference else case.fn
    for k, g in zip(_wrt_tuple(case), grads):
        assert np.shape(g) == np.shape(args[k])
        d = _directions(rng, args[k])
        numeric = _directional(reference, args, k, d, 1e-3 * max(1.0, float(np.max(np.abs(args[k])))))
        _close(np.sum(np.asarray(g) * d), numeric, case.fd_rtol, f"gradient wrt {k}")
    if target == "cpu":   # the CPU back end equals the NumPy reference to rounding
        ref = _grads(_function(case, "python"), args, case)
        for g, r in zip(grads, ref):
            _close(g, r, 1e-11, "cpu vs python gradient")


def _second_derivative_cases():
    return [c for c in CASES if c.second]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", _second_derivative_cases(), ids=lambda c: c.name)
def test_second_derivative(case, target):
    """The derivative of the gradient (itself a program with a reversed loop) against central
    differences of the gradient computed by target="python"."""
    rng = np.random.default_rng(1)
    args = case.make_args(rng, TRIPS)
    k = _wrt_tuple(case)[0]
    first = sg.differentiate(case.fn, wrt=k, target="python").grad
    d = _directions(rng, args[k])
    h = 1e-3 * max(1.0, float(np.max(np.abs(args[k]))))
    numeric = _directional_vector(first, args, k, d, h)
    if not isinstance(args[k], np.ndarray) and np.ndim(case.fn(*args)) == 0:
        second = sg.differentiate(case.fn, wrt=k, target=target).grad.grad(*args)
        _close(second * d, numeric, 1e-6, "f.grad.grad")
    else:   # hvp(f)(x, v, *rest): the table's first wrt argument is the first parameter
        assert k == 0
        hv = sg.hvp(sg.differentiate(case.fn, wrt=k, target=target))(args[k], d, *args[1:])
        _close(hv, numeric, 1e-6, "hvp")


def _directional_vector(g, args, k, d, h):
    def at(t):
        moved = list(args)
        moved[k] = args[k] + t * d if isinstance(args[k], np.ndarray) else float(args[k] + t * d)
        return np.asarray(g(*moved), dtype=np.float64)
    return (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h)


# ---------------------------------------------------------------------------------------------
# The loop stays a loop: in the IR, in the generated source, at every trip count

@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_traced_as_a_loop_region(case):
    args = case.make_args(np.random.default_rng(0), TRIPS)
    f = sg.differentiate(case.fn, wrt=case.wrt, target="python")
    assert "= loop(" in f.ir_for(*args)
    source = f.grad.source_for(*args)
    assert re.search(r"^\s*for \w+ in range\(", source, re.M), source
    assert re.search(r"^\s*for \w+ in reversed\(range\(", source, re.M), source


@pytest.mark.parametrize("name", ["scalar_recurrence", "tanh_rnn", "lstm_adbench", "euler_oscillator",
                                  "heat_equation", "stacked_outputs"])
def test_source_length_does_not_grow_with_trips(name):
    case = BY_NAME[name]
    lengths = []
    for trips in (10, 1000):
        args = case.make_args(np.random.default_rng(0), trips)
        f = sg.differentiate(case.fn, wrt=case.wrt, target="python")
        # the body, after the argument checks (wrapped at 99 columns: where a line breaks
        # depends on how wide the sizes they check are)
        source = f.grad.source_for(*args).split("source_for(...)')\n", 1)[1]
        # numbers (the trip count in loop headers and stack shapes, constants such as a mean's
        # 1 / n) may change; nothing else
        lengths.append(len(re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "N", source)))
    assert lengths[0] == lengths[1]


def test_float32_stays_float32():
    rng = np.random.default_rng(0)
    W, U, b = (a.astype(np.float32) for a in (_mat(rng, 3, 3, scale=0.5), _mat(rng, 3, 2), _mat(rng, 3)))
    xs = _mat(rng, TRIPS, 2).astype(np.float32)

    def rnn32(W, U, b, xs):
        h = np.zeros(W.shape[0], dtype=np.float32)
        for x in xs:
            h = np.tanh(W @ h + U @ x + b)
        return np.sum(h * h)

    expected = rnn32(W, U, b, xs)
    for target in TARGETS:
        f = sg.differentiate(rnn32, wrt=(0, 2), target=target)
        assert "= loop(" in f.ir_for(W, U, b, xs)
        value, (gW, gb) = f.value_and_grad(W, U, b, xs)
        assert np.asarray(value).dtype == np.float32 and gW.dtype == np.float32 and gb.dtype == np.float32
        np.testing.assert_allclose(value, expected, rtol=1e-5)
        g64 = sg.differentiate(tanh_rnn, wrt=(0, 2), target="python").grad(
            *(a.astype(np.float64) for a in (W, U, b, xs)))
        np.testing.assert_allclose(gW, g64[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(gb, g64[1], rtol=1e-4, atol=1e-5)


def test_float_carry_with_float32_rows_stays_float32():
    """A Python 0.0 carry is weak: summing float32 terms keeps float32, as in NumPy."""
    rng = np.random.default_rng(0)
    w, xs = _mat(rng, 3).astype(np.float32), _mat(rng, TRIPS, 3).astype(np.float32)
    expected = float_carry(w, xs)
    for target in TARGETS:
        f = sg.differentiate(float_carry, target=target)
        value = f(w, xs)
        assert np.asarray(value).dtype == np.asarray(expected).dtype
        np.testing.assert_allclose(value, expected, rtol=1e-5)
        assert f.grad(w, xs).dtype == np.float32


def test_a_new_trip_count_gives_the_right_numbers():
    f = sg.differentiate(tanh_rnn, wrt=0, target="python")
    rng = np.random.default_rng(3)
    W, U, b = _mat(rng, 3, 3, scale=0.5), _mat(rng, 3, 2), _mat(rng, 3)
    for trips in (7, 30, 5):
        xs = _mat(rng, trips, 2)
        _close(f(W, U, b, xs), tanh_rnn(W, U, b, xs), 1e-12, f"value at {trips} steps")
        d = rng.standard_normal(W.shape)
        numeric = _directional(tanh_rnn, (W, U, b, xs), 0, d, 1e-3)
        _close(np.sum(f.grad(W, U, b, xs) * d), numeric, 1e-6, f"gradient at {trips} steps")


# ---------------------------------------------------------------------------------------------
# Errors

def carry_changes_shape(x):
    h = x
    for i in range(8):
        h = np.concatenate((h, np.sin(x)))
    return np.sum(h)


def test_carry_whose_shape_changes_is_refused_with_names_shapes_and_line():
    f = sg.differentiate(carry_changes_shape, target="python")
    with pytest.raises(sg.UnsupportedSyntaxError) as info:
        f(np.ones(2))
    message = str(info.value)
    # the first iteration runs as written (peeled); the second would grow h again
    assert "'h'" in message and "(4,)" in message and "(6,)" in message, message
    line = carry_changes_shape.__code__.co_firstlineno + 2   # the for statement
    assert f"line {line}" in message or f":{line}" in message, message


# ---------------------------------------------------------------------------------------------
# Random programs with loop regions (tests/program_gen.py, LOOP_STATEMENTS): each checked
# like tests/test_random_programs.py's (values vs NumPy on both targets, gradients vs central
# differences and between targets, structure, refusals only where allowed)

import program_gen  # noqa: E402

LOOP_PROGRAMS = 80


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    saved = os.environ.get("SYMGRAD_NO_CACHE")
    os.environ["SYMGRAD_NO_CACHE"] = "1"
    yield str(tmp_path_factory.mktemp("random_loop_programs"))
    if saved is None:
        del os.environ["SYMGRAD_NO_CACHE"]
    else:
        os.environ["SYMGRAD_NO_CACHE"] = saved


def _loop_program(seed):
    return program_gen.generate(seed, 3, 1, statements=program_gen.LOOP_STATEMENTS)


@pytest.mark.parametrize("seed", range(LOOP_PROGRAMS))
def test_random_program_with_loops(seed, folder):
    program = _loop_program(seed)
    outcome = program_gen.check(program, folder)
    assert outcome.kind in ("ok", "refused-by-design"), (
        f"{outcome.kind}: {outcome.detail}\n(seed {seed}, {program.dtype}, wrt={program.wrt!r}, "
        f"sizes {program.sizes})\n{program.text}")


LOOP_FORMS = [("recurrence", r"= np\.\w+\(acc\d+\) \* 0\.5 \+"), ("where", r"np\.where\(acc"),
              ("branch in body", r"^ {8}if "), ("append + stack", r"np\.stack\(rows"),
              ("nested", r"for j in range\(5\)"), ("augmented", r"^ {8}acc\d+ [-+]= "),
              ("rows read by index", r"for k in range\(len\("),
              ("Python 0.0 carry", r"acc\d+ = 0\.0\n +for k")]


_REGION_RESULT = re.compile(r"^    (acc\d+) = .*\n(?:    rows\d+ = \[\]\n)?    " +
                            program_gen.REGION_LOOP, re.M)


def _returns_a_region_result(program) -> bool:
    """Whether the program's last line reads a variable a region loop computes (otherwise
    the loop is dead code and rightly gone from the IR)."""
    names = [m.group(1) for m in _REGION_RESULT.finditer(program.text)]
    last = program.text.strip().splitlines()[-1]
    return any(re.search(rf"\b{n}\b", last) for n in names)


def test_random_loop_programs_keep_their_breadth_and_become_regions(folder):
    programs = [_loop_program(s) for s in range(LOOP_PROGRAMS)]
    counts = {name: sum(bool(re.search(p, prog.text, re.M)) for prog in programs)
              for name, p in LOOP_FORMS}
    assert all(c >= 3 for c in counts.values()), counts
    # float64 programs (in float32 the int64 loop index in `k + 1.0` promotes the carry,
    # which unrolls) whose result reads a region loop's variable
    live = [p for p in programs if p.dtype == "float64" and _returns_a_region_result(p)]
    assert len(live) >= 15, len(live)
    unrolled = []
    for program in live:
        fn = program_gen.load(program, folder)
        args = program_gen.arguments(program, np.random.default_rng(0))
        if "= loop(" not in sg.differentiate(fn, wrt=program.wrt, target="python").ir_for(*args):
            unrolled.append(program.seed)
    assert not unrolled, f"loops unrolled in seeds {unrolled}"


def test_readme_shows_the_generated_loop_gradient():
    """README.md's loop-gradient subsection is examples/loop_gradient_source.py's output
    (rerun ``python examples/loop_gradient_source.py --readme README.md`` when it changes)."""
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        "loop_gradient_source", os.path.join(root, "examples", "loop_gradient_source.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    with open(os.path.join(root, "README.md")) as f:
        text = f.read()
    start, end = text.index(script.README_BEGIN), text.index(script.README_END)
    assert text[start:end + len(script.README_END)] == script.readme_section(), \
        "README.md is stale: run `python examples/loop_gradient_source.py --readme README.md`"
    assert script.gradient_source(10).count("\n") == script.gradient_source(1000).count("\n")


def test_adbench_lstm_benchmark_objective():
    """benchmarks/adbench_lstm.py's objective (ADBench's, with its int counter) is one loop
    region whose gradient matches central differences (JAX is not needed)."""
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        "adbench_lstm", os.path.join(root, "benchmarks", "adbench_lstm.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cell_args = [np.random.default_rng(1).uniform(-1.0, 1.0, n) for n in (12, 12, 3, 3, 3)]
    for got, want in zip(bench.lstm_model(*cell_args), lstm_model(*cell_args)):
        np.testing.assert_array_equal(got, want)   # the suite's copy of the cell is the benchmark's
    args = bench.make_inputs(2, 7)
    f = sg.differentiate(bench.objective, wrt=(0, 1), target="python")
    assert "= loop(" in f.ir_for(*args)
    _close(f(*args), bench.objective(*args), 1e-12, "value")
    assert sg.check_grad(bench.objective, *args, wrt=(0, 1)) < 1e-6
