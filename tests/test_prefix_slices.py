"""Slices whose length changes with a loop index (``x[:i]``, ``L[i, :j]``, ``U[i, i + 1:]``) inside
a loop region (symgrad.padded_slices): where they flow only into sums, dots and products of such
slices, they are the whole axis with zeros past the slice (a select), so the loop stays one
region, its IR the same size whatever n; any other use (max, exp, len, indexing, keeping the
slice) unrolls the loop as before, which gives NumPy's answer.

Each program goes through ``user_program_check.check_program``: values against NumPy, the
gradient against central differences on target="cpu" and target="python", and the gradient's
CUDA plan under the PTX emulation.
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import symgrad as sg

sys.path.insert(0, os.path.dirname(__file__))
from textbook_programs import cholesky_banachiewicz as cholesky  # noqa: E402
from user_program_check import assert_tree_close, central_difference, check_cuda, check_program  # noqa: E402

RNG = np.random.default_rng(11)
TARGETS = ("cpu", "python")


# ---------------------------------------------------------------------------------------------
# The programs, as textbooks write them

def forward_substitution(L, b):
    n = b.shape[0]
    y = np.zeros_like(b)
    for i in range(n):
        y[i] = (b[i] - L[i, :i] @ y[:i]) / L[i, i]
    return y


def back_substitution(U, b):
    n = b.shape[0]
    x = np.zeros_like(b)
    for i in range(n - 1, -1, -1):
        x[i] = (b[i] - U[i, i + 1:] @ x[i + 1:]) / U[i, i]
    return x


def running_sum(x):
    t = 0.0
    for i in range(x.shape[0]):
        t = t + np.sum(x[:i]) * x[i]    # x[:0] at i = 0: NumPy's empty sum, 0
    return t


def gram_schmidt(A):
    Q = np.zeros_like(A)
    for k in range(A.shape[1]):
        v = A[:, k]
        v = v - Q[:, :k] @ (Q[:, :k].T @ v)
        Q[:, k] = v / np.linalg.norm(v)
    return Q


def consumers(x, w, A):
    """The other uses the zeros are exact for: a product of two slices, a scale (by a scalar,
    a division, a power), a sum of two slices, a sum over the other axis, np.inner, a mean,
    2-norms, a suffix and a slice with both bounds traced."""
    n = x.shape[0]
    t = 0.0
    for i in range(n):
        p = x[:i] * w[:i]
        t = t + np.sum(p + 2.0 * x[:i] - w[:i] / 3.0) + np.inner(x[i:], w[i:])
        t = t + np.sum(np.sum(A[:, :i], axis=0) * x[:i]) + np.sum(x[:i + 1] ** 2)
        t = t + np.mean(w[:i + 1]) + x[i:].sum() * 0.5 - np.dot(-x[n - 1 - i:i], w[n - 1 - i:i])
        t = t + np.linalg.norm(x[:i + 1]) + np.linalg.norm(A[:, i:])
    return t


def _spd(n, dtype=np.float64):
    m = RNG.normal(size=(n, n))
    return (m @ m.T + n * np.eye(n)).astype(dtype)


def _lower(n, dtype=np.float64):
    return (np.tril(RNG.normal(size=(n, n))) + 3 * np.eye(n)).astype(dtype)


PROGRAMS = {
    "forward_substitution": (forward_substitution, lambda n: [_lower(n), RNG.normal(size=n)], (0, 1)),
    "back_substitution": (back_substitution, lambda n: [_lower(n).T.copy(), RNG.normal(size=n)], (0, 1)),
    "cholesky": (cholesky, lambda n: [_spd(n)], 0),
    "running_sum": (running_sum, lambda n: [RNG.normal(size=n)], 0),
    "gram_schmidt": (gram_schmidt, lambda n: [RNG.normal(size=(n + 1, n))], 0),
    "consumers": (consumers, lambda n: [RNG.normal(size=n), RNG.normal(size=n),
                                        RNG.normal(size=(3, n))], (0, 1, 2)),
}


def _regions(f, args) -> int:
    return f.ir_for(*args).count("= loop(")


def _shape_free(text: str) -> str:
    return re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", text)


# ---------------------------------------------------------------------------------------------
# Values and gradients on cpu, python and the PTX emulation; the loop stays a region

@pytest.mark.parametrize("name", list(PROGRAMS))
def test_values_and_gradients(name):
    fn, make, wrt = PROGRAMS[name]
    check_program(fn, make(7), wrt=wrt)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_loop_is_a_region_that_does_not_grow_with_n(name):
    fn, make, wrt = PROGRAMS[name]
    listings, sources = [], []
    for n in (8, 40):
        args = make(n)
        f = sg.differentiate(fn, wrt=wrt, target="python")
        assert _regions(f, args) >= 1, f.ir_for(*args)
        listings.append(_shape_free(f.ir_for(*args)))
        sources.append(_shape_free(f.grad.source_for(*args)))
    assert len(listings[0]) == len(listings[1])
    assert len(sources[0]) == len(sources[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["forward_substitution", "back_substitution", "cholesky", "running_sum"])
def test_dtypes(name, target, dtype):
    fn, make, wrt = PROGRAMS[name]
    args64 = make(9)
    args = [a.astype(dtype) for a in args64]
    f = sg.differentiate(fn, wrt=wrt, target=target)
    value = f(*args)
    assert np.asarray(value).dtype == np.asarray(fn(*args)).dtype == dtype
    rtol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(value, fn(*args64), rtol=rtol, atol=rtol)
    got = f.grad(*args)
    want = sg.differentiate(fn, wrt=wrt, target="python").grad(*args64)
    got, want = (got, want) if isinstance(wrt, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, rtol=1e-3 if dtype == np.float32 else 1e-10,
                                   atol=1e-4 if dtype == np.float32 else 1e-12)


def test_a_new_n_gives_the_right_numbers_on_cpu():
    f = sg.differentiate(forward_substitution, wrt=(0, 1))
    for n in (10, 23, 1):
        L, b = _lower(n), RNG.normal(size=n)
        np.testing.assert_allclose(f(L, b), np.linalg.solve(L, b), rtol=1e-10)
        gL, gb = f.grad(L, b)
        np.testing.assert_allclose(gb, central_difference(forward_substitution, [L, b], 1),
                                   rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# The empty slice, values past the slice that are inf or nan

@pytest.mark.parametrize("target", TARGETS)
def test_the_empty_slice_sums_to_zero(target):
    def first_terms(x):
        t = 0.0
        for i in range(x.shape[0]):
            t = t + (np.sum(x[:i]) + 1.0) * x[i] + np.dot(x[i + 1:], x[i + 1:]) + \
                np.linalg.norm(x[:i + 1])
        return t
    x = RNG.normal(size=6)
    f = sg.differentiate(first_terms, target=target)
    assert _regions(f, [x]) == 1
    np.testing.assert_allclose(f(x), first_terms(x), rtol=1e-12)
    np.testing.assert_allclose(f.grad(x), central_difference(first_terms, [x], 0), rtol=1e-6, atol=1e-8)
    one = np.array([2.0])   # a single iteration, i = 0: both slices empty
    np.testing.assert_allclose(sg.differentiate(first_terms, target=target)(one), 4.0)


@pytest.mark.parametrize("target", TARGETS)
def test_inf_and_nan_past_the_slice_never_reach_the_gradient(target):
    """x[-1] is inf and s may be inf: the slices stop before x[-1], so NumPy's value is finite
    and x[-1]'s derivative is 0, not 0 * inf = nan (the zeros are a select, not a product)."""
    def partial_norms(x, s):
        t = 0.0
        for i in range(x.shape[0] - 1):
            t = t + np.sum(x[:i] * x[:i]) + np.sum(s * x[:i]) * 0.0 + np.sum(x[:i] / s)
        return t
    x = RNG.normal(size=7)
    x[-1] = np.inf
    s = 4.0
    f = sg.differentiate(partial_norms, wrt=(0, 1), target=target)
    assert _regions(f, [x, s]) == 1
    np.testing.assert_allclose(f(x, s), partial_norms(x, s), rtol=1e-12)
    gx, _ = f.grad(x, s)
    k = np.arange(6)
    want = 2 * x[:6] * (5 - k) + (5 - k) / s
    np.testing.assert_allclose(gx[:6], want, rtol=1e-12)
    assert gx[6] == 0.0
    x = RNG.normal(size=7)
    x[-1] = np.nan
    gx, gs = f.grad(x, np.inf)     # s = inf: 0 * inf past the slice would be nan
    assert gx[6] == 0.0 and np.isnan(f(x, np.inf)) == np.isnan(partial_norms(x, np.inf))


# ---------------------------------------------------------------------------------------------
# Other uses keep NumPy's answer (the loop unrolls)

def max_of_prefix(x):
    t = 0.0
    for i in range(x.shape[0]):
        t = t + np.max(x[:i + 1])
    return t


def exp_of_prefix(x):
    t = 0.0
    for i in range(x.shape[0]):
        t = t + np.sum(np.exp(x[:i]))
    return t


def length_of_prefix(x):
    t = 0.0
    for i in range(x.shape[0]):
        t = t + len(x[:i]) * x[i] + x[:i].shape[0]
    return t


def shifted_prefix(x):
    t = 0.0
    for i in range(x.shape[0] - 1):
        t = t + np.sum(x[:i] + 1.0) + np.dot(x[:i], x[1:i + 1])
    return t


def kept_prefix(x):
    t = 0.0
    for i in range(x.shape[0]):
        head = x[:i + 1]
        t = t + np.sum(head) + head[-1]
    return t + np.sum(head)


def appended_prefix(x):
    parts = []
    for i in range(x.shape[0]):
        parts.append(np.sum(x[:i]))
        parts.append(x[:i])
    return np.sum(np.concatenate(parts[1::2]))


def compared_prefix(x):
    t = 0.0
    for i in range(x.shape[0]):
        t = t + np.sum(np.where(x[:i] == x[0], 1.0, 0.0) * x[i])
    return t


def selected_prefix(x):
    t = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0:
            v = x[:i]
        else:
            v = x[:i] * 2.0
        t = t + np.sum(v)
    return t


def maybe_negative_bound(x):
    t = 0.0
    for i in range(x.shape[0]):
        t = t + np.sum(x[i - 3:]) * x[i]   # i - 3 < 0: counted from the end, as NumPy does
    return t


UNSUPPORTED = [maybe_negative_bound, max_of_prefix, exp_of_prefix, length_of_prefix, shifted_prefix, kept_prefix,
               appended_prefix, compared_prefix, selected_prefix]


@pytest.mark.parametrize("fn", UNSUPPORTED, ids=lambda fn: fn.__name__)
def test_other_uses_unroll_and_keep_numpys_answer(fn):
    x = RNG.normal(size=6)
    for target in TARGETS:
        f = sg.differentiate(fn, target=target)
        np.testing.assert_allclose(f(x), fn(x), rtol=1e-12, err_msg=fn.__name__)
        assert _regions(f, [x]) == 0, fn.__name__
        np.testing.assert_allclose(f.grad(x), central_difference(fn, [x], 0), rtol=1e-6, atol=1e-7)


def test_a_write_into_a_prefix_unrolls():
    def zero_head(x):
        y = x.copy()
        t = 0.0
        for i in range(x.shape[0]):
            y[:i] = 0.0
            t = t + np.sum(y)
        return t
    x = RNG.normal(size=6)
    f = sg.differentiate(zero_head, target="python")
    np.testing.assert_allclose(f(x), zero_head(x), rtol=1e-12)
    assert _regions(f, [x]) == 0


# ---------------------------------------------------------------------------------------------
# Second order, forward mode, vmap, the CUDA emulation of a second derivative

@pytest.mark.parametrize("target", TARGETS)
def test_running_sum_hessian(target):
    x = RNG.normal(size=6)
    h = sg.hessian(running_sum, target=target)(x)
    want = np.tril(np.ones((6, 6)), -1)    # t = sum_{j < i} x_j x_i
    np.testing.assert_allclose(h, want + want.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_cholesky_jvp(target):
    A = _spd(6)
    d = RNG.normal(size=A.shape)
    d = d + d.T
    value, tangent = sg.jvp(cholesky, target=target)(A, d)
    np.testing.assert_allclose(value, np.linalg.cholesky(A), rtol=1e-12, atol=1e-12)
    eps = 1e-6
    numeric = (cholesky(A + eps * d) - cholesky(A - eps * d)) / (2 * eps)
    np.testing.assert_allclose(tangent, numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("target", TARGETS)
def test_vmap_of_forward_substitution(target):
    Ls = np.stack([_lower(6) for _ in range(3)])
    bs = RNG.normal(size=(3, 6))
    got = sg.vmap(forward_substitution, target=target)(Ls, bs)
    np.testing.assert_allclose(got, [np.linalg.solve(L, b) for L, b in zip(Ls, bs)], rtol=1e-12)
    grads = sg.vmap(sg.grad(forward_substitution, wrt=1), target=target)(Ls, bs)
    want = sg.differentiate(forward_substitution, wrt=1, target="python").grad
    np.testing.assert_allclose(grads, [want(L, b) for L, b in zip(Ls, bs)], rtol=1e-12)


def test_hvp_under_the_ptx_emulation():
    A = _spd(5)
    hv = sg.hvp(lambda A: np.sum(cholesky(A)), target="python")
    d = RNG.normal(size=A.shape)
    check_cuda(hv, [A, d], hv(A, d))
    assert_tree_close(hv(A, d), sg.hvp(lambda A: np.sum(cholesky(A)), target="cpu")(A, d),
                      1e-10, 1e-12, "hvp cpu vs python")


# ---------------------------------------------------------------------------------------------
# A bound slice is a view of its array, as in NumPy

def written_after_slicing(L):
    M = L.copy()
    t = 0.0
    for i in range(M.shape[0]):
        v = M[i, :i]
        M[i, 0] = M[i, 0] + 1.0     # NumPy's v sees this write
        t = t + np.sum(v)
    return t


def test_a_write_into_the_array_a_bound_slice_views_is_refused():
    """As for a static view (the zero-padded slice is a copy: a write after it would change
    NumPy's answer and not ours)."""
    with pytest.raises(sg.UnsupportedSyntaxError, match="may share memory with 'v'"):
        sg.differentiate(written_after_slicing, target="python")(RNG.normal(size=(6, 6)))
