"""np.logaddexp's derivative at a tie (a == b) is 1/2 to each argument (it was 1 to one side
and 0 to the other, so a logistic loss at w = 0 had a zero gradient)."""
import numpy as np

import symgrad as sg


def softplus_sum(m):
    return np.sum(np.logaddexp(0.0, -m))


def both(a, b):
    return np.sum(np.logaddexp(a, b))


def test_tie_derivative_is_one_half():
    f = sg.differentiate(softplus_sum)
    np.testing.assert_allclose(f.grad(np.zeros(3)), -0.5, rtol=1e-15)
    ga, gb = sg.grad(both, wrt=(0, 1))(np.array([1.0, -2.0, 3.0]), np.array([1.0, -2.0, 0.0]))
    np.testing.assert_allclose(ga, [0.5, 0.5, 1 / (1 + np.exp(-3.0))], rtol=1e-14)
    np.testing.assert_allclose(gb, [0.5, 0.5, 1 / (1 + np.exp(3.0))], rtol=1e-14)


def test_values_unchanged():
    a = np.array([0.0, 1.0, -700.0, 30.0, 2.5])
    b = np.array([0.0, 1.0, -701.0, -30.0, 2.5])
    np.testing.assert_allclose(sg.differentiate(both)(a, b), np.sum(np.logaddexp(a, b)), rtol=1e-15)
    x = np.linspace(-3, 3, 7)
    assert sg.check_grad(sg.differentiate(softplus_sum), x) < 1e-6
