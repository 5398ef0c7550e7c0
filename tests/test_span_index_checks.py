"""Index checks that loop indices' ranges decide (symgrad.numpy_indexing._flat_positions with
the tracer's ``index_ranges``, symgrad.loop_plan): ``pos[j]`` in ``for j in range(i + 1, n)``
(a span loop, symgrad.loop_plan.Span) is ``take(pos, j)``, with no wrap-around of a negative
index and no bounds check, as ``pos[i]`` of a plain loop is: the range of j (from the outer
index's and the span's count) lies inside the axis. Where it does not (``x[j - 5]`` may be
negative, ``x[j + 1]`` reaches past the end at the last j) the checks stay and the numbers are
NumPy's: the wrap from the end, or IndexError.
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import ptx_emulate

sys.path.insert(0, os.path.dirname(__file__))
from user_program_check import check_program  # noqa: E402
from test_triangular_loops import (PROGRAMS, _lower, _positions, back_substitution,  # noqa: E402
                                   cholesky, coulomb, forward_substitution, lennard_jones,
                                   lennard_jones_lower, three_deep)

RNG = np.random.default_rng(11)
TARGETS = ("cpu", "python")

# The wrap of a negative index (``np.where(k < 0, k + n, k)``) and the bounds check
# (``np.logical_and(k >= 0, k < n)``) as the generated source spells them.
_CHECK = re.compile(r"(<|>=) 0(?![.\d])")


def _index_checks(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if _CHECK.search(line)]


# ---------------------------------------------------------------------------------------------
# Folded: the span's bounds show every index inside the array

FOLDED = {
    "lennard_jones": (lennard_jones, lambda: [_positions(7)], 0),
    "lennard_jones_lower": (lennard_jones_lower, lambda: [_positions(6)], 0),   # j < i
    "coulomb": (coulomb, lambda: [_positions(6), RNG.normal(size=6)], (0, 1)),
    "forward_substitution": (forward_substitution, lambda: [_lower(6), RNG.normal(size=6)], (0, 1)),
    "back_substitution": (back_substitution, lambda: [_lower(6).T.copy(), RNG.normal(size=6)], (0, 1)),
    "cholesky": (cholesky, lambda: [PROGRAMS["cholesky"][1]()[0]], 0),   # L[i, j] = v in a branch
    "three_deep": (three_deep, lambda: [RNG.normal(size=6)], 0),
}


@pytest.mark.parametrize("name", list(FOLDED))
def test_no_index_checks_in_the_source(name):
    fn, make, wrt = FOLDED[name]
    args = make()
    f = sg.differentiate(fn, wrt=wrt, target="python")
    for source in (f.source_for(*args), f.grad.source_for(*args)):
        assert not _index_checks(source), source


def test_lennard_jones_inner_body_is_the_pair_maths():
    """The IR of the pair loop's gradient: no select, comparison or logical_and anywhere (the
    inner body reads ``pos`` at ``k + (i + 1)`` as it is)."""
    f = sg.differentiate(lennard_jones, target="python")
    listing = f.grad.ir_for(_positions(7))
    assert "('count',)" in listing
    for op in ("where(", "lt(", "ge(", "logical_and("):
        assert op not in listing, listing


def reversed_items(x, w):
    """``x[n - 1 - j]`` and ``w[j + 1]`` (j < n - 1): in bounds, folded."""
    n = x.shape[0]
    t = 0.0
    for i in range(n):
        for j in range(i + 1, n - 1):
            t = t + x[n - 1 - j] * w[j + 1] * x[i]
    return t


def test_reversed_and_shifted_items():
    args = [RNG.normal(size=7), RNG.normal(size=7)]
    f = sg.differentiate(reversed_items, wrt=(0, 1), target="python")
    assert not _index_checks(f.grad.source_for(*args))
    check_program(reversed_items, args, wrt=(0, 1))


# ---------------------------------------------------------------------------------------------
# Not folded: an index that may be negative, or past the end

def from_the_end(x):
    """``x[j - 5]``: negative for j < 5, NumPy's read from the end (the wrap stays; the bounds
    check does not: j - 5 >= -n)."""
    t = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            t = t + x[j - 5] * np.sin(x[i])
    return t


def test_a_negative_index_wraps_as_numpy():
    x = RNG.normal(size=8)
    f = sg.differentiate(from_the_end, target="python")
    checks = _index_checks(f.grad.source_for(x))
    assert checks and all("logical_and" not in line for line in checks), checks
    check_program(from_the_end, [x])


def past_the_end(x):
    t = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            t = t + x[j + 1] * x[i]
    return t


def far_from_the_end(x):
    t = 0.0
    for i in range(x.shape[0]):
        for j in range(i):
            t = t + x[j - 2 * x.shape[0]] * x[i]
    return t


@pytest.mark.parametrize("fn", [past_the_end, far_from_the_end])
@pytest.mark.parametrize("target", TARGETS)
def test_an_index_out_of_bounds_raises_as_numpy(fn, target):
    """``x[j + 1]`` at the last j (and ``x[j - 2n]``): NumPy's IndexError, value and gradient."""
    x = RNG.normal(size=6)
    with pytest.raises(IndexError):
        fn(x)
    f = sg.differentiate(fn, target=target)
    with pytest.raises(IndexError):
        f(x)
    with pytest.raises(IndexError):
        f.grad(x)


def test_an_index_out_of_bounds_keeps_its_check():
    x = RNG.normal(size=6)
    source = sg.differentiate(past_the_end, target="python").grad.source_for(x)
    assert any("logical_and" in line for line in _index_checks(source)), source


def shifted_rows(A):
    """``A[j - 3, i]`` (2-d, one component may be negative): the wrap stays on that one."""
    t = 0.0
    for i in range(A.shape[1]):
        for j in range(i + 1, A.shape[0]):
            t = t + A[j - 3, i] * A[j, i] ** 2
    return t


def test_two_components_one_wrapped():
    A = RNG.normal(size=(7, 5))
    check_program(shifted_rows, [A])
    f = sg.differentiate(shifted_rows, target="python")
    checks = _index_checks(f.grad.source_for(A))
    assert checks and all("logical_and" not in line for line in checks), checks


def test_out_of_bounds_under_the_ptx_emulation_raises():
    """Where the check stays, the emulated CUDA plan raises too (not a number read elsewhere)."""
    x = RNG.normal(size=6)
    g = sg.differentiate(past_the_end, target="python").grad
    with pytest.raises(IndexError):
        ptx_emulate.run(g._graph(g.bind([x], {})), [x])
