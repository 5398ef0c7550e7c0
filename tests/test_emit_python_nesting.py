"""The Python back end names a value when an expression would nest too deeply: Python's parser
refuses about 200 nested parentheses ("too many nested parentheses"), so a long chain of
single-use calls must not become one expression."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.emit_python import MAX_NESTING


def nested_sines(x):
    y = [x]
    for i in range(400):
        y.append(np.sin(y[-1]))
    return np.sum(y[-1])


def expected(x):
    for _ in range(400):
        x = np.sin(x)
    return np.sum(x)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_a_400_deep_chain_of_calls_runs(target):
    x = np.linspace(-0.5, 1.0, 5)
    f = sg.differentiate(nested_sines, target=target)
    np.testing.assert_allclose(f(x), expected(x), rtol=1e-12)
    h = 1e-6
    fd = np.array([(expected(x + h * e) - expected(x - h * e)) / (2 * h) for e in np.eye(5)])
    np.testing.assert_allclose(f.grad(x), fd, rtol=1e-6, atol=1e-9)


def test_no_generated_line_nests_deeper_than_the_limit():
    f = sg.differentiate(nested_sines, target="python")
    for line in f.source_for(np.ones(5)).splitlines():
        assert line.count("np.sin(") <= MAX_NESTING + 1   # the named call itself
