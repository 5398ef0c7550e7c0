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
