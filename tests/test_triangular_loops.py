"""Triangular loops: ``for j in range(i + 1, n)`` inside ``for i in range(n)`` (the inner
range's bounds made from an enclosing loop's index) are loop regions too (symgrad.loops,
``symgrad.loop_plan.Span``): the inner loop is sized by its longest range and runs only the
iterations of its own (a ``("count",)`` exit, forward and backward), so the traced IR holds
one copy of each body, not one per outer iteration, and an iteration outside the range is
never computed (at ``j = i`` a pair loop's ``1 / r2`` would be inf, and its backward
``0 * inf = nan``).

Each program is checked by ``user_program_check.check_program``: values against NumPy, the
gradient against central differences on target="cpu" and target="python", and the
gradient's CUDA plan under the PTX emulation (where every iteration is launched and the
ones outside the range keep the carries by a select).
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import symgrad as sg

sys.path.insert(0, os.path.dirname(__file__))
from user_program_check import assert_tree_close, central_difference, check_cuda, check_program  # noqa: E402
from test_user_programs_science import lennard_jones  # noqa: E402  (the pair loop as users write it)

RNG = np.random.default_rng(7)
TARGETS = ("cpu", "python")


# ---------------------------------------------------------------------------------------------
# The programs

def lennard_jones_lower(pos):
    """The pairs j < i: in the loop over the longest range, j = i comes right after the last
    iteration of each range (r2 = 0 there: it must never run)."""
    e = 0.0
    for i in range(pos.shape[0]):
        for j in range(i):
            r2 = np.sum((pos[i] - pos[j]) ** 2)
            s6 = (1.0 / r2) ** 3
            e += 4.0 * (s6 * s6 - s6)
    return e


def coulomb(pos, q):
    e = 0.0
    for i in range(len(q)):
        for j in range(i + 1, len(q)):
            e = e + q[i] * q[j] / np.sqrt(np.sum((pos[i] - pos[j]) ** 2))
    return e


def forward_substitution(L, b):
    n = b.shape[0]
    y = np.zeros_like(b)
    for i in range(n):
        s = b[i]
        for j in range(i):
            s -= L[i, j] * y[j]
        y[i] = s / L[i, i]
    return y


def back_substitution(U, b):
    n = b.shape[0]
    x = np.zeros_like(b)
    for i in range(n - 1, -1, -1):
        s = b[i]
        for j in range(n - 1, i, -1):
            s -= U[i, j] * x[j]
        x[i] = s / U[i, i]
    return x


def cholesky(A):
    n = A.shape[0]
    L = np.zeros_like(A)
    for i in range(n):
        for j in range(i + 1):
            s = 0.0
            for k in range(j):
                s += L[i, k] * L[j, k]
            if i == j:
                L[i, j] = np.sqrt(A[i, i] - s)
            else:
                L[i, j] = (A[i, j] - s) / L[j, j]
    return L


def gram_schmidt(A):
    Q = np.zeros_like(A)
    for k in range(A.shape[1]):
        v = A[:, k]
        for j in range(k):
            v = v - np.dot(Q[:, j], A[:, k]) * Q[:, j]
        Q[:, k] = v / np.linalg.norm(v)
    return Q


def rnn_pairwise(W, xs):
    """An RNN whose step reads a running sum over the earlier states (j < i)."""
    n, d = xs.shape
    hs = np.zeros((n, d))
    h = np.zeros(d)
    for i in range(n):
        s = np.zeros(d)
        for j in range(i):
            s = s + np.dot(hs[j], h) * hs[j]
        h = np.tanh(W @ h + xs[i] + 0.1 * s)
        hs[i] = h
    return np.sum(h ** 2) + np.sum(hs)


def upper_from_i(x, w):
    """range(i, n) and range(0, i + 1)."""
    t = 0.0
    for i in range(x.shape[0]):
        for j in range(i, x.shape[0]):
            t = t + x[i] * x[j] * w[j - i]
        for j in range(0, i + 1):
            t = t + np.sin(x[j]) * w[i]
    return t


def three_deep(x):
    t = 0.0
    for i in range(x.shape[0]):
        for j in range(i):
            for k in range(j + 1, i):
                t = t + x[i] * x[j] * np.cos(x[k])
    return t


def inner_break(x):
    t = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            if x[j] * x[i] < 0.0:
                break
            t = t + x[i] * x[j]
    return t


def inner_continue(x):
    t = 0.0
    for i in range(x.shape[0]):
        for j in range(i):
            if x[j] > x[i]:
                continue
            t = t + np.exp(x[j] - x[i])
    return t


def _spd(n, dtype=np.float64):
    m = RNG.normal(size=(n, n))
    return (m @ m.T + n * np.eye(n)).astype(dtype)


def _lower(n, dtype=np.float64):
    return (np.tril(RNG.normal(size=(n, n))) + 3 * np.eye(n)).astype(dtype)


def _positions(n, dtype=np.float64):
    grid = np.array([[k % 3, (k // 3) % 3, k // 9] for k in range(n)], dtype=np.float64) * 1.3
    return (grid + 0.1 * RNG.normal(size=(n, 3))).astype(dtype)


def _is_triangular_region(f, args) -> bool:
    """The traced IR has a loop inside a loop body whose trip count is an input (``("count",)``)."""
    listing = f.ir_for(*args)
    return listing.count("= loop(") >= 2 and ("('count',)" in listing or "('until'," in listing)


# ---------------------------------------------------------------------------------------------
# Values, gradients (cpu, python, PTX emulation) and the region itself

PROGRAMS = {
    "lennard_jones": (lennard_jones, lambda: [_positions(7)], 0, {"fd_rtol": 1e-5}),
    "lennard_jones_lower": (lennard_jones_lower, lambda: [_positions(6)], 0, {"fd_rtol": 1e-5}),
    "coulomb": (coulomb, lambda: [_positions(6), RNG.normal(size=6)], (0, 1), {}),
    "forward_substitution": (forward_substitution, lambda: [_lower(6), RNG.normal(size=6)], (0, 1), {}),
    "back_substitution": (back_substitution, lambda: [_lower(6).T.copy(), RNG.normal(size=6)], (0, 1), {}),
    "cholesky": (cholesky, lambda: [_spd(6)], 0, {}),
    "gram_schmidt": (gram_schmidt, lambda: [RNG.normal(size=(6, 5))], 0, {}),
    "rnn_pairwise": (rnn_pairwise, lambda: [0.4 * RNG.normal(size=(3, 3)), RNG.normal(size=(6, 3))], (0, 1), {}),
    "upper_from_i": (upper_from_i, lambda: [RNG.normal(size=6), RNG.normal(size=6)], (0, 1), {}),
    "three_deep": (three_deep, lambda: [RNG.normal(size=6)], 0, {}),
    "inner_break": (inner_break, lambda: [np.array([1.0, 0.5, 2.0, -1.0, 0.3, 0.7, 1.2])], 0, {}),
    "inner_continue": (inner_continue, lambda: [RNG.normal(size=7)], 0, {}),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_values_and_gradients(name):
    fn, make, wrt, tol = PROGRAMS[name]
    check_program(fn, make(), wrt=wrt, **tol)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_inner_loop_is_a_region(name):
    fn, make, wrt, _ = PROGRAMS[name]
    args = make()
    f = sg.differentiate(fn, wrt=wrt, target="python")
    assert _is_triangular_region(f, args), f.ir_for(*args)
    source = f.grad.source_for(*args)
    assert re.search(r"^\s*for \w+ in reversed\(range\([A-Za-z_]\w*\)\)", source, re.M), source


def test_three_deep_is_three_nested_regions():
    x = RNG.normal(size=6)
    listing = sg.differentiate(three_deep, target="python").ir_for(x)
    assert listing.count("= loop(") == 3 and listing.count("('count',)") == 2, listing


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("target", TARGETS)
def test_forward_substitution_dtypes(dtype, target):
    L, b = _lower(8, dtype), RNG.normal(size=8).astype(dtype)
    f = sg.differentiate(forward_substitution, wrt=(0, 1), target=target)
    y = f(L, b)
    assert y.dtype == dtype
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, np.linalg.solve(L.astype(np.float64), b.astype(np.float64)), rtol=rtol, atol=rtol)
    gL, gb = f.grad(L, b)
    assert gL.dtype == dtype and gb.dtype == dtype
    want = sg.differentiate(forward_substitution, wrt=(0, 1), target="python").grad(
        L.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(gb, want[1], rtol=10 * rtol, atol=10 * rtol)
    np.testing.assert_allclose(gL, want[0], rtol=10 * rtol, atol=10 * rtol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("target", TARGETS)
def test_cholesky_dtypes(dtype, target):
    """``s = 0.0`` before the innermost loop: a Python number the float32 body makes a float32
    of (a span cannot peel its first iteration, which may not run: the carry is a float32 from
    the start, as the body reads it only cast to float32)."""
    A = _spd(7, dtype)
    f = sg.differentiate(cholesky, target=target)
    assert _is_triangular_region(f, [A])
    L = f(A)
    assert L.dtype == dtype
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(L, np.linalg.cholesky(A.astype(np.float64)), rtol=rtol, atol=rtol)
    g = f.grad(A)
    assert g.dtype == dtype
    want = sg.differentiate(cholesky, target="python").grad(A.astype(np.float64))
    np.testing.assert_allclose(g, want, rtol=1e-3 if dtype == np.float32 else 1e-10, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_lennard_jones_float32(target):
    pos = _positions(7, np.float32)
    f = sg.differentiate(lennard_jones, target=target)
    value, g = f.value_and_grad(pos)
    assert g.dtype == np.float32
    np.testing.assert_allclose(value, lennard_jones(pos.astype(np.float64)), rtol=1e-4)
    np.testing.assert_allclose(g, central_difference(lennard_jones, [pos.astype(np.float64)], 0),
                               rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------------------------------------
# Iterations outside the range: never run (the LJ pair j = i gives r2 = 0)

@pytest.mark.parametrize("target", TARGETS)
def test_iterations_outside_the_range_never_run(target):
    """At j = i, r2 = 0 and 1 / r2 = inf: every gradient stays finite, forward, reverse,
    second order, also where the last outer iterations' ranges are empty (i = n - 1 for
    range(i + 1, n), i = 0 for range(i))."""
    pos = _positions(6)
    for fn in (lennard_jones, lennard_jones_lower):
        f = sg.differentiate(fn, target=target)
        g = f.grad(pos)
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(g, central_difference(fn, [pos], 0), rtol=1e-5, atol=1e-7)
        h = sg.hessian(fn, target=target)(pos)
        assert np.all(np.isfinite(h))
        d = RNG.normal(size=pos.shape)
        defaults = [1.0, 1.0] if fn is lennard_jones else []
        _, t = sg.jvp(fn, target=target)(pos, *defaults, d)
        assert np.isfinite(t)
        np.testing.assert_allclose(t, np.sum(g * d), rtol=1e-9)


def test_iterations_outside_the_range_under_the_ptx_emulation():
    """The CUDA launch sequence runs every iteration of the longest range; those outside a
    range (j = i here) compute inf and keep the carries by a select, never multiplying it."""
    pos = _positions(6)
    want = sg.differentiate(lennard_jones_lower, target="python").grad(pos)
    check_cuda(sg.differentiate(lennard_jones_lower, target="python").grad, [pos], want)
    hv = sg.hvp(lennard_jones_lower, target="python")
    d = RNG.normal(size=pos.shape)
    check_cuda(hv, [pos, d], hv(pos, d))


def zero_trip_inner(x):
    t = 0.0
    n = x.shape[0]
    for i in range(n):
        for j in range(i + 1, n - 1):
            t = t + x[j] * x[i]
        for j in range(i + 5, n):   # no trips from i = 1 on
            t = t + np.log(x[j] - x[i])
    return t


def test_zero_trip_inner_loops():
    x = np.array([0.5, 1.0, 1.5, 2.0, 2.5, 3.0])
    check_program(zero_trip_inner, [x])


def last_item(x):
    t = 0.0
    j = 0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            t = t + x[j]
        t = t + x[j] * x[i]   # j: the last item, or (no trips) its value before
    return t


def test_loop_variable_after_a_triangular_loop():
    check_program(last_item, [RNG.normal(size=6)])


# ---------------------------------------------------------------------------------------------
# Second derivatives, forward mode, vmap

@pytest.mark.parametrize("target", TARGETS)
def test_lennard_jones_hessian(target):
    pos = _positions(5)
    h = sg.hessian(lennard_jones, target=target)(pos)
    assert h.shape == (5, 3, 5, 3)
    flat = h.reshape(15, 15)
    np.testing.assert_allclose(flat, flat.T, rtol=1e-9, atol=1e-9)
    g = sg.differentiate(lennard_jones, target="python").grad
    d = RNG.normal(size=pos.shape)
    eps = 1e-5
    numeric = (g(pos + eps * d) - g(pos - eps * d)) / (2 * eps)
    np.testing.assert_allclose(np.tensordot(h, d, 2), numeric, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["forward_substitution", "cholesky", "rnn_pairwise", "three_deep"])
@pytest.mark.parametrize("target", TARGETS)
def test_forward_mode(name, target):
    fn, make, _, _ = PROGRAMS[name]
    args = make()
    d = RNG.normal(size=args[0].shape)
    value, tangent = sg.jvp(fn, wrt=0, target=target)(*args, d)
    assert_tree_close(value, fn(*args), 1e-10, 1e-12, f"{name} jvp value")
    eps = 1e-6
    up, down = list(args), list(args)
    up[0], down[0] = args[0] + eps * d, args[0] - eps * d
    numeric = (np.asarray(fn(*up)) - np.asarray(fn(*down))) / (2 * eps)
    np.testing.assert_allclose(tangent, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target", TARGETS)
def test_vmap(target):
    batch = np.stack([_lower(6) for _ in range(3)])
    bs = RNG.normal(size=(3, 6))
    got = sg.vmap(forward_substitution, target=target)(batch, bs)
    np.testing.assert_allclose(got, [forward_substitution(L, b) for L, b in zip(batch, bs)], rtol=1e-12)
    pos = np.stack([_positions(6) for _ in range(3)])
    grads = sg.vmap(sg.grad(lennard_jones), target=target)(pos)
    want = sg.differentiate(lennard_jones, target="python").grad
    np.testing.assert_allclose(grads, [want(p) for p in pos], rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Code that does not grow with n

def test_source_does_not_grow_with_n():
    lengths = []
    for n in (8, 40):
        f = sg.differentiate(lennard_jones, target="python")
        source = f.grad.source_for(_positions(n))
        lengths.append(len(re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "N", source)))
    assert lengths[0] == lengths[1]


def test_a_new_n_gives_the_right_numbers_on_cpu():
    f = sg.differentiate(forward_substitution, wrt=(0, 1))
    for n in (7, 12, 5):
        L, b = _lower(n), RNG.normal(size=n)
        np.testing.assert_allclose(f(L, b), np.linalg.solve(L, b), rtol=1e-10)
        gL, gb = f.grad(L, b)
        np.testing.assert_allclose(gb, central_difference(forward_substitution, [L, b], 1), rtol=1e-6, atol=1e-8)


def test_a_new_n_reuses_the_machine_code():
    """The trip counts (the outer one, the longest inner range and each range's count) are
    run-time values on target="cpu": a new number of particles compiles nothing."""
    from symgrad.codegen import llvm
    g = sg.differentiate(lennard_jones).grad
    g(_positions(12))
    compiles = llvm.stats()["compiles"]
    pos = _positions(20)
    got = g(pos)
    assert llvm.stats()["compiles"] == compiles
    np.testing.assert_allclose(got, sg.differentiate(lennard_jones, target="python").grad(pos),
                               rtol=1e-10, atol=1e-12)
    texts = [re.sub(r"^;.*$", "", g.llvm_ir(_positions(n)), flags=re.M) for n in (12, 30)]
    assert texts[0] == texts[1]   # (but for the comments, which name the shapes)


# ---------------------------------------------------------------------------------------------
# A gather's cotangent in a loop: stacked per iteration, scattered once after the loop

def gathered_and_whole(x, w):
    """x[i] (a gather: its cotangent scattered) and all of x (accumulated) in one loop."""
    t = 0.0
    for i in range(x.shape[0]):
        t = t + x[i] * np.sum(w * x) + np.sin(w[i] * x[i])
    return t


def test_gathered_and_whole_input():
    check_program(gathered_and_whole, [RNG.normal(size=6), RNG.normal(size=6)], wrt=(0, 1))


def test_gather_cotangent_is_scattered_after_the_loops():
    """The backward of ``pos[j]`` in the pair loop stores one row per pair, not a pass over
    all of ``pos``'s cotangent per pair: no scatter (``np.add.at``) in the inner loop's body
    (indented twice in the function's), one after it."""
    source = sg.differentiate(lennard_jones, target="python").grad.source_for(_positions(7))
    scatters = [line for line in source.splitlines() if "np.add.at" in line]
    assert scatters and all(len(line) - len(line.lstrip()) < 12 for line in scatters), source


_PTX_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
import symgrad as sg
import test_triangular_loops as t
programs = [(t.lennard_jones_lower, [t._positions(6)], 0), (t.cholesky, [t._spd(6)], 0),
            (t.inner_break, [np.array([1.0, 0.5, 2.0, -1.0, 0.3, 0.7, 1.2])], 0)]
for path, (fn, args, wrt) in zip(sys.argv[1:], programs):
    open(path, "w").write(sg.grad(fn, wrt=wrt, target="python").ptx(*args, arch="sm_80"))
"""


def test_gradients_assemble_with_ptxas(tmp_path):
    from ptx_child import assemble_in_child
    assemble_in_child(_PTX_SCRIPT, [tmp_path / f"program{i}.ptx" for i in range(3)])
