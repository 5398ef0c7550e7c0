"""``f.grad.stopped()``: each stop_gradient site at the user's line, and what it removed."""
import pathlib
import sys

import numpy as np

import symgrad as sg
from symgrad.emit_python import compile_python

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import stable_softmax  # noqa: E402

X = np.array([1.0, 2.0, 0.5, -1.0])
T = np.array([0.0, 1.0, 0.0, 0.0])


def _recorded(g, *args):
    graph = g._inspect_entry(*args).graph
    return graph, list(graph.stopped.items())


def test_stable_softmax_site_and_removed_terms():
    g = sg.grad(stable_softmax.stop_gradient_max)
    report = g.stopped(X, T)
    line = "z = x - sg.stop_gradient(sg.reduce_max(x))"
    lineno = next(i for i, text in enumerate((ROOT / "examples" / "stable_softmax.py")
                                             .read_text().splitlines(), 1) if text.strip() == line)
    assert f"stable_softmax.py:{lineno}: {line}" in report
    assert "derivative cut through: np.max(x)" in report
    assert "-np.sum(b_x)" in report            # the cotangent reaching the max, spelled as Python
    # shift invariance: the removed cotangent is zero, and sympy says so
    assert "simplifies this cotangent to 0" in report
    graph, [(node, cotangent)] = _recorded(g, X, T)
    assert node.op == "stop_gradient" and node.inputs[0].op == "max"
    value = compile_python(graph.derive("cot", (cotangent,), 0))[0](X, T)
    assert abs(value) < 1e-15


def test_a_nonzero_removed_term():
    def f(x, y):
        return x * sg.stop_gradient(np.sin(x) * y)
    g = sg.grad(f, target="python")
    report = g.stopped(0.3, 2.0)
    assert "return x * sg.stop_gradient(np.sin(x) * y)" in report
    assert "derivative cut through: np.sin(x) * y" in report
    assert "derivative of the cut expression: x" in report   # d(sum outputs)/d(cut) = x
    assert "simplifies this cotangent to 0" not in report
    # the gradient with the cut plus the removed term (cotangent * d(cut)/dx) is the full one
    full = sg.grad(lambda x, y: x * (np.sin(x) * y), target="python")
    assert abs(g(0.3, 2.0) + 0.3 * np.cos(0.3) * 2.0 - full(0.3, 2.0)) < 1e-15


def test_sites_that_nothing_reached_and_functions_without_any():
    g = sg.grad(lambda x, y: x * x + sg.stop_gradient(y), target="python")
    assert "removed: nothing" in g.stopped(1.0, 2.0)
    plain = sg.grad(lambda x: np.sin(x), target="python")
    assert "no stop_gradient site" in plain.stopped(1.0)


def test_stopped_uses_the_last_call_and_works_for_value_and_grad():
    vg = sg.value_and_grad(stable_softmax.stop_gradient_max, target="python")
    vg(X, T)
    assert "np.max(x)" in vg.stopped()


def test_a_second_derivative_reports_its_own_pass():
    def f(x):
        return x * x * sg.stop_gradient(x)
    g = sg.grad(f, target="python")
    first = g.stopped(0.5)
    second = g.grad.stopped(0.5)
    assert "derivative of the cut expression: x * x" in first     # d(x*x*c)/dc
    # grad = 2 * x * c: the second pass reaches the same cut with cotangent 2 * x
    assert "derivative of the cut expression: 2.0 * x" in second, second
