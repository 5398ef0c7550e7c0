"""Every op has every entry of the op table, and its NumPy reference agrees with its spelling."""
import numpy as np

from symgrad import ops
from symgrad.ir import OPS

# Ops with no derivative: the result is piecewise constant or not a float.
NOT_DIFFERENTIABLE = {"sign", "lt", "le", "gt", "ge", "eq", "ne", "logical_and", "logical_or",
                      "logical_not", "arg", "param", "const", "full", "array", "arange",
                      "floor", "ceil", "rint", "trunc"}
# Ops the Python emitter writes itself (a namespace name; in-place update statements).
SPELLED_BY_EMITTER = {"array", "setitem", "index_add", "scatter_add", "loop", "cond", "remat", "proj"}
LEAVES = {"arg", "const", "full", "array", "arange", "param"}


def test_every_op_has_every_entry():
    for name, op in OPS.items():
        assert op.name == name
        assert op.kind in ("leaf", "elementwise", "reduction", "shape", "linalg", "region")
        assert callable(op.infer), name
        assert callable(op.numpy) or name in ("arg", "param"), name
        assert callable(op.python) or name in SPELLED_BY_EMITTER, name
        assert callable(op.vjp) or name in NOT_DIFFERENTIABLE, name
        assert (op.vjp is None) == (name in NOT_DIFFERENTIABLE) or name == "stop_gradient", name
        assert (op.kind == "leaf") == (name in LEAVES), name


def test_design_ops_are_all_present():
    """The op list of DESIGN.md §2 maps onto primitives or documented composites."""
    primitives = {"exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "arcsin", "arccos",
                  "arctan", "arctan2", "sinh", "cosh", "tanh", "abs", "sign", "maximum", "minimum",
                  "where", "sum", "max", "min", "prod", "matmul", "transpose", "reshape", "stack",
                  "concatenate", "getitem", "setitem", "index_add", "stop_gradient", "cast",
                  "broadcast_to", "full", "arange"}
    assert primitives <= set(OPS)
    from symgrad.numpy_api import DUALS
    composites = {"clip", "mean", "dot", "zeros", "ones", "zeros_like", "ones_like",
                  "reduce_sum", "reduce_max", "reduce_min", "reduce_mean"}
    assert composites <= set(DUALS)


def test_listing_is_readable():
    x = ops.lift(np.ones(3))
    from symgrad.ir import Graph, make
    a = make("arg", (), (0, "x", "float64", (3,)))
    g = Graph("f", ("x",), (a,), (ops.reduce("sum", ops.sin(a) * a),), 0, names={})
    text = g.listing()
    assert text.splitlines()[0] == "graph f(x):"
    assert "sin(%0) : float64[3]" in text and "return %" in text
    del x
