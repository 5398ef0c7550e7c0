"""Property tests: random programs (broadcasting, shared subexpressions, reductions over axes,
views, concatenation) compiled by the CPU back end agree with the NumPy reference, for the
function and its gradient."""
import numpy as np
from hypothesis import given, settings, strategies as st

from symgrad import ops
from symgrad.autodiff import grad_graph
from symgrad.emit_python import compile_python
from symgrad.ir import Graph, make
from symgrad.simplify import simplify
from symgrad.codegen.llvm import Native

UNARY = {
    "sin": ops.sin, "cos": ops.cos, "tanh": ops.tanh, "neg": ops.neg, "arctan": ops.arctan,
    "exp_tanh": lambda a: ops.exp(ops.tanh(a)), "log1p_sq": lambda a: ops.log1p(a * a),
    "sqrt_1p": lambda a: ops.sqrt(1.0 + a * a), "square": lambda a: a * a,
    "expm1": lambda a: ops.expm1(ops.tanh(a)), "sinh": lambda a: ops.sinh(ops.tanh(a)),
    "sum0": lambda a: ops.reduce("sum", a, 0, keepdims=a.ndim > 1) if a.ndim else a,
    "sum_last": lambda a: ops.reduce("sum", a, a.ndim - 1) if a.ndim else a,
    "max_last": lambda a: ops.reduce("max", a, a.ndim - 1, keepdims=True) if a.ndim else a,
    "mean": lambda a: ops.mean(a),
    "transpose": lambda a: ops.transpose(a),
    "flip": lambda a: ops.getitem(a, (slice(None, None, -1),)) if a.ndim else a,
    "head": lambda a: ops.getitem(a, (slice(0, 2),)) if a.ndim and a.shape[0] > 2 else a,
    "concat": lambda a: ops.concatenate([a, ops.sin(a)], axis=-1) if a.ndim else a,
    "stop": ops.stop_gradient, "abs_p": lambda a: ops.abs_(a) + 0.5,
}
BINARY = {
    "add": ops.add, "sub": ops.sub, "mul": ops.mul,
    "div": lambda a, b: a / (1.0 + b * b), "maximum": ops.maximum, "minimum": ops.minimum,
    "where": lambda a, b: ops.where(a > b, a * b, a - b),
    "pow": lambda a, b: ops.pow_(1.0 + a * a, ops.tanh(b)),
    "atan2": lambda a, b: ops.arctan2(a, 1.5 + ops.tanh(b)),
}


def _combine(name, a, b):
    try:
        return BINARY[name](a, b)
    except ValueError:           # shapes that do not broadcast: use a reduction of b
        return BINARY[name](a, ops.reduce("sum", b))


@st.composite
def programs(draw):
    x = make("arg", (), (0, "x", "float64", (4, 3)))
    y = make("arg", (), (1, "y", "float64", (3,)))
    z = make("arg", (), (2, "z", "float64", ()))
    pool = [x, y, z]
    for _ in range(draw(st.integers(2, 10))):
        a = pool[draw(st.integers(0, len(pool) - 1))]
        if draw(st.booleans()):
            pool.append(UNARY[draw(st.sampled_from(sorted(UNARY)))](a))
        else:
            b = pool[draw(st.integers(0, len(pool) - 1))]
            pool.append(_combine(draw(st.sampled_from(sorted(BINARY))), a, b))
    outs = (ops.reduce("sum", pool[-1]) + ops.reduce("sum", pool[draw(st.integers(3, len(pool) - 1))]),
            pool[-1])
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    args = (rng.uniform(-1.5, 1.5, (4, 3)), rng.uniform(-1.5, 1.5, 3), float(rng.uniform(-1, 1)))
    return Graph("prog", ("x", "y", "z"), (x, y, z), outs, (0, 1)), args


def _check(graph, args):
    graph = simplify(graph)
    want, _ = compile_python(graph)
    ref = want(*args)
    got = Native(graph)(list(args))
    flat_got, flat_ref = _flatten(got), _flatten(ref)
    assert len(flat_got) == len(flat_ref)
    for a, b in zip(flat_got, flat_ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def _flatten(v):
    return [w for item in v for w in _flatten(item)] if isinstance(v, tuple) else [v]


@settings(max_examples=25, deadline=None)
@given(programs())
def test_cpu_matches_reference_on_random_programs(case):
    graph, args = case
    _check(graph, args)
    scalar = graph.derive("loss", (graph.outputs[0],), 0)
    _check(grad_graph(scalar, (0, 1, 2), False, True), args)
