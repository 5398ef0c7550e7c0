"""Forward mode (``sg.jvp``), driven by one table of op cases: every op's JVP against central
finite differences and against its VJP (``<u, J v> == <J^T u, v>``), first and second order,
scalars and arrays, float64 and float32, on target="python" and target="cpu". A coverage test
asserts the table reaches every differentiable op of the op table."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.forward import missing_jvp_rules
from symgrad.ir import OPS

TARGETS = ["python", "cpu"]
ARRAY = (2, 3)

# (name, function, domain of each argument (low, high), shape or None for "scalar and ARRAY").
# Every function returns an array (or a tuple), so the tangent keeps the output's structure.
CASES = [
    ("neg", lambda x: -x, [(-2, 2)], None),
    ("exp", lambda x: np.exp(x), [(-2, 2)], None),
    ("log", lambda x: np.log(x), [(0.2, 3)], None),
    ("log1p", lambda x: np.log1p(x), [(-0.5, 3)], None),
    ("expm1", lambda x: np.expm1(x), [(-2, 2)], None),
    ("sqrt", lambda x: np.sqrt(x), [(0.2, 3)], None),
    ("sin", lambda x: np.sin(x), [(-3, 3)], None),
    ("cos", lambda x: np.cos(x), [(-3, 3)], None),
    ("tan", lambda x: np.tan(x), [(-1.2, 1.2)], None),
    ("arcsin", lambda x: np.arcsin(x), [(-0.9, 0.9)], None),
    ("arccos", lambda x: np.arccos(x), [(-0.9, 0.9)], None),
    ("arctan", lambda x: np.arctan(x), [(-3, 3)], None),
    ("sinh", lambda x: np.sinh(x), [(-2, 2)], None),
    ("cosh", lambda x: np.cosh(x), [(-2, 2)], None),
    ("tanh", lambda x: np.tanh(x), [(-2, 2)], None),
    ("abs", lambda x: np.abs(x), [(-2, 2)], None),
    ("arcsinh", lambda x: np.arcsinh(x), [(-2, 2)], None),
    ("arccosh", lambda x: np.arccosh(x), [(1.2, 3)], None),
    ("arctanh", lambda x: np.arctanh(x), [(-0.8, 0.8)], None),
    ("exp2", lambda x: np.exp2(x), [(-2, 2)], None),
    ("log2", lambda x: np.log2(x), [(0.2, 3)], None),
    ("log10", lambda x: np.log10(x), [(0.2, 3)], None),
    ("cbrt", lambda x: np.cbrt(x), [(0.2, 3)], None),
    ("erf", lambda x: sg.erf(x), [(-2, 2)], None),
    ("erfc", lambda x: sg.erfc(x), [(-2, 2)], None),
    ("lgamma", lambda x: sg.lgamma(x), [(2.5, 6)], None),
    ("gamma", lambda x: sg.gamma(x), [(-1.9, -1.1)], None),
    ("digamma", lambda x: sg.digamma(x), [(0.6, 12)], None),
    ("stop_gradient", lambda x: x * sg.stop_gradient(x * x), [(-2, 2)], None),
    ("cast", lambda x: np.sin(x.astype(np.float32)), [(-2, 2)], ARRAY),
    ("add", lambda x, y: x + y, [(-2, 2), (-2, 2)], None),
    ("sub", lambda x, y: x - y, [(-2, 2), (-2, 2)], None),
    ("mul", lambda x, y: x * y, [(-2, 2), (-2, 2)], None),
    ("div", lambda x, y: x / y, [(-2, 2), (0.5, 2)], None),
    ("pow", lambda x, y: x ** y, [(0.5, 2), (-2, 2)], None),
    ("pow_const", lambda x: x ** 3.0 + 2.0 ** x, [(-2, 2)], None),
    ("arctan2", lambda x, y: np.arctan2(x, y), [(0.3, 2), (-2, 2)], None),
    ("maximum", lambda x, y: np.maximum(x, y * 1.3), [(0.1, 2), (0.1, 2)], None),
    ("minimum", lambda x, y: np.minimum(x, y * 1.3), [(0.1, 2), (0.1, 2)], None),
    ("where", lambda x, y: np.where(x > y, x * y, x - y), [(-2, 2), (-2, 2)], None),
    ("hypot", lambda x, y: np.hypot(x, y), [(0.3, 2), (-2, -0.3)], None),
    ("fmod", lambda x, y: np.fmod(x, y), [(0.1, 5), (1.1, 1.9)], None),
    ("broadcast_binary", lambda x, y: x[:, None] * np.sin(y), [(-2, 2), (-2, 2)], (3,)),
    ("sum", lambda x: np.sum(np.sin(x), axis=0), [(-2, 2)], ARRAY),
    ("sum_keepdims", lambda x: x * np.sum(x * x, axis=1, keepdims=True), [(-2, 2)], ARRAY),
    ("prod", lambda x: np.prod(x, axis=1), [(0.5, 1.5)], ARRAY),
    ("max", lambda x: np.max(np.sin(x), axis=0), [(-2, 2)], ARRAY),
    ("min", lambda x: np.min(x * x, axis=1, keepdims=True), [(-2, 2)], ARRAY),
    ("reshape", lambda x: np.sin(x.reshape(6)), [(-2, 2)], ARRAY),
    ("transpose", lambda x: x.T * np.arange(6.0).reshape(3, 2), [(-2, 2)], ARRAY),
    ("broadcast_to", lambda x: np.tile(x, (2, 1, 2)) * np.arange(24.0).reshape(2, 2, 6),
     [(-2, 2)], ARRAY),
    ("matmul", lambda x, y: x @ y, [(-2, 2), (-2, 2)], ARRAY),   # shapes: SPECIAL_SHAPES
    ("matmul_vector", lambda x: np.tanh(x @ np.arange(3.0)), [(-2, 2)], ARRAY),
    ("getitem", lambda x: x[1:, ::-1] * x[0, 1], [(-2, 2)], (3, 4)),
    ("setitem", lambda x: _setitem(x), [(-2, 2)], (4,)),
    ("index_add", lambda x: _index_add(x), [(-2, 2)], (4,)),
    ("concatenate", lambda x: np.concatenate([x, x[:2] * 3.0, np.ones(2)]), [(-2, 2)], (4,)),
    ("stack", lambda x: np.stack([x, x * x, np.sin(x)], axis=1), [(-2, 2)], (4,)),
    ("take", lambda x: np.exp(x[:, [2, 2, 0]]) * np.take(x, np.array([1, 0, 1]), axis=1),
     [(-2, 2)], ARRAY),
    ("tuple_output", lambda x: (np.sin(x), np.sum(x * x)), [(-2, 2)], (3,)),
    ("custom_gradient", lambda x: log1pexp(x) * x, [(-3, 3)], None),   # JVP: the rule transposed
]


@sg.custom_gradient
def log1pexp(x):
    e = np.exp(x)

    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return np.log(1 + e), grad
SPECIAL_SHAPES = {"matmul": [(2, 3), (3, 4)]}
# What finite differences cannot see: the tangent with the stopped factor held constant.
EXACT_TANGENT = {"stop_gradient": lambda args, tangents: _flat(args[0] ** 2 * tangents[0]),
                 "cast": lambda args, tangents: _flat(np.cos(args[0].astype(np.float32)) *
                                                      tangents[0].astype(np.float32))}
RTOL = {"cast": 1e-6}   # a float32 result: rounding, not the rule


def _setitem(x):
    y = np.zeros(6)
    y[1:5] = x * x
    y[0] = x[0]
    return y * 2.0


def _index_add(x):
    y = x * 1.0
    y[1:3] += np.sin(x[:2])
    return y


def _shapes(case, shape):
    name, _, domains, fixed = case
    if name in SPECIAL_SHAPES:
        return SPECIAL_SHAPES[name]
    return [shape if fixed is None else fixed] * len(domains)


def _args(case, shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for (low, high), s in zip(case[2], _shapes(case, shape)):
        v = rng.uniform(low, high, s).astype(dtype)
        out.append(float(v) if s == () and dtype == np.float64 else v[()] if s == () else v)
    return out


def _tangents(args, seed=1):
    rng = np.random.default_rng(seed)
    return [type(a)(rng.uniform(-1, 1)) if np.ndim(a) == 0 else
            rng.uniform(-1, 1, np.shape(a)).astype(np.asarray(a).dtype) for a in args]


def _parts(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _flat(value) -> np.ndarray:
    parts = _parts(value)
    return np.concatenate([np.ravel(np.asarray(p, dtype=np.float64)) for p in parts])


def _shift(args, tangents, h):
    return [a + h * t for a, t in zip(args, tangents)]


def _numeric_jvp(fn, args, tangents, h=1e-6):
    return (_flat(fn(*_shift(args, tangents, h))) - _flat(fn(*_shift(args, tangents, -h)))) / (2 * h)


def _wrt(case):
    n = len(case[2])
    return 0 if n == 1 else tuple(range(n))


def _case_params():
    out = []
    for case in CASES:
        shapes = [(), ARRAY] if case[3] is None and case[0] not in SPECIAL_SHAPES else [case[3]]
        for shape in shapes:
            out.append(pytest.param(case, shape, id=f"{case[0]}-{'x'.join(map(str, shape)) or 'scalar'}"))
    return out


PARAMS = _case_params()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case, shape", PARAMS)
def test_jvp_against_finite_differences(case, shape, target):
    fn = case[1]
    args = _args(case, shape, np.float64)
    tangents = _tangents(args)
    value, tangent = sg.jvp(fn, wrt=_wrt(case), target=target)(*args, *tangents)
    np.testing.assert_allclose(_flat(value), _flat(fn(*args)), rtol=1e-12, atol=1e-12)
    exact = EXACT_TANGENT.get(case[0])
    numeric = exact(args, tangents) if exact else _numeric_jvp(fn, args, tangents)
    np.testing.assert_allclose(_flat(tangent), numeric, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case, shape", PARAMS)
def test_jvp_agrees_with_the_vjp(case, shape, target):
    """``<u, J v>`` from forward mode equals ``<J^T u, v>`` from reverse mode."""
    fn = case[1]
    args = _args(case, shape, np.float64)
    tangents = _tangents(args)
    _, tangent = sg.jvp(fn, wrt=_wrt(case), target=target)(*args, *tangents)
    u = np.random.default_rng(2).uniform(-1, 1, _flat(tangent).shape)
    n = len(args)
    grads = sg.grad(_weighted(fn, u, n), wrt=tuple(range(n)), target=target)(*args)
    reverse = sum(float(np.sum(g * t)) for g, t in zip(grads, tangents))
    assert np.isclose(float(np.dot(u, _flat(tangent))), reverse, rtol=RTOL.get(case[0], 1e-10),
                      atol=1e-12)


def _weighted(fn, u, n):
    """``<fn(...), u>`` as a function of n arguments (its gradient is ``J^T u``)."""
    if n == 1:
        def weighted(x):
            return np.sum(_flat_traced(fn(x)) * u)
    else:
        def weighted(x, y):
            return np.sum(_flat_traced(fn(x, y)) * u)
    return weighted


def _flat_traced(value):
    parts = value if isinstance(value, tuple) else (value,)
    return np.concatenate([np.reshape(p, -1) for p in parts])


@pytest.mark.parametrize("case, shape", PARAMS)
def test_jvp_float32(case, shape):
    """float32 tangents have the value's dtype (NumPy's) and agree with float64 to float32 precision, on both
    targets."""
    fn = case[1]
    args = _args(case, shape, np.float32)
    tangents = _tangents(args)
    want = sg.jvp(fn, wrt=_wrt(case), target="python")(
        *[np.asarray(a, np.float64) for a in args], *[np.asarray(t, np.float64) for t in tangents])[1]
    for target in TARGETS:
        value, tangent = sg.jvp(fn, wrt=_wrt(case), target=target)(*args, *tangents)
        parts = tangent if isinstance(tangent, tuple) else (tangent,)
        values = value if isinstance(value, tuple) else (value,)
        for t, v, ref in zip(parts, values, _parts(fn(*args))):   # NumPy's result dtype
            assert np.asarray(t).dtype == np.asarray(v).dtype == np.asarray(ref).dtype, target
        np.testing.assert_allclose(_flat(tangent), _flat(want), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case, shape", [p for p in PARAMS if p.values[1] != () and
                                         p.values[0][0] not in EXACT_TANGENT])
def test_second_order_forward_over_forward_and_forward_over_reverse(case, shape, target):
    """jvp(jvp(f)) is the second directional derivative; jvp(grad(<f, u>)) is H v of the
    weighted sum, both against finite differences of the first-order transforms."""
    fn = case[1]
    wrt = _wrt(case)
    args = _args(case, shape, np.float64)
    tangents = _tangents(args)
    n = len(args)
    first = sg.jvp(fn, wrt=wrt, target=target)
    second = sg.jvp(first, wrt=tuple(range(n)), target=target)
    h = 1e-5
    # d/ds of jvp(f)(x + s v, v) = f''(x)[v, v]
    _, (_, tt) = second(*args, *tangents, *tangents)

    def tangent_at(xs):
        return first(*xs, *tangents)[1]
    numeric = (_flat(tangent_at(_shift(args, tangents, h))) -
               _flat(tangent_at(_shift(args, tangents, -h)))) / (2 * h)
    np.testing.assert_allclose(_flat(tt), numeric, rtol=1e-5, atol=1e-6)

    u = np.random.default_rng(2).uniform(-1, 1, numeric.shape)
    g = sg.grad(_weighted(fn, u, n), wrt=tuple(range(n)), target=target)
    _, hv = sg.jvp(g, wrt=tuple(range(n)), target=target)(*args, *tangents)
    numeric = (_flat(g(*_shift(args, tangents, h))) - _flat(g(*_shift(args, tangents, -h)))) / (2 * h)
    np.testing.assert_allclose(_flat(hv), numeric, rtol=1e-5, atol=1e-6)


def test_the_table_reaches_every_differentiable_op():
    """Each op with a derivative appears in a primal or gradient graph of the table (so a new
    op needs a case here), and each such op has a JVP rule."""
    seen = set()
    for param in PARAMS:
        case, shape = param.values
        args = _args(case, shape, np.float64)
        f = sg.differentiate(case[1], wrt=_wrt(case), target="python")
        for graph in (f._compiled(args).derivable, _grad_of_sum(case[1], len(args))._graph(args)):
            seen |= {n.op for n in graph.nodes()}
    # region ops (loop, cond, proj) are expanded before forward mode: tests/test_forward_api.py
    differentiable = {name for name, op in OPS.items() if op.vjp is not None and op.kind != "region"}
    assert differentiable - seen == set()
    assert missing_jvp_rules() == []


def _grad_of_sum(fn, n):
    return sg.grad(_weighted(fn, 1.0, n), wrt=tuple(range(n)), target="python")


def test_an_op_with_a_vjp_and_no_jvp_fails_loudly():
    from symgrad.ir import OpDef, make, register
    from symgrad.op_base import _elementwise, to_float
    from symgrad import spelling as sp
    register(OpDef("no_jvp_op", "elementwise", infer=_elementwise(float_only=True),
                   numpy=lambda x, attrs: x, vjp=lambda g, n: (g,), python=sp.call("np.positive")))
    try:
        assert missing_jvp_rules() == ["no_jvp_op"]
        from symgrad.forward import push_tangents
        from symgrad.ir import Graph
        x = make("arg", (), (0, "x", "float64", ()))
        y = make("no_jvp_op", (to_float(x),))
        with pytest.raises(NotImplementedError, match="no_jvp_op"):
            push_tangents(Graph("f", ("x",), (x,), (y,)), {x: x})
    finally:
        del OPS["no_jvp_op"]
    assert missing_jvp_rules() == []
