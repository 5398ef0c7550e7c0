"""The Python target spells products with a 1-d operand as NumPy does (``W @ x``, ``u @ B``,
``u @ v``, ``np.outer(u, v)``, ``A @ u + B @ v``), not as the 2-d matmuls between reshapes
the IR holds, and the source it shows still computes what the CPU target does."""
import numpy as np
import pytest

import symgrad as sg

RNG = np.random.default_rng(7)
A, B = RNG.normal(size=(3, 4)), RNG.normal(size=(4, 5))
U, V, W3 = RNG.normal(size=4), RNG.normal(size=4), RNG.normal(size=3)
AB = RNG.normal(size=(2, 3, 4))

# name -> (function, arguments, text its value's or gradient's source must contain)
CASES = {
    "matvec": (lambda a, u: np.sum(np.sin(a @ u)), (A, U), "a @ u"),
    "vecmat": (lambda u, b: np.sum(np.sin(u @ b)), (U, B), "u @ b"),
    "dot": (lambda u, v: np.sin(u @ v), (U, V), "u @ v"),
    "np_dot": (lambda u, v: np.sin(np.dot(u, v)), (U, V), "u @ v"),
    "batched_matvec": (lambda ab, u: np.sum(np.sin(ab @ u)), (AB, U), "ab @ u"),
    "sum_of_products": (lambda a, u, v: np.sum(np.tanh(a @ u + a @ v - a @ (u * v))), (A, U, V),
                        "a @ u + a @ v - a @ t1"),
}


def _source_and_values(fn, args, wrt):
    grad_py, grad_cpu = sg.grad(fn, wrt=wrt, target="python"), sg.grad(fn, wrt=wrt)
    return grad_py.source_for(*args), grad_py(*args), grad_cpu(*args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_products_are_spelled_as_numpy_and_agree(name):
    fn, args, text = CASES[name]
    value = sg.differentiate(fn, target="python")
    np.testing.assert_allclose(value(*args), fn(*args), rtol=1e-13, atol=1e-13)
    shown = [value.source_for(*args)]
    for wrt in range(len(args)):
        source, ours, compiled = _source_and_values(fn, args, wrt)
        shown.append(source)
        np.testing.assert_allclose(ours, compiled, rtol=1e-12, atol=1e-12)
    assert any(text in s for s in shown), "\n".join(shown)
    assert ".reshape(4, 1)).reshape" not in "".join(shown)


def test_gradient_of_a_matvec_is_an_outer_product():
    source, ours, compiled = _source_and_values(CASES["matvec"][0], (A, U), 0)
    assert "np.outer(np.cos(a @ u), u)" in source, source
    np.testing.assert_allclose(ours, np.outer(np.cos(A @ U), U), rtol=1e-13)


def test_rnn_gradient_reads_like_numpy():
    """The backward of a tanh RNN: ``W.T @ g`` and ``np.outer`` inside the reversed loop, and
    the temporaries the reshapes needed are gone."""
    def rnn(W, Ux, xs):
        h = np.zeros(3)
        for x in xs:
            h = np.tanh(W @ h + Ux @ x)
        return np.sum(h * h)

    args = (RNG.normal(size=(3, 3)) * 0.5, RNG.normal(size=(3, 2)), RNG.normal(size=(20, 2)))
    f = sg.grad(rnn, target="python")
    source = f.source_for(*args)
    assert "np.tanh(W @ h + Ux @ xs[i])" in source, source
    assert "np.outer(" in source and ".reshape(" not in source, source
    np.testing.assert_allclose(f(*args), sg.grad(rnn)(*args), rtol=1e-12)


def test_a_product_used_twice_keeps_one_name():
    """``W @ x`` read by two consumers is computed once (named), not spelled twice."""
    def f(W, x):
        y = W @ x
        return np.sum(np.sin(y) + y * y)

    source = sg.differentiate(f, target="python").source_for(A, U)
    code = [line for line in source.splitlines() if not line.strip().startswith("#")]
    assert sum(line.count("W @ x") for line in code) == 1, source


def test_lambdas_in_a_dict_literal_are_read_from_their_file():
    """A lambda written as a dict entry (a table of test functions) has no parseable lines of
    its own: its file gives its syntax tree."""
    table = {
        "square": lambda x: np.sum(x * x),
        "cube": lambda x: np.sum(x * x * x),
    }
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(sg.grad(table["square"])(x), 2 * x)
    np.testing.assert_allclose(sg.grad(table["cube"])(x), 3 * x * x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_integral_exponents_are_spelled_as_written(dtype):
    """``x ** 2`` printed as ``x ** 2`` (it was ``x ** 2.0``); a fractional exponent stays a
    float. NumPy computes both spellings in the base's dtype: the values are the same bits."""
    def f(x):
        return np.sum(x ** 2 + x ** 3 - x ** -1 + x ** 0.5)

    x = np.linspace(0.5, 2.0, 7).astype(dtype)
    g = sg.differentiate(f, target="python")
    value = g(x)
    source = g.source
    assert "x ** 2 " in source and "x ** 3" in source and "x ** -1" in source
    assert "** 2.0" not in source and "x ** 0.5" in source
    assert value == f(x) and np.asarray(value).dtype == dtype


def test_python_number_divided_by_a_nonzero_constant_is_spelled_with_a_slash():
    """Between Python numbers only a zero divisor makes Python's ``/`` differ from NumPy's (it
    raises): ``scale / 2.0`` is spelled so, ``scale / 0.0`` stays ``np.divide`` (inf)."""
    def halved(scale, x):
        return scale / 2.0 * np.sum(x)

    def by_zero(scale, x):
        return scale / 0.0 + np.sum(x)

    x = np.ones(3)
    f, g = sg.differentiate(halved, target="python"), sg.differentiate(by_zero, target="python")
    assert f(3.0, x) == 4.5 and "scale / 2.0" in f.source
    with np.errstate(divide="ignore"):
        assert g(3.0, x) == np.inf
    assert "np.divide(scale, 0.0)" in g.source
