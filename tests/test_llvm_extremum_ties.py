"""max/min of a computed value on target="cpu": the tie mask of the gradient compares the very
bits that were reduced (codegen.fusion.computed_once), whatever vector width LLVM gives
each loop and whatever SIMD math variant it calls there."""
import zlib

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import ptx_emulate
from symgrad.codegen.schedule import Schedule


def max_tanh(x):
    return np.max(np.tanh(x))


def min_sin(x):
    return np.min(np.sin(3.0 * x))


def max_exp_rows(x):
    return np.sum(np.max(np.exp(x), axis=1))


def min_arctan_cols(x):
    return np.sum(np.min(np.arctan(x * x), axis=0))


def max_log_cosh(x):
    return np.max(np.log(np.cosh(x))) + np.max(np.sinh(x))


def softmax_of_tanh(x):
    t = np.tanh(x)
    e = np.exp(t - np.max(t))
    return np.sum(e / np.sum(e) * x)


def maximum_of_two(x):
    return np.sum(np.maximum(np.tanh(x), np.sin(x)) * np.cos(x))


CASES = [(max_tanh, (4,)), (max_tanh, (13,)), (min_sin, (7,)), (min_sin, (37,)),
         (max_exp_rows, (3, 11)), (min_arctan_cols, (9, 5)), (max_log_cosh, (19,)),
         (softmax_of_tanh, (10,)), (maximum_of_two, (23,))]


def test_issue_example():
    x = np.array([-1.05, -1.86, 1.08, 1.8])
    want = np.zeros(4)
    want[3] = 1.0 - np.tanh(1.8) ** 2
    for target in ("cpu", "python"):
        np.testing.assert_allclose(sg.grad(max_tanh, target=target)(x), want, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("fn,shape", CASES, ids=[f"{f.__name__}{s}" for f, s in CASES])
def test_random_inputs_match_python(fn, shape, dtype):
    """A few hundred random inputs per case (the bug hit 9-60% of them)."""
    rng = np.random.default_rng(zlib.crc32(f"{fn.__name__}{shape}{dtype}".encode()))
    cpu, ref = sg.grad(fn, target="cpu"), sg.grad(fn, target="python")
    tol = 2e-5 if dtype == "float32" else 1e-11
    for _ in range(300):
        x = rng.uniform(-2.0, 2.0, shape).astype(dtype)
        got, want = cpu(x), ref(x)
        assert np.all(np.isfinite(got)), (fn.__name__, x)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{fn.__name__} at {x!r}")


def test_reduced_value_is_stored_once_not_recomputed():
    """The scheduler's side of it: tanh(x) feeds max and the mask, so it is computed in one
    loop and every other loop loads it (no stage recomputes it)."""
    g = sg.grad(max_tanh)
    x = np.zeros(4)
    sched = Schedule(g._inspect_entry(x).graph)
    homes = [st.index for st in sched.stages for n in st.ssa if n.op == "tanh"]
    assert len(homes) == 1, homes


@pytest.mark.parametrize("fn,shape", CASES, ids=[f"{f.__name__}{s}" for f, s in CASES])
def test_cuda_plan_matches_python(fn, shape):
    """The CUDA back end recomputes elementwise values in registers wherever they are read;
    that is safe there because every recomputation is the same scalar libdevice code. Its
    plan, run by the CPU emulation, agrees with the reference on random inputs too."""
    rng = np.random.default_rng(zlib.crc32(fn.__name__.encode()))
    ref = sg.grad(fn, target="python")
    graph = ref._inspect_entry(np.zeros(shape)).graph
    compiled = ptx_emulate.compile_plan(graph)
    for _ in range(20):
        x = rng.uniform(-2.0, 2.0, shape)
        got = ptx_emulate.run(graph, [x], compiled)
        np.testing.assert_allclose(got, ref(x), rtol=1e-11, atol=1e-11)


TRANSCENDENTAL = ["np.tanh({0})", "np.sin(2.0 * {0})", "np.cos({0})", "np.exp({0})",
                  "np.log1p({0} * {0})", "np.arctan(3.0 * {0})", "np.sinh({0})",
                  "np.expm1({0})", "np.sqrt(1.0 + {0} * {0})", "np.tanh(np.exp({0}))"]
EXTREMA = ["np.max", "np.min", "np.amax", "np.amin"]


def _random_extremum_program(rng, k, tmp_path):
    """max/min (over all axes or one) of a transcendental of x, used again after reducing
    (so the reduced value has more than one consumer), written to a file (symgrad reads the
    source)."""
    inner = TRANSCENDENTAL[rng.integers(len(TRANSCENDENTAL))].format("x")
    outer = TRANSCENDENTAL[rng.integers(len(TRANSCENDENTAL))].format("t")
    red = EXTREMA[rng.integers(len(EXTREMA))]
    axis = ["", ", axis=0", ", axis=1", ", axis=-1"][rng.integers(4)]
    text = (f"import numpy as np\n\n\ndef program(x):\n    t = {inner}\n"
            f"    m = {red}(t{axis})\n    return np.sum(m * m) + np.sum({outer} * 0.25)\n")
    path = tmp_path / f"extremum_{k}.py"
    path.write_text(text)
    namespace = {}
    exec(compile(text, str(path), "exec"), namespace)
    return namespace["program"], text


def test_random_extremum_programs(tmp_path):
    """Random programs x random shapes (sizes around every vector width) x random inputs:
    target="cpu" equals the reference, with every mask hitting (finite gradients)."""
    rng = np.random.default_rng(8)
    checked = 0
    for k in range(24):
        fn, text = _random_extremum_program(rng, k, tmp_path)
        shape = (int(rng.integers(1, 7)), int(rng.integers(1, 40)))
        cpu, ref = sg.grad(fn, target="cpu"), sg.grad(fn, target="python")
        for _ in range(80):
            x = rng.uniform(-1.5, 1.5, shape)
            got, want = cpu(x), ref(x)
            assert np.all(np.isfinite(got)), text
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10, err_msg=f"{text}{x!r}")
            checked += 1
    assert checked == 24 * 80
