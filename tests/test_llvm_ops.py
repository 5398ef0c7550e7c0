"""Every op on target="cpu" (LLVM) against target="python" (the NumPy reference): values and
gradients, float64 and float32, scalars, broadcasting, reductions, shape ops, int/bool data."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.ir import OPS
from symgrad.codegen import lower

# (name, function, low, high); the front end reads each lambda's source: one per line.
UNARY = [
    ("neg", lambda x: -x, -2, 2),
    ("exp", lambda x: np.exp(x), -30, 30),
    ("log", lambda x: np.log(x), 1e-3, 1e3),
    ("log1p", lambda x: np.log1p(x), -0.9, 50),
    ("expm1", lambda x: np.expm1(x), -5, 5),
    ("sqrt", lambda x: np.sqrt(x), 0, 9),
    ("sin", lambda x: np.sin(x), -50, 50),
    ("cos", lambda x: np.cos(x), -50, 50),
    ("tan", lambda x: np.tan(x), -1.4, 1.4),
    ("arcsin", lambda x: np.arcsin(x), -0.99, 0.99),
    ("arccos", lambda x: np.arccos(x), -0.99, 0.99),
    ("arctan", lambda x: np.arctan(x), -20, 20),
    ("sinh", lambda x: np.sinh(x), -5, 5),
    ("cosh", lambda x: np.cosh(x), -5, 5),
    ("tanh", lambda x: np.tanh(x), -10, 10),
    ("abs", lambda x: np.abs(x), -2, 2),
    ("sign", lambda x: np.sign(x) * x, -2, 2),
    ("square", lambda x: x ** 2, -3, 3),
    ("cube", lambda x: x ** 3, -3, 3),
    ("sqrtpow", lambda x: x ** 0.5, 0.1, 3),
    ("pow17", lambda x: x ** 1.7, 0.1, 3),
    ("recip", lambda x: x ** -1, 0.5, 3),
    ("rpow", lambda x: 2.0 ** x, -3, 3),
    ("mean_const", lambda x: np.mean(x * 0.3), -2, 2),
]
BINARY = [
    ("add", lambda x, y: x + y),
    ("sub", lambda x, y: x - y),
    ("mul", lambda x, y: x * y),
    ("div", lambda x, y: x / (y + 3.0)),
    ("pow", lambda x, y: (x + 3.0) ** y),
    ("arctan2", lambda x, y: np.arctan2(x, y)),
    ("maximum", lambda x, y: np.maximum(x, y)),
    ("minimum", lambda x, y: np.minimum(x, y)),
    ("where", lambda x, y: np.where(x > y, x * y, x - y)),
    ("compare", lambda x, y: np.where(x <= y, x, y * 2.0) + np.where(x != y, x, 1.0) + np.where(x >= 1.5, y, 0.5)),
    ("eqge", lambda x, y: np.where(x == y, x, -y) + np.where(x < y, 1.0, x) + np.where(y > x, x, -x)),
]
TOL = {"float64": 4e-15, "float32": 4e-6}


def both(fn, wrt=0):
    return (sg.differentiate(fn, wrt=wrt, target="cpu"),
            sg.differentiate(fn, wrt=wrt, target="python"))


def close(a, b, dtype="float64", scale=1.0):
    a, b = np.asarray(a), np.asarray(b)
    # the reference returns a Python float where its generated code folds to a literal
    assert (a.dtype == b.dtype or a.ndim == 0) and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    tol = TOL[dtype] * scale
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.nanmax(np.abs(b)))
                                                              if b.size else 1.0))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", [(), (7,), (3, 5)])
@pytest.mark.parametrize("name, fn, low, high", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, fn, low, high, shape, dtype):
    rng = np.random.default_rng(0)
    x = rng.uniform(low, high, shape).astype(dtype)
    x = x[()] if shape == () and dtype == "float32" else (float(x) if shape == () else x)
    cpu, py = both(fn)
    close(cpu(x), py(x), dtype, 8)
    close(cpu.grad(x), py.grad(x), dtype, 8)


@pytest.mark.parametrize("shapes", [((), ()), ((6,), (6,)), ((), (2, 3)), ((3, 1), (4,)),
                                    ((2, 1, 3), (4, 1))])
@pytest.mark.parametrize("name, fn", BINARY, ids=[b[0] for b in BINARY])
def test_binary_broadcasting(name, fn, shapes):
    rng = np.random.default_rng(1)
    x, y = (rng.uniform(-2, 2, s) if s else float(rng.uniform(-2, 2)) for s in shapes)
    cpu, py = both(fn, wrt=(0, 1))
    close(cpu(x, y), py(x, y), scale=8)
    for a, b in zip(cpu.grad(x, y), py.grad(x, y)):
        close(a, b, scale=8)


REDUCTIONS = [
    ("sum", lambda x: np.sum(np.sin(x))),
    ("sum0", lambda x: np.sum(x * x, axis=0)),
    ("sum1", lambda x: np.sum(np.exp(x), axis=1)),
    ("sumk", lambda x: np.sum(x, axis=1, keepdims=True) * x),
    ("mean", lambda x: np.mean(x, axis=0) + np.mean(x)),
    ("prod", lambda x: np.prod(x + 3.0, axis=1)),
    ("max", lambda x: np.max(x) + np.max(x, axis=0)),
    ("min", lambda x: np.min(x, axis=1) * 2.0),
    ("softmax", lambda x: np.sum(np.exp(x - sg.stop_gradient(np.max(x))))),
    ("logsumexp", lambda x: np.log(np.sum(np.exp(x - np.max(x, axis=1, keepdims=True)), axis=1))),
    ("max_ties", lambda x: np.max(np.abs(x) * 0.0 + 1.0) * x),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name, fn", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
def test_reductions(name, fn, dtype):
    x = np.random.default_rng(2).uniform(-2, 2, (5, 6)).astype(dtype)
    cpu, py = both(fn)
    close(cpu(x), py(x), dtype, 16)
    close(cpu.grad(x), py.grad(x), dtype, 16)


SHAPE_OPS = [
    ("transpose", lambda x: np.sum(x.T * np.arange(5.0))),
    ("transpose3", lambda x: np.transpose(x.reshape(2, 3, 5), (2, 0, 1)) * 2.0),
    ("reshape", lambda x: np.sin(x.reshape(15, 2)) @ np.ones((2, 3))),
    ("reshape_of_transpose", lambda x: x.T.reshape(-1) * np.arange(30.0)),
    ("getitem", lambda x: x[1:4, ::2] * x[0][None, ::2] + x[-1, 3]),
    ("negstep", lambda x: x[::-1, 4:0:-2] ** 2),
    ("newaxis", lambda x: x[:, None, :] * x[None, :, :]),
    ("setitem", None),
    ("concatenate", lambda x: np.concatenate([x, np.sin(x), x[:2]], axis=0)),
    ("concat1", lambda x: np.concatenate([x * 2.0, x[:, :1]], axis=1)),
    ("stack", lambda x: np.stack([x[0], np.cos(x[1]), x[2] * x[3]], axis=1)),
    ("broadcast", lambda x: x[0] * x[1:5] + x[1:5, :1]),
    ("take", lambda x: np.take(x, np.array([4, 0, 0, -1]), axis=1) * np.arange(4.0)),
    ("fancy", lambda x: x[np.array([1, 1, 3])] ** 2),
    ("matmul", lambda x: x @ x.T),
    ("matvec", lambda x: np.dot(x, np.arange(6.0))),
    ("vecmat", lambda x: np.arange(5.0) @ np.tanh(x)),
    ("batched", lambda x: np.matmul(x.reshape(3, 2, 5), x.reshape(3, 5, 2)) ** 2),
    ("zeros_full", lambda x: np.zeros_like(x) + np.ones((5, 6)) * x + 2.5),
]


def _setitem(x):
    y = x * 1.0
    y[1, :] = np.sin(x[2])
    y[:, 2] = 3.0
    y[3:, 1:3] += x[:2, :2]
    return y * x


@pytest.mark.parametrize("name, fn", SHAPE_OPS, ids=[s[0] for s in SHAPE_OPS])
def test_shape_ops(name, fn):
    fn = fn or _setitem
    x = np.random.default_rng(3).uniform(-2, 2, (5, 6))
    cpu, py = both(fn)
    close(cpu(x), py(x), scale=8)
    close(cpu.grad(x), py.grad(x), scale=8)


def test_int_and_bool_data():
    def f(x, labels, mask):
        hit = labels == 2
        s = np.sum(np.where(mask, np.where(hit, x, 0.0), 0.0)) + np.sum(labels * 3) + np.max(labels)
        return s + np.sum(np.abs(labels - 4)) + np.sum(mask) + np.sum(np.minimum(labels, 1))
    x = np.linspace(0, 1, 8)
    labels = np.array([0, 2, 2, 1, 5, 2, 7, 3], dtype=np.int64)
    mask = np.array([1, 1, 0, 1, 1, 1, 0, 1], dtype=bool)
    cpu, py = both(f)
    assert cpu(x, labels, mask) == py(x, labels, mask)
    close(cpu.grad(x, labels, mask), py.grad(x, labels, mask))
    for dt in ("int32", "uint64", "int16"):   # NumPy sums 8/16-bit ints in 64 bits; the IR keeps the dtype
        lab = labels.astype(dt)
        assert cpu(x, lab, mask) == py(x, lab, mask), dt


def test_casts_between_dtypes():
    def f(x, k):
        y = x.astype(np.float32) * np.float32(1.5)
        z = (k.astype(np.float64) + x) * (x > 0.3).astype(np.float64)
        return np.sum(y.astype(np.float64)) + np.sum(z) + np.sum((x * 10).astype(np.int64))
    x = np.linspace(-1, 1, 9)
    k = np.arange(9, dtype=np.int32)
    cpu, py = both(f)
    close(cpu(x, k), py(x, k), scale=1e8)   # float32 rounding inside
    close(cpu.grad(x, k), py.grad(x, k), scale=1e8)


def test_nan_inf_propagate_as_numpy():
    def f(x):
        return np.maximum(x, 0.0) + np.minimum(x, 1.0) + np.exp(x) + np.log(x) + np.sqrt(x)
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1.0])
    cpu, py = both(f)
    with np.errstate(all="ignore"):
        got, want = cpu(x), py(x)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-15)     # inf == inf, finite to 1 ulp
        assert np.isnan(sg.differentiate(lambda x: np.max(x), target="cpu")(x))
        np.testing.assert_array_equal(sg.differentiate(lambda x: np.min(x), target="cpu")(x[1:]), -np.inf)


def test_arange_and_constant_arrays():
    table = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])

    def f(x):
        return np.sum(x * np.arange(3.0) + table * x) + np.sum(np.arange(1, 7, 2) * x[0])
    x = np.linspace(0.5, 1.5, 3)
    cpu, py = both(f)
    close(cpu(x), py(x))
    close(cpu.grad(x), py.grad(x))


def test_value_and_grad_and_second_derivative():
    def f(x):
        return np.sum(np.tanh(x) * np.log1p(x * x))
    x = np.linspace(-1, 2, 11)
    cpu, py = both(f)
    v1, g1 = cpu.value_and_grad(x)
    v2, g2 = py.value_and_grad(x)
    close(v1, v2)
    close(g1, g2)
    s = sg.differentiate(lambda t: np.tanh(t) * np.sin(t), target="cpu")
    s2 = sg.differentiate(lambda t: np.tanh(t) * np.sin(t), target="python")
    close(s.grad.grad(0.7), s2.grad.grad(0.7))


def test_every_op_has_a_cpu_lowering():
    from symgrad.codegen import schedule
    for name in OPS:
        assert (name in lower.LOWER) + (name in schedule.SCHEDULE_RULES) + \
            (name in schedule.UNSUPPORTED) == 1, name
    assert not set(lower.LOWER) - set(OPS)
    assert not set(schedule.SCHEDULE_RULES) - set(OPS)


def _update_shared_base(x):
    y = np.sin(x)
    z = y * 1.0
    z[0] = 5.0          # z's buffer may be updated in place: nothing else reads it
    w = np.cos(x)
    v = w + 0.0
    v[1:3, :] += x[:2, :]
    return z + y, v * w    # w is read after the update of v: v must not overwrite w


def test_in_place_updates_never_clobber_a_shared_base():
    x = np.random.default_rng(4).uniform(-2, 2, (5, 6))
    cpu, py = both(_update_shared_base)
    for a, b in zip(cpu(x), py(x)):
        close(a, b)
    close(cpu.grad(x), py.grad(x))


def test_every_math_name_is_registered_with_llvm():
    """A C math function LLVM cannot resolve crashed the process at the first call. The JIT
    binds the functions a kernel's IR declares (CPUMath.bind, before linking), so there is no
    list to forget: every name of codegen.mathlib.MATH_NAMES (float64 and float32) resolves
    once declared, for codegen.elf_load (linker._resolve) and for LLVM's engine alike."""
    import ctypes

    import llvmlite.binding as llvm
    from symgrad.codegen import jit, linker
    from symgrad.codegen.mathlib import MATH_NAMES
    math_target = jit.target()["math"]
    symbols = [math_target.symbol(cname, dtype) for cname in MATH_NAMES.values()
               for dtype in ("float64", "float32")]
    math_target.bind("".join(f'declare double @"{sym}"(double)\n' for sym in symbols))
    linker._link_mcjit([], [], math_target, lambda: jit._init()["tm"])   # (gives LLVM's
    # engine every address codegen knows)
    for sym in symbols:
        cname = sym[len("symgrad_"):]
        libm = ctypes.cast(getattr(math_target.libm, cname), ctypes.c_void_p).value
        assert linker._resolve(sym, math_target) == libm, sym
        assert llvm.address_of_symbol(sym) == libm, sym
