"""End to end on random *source* programs: Python text -> front end -> derivative -> both back
ends, checked against plain NumPy execution of the same text and against finite differences."""
import importlib.util
import itertools
import sys

import numpy as np
from hypothesis import given, settings, strategies as st

import symgrad as sg

UNARY = ["np.sin({0})", "np.cos({0})", "np.tanh({0})", "np.exp(np.tanh({0}))",
         "np.log1p({0} * {0})", "np.sqrt(1.0 + {0} * {0})", "-{0}", "abs({0}) + 0.5",
         "np.arctan({0})", "({0}) ** 2"]
BINARY = ["({0} + {1})", "({0} - {1})", "({0} * {1})", "({0} / (1.0 + {1} * {1}))",
          "np.maximum({0}, {1})", "np.where({0} > {1}, {0} * {1}, {0} - {1})",
          "np.minimum({0}, 0.5 * {1})"]
REDUCE = ["np.sum({0})", "np.max({0})", "np.mean({0})", "np.sum({0}[1:] * {0}[:-1])"]

_counter = itertools.count()


@st.composite
def program_text(draw):
    """A function of x (an array of 4) and y (a scalar) built from statements."""
    names, arrays = ["x", "y"], {"x"}
    lines = []
    for k in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce"]))
        pick = lambda: draw(st.sampled_from(names))   # noqa: E731
        if kind == "unary":
            operands = [pick()]
            expr = draw(st.sampled_from(UNARY)).format(*operands)
        elif kind == "binary":
            operands = [pick(), pick()]
            expr = draw(st.sampled_from(BINARY)).format(*operands)
        else:
            operands = []
            expr = draw(st.sampled_from(REDUCE)).format(draw(st.sampled_from(sorted(arrays))))
        name = f"{'s' if kind == 'reduce' else 'v'}{k}"
        lines.append(f"    {name} = {expr}")
        names.append(name)
        if any(o in arrays for o in operands):
            arrays.add(name)
    lines.append(f"    return np.sum({names[-1]}) + 0.5 * np.sum({draw(st.sampled_from(names))})")
    return "import numpy as np\n\n\ndef program(x, y):\n" + "\n".join(lines) + "\n"


def _load(text, tmp_path):
    path = tmp_path / f"random_program_{next(_counter)}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module.program


@settings(max_examples=40, deadline=None)
@given(text=program_text(), seed=st.integers(0, 2 ** 16))
def test_random_programs_agree_everywhere(tmp_path_factory, text, seed):
    fn = _load(text, tmp_path_factory.mktemp("programs"))
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.5, 1.5, 4) + np.array([0.0123, -0.0234, 0.0345, -0.0456])   # no ties
    y = float(rng.uniform(-1.5, 1.5)) + 0.00567
    expected = fn(x.copy(), y)
    ref = sg.differentiate(fn, wrt=(0, 1), target="python")
    cpu = sg.differentiate(fn, wrt=(0, 1), target="cpu")
    np.testing.assert_allclose(ref(x, y), expected, rtol=1e-13, atol=1e-13, err_msg=text)
    np.testing.assert_allclose(cpu(x, y), expected, rtol=1e-9, atol=1e-12, err_msg=text)
    (gx, gy), (cx, cy) = ref.grad(x, y), cpu.grad(x, y)
    np.testing.assert_allclose(cx, gx, rtol=1e-9, atol=1e-12, err_msg=text)
    np.testing.assert_allclose(cy, gy, rtol=1e-9, atol=1e-12, err_msg=text)
    h = 1e-6
    for k in range(4):   # central differences where the program is smooth around x
        e = np.zeros(4)
        e[k] = h
        d1 = (fn(x + e, y) - fn(x - e, y)) / (2 * h)
        d2 = (fn(x + 100 * e, y) - fn(x - 100 * e, y)) / (200 * h)
        if abs(d1 - d2) <= 1e-3 * max(1.0, abs(d1)):
            assert abs(gx[k] - d1) <= 1e-5 * max(1.0, abs(d1)), text
