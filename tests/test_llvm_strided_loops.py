"""A loop reading a column of a matrix (a run-time stride, as every vmapped slice ``p[:, 6]``
is) is vectorised for that stride. LLVM's default versions such a loop on ``stride == 1``
(its ``vector.scevcheck`` block) and runs the scalar loop otherwise; codegen.kernel bakes unit
strides into the IR, so a run-time stride is never 1 and the vector loop never ran (ADBench
BA's sin/cos loop took 5.6x its vectorised time). codegen.jit turns that versioning off."""
import numpy as np

import symgrad as sg


def columns(p):
    return np.sin(p[:, 6]) * np.cos(p[:, 2]) + p[:, 0] * p[:, 14]


def test_strided_column_loop_has_no_unit_stride_version():
    p = np.linspace(-2.0, 2.0, 15 * 101).reshape(101, 15)
    text = sg.differentiate(columns).llvm_ir(p, optimized=True)
    assert "vector.body" in text            # vectorised ...
    assert "vector.scevcheck" not in text   # ... without a stride == 1 guard


def test_strided_column_loop_values_and_gradient_match_python():
    for rows in (1, 7, 101):
        p = np.linspace(-2.0, 2.0, 15 * rows).reshape(rows, 15)
        cpu, py = sg.differentiate(columns, target="cpu"), sg.differentiate(columns, target="python")
        np.testing.assert_allclose(cpu(p), py(p), rtol=1e-13)
        f = sg.differentiate(lambda q: np.sum(columns(q)))
        g = sg.differentiate(lambda q: np.sum(columns(q)), target="python")
        np.testing.assert_allclose(f.grad(p), g.grad(p), rtol=1e-13, atol=1e-15)
