"""A loop reading a column of a matrix (a run-time stride, as every vmapped slice ``p[:, 6]``
is) gives the reference values and gradient at every row count. (LLVM versions such a loop on
``stride == 1`` and runs the scalar loop otherwise; turning that versioning off process-wide
vectorised it but slowed the unit-stride loops of other kernels: codegen.jit keeps it.)"""
import numpy as np

import symgrad as sg


def columns(p):
    return np.sin(p[:, 6]) * np.cos(p[:, 2]) + p[:, 0] * p[:, 14]


def test_strided_column_loop_values_and_gradient_match_python():
    for rows in (1, 7, 101):
        p = np.linspace(-2.0, 2.0, 15 * rows).reshape(rows, 15)
        cpu, py = sg.differentiate(columns, target="cpu"), sg.differentiate(columns, target="python")
        np.testing.assert_allclose(cpu(p), py(p), rtol=1e-13)
        f = sg.differentiate(lambda q: np.sum(columns(q)))
        g = sg.differentiate(lambda q: np.sum(columns(q)), target="python")
        np.testing.assert_allclose(f.grad(p), g.grad(p), rtol=1e-13, atol=1e-15)
