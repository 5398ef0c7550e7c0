"""Signed zeros in the user's own computation: simplify's identities that hold only up to the
sign of a zero result (x + 0.0 -> x, -x + -y -> -(x + y), -x - y -> -(x + y), sum(-x) -> -sum(x))
apply to derivative nodes only, so a forward value keeps NumPy's sign of zero."""
import numpy as np
import pytest

import symgrad as sg

TARGETS = ("cpu", "python")

XS = np.array([-0.0, 0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 5e-324, -2.5])
YS = np.array([0.0, -0.0, -1.0, 1.0, 1.0, 2.0, 0.0, -5e-324, 2.5])

CASES = {
    "x + 0.0": lambda x, y: x + 0.0,
    "0.0 + x": lambda x, y: 0.0 + x,
    "x + -0.0": lambda x, y: x + -0.0,
    "x - 0.0": lambda x, y: x - 0.0,
    "0.0 - x": lambda x, y: 0.0 - x,
    "-x + -y": lambda x, y: -x + -y,
    "-x - y": lambda x, y: -x - y,
    "-x + y": lambda x, y: -x + y,
    "x + -y": lambda x, y: x + -y,
    "x + x": lambda x, y: x + x,
    "sum(-x) rows": lambda x, y: np.sum(-np.stack([x, -x]), axis=0),
    "sum(-(x*0))": lambda x, y: np.sum(-(x * 0.0)) + 0 * np.sum(y),
}


def _same_bits(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    numbers = ~np.isnan(want)       # a NaN's sign bit is not NumPy's contract either
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_keeps_numpys_signed_zeros(name, target):
    fn = CASES[name]
    with np.errstate(all="ignore"):
        want = fn(XS.copy(), YS.copy())
        got = sg.differentiate(fn, target=target)(XS.copy(), YS.copy())
    _same_bits(got, want)


@pytest.mark.parametrize("target", TARGETS)
def test_scalar_minus_zero_plus_zero_is_plus_zero(target):
    f = sg.differentiate(lambda x: x + 0.0, target=target)
    assert not np.signbit(f(-0.0))
    assert f.grad(-0.0) == 1.0


def test_derivatives_still_drop_zero_terms():
    # derivative nodes keep the zero-sign rules: the gradient's source adds no zero
    def f(x, y):
        return np.sum(x * y + sg.stop_gradient(x) * 2.0 + -x + -y)
    g = sg.differentiate(f, target="python").grad
    np.testing.assert_allclose(g(XS[2:4].copy(), YS[2:4].copy()), YS[2:4] - 1.0)
    body = g.source
    assert "+ 0" not in body and "0.0 +" not in body, body


def test_forward_signed_zeros_in_the_cuda_emulation():
    from symgrad.codegen import ptx_emulate
    fn = CASES["-x + -y"]
    graph = sg.differentiate(fn)._compiled([XS, YS]).graph
    got = ptx_emulate.run(graph, [XS, YS])
    with np.errstate(all="ignore"):
        _same_bits(got, fn(XS, YS))


# ----------------------------------------------------------------------------------------------
# Lowerings and builders that lost a zero's sign or a float32 dtype

SPECIAL = np.array([-0.0, 0.0, -1e-310, 1e-310, -2.0, 3.0, np.inf, -np.inf, np.nan])


def sign_of(x):
    return np.sign(x)


def expm1_of(x):
    return np.expm1(x)


def cumsum_of(x):
    return np.cumsum(x)


def add_accumulate_of(x):
    return np.add.accumulate(x)


def logaddexp_weak(x):
    return np.logaddexp(x, 1.0)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [sign_of, expm1_of], ids=lambda f: f.__name__)
def test_elementwise_signed_zeros(fn, target, dtype):
    # np.sign(-0.0) is +0.0 (NaN stays NaN); np.expm1(-0.0) is -0.0
    x = SPECIAL.astype(dtype)
    with np.errstate(all="ignore"):
        got = sg.differentiate(fn, target=target)(x.copy())
        want = fn(x.copy())
    assert got.dtype == want.dtype
    _same_bits(got, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [cumsum_of, add_accumulate_of], ids=lambda f: f.__name__)
def test_running_sums_keep_a_leading_negative_zero(fn, target):
    # the scan's padding is the additive identity -0.0: +0.0 turned a leading -0 into +0
    for x in (np.array([-0.0, -0.0, -0.0]), np.array([-0.0]), np.array([-0.0, 1.0, -1.0, -0.0])):
        _same_bits(sg.differentiate(fn, target=target)(x.copy()), fn(x.copy()))
    np.testing.assert_array_equal(sg.differentiate(fn, target=target)(np.arange(5)),
                                  fn(np.arange(5)))   # integers: the identity is 0


def test_the_python_source_spells_a_negative_zero_fill():
    src = sg.differentiate(cumsum_of, target="python")
    src(np.array([-0.0, 2.0]))
    assert "-0.0" in src.source and "zeros" not in src.source, src.source


@pytest.mark.parametrize("target", TARGETS)
def test_logaddexp_with_a_python_number_keeps_float32(target):
    x = np.array([-3.0, 0.0, 1.0, 40.0], dtype=np.float32)
    f = sg.differentiate(logaddexp_weak, target=target)
    got, want = f(x), logaddexp_weak(x)
    assert got.dtype == np.float32 == want.dtype
    np.testing.assert_allclose(got, want, rtol=2e-7)
    g = sg.differentiate(sum_of_logaddexp, target=target).grad(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 1 / (1 + np.exp(1.0 - x.astype(np.float64))), rtol=1e-6)


def sum_of_logaddexp(x):
    return np.sum(np.logaddexp(x, 1.0))


def test_sign_in_the_cuda_emulation():
    from symgrad.codegen import ptx_emulate
    graph = sg.differentiate(sign_of)._compiled([SPECIAL]).graph
    _same_bits(ptx_emulate.run(graph, [SPECIAL]), np.sign(SPECIAL))


@pytest.mark.skipif(__import__("shutil").which("gcc") is None, reason="gcc is not installed")
def test_sign_in_exported_c(tmp_path):
    from test_export import _call_c
    got = _call_c(sg.differentiate(sign_of, target="python"), tmp_path, SPECIAL)
    _same_bits(got[0], np.sign(SPECIAL))
