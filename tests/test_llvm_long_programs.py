"""Long traces compile: every walk of the back ends is iterative (no RecursionError however
long a chain of ops), and loops are bounded in size (codegen.schedule.STAGE_OPS), so compile
time grows linearly with the program instead of with the square of one loop's body."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import ptx, ptx_emulate
from symgrad.codegen.schedule import CLONE_BUDGET, STAGE_OPS, Schedule
from symgrad.regions import straight_line

STEPS = 1500          # two ops a step: a 3000-op chain, then a reduction that needs its end

SOURCE = f'''
import numpy as np


def chain(x):
    y = x
    for i in range({STEPS}):
        y = y * 0.75 + x
    return np.sum(y * np.sum(y))
'''


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    path = tmp_path_factory.mktemp("long") / "long_chain.py"
    path.write_text(SOURCE)
    namespace = {}
    exec(compile(SOURCE, str(path), "exec"), namespace)   # symgrad reads the file's source
    return namespace["chain"]


def closed_form(x):
    """y_N = 0.75^N x + x (1 - 0.75^N) / 0.25; the output is (sum y_N)^2."""
    a = 0.75 ** STEPS
    slope = a + (1 - a) / 0.25
    s = np.sum(slope * x)
    return s * s, 2 * s * slope * np.ones_like(x)


def test_long_chain_on_cpu(chain):
    x = np.linspace(0.0, 1.0, 7)
    want_value, want_grad = closed_form(x)
    f = sg.differentiate(chain, target="cpu")
    assert f(x) == pytest.approx(chain(x), rel=1e-12) == pytest.approx(want_value, rel=1e-12)
    np.testing.assert_allclose(f.grad(x), want_grad, rtol=1e-12)


def test_long_chain_loops_are_bounded(chain):
    x = np.linspace(0.0, 1.0, 7)
    for fn in (sg.differentiate(chain), sg.grad(chain)):
        # the for loop is one loop node now: its unrolled form is the long straight chain
        sched = Schedule(straight_line(fn._inspect_entry(x).graph))
        biggest = max(len(st.ssa) for st in sched.stages)
        assert biggest <= STAGE_OPS + CLONE_BUDGET, biggest   # (+ what one op may recompute)
        assert len(sched.stages) >= 2 * STEPS // STAGE_OPS


def test_long_chain_cuda_plan(chain):
    """The PTX back end fuses the whole chain into one kernel body: built without recursion,
    and right when run by the CPU emulation."""
    x = np.linspace(0.0, 1.0, 7)
    graph = sg.grad(chain, target="python")._inspect_entry(x).graph
    plan = ptx.plan(graph)
    assert "ptx_kernel" in ptx.build_module(plan)
    np.testing.assert_allclose(ptx_emulate.run(graph, [x]), closed_form(x)[1], rtol=1e-12)
