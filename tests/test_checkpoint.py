"""``sg.checkpoint``: values and derivatives equal the un-checkpointed function's (reverse, forward,
second order, vmap) on target="python" and "cpu" and finite differences; the backward pass
recomputes the checkpointed values (a region of its own, never merged with the forward nodes)
so a checkpointed loop stores only the cell's inputs per iteration; PTX assembles and matches
in the emulator; bad use is a clear error."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad.ir import toposort
from symgrad.regions import CHECKPOINT, RECOMPUTE

RNG = np.random.default_rng(11)
TARGETS = ["python", "cpu"]


def plain(fn):
    """The un-checkpointed twin of ``sg.checkpoint``."""
    return fn


# ----------------------------------------------------------------------------------------------
# Cells and programs, each built with ``wrap`` = sg.checkpoint or plain


def tanh_cell(h, x, W, U, b):
    return np.tanh(W @ h + U @ x + b)


def gru_cell(h, x, Wz, Wr, Wh):
    z = 1.0 / (1.0 + np.exp(-(Wz @ h + x)))
    r = 1.0 / (1.0 + np.exp(-(Wr @ h - x)))
    c = np.tanh(Wh @ (r * h) + x)
    return (1.0 - z) * h + z * c


def rnn_of(wrap):
    def rnn(W, U, b, h0, xs):
        h = h0
        for t in range(xs.shape[0]):
            h = wrap(tanh_cell)(h, xs[t], W, U, b)
        return np.sum(h * h)
    return rnn


def gru_of(wrap):
    def gru(Wz, Wr, Wh, xs):
        h = np.zeros(Wz.shape[0])
        for x in xs:
            h = wrap(gru_cell)(h, x, Wz, Wr, Wh)
        return np.sum(np.sin(h))
    return gru


def inner_step(h, W):
    return np.sin(W @ h) * 0.5 + h


def nested_of(wrap):
    def two_steps(h, W):          # a checkpoint whose body holds another
        return np.tanh(wrap(inner_step)(h, W) * 1.5)

    def nested(W, h0):
        h = h0
        for _ in range(7):
            h = wrap(two_steps)(h, W)
        return np.sum(h * h)
    return nested


def stopped_cell(h, W):
    scale = sg.stop_gradient(np.sum(h * h))   # no derivative through the scale
    return np.tanh(W @ h) * (1.0 + 0.1 * scale)


def stopped_of(wrap):
    def stopped(W, h0):
        h = h0
        for _ in range(6):
            h = wrap(stopped_cell)(h, W)
        return np.sum(h)
    return stopped


def lstm_cell(state, x, W):
    h, c = state                   # a pytree in, a pytree out
    gates = W @ np.concatenate([h, x])
    i, f, o, g = np.split(gates, 4)
    c = 1.0 / (1.0 + np.exp(-f)) * c + 1.0 / (1.0 + np.exp(-i)) * np.tanh(g)
    return (1.0 / (1.0 + np.exp(-o)) * np.tanh(c), c)


def lstm_of(wrap):
    def lstm(W, xs):
        h, c = np.zeros(3), np.zeros(3)
        for t in range(xs.shape[0]):
            h, c = wrap(lstm_cell)((h, c), xs[t], W)
        return np.sum(h * c)
    return lstm


def branch_of(wrap):
    def branchy(W, h0):
        h = h0
        for _ in range(6):
            if np.sum(h) > 0.2:        # a branch node whose taken side holds the checkpoint
                h = wrap(inner_step)(h, W)
            else:
                h = h * 1.1 + 0.2
        return np.sum(h * h)
    return branchy


def straight_of(wrap):
    def straight(x, y):            # no loop: a checkpoint at the top level
        u = wrap(lambda a, b: np.exp(np.sin(a) * b) + a * a)(x, y)
        return np.sum(u * np.cos(x))
    return straight


def _rnn_args():
    n, T = 4, 9
    return (RNG.normal(size=(n, n)) * 0.5, RNG.normal(size=(n, n)) * 0.5, RNG.normal(size=n),
            RNG.normal(size=n), RNG.normal(size=(T, n)))


CASES = {
    "tanh_rnn": (rnn_of, _rnn_args, (0, 1, 2, 3, 4)),
    "gru": (gru_of, lambda: tuple(RNG.normal(size=(3, 3)) * 0.6 for _ in range(3)) +
            (RNG.normal(size=(8, 3)),), (0, 1, 2, 3)),
    "nested": (nested_of, lambda: (RNG.normal(size=(3, 3)) * 0.4, RNG.normal(size=3)), (0, 1)),
    "stop_gradient": (stopped_of, lambda: (RNG.normal(size=(3, 3)) * 0.5, RNG.normal(size=3)),
                      (0, 1)),
    "lstm": (lstm_of, lambda: (RNG.normal(size=(12, 5)) * 0.4, RNG.normal(size=(9, 2))), (0, 1)),
    "branch": (branch_of, lambda: (np.eye(3) * 0.5 + 0.1, np.array([0.3, -0.2, 0.01])), (0, 1)),
    "straight_line": (straight_of, lambda: (RNG.normal(size=5), RNG.normal(size=5)), (0, 1)),
}


def _pair(name, target, wrt=None):
    make, make_args, every = CASES[name]
    wrt = every if wrt is None else wrt
    return (sg.differentiate(make(sg.checkpoint), wrt=wrt, target=target),
            sg.differentiate(make(plain), wrt=wrt, target=target), make_args())


def _close(a, b, rtol=1e-12, atol=1e-14):
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_value_and_gradient_equal_the_uncheckpointed(name, target):
    f, g, args = _pair(name, target)
    _close(f(*args), g(*args))
    _close(f.grad(*args), g.grad(*args))


@pytest.mark.parametrize("name", sorted(set(CASES) - {"stop_gradient"}))   # cut on purpose
def test_gradient_matches_finite_differences(name):
    make, make_args, every = CASES[name]
    args = make_args()
    for k in every:
        assert sg.check_grad(make(sg.checkpoint), *args, wrt=k) < 1e-6


@pytest.mark.parametrize("target", TARGETS)
def test_backward_pass_recomputes_in_a_region_of_its_own(target):
    f, _, args = _pair("tanh_rnn", target)
    lowered = f.grad._graph(args)
    roles = [n.attrs[1] for n in _all_nodes(lowered.outputs) if n.op == "remat"]
    # the checkpoint itself is inlined for the back end; its recomputation stays a region
    assert roles == [RECOMPUTE]
    derivable = f.grad.graph_for(args)[0]
    assert sorted(n.attrs[1] for n in _all_nodes(derivable.outputs) if n.op == "remat") == \
        [CHECKPOINT, RECOMPUTE]
    if target == "python":
        assert "recompute (sg.checkpoint)" in f.grad.source_for(*args)
    else:   # the CPU schedule runs it as a region stage of the backward loop's body
        from symgrad.codegen.regions import LoopRegion, RematRegion
        from symgrad.codegen.schedule import Schedule
        loops = [st.region for st in Schedule(lowered).stages if isinstance(st.region, LoopRegion)]
        inner = [[type(st.region) for st in r.body.schedule.stages] for r in loops]
        assert sorted(RematRegion in kinds for kinds in inner) == [False, True]


def _all_nodes(outputs):
    """Every node, in region bodies too."""
    out, pending = [], [list(outputs)]
    while pending:
        for n in toposort(pending.pop()):
            out.append(n)
            pending += [list(a.results) for a in n.attrs if hasattr(a, "results")]
    return out


def _forward_loop_stores(f, args) -> int:
    """How many arrays the forward loop of ``f``'s gradient stacks per iteration (its values
    stored for the backward loop)."""
    loops = [n for n in _all_nodes(f.grad._graph(args).outputs) if n.op == "loop" and not n.attrs[4]]
    assert len(loops) == 1
    body, _, nc = loops[0].attrs[:3]
    return len(body.results) - nc


@pytest.mark.parametrize("name, stored", [("tanh_rnn", 1), ("gru", 1), ("lstm", 2)])
def test_a_checkpointed_loop_stores_only_the_cells_inputs(name, stored):
    f, g, args = _pair(name, "python", wrt=0)
    # only the carried state per iteration (h; h and c for the LSTM), not the cell's gates
    assert _forward_loop_stores(f, args) == stored
    assert _forward_loop_stores(g, args) > stored


@pytest.mark.parametrize("target", TARGETS)
def test_jvp_through_a_checkpoint(target):
    f, g, args = _pair("gru", target, wrt=0)
    t = RNG.normal(size=args[0].shape)
    _close(sg.jvp(f, wrt=0)(*args, t), sg.jvp(g, wrt=0)(*args, t))
    eps = 1e-6
    shifted = lambda s: f(args[0] + s * t, *args[1:])   # noqa: E731
    fd = (shifted(eps) - shifted(-eps)) / (2 * eps)
    np.testing.assert_allclose(sg.jvp(f, wrt=0)(*args, t)[1], fd, rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["tanh_rnn", "nested", "straight_line"])
def test_hvp_and_second_derivative_through_a_checkpoint(name, target):
    f, g, args = _pair(name, target, wrt=0)
    v = RNG.normal(size=np.shape(args[0]))
    _close(sg.hvp(f, wrt=0)(args[0], v, *args[1:]), sg.hvp(g, wrt=0)(args[0], v, *args[1:]),
           rtol=1e-10, atol=1e-12)
    eps = 1e-6
    fd = (f.grad(args[0] + eps * v, *args[1:]) - f.grad(args[0] - eps * v, *args[1:])) / (2 * eps)
    np.testing.assert_allclose(sg.hvp(f, wrt=0)(args[0], v, *args[1:]), fd, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target", TARGETS)
def test_grad_of_grad_of_a_scalar_checkpoint(target):
    def h(x):
        return sg.checkpoint(lambda u: np.sin(u) * u * u)(x) * 2.0
    f = sg.differentiate(h, target=target)
    x = 0.7
    want = 2.0 * (-np.sin(x) * x * x + 4.0 * x * np.cos(x) + 2.0 * np.sin(x))
    assert f.grad.grad(x) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_forward_over_reverse_through_a_checkpoint(target):
    f, g, args = _pair("tanh_rnn", target, wrt=0)
    v = RNG.normal(size=args[0].shape)
    _close(sg.jvp(f.grad, wrt=0)(*args, v), sg.jvp(g.grad, wrt=0)(*args, v), rtol=1e-10,
           atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_vmap_per_example_gradients_through_a_checkpoint(target):
    f, g, args = _pair("tanh_rnn", target, wrt=0)
    batch = RNG.normal(size=(5,) + args[4].shape)
    in_axes = (None, None, None, None, 0)
    per_example = sg.vmap(f.grad, in_axes=in_axes)(*args[:4], batch)
    want = np.stack([g.grad(*args[:4], x) for x in batch])
    np.testing.assert_allclose(per_example, want, rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------------------------
# Ways of writing it


@sg.checkpoint
def decorated_cell(h, W):
    return np.tanh(W @ h) + 0.1 * h


def with_decorator(W, h0):
    h = h0
    for _ in range(6):
        h = decorated_cell(h, W)
    return np.sum(h * h)


def with_nested_def(W, h0):
    @sg.checkpoint
    def step(h):                  # defined while tracing, W closed over (computed outside)
        return np.tanh(W.T @ h) + 0.1 * h
    h = h0
    for _ in range(6):
        h = step(h)
    return np.sum(h * h)


def with_keywords(W, h0):
    h = h0
    for _ in range(6):
        h = sg.checkpoint(decorated_cell.__wrapped__)(W=W, h=h)
    return np.sum(h * h)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [with_decorator, with_nested_def, with_keywords])
def test_decorator_nested_def_and_keywords(fn, target):
    W, h0 = RNG.normal(size=(4, 4)) * 0.5, RNG.normal(size=4)
    f = sg.differentiate(fn, wrt=(0, 1), target=target)
    assert sg.check_grad(fn, W, h0, wrt=0) < 1e-6
    assert sg.check_grad(fn, W, h0, wrt=1) < 1e-6
    ref = sg.differentiate(fn, wrt=(0, 1), target="python")
    _close(f.grad(W, h0), ref.grad(W, h0))
    assert any(n.op == "remat" for n in _all_nodes(f.grad.graph_for((W, h0))[0].outputs))


def test_eager_call_is_the_function():
    W, h = RNG.normal(size=(3, 3)), RNG.normal(size=3)
    np.testing.assert_array_equal(decorated_cell(h, W), np.tanh(W @ h) + 0.1 * h)
    np.testing.assert_array_equal(sg.checkpoint(np.sin)(h), np.sin(h))
    assert decorated_cell.__name__ == "decorated_cell"
    assert sg.checkpoint(decorated_cell).fn is decorated_cell.fn


def test_a_checkpointed_differentiated_function():
    f = sg.differentiate(sg.checkpoint(lambda x: np.sum(np.sin(x) * x)))
    x = RNG.normal(size=4)
    np.testing.assert_allclose(f.grad(x), np.cos(x) * x + np.sin(x), rtol=1e-12)


# ----------------------------------------------------------------------------------------------
# Bad use


def test_bad_use_is_a_clear_error():
    with pytest.raises(TypeError, match="expected a function"):
        sg.checkpoint(3.0)
    with pytest.raises(TypeError, match="unsupported option.*policy"):
        sg.checkpoint(np.sin, policy="dots_saveable")
    with pytest.raises(TypeError, match="needs the function"):
        sg.checkpoint()


def checkpoint_of_a_number(x):
    return sg.checkpoint(x)(x)


def test_checkpoint_of_a_traced_value_is_a_clear_error():
    with pytest.raises(TypeError, match="expected a function, got Node"):
        sg.differentiate(checkpoint_of_a_number, target="python")(1.5)


def other_decorator(x):
    @np.vectorize
    def step(u):
        return u * 2.0
    return step(x)


def test_another_decorator_on_a_nested_def_is_refused_at_its_line():
    with pytest.raises(sg.UnsupportedSyntaxError, match="only @sg.checkpoint") as info:
        sg.differentiate(other_decorator, target="python")(1.5)
    assert info.value.lineno == other_decorator.__code__.co_firstlineno + 1


# ----------------------------------------------------------------------------------------------
# CUDA: the recomputation inlined into the plan; PTX assembles, the emulation matches


def test_cuda_plan_of_a_checkpointed_rnn_matches_python():
    from symgrad.codegen import ptx_emulate
    f, _, args = _pair("tanh_rnn", "python", wrt=(0, 3))
    graph = f.grad._graph(args)
    got = ptx_emulate.run(graph, list(args))
    _close(tuple(got), f.grad(*args), rtol=1e-10, atol=1e-13)


_PTX_SCRIPT = """
import sys, numpy as np, symgrad as sg
sys.path.insert(0, sys.argv[2])
import test_checkpoint as t
f, _, args = t._pair("gru", "python", wrt=0)
open(sys.argv[1], "w").write(f.grad.ptx(*args, arch="sm_80"))
"""


def test_ptx_of_a_checkpointed_gradient_assembles(tmp_path):
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not found")
    path = tmp_path / "checkpoint.ptx"
    # NVPTX may abort the process on a bad input: generate in a child
    child = subprocess.run([sys.executable, "-c", _PTX_SCRIPT, str(path),
                            os.path.dirname(os.path.abspath(__file__))],
                           capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-2000:]
    for arch in ("sm_80", "sm_90"):
        r = subprocess.run([ptxas, f"-arch={arch}", str(path), "-o", os.devnull],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]


# ----------------------------------------------------------------------------------------------
# The README's example is this code's output


def test_readme_checkpoint_section_is_the_generated_source(tmp_path):
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "README.md")) as f:
        text = f.read()
    section = text[text.index("### Checkpointing: `sg.checkpoint`"):]
    section = section[:section.index("\n## ")]
    blocks = [b.split("\n", 1)[1] for b in section.split("```python")[1:]]
    example, shown = (b[:b.index("```")] for b in blocks[:2])
    path = tmp_path / "readme_checkpoint.py"
    path.write_text("import numpy as np\nimport symgrad as sg\n\n" + example)
    spec = importlib.util.spec_from_file_location("readme_checkpoint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = (np.ones((3, 3)), np.ones((3, 2)), np.ones(3), np.ones((1000, 2)))
    assert module.rnn_loss.grad.source_for(*args) == shown, \
        "README.md's checkpoint example is stale: paste the generated source"
