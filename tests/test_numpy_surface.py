"""The README's list of the supported NumPy surface is the one generated from the tables, and
every NumPy function outside them is refused by name at the user's line (never inlined, never
an internal error)."""
import math
import os

import numpy as np
import pytest

import symgrad as sg
from symgrad import numpy_api

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_lists_the_generated_surface():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start = text.index(numpy_api.README_BEGIN)
    end = text.index(numpy_api.README_END) + len(numpy_api.README_END)
    assert text[start:end] == numpy_api.readme_section(), \
        "README.md is stale: run `python -m symgrad.readme_numpy`"


def test_numpy_names_are_numpys_own():
    import scipy.special
    assert numpy_api.numpy_name(np.cumsum) == "np.cumsum"
    assert numpy_api.numpy_name(np.linalg.det) == "np.linalg.det"
    assert numpy_api.numpy_name(np.bitwise_count if hasattr(np, "bitwise_count") else np.gcd).startswith("np.")
    assert numpy_api.numpy_name(scipy.special.erf) is None   # a ufunc, but not NumPy's
    assert numpy_api.numpy_name(len) is None and numpy_api.numpy_name(np.ndarray) is None


def test_supported_names_are_recognised():
    """Each listed name is sg.<name>, and the NumPy / math function of that name (where the
    installed versions have it) is handled by it."""
    names = numpy_api.supported()
    assert {"sinc", "norm", "erf", "take_along_axis", "pad"} <= set(names)
    assert np.linalg.norm in numpy_api.CALLABLES
    for name in names:
        assert getattr(sg, name) is numpy_api.DUALS[name], name
        for module in (np, math):
            fn = getattr(module, name, None)
            if callable(fn) and (module, name) != (math, "remainder"):   # IEEE's, not NumPy's
                assert fn in numpy_api.CALLABLES, f"{module.__name__}.{name}"
    assert math.remainder not in numpy_api.CALLABLES


def nancumsum_call(x):
    return np.sum(np.nancumsum(x))


def einsum_sublists(x):
    return np.einsum(x, [0, 1], x, [0, 1])


def argsort_call(x):
    return np.sum(np.argsort(x) * x)


def polyfit_call(x):   # (np.interp is supported: tests/test_user_idioms.py)
    return np.sum(np.polyfit(np.arange(3.0), x, 1))


def svd_call(x):
    return np.sum(np.linalg.svd(x)[1])


def qr_call(x):
    return np.sum(np.linalg.qr(x)[1])


def unique_call(x):
    return np.sum(np.unique(x))


def spectral_norm(x):
    return np.linalg.norm(x, 2)


def keyword_not_taken(x):
    return np.sum(x, dtype=np.float32)


def r_directive(x):
    return np.sum(np.r_["0,2", x[0], x[1]])


CASES = [(nancumsum_call, "np.nancumsum is not supported"),
         (einsum_sublists, "np.einsum(operand, sublist, ...)"),
         (argsort_call, "np.argsort without kind='stable'"), (polyfit_call, "np.polyfit is not supported"),
         (svd_call, "np.linalg.svd is not supported"), (qr_call, "np.linalg.qr is not supported"),
         (unique_call, "np.unique is not supported"),
         (spectral_norm, "ord=2) of a matrix"), (keyword_not_taken, "np.sum(..., dtype=...)"),
         (r_directive, "np.r_ / np.c_ with a directive string")]


@pytest.mark.parametrize("fn, construct", CASES, ids=[c[0].__name__ for c in CASES])
def test_unsupported_numpy_is_refused_by_name(fn, construct):
    with pytest.raises(sg.UnsupportedSyntaxError) as info:
        sg.grad(fn, target="python")(np.eye(3) + 0.5)
    err = info.value
    assert construct in str(err)
    assert err.filename.endswith("test_numpy_surface.py") and err.lineno > 0
    assert err.source_line.strip().startswith("return")


def test_builtin_round_and_divmod_keep_python_semantics_on_static_values():
    def f(x, n):
        q, r = divmod(n, 3)
        k = math.floor(n / 2) + math.ceil(n / 4) - math.trunc(1.5)
        return (x[:round(n / 2)].sum() * q + r + round(x[0] * 10.0) + divmod(x[1], 0.5)[1]
                + x[k] * math.floor(x[2] * 10.0) + math.erf(x[3]))
    x = np.linspace(0.1, 0.9, 6)
    for target in ("python", "cpu"):
        g = sg.differentiate(f, target=target)
        np.testing.assert_allclose(g(x, 5), f(x, 5), rtol=1e-14)
        assert sg.check_grad(g, x, 5) < 1e-6


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_take_without_axis_reads_the_flattened_array(target):
    """np.take(x, i) (and x.take(i)) without axis= index the flattened array, as NumPy; they
    took rows of a 2-d array (a wrong value, or an IndexError for np.take(x, np.argmax(x)))."""
    x = np.array([[0.5, -1.0, 2.0, 0.25], [3.0, 1.5, -0.5, 4.5], [0.0, 2.5, 1.0, -3.0]])
    cases = [lambda x: np.take(x, 1), lambda x: np.take(x, np.array([[1, 5], [-1, 0]])),
             lambda x: np.take(x, np.argmax(x)), lambda x: x.take(7), lambda x: x.take([2, 3], axis=1),
             lambda x: np.take(x, 1, axis=1)]
    for fn in cases:
        got = sg.differentiate(fn, target=target)(x)
        assert np.shape(got) == np.shape(fn(x))
        np.testing.assert_array_equal(got, fn(x))
