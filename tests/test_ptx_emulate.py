"""The CUDA back end's kernels, run on the CPU by ``codegen.ptx_emulate`` (one thread for the
whole grid), agree with ``target="python"`` for every op case of ``test_ptx`` (value and
gradient, float32 and float64) and for the examples: buffers, kernel order, index maps, region
branches, split reductions, gathers and atomic scatters are the GPU's own."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ptx  # noqa: E402  (the case table)

from symgrad.codegen import ptx_emulate  # noqa: E402
from symgrad.runtime import finish  # noqa: E402
from symgrad.emit_python import compile_python  # noqa: E402


def _values(graph, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for a in graph.inputs:
        if a is None:
            out.append(None)
        elif a.dtype == "int64":
            out.append(rng.integers(-3, 4, a.shape))
        elif a.dtype == "bool":
            out.append(rng.random(a.shape) < 0.5)
        else:
            v = rng.uniform(0.1, 0.9, a.shape).astype(a.dtype)
            out.append(v if a.shape else v[()])
    return out


def _flat(t):
    return [x for e in t for x in _flat(e)] if isinstance(t, tuple) else [t]


def _check(name, graph, values):
    got = _flat(ptx_emulate.run(graph, values))
    fn, _ = compile_python(graph)
    want = _flat(finish(fn(*values), graph, values))
    assert len(got) == len(want), name
    # float32 anywhere: an output, or an input whose float32 work feeds a float64 output
    single = any(getattr(n, "dtype", "") == "float32" for n in list(graph.outputs) + list(graph.inputs))
    tol = 3e-5 if single else 1e-11
    for i, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (name, i, a.shape, b.shape, a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"{name} output {i}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_op_case_matches_python(dtype):
    for name, graph in test_ptx._graphs(dtype):
        _check(name, graph, _values(graph))


def test_examples_match_python():
    for name, entry in test_ptx._examples():
        values = _values(entry.graph, seed=1)
        _check(name, entry.graph, values)


def test_long_reductions_split_over_blocks():
    """Sums long enough to be split into partial sums and finished by a second kernel."""
    from symgrad import ops
    from symgrad.ir import Graph, make
    from symgrad.codegen import ptx
    x = make("arg", (), (0, "x", "float64", (300001,)))
    y = make("arg", (), (1, "y", "float64", (3, 20000)))
    g = Graph("long", ("x", "y"), (x, y), (ops.reduce("sum", ops.exp(x)), ops.reduce("max", y, 1),
                                           ops.reduce("min", y, 0), ops.reduce("sum", y, 1)), (0, 1, 2, 3))
    kinds = [k.kind for k in ptx.plan(g).kernels]
    assert kinds.count("block") >= 2 and len(kinds) >= 4
    _check("long", g, _values(g))


def test_zero_size_arrays():
    from symgrad import ops
    from symgrad.ir import Graph, make
    g = make("arg", (), (0, "g", "float64", (0, 3)))
    k = make("arg", (), (1, "k", "int64", (0,)))
    x = make("arg", (), (2, "x", "float64", (0,)))
    graph = Graph("empty", ("g", "k", "x"), (g, k, x),
                  (ops.scatter_add(g, k, 0, 4), ops.reduce("sum", x), ops.exp(x)), (0, 1, 2))
    _check("empty", graph, [np.zeros((0, 3)), np.zeros(0, np.int64), np.zeros(0)])


def test_an_index_out_of_range_sets_the_error_word():
    """A gather or scatter-add through an index from data checks it: the kernels that compute
    one get the plan's error word (a buffer of kind "flag"; kernels without one, and gathers
    through constant indices, checked while tracing, do not), set it when an index is out of
    range (reading a clamped position meanwhile), and the run raises target='cpu''s IndexError;
    for the value, the gradient (a scatter-add) and vmap."""
    import symgrad as sg
    from symgrad.codegen import ptx

    def loss(x, i):
        return np.sum(np.exp(x) * 2.0) + np.sum(x[i] * x[i])

    x = np.linspace(0.5, 1.5, 5)
    good, bad = np.array([0, 4, -5]), np.array([0, 4, -6])
    for f, args in ((sg.differentiate(loss), (x, bad)), (sg.grad(loss), (x, bad)),
                    (sg.vmap(loss, in_axes=(None, 0)), (x, np.stack([good, bad])))):
        graph = f._graph(list(args))
        compiled = ptx_emulate.compile_plan(graph)   # the kernels' parameters: set as built
        p = compiled[0]
        assert p.buffers[p.flag].kind == "flag"
        flagged = [k for _, k in ptx.all_kernels(p) if k.flag == p.flag]
        assert flagged and all(p.flag in k.params for k in flagged)
        assert all(p.flag not in k.params for _, k in ptx.all_kernels(p) if k.flag is None)
        with pytest.raises(IndexError) as cpu:    # target='cpu', the default: the reference
            f(*args)
        with pytest.raises(IndexError) as emulated:
            ptx_emulate.run(graph, list(args), compiled)
        assert str(emulated.value) == str(cpu.value)
        ok = list(args[:-1]) + [np.stack([good, good]) if args[-1].ndim == 2 else good]
        _check("in range", f._graph(ok), ok)
    constant = sg.differentiate(lambda x: x[np.array([0, 3, -1])] * 2.0)
    assert ptx.plan(constant._graph([x])).flag is None


def _row_recursion(D):
    m, n = D.shape
    R = np.zeros((m, n + 1))
    for i in range(m):
        for j in range(1, n + 1):
            R[i, j] = D[i, j - 1] * (R[i, j - 1] + 1.0)
    return np.sum(R[:, n])


@pytest.mark.parametrize("shape", [(2, 2), (3, 4)])
def test_one_constant_index_into_arrays_of_two_shapes(shape):
    """``D[1, 0]`` (2x2) and ``R[1, 0]`` (2x3) in one kernel: the index maps of getitem were
    shared by index alone, so R was read at D's flat position (soft-DTW's value and gradient
    were wrong on the GPU; found by helper hunt2)."""
    import symgrad as sg
    D = np.random.default_rng(0).random(shape)
    for f in (sg.differentiate(_row_recursion, target="python"), sg.grad(_row_recursion, target="python")):
        graph = f._graph(f.bind([D], {}))
        _check(f.__name__, graph, [D])
