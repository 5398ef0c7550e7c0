"""Constant arrays in the generated Python source (symgrad.emit_python, symgrad.export).

A closure array or a literal with distinct values used to be bound in a hidden namespace
under a name like ``c`` that the source never explained, so ``.source`` did not run as shown.
Now a small constant (up to symgrad.spelling.ARRAY_LITERAL_LIMIT elements) is spelled as an
exact ``np.array([...], dtype=...)`` literal (the repr of a float round-trips; -0.0, inf and
nan are kept), and a larger one keeps a binding named after the variable it came from, with a
comment saying where that is; ``sg.export`` writes it out, so the module stays standalone.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import symgrad as sg

SPECIAL = np.array([1.5, -0.0, np.inf, -np.inf, np.nan, 0.1, 1e-30, 3.4e38], dtype=np.float32)
BIG = np.linspace(-1.0, 1.0, 120).reshape(12, 10)


def _closure_over(table):
    def scaled(x):
        return x * table + 0.5
    return scaled


def literal_table(x):
    weights = np.array([0.1, -0.25, 1.0 / 3.0])
    return np.sum(np.sin(x * weights)) + np.sum(x * np.array([[1, 2, 3], [4, 5, 6]]))


def big_global(x):
    return np.sum(np.tanh(BIG @ x))


def _run_source(source, name, *args, **bindings):
    """Run generated source exactly as shown, with NumPy and only the names given."""
    namespace = {"np": np, **bindings}
    exec(source, namespace)
    return namespace[name](*args)


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)                         # nan == nan here
    np.testing.assert_array_equal(np.signbit(a), np.signbit(b))  # -0.0 is not 0.0


def test_small_closure_array_is_an_exact_literal():
    f = sg.differentiate(_closure_over(SPECIAL), target="python")
    x = np.linspace(-2.0, 2.0, SPECIAL.size).astype(np.float32)
    source = f.source_for(x)
    assert "np.array([1.5, -0.0, np.inf, -np.inf, np.nan," in source and "dtype=np.float32" in source
    with np.errstate(invalid="ignore", over="ignore"):
        _same_bits(_run_source(source, "scaled", x), f(x))
        _same_bits(f(x), _closure_over(SPECIAL)(x))


@pytest.mark.parametrize("kind", ["value", "grad"])
def test_literals_with_distinct_values_run_as_shown(kind):
    f = sg.differentiate(literal_table, target="python")
    fn = f if kind == "value" else f.grad
    x = np.array([0.3, -1.2, 2.0])
    source = fn.source_for(x)
    expected = fn(x)
    name = "literal_table" if kind == "value" else "grad_literal_table"
    np.testing.assert_array_equal(_run_source(source, name, x), expected)


def test_large_closure_array_is_named_and_explained():
    table = np.arange(100.0).reshape(10, 10) / 7.0
    f = sg.differentiate(_closure_over(table), target="python")
    x = np.ones((10, 10))
    source = f.source_for(x)
    assert "# table: closure variable 'table' when traced, a float64 array of shape (10, 10)" in source
    assert "x * table" in source
    np.testing.assert_array_equal(_run_source(source, "scaled", x, table=table), f(x))
    with pytest.raises(NameError):   # it is bound beside the source, not printed
        _run_source(source, "scaled", x)


def test_large_global_array_is_named_and_explained():
    f = sg.differentiate(big_global, target="python")
    x = np.linspace(0.0, 1.0, 10)
    source = f.grad.source_for(x)
    assert "# BIG: global 'BIG' when traced" in source
    np.testing.assert_allclose(_run_source(source, "grad_big_global", x, BIG=BIG), f.grad(x),
                               rtol=1e-15)


@pytest.mark.parametrize("table", [SPECIAL, np.tile(SPECIAL, 20), BIG.astype(np.float32)],
                         ids=["small", "large-special", "large"])
def test_exported_module_is_standalone_and_exact(tmp_path, table):
    f = sg.differentiate(_closure_over(table), target="python")
    x = np.linspace(-2.0, 2.0, table.size).astype(np.float32).reshape(table.shape)
    path = sg.export(f, tmp_path / "scaled.py", x)
    spec = importlib.util.spec_from_file_location("scaled_export", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with np.errstate(invalid="ignore", over="ignore"):
        _same_bits(module.scaled(x), f(x))


EYES = {"eye": np.eye(30), "half_eye": 0.5 * np.eye(3), "eye32": np.eye(3, dtype=np.float32),
        "minus_eye": -np.eye(3)}


@pytest.mark.parametrize("name", sorted(EYES))
def test_a_scaled_identity_is_spelled_np_eye(name):
    """An identity matrix times a positive number reads as ``np.eye(n)`` / ``c * np.eye(n)``
    at any size (no hidden binding for a 30 x 30 one); a negative scale would give -0.0 off the
    diagonal, so it keeps the exact literal. The source runs as shown, bit for bit."""
    eye = EYES[name]

    def f(x):
        return np.sum(np.sin(x @ eye))

    x = np.linspace(0.2, 0.9, eye.shape[0]).astype(eye.dtype)
    source = sg.differentiate(f, target="python").source_for(x)
    assert ("np.eye(" in source) == (name != "minus_eye"), source
    assert "too large to print" not in source, source
    np.testing.assert_array_equal(_run_source(source, "f", x), sg.differentiate(f, target="python")(x))
