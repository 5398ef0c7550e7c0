"""Writes through index arrays (symgrad.index_writes): ``y[idx] = v``, ``y[idx] += v`` and
``np.add.at(y, idx, v)`` against NumPy on every target (python, cpu, and the CUDA plan run by
codegen.ptx_emulate; its PTX is assembled by ptxas in test_ptx's "index_writes" case), with
repeated, negative, out-of-range and empty indices, constant and traced; derivatives against
central differences (first and second order, float32 and float64), forward mode, Jacobians,
Hessians, vmap, and the writes inside for and while loops."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import ptx_emulate

TARGETS = ("python", "cpu")
RNG = np.random.default_rng(11)
CONSTANT_INDEX = np.array([3, -1, 0, 3, 1])    # repeated (3), negative (-1)
MASK = np.array([True, False, True, True, False, False])


# -- the programs: plain NumPy, so each is its own reference ------------------------------------
def assign(x, idx):
    y = np.zeros(6)
    y[idx] = x * x
    return y


def assign_rows(X, idx):             # the first axis of a 2-d array, a row per index
    Y = np.ones((6, 3))
    Y[idx] = X * 3.0
    return Y


def assign_columns(X, idx):
    Y = np.zeros((3, 6))
    Y[:, idx] = X * 2.0
    return Y


def assign_pairs(x, rows, cols):     # two index arrays: one position per pair
    Y = np.zeros((4, 5))
    Y[rows, cols] = x
    return Y


def assign_broadcast(row, s, idx):   # one row for every index, one scalar for every index
    Y = np.zeros((6, 3))
    Y[idx] = row
    z = np.zeros(6)
    z[idx] = s
    return Y, z


def assign_constant(x):
    y = np.full(5, 0.5)
    y[CONSTANT_INDEX] = x
    return y


def assign_mask(x, v):               # a constant mask selecting 3 elements, written with 3 values
    y = x * 1.0
    y[MASK] = v * v
    return y


def assign_traced_mask(x):           # a mask computed from the data, one value: np.where
    y = x * 1.0
    y[x > 1.0] = 0.5
    return y


def update_traced_mask(x, s):        # y[mask] op= v, a mask from data: where(mask, y op v, y)
    y = x * 1.0
    y[x > 1.0] += 0.25
    y[x < 0.8] -= s                  # a traced 0-d value
    y[x > 1.2] *= s * s
    y[x < 1.0] /= np.float64(3.0)
    return y


def update_traced_mask_rows(X, s):   # a mask over the rows: one value, or one per column
    Y = X * 1.0
    Y[X[:, 0] > 1.0] *= s
    Y[X[:, 1] < 1.0] -= np.array([1.0, 2.0, 3.0])
    Y[X[:, 2] > 0.7] += np.array([[0.5, 0.25, 0.125]])   # a leading length-1 axis: dropped
    return Y


def assign_traced_position(x):       # a traced integer scalar as the index
    y = x * 1.0
    y[np.argmax(x)] = 0.0
    return y


def add_buffered(x, y0, idx):        # NumPy: a repeated index adds once (its last value)
    y = y0 * 1.0
    y[idx] += x * x
    return y


def add_at(x, y0, idx):              # unbuffered: every occurrence adds
    y = y0 * 1.0
    np.add.at(y, idx, x * x)
    return y


def subtract_at_columns(X, Y0, idx):
    Y = Y0 * 1.0
    np.subtract.at(Y, (slice(None), idx), X)
    return Y


def writes_in_for(x, idx):           # a loop region: each iteration writes one traced position
    y = np.zeros(6)
    for i in range(x.shape[0]):
        y[idx[i]] = x[i] * y[idx[i]] + x[i]
    return y


def adds_in_for(x, idx):
    y = np.zeros(6)
    for i in range(x.shape[0]):
        np.add.at(y, idx, x * (i + 1.0))
    return y


def writes_in_while(x, idx):         # a data-dependent while loop writing through an index array
    y = np.zeros(6)
    t = 0
    while np.sum(y) < 20.0 and t < 8:
        y[idx] = y[idx] + x
        t += 1
    return y


def ints(*values):
    return np.array(values, dtype=np.int64)


def floats(*shape, dtype="float64"):
    return RNG.uniform(0.5, 1.5, size=shape).astype(dtype)


REPEATED = ints(0, 2, 0, -1, 3, 2)
CASES = {   # name: (program, arguments)
    "repeated": (assign, (floats(6), REPEATED)),
    "distinct": (assign, (floats(3), ints(5, -6, 2))),
    "many": (assign, (floats(37), RNG.integers(-6, 6, 37))),   # several bit passes
    "rows": (assign_rows, (floats(4, 3), ints(1, -1, 1, 0))),
    "columns": (assign_columns, (floats(3, 4), ints(5, 0, 5, 2))),
    "pairs": (assign_pairs, (floats(5), ints(0, 3, 0, -1, 2), ints(1, 4, 1, 0, -5))),
    "2-d index": (assign, (floats(2, 3), ints(4, 1, 1, 0, 4, 5).reshape(2, 3))),
    "broadcast": (assign_broadcast, (floats(3), 2.5, REPEATED)),
    "constant": (assign_constant, (floats(5),)),
    "mask": (assign_mask, (floats(6), floats(3))),
    "traced mask": (assign_traced_mask, (floats(6),)),
    "traced position": (assign_traced_position, (floats(6),)),
    "traced mask update": (update_traced_mask, (floats(6), 1.7)),
    "traced mask update rows": (update_traced_mask_rows, (floats(5, 3), 0.6)),
    "add buffered": (add_buffered, (floats(6), floats(6), REPEATED)),
    "add.at": (add_at, (floats(6), floats(6), REPEATED)),
    "subtract.at columns": (subtract_at_columns, (floats(3, 4), floats(3, 6), ints(5, 0, 5, -1))),
    "for": (writes_in_for, (floats(6), REPEATED)),
    "add.at in for": (adds_in_for, (floats(6), REPEATED)),
    "while": (writes_in_while, (floats(6), REPEATED)),
}


def _flat(t):
    return [x for e in t for x in _flat(e)] if isinstance(t, (tuple, list)) else [t]


def _assert_numpy(got, want, exact):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        if exact:   # a write copies values: bit for bit
            np.testing.assert_array_equal(a, b)
        else:       # sums: the order of additions may differ
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)


def _exact(name) -> bool:
    return not any(word in name for word in ("add", "subtract", "for", "while"))


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("target", TARGETS)
def test_values_match_numpy(name, target):
    program, args = CASES[name]
    got = sg.differentiate(program, target=target)(*args)
    _assert_numpy(got, program(*args), _exact(name))


@pytest.mark.parametrize("name", list(CASES))
def test_values_match_numpy_in_the_cuda_plan(name):
    program, args = CASES[name]
    f = sg.differentiate(program, target="python")
    got = ptx_emulate.run(f._graph(list(args)), list(args))
    _assert_numpy(got, program(*args), _exact(name))


def test_the_last_of_a_repeated_index_wins_and_add_at_accumulates():
    x, y0 = np.arange(1.0, 7.0), np.zeros(6)
    for target in TARGETS:
        # REPEATED = [0, 2, 0, -1, 3, 2]: position 0 gets x[2], position 2 gets x[5]
        np.testing.assert_array_equal(sg.differentiate(assign, target=target)(x, REPEATED),
                                      [9.0, 0.0, 36.0, 25.0, 0.0, 16.0])
        np.testing.assert_array_equal(sg.differentiate(add_buffered, target=target)(x, y0, REPEATED),
                                      [9.0, 0.0, 36.0, 25.0, 0.0, 16.0])
        np.testing.assert_array_equal(sg.differentiate(add_at, target=target)(x, y0, REPEATED),
                                      [10.0, 0.0, 40.0, 25.0, 0.0, 16.0])


# -- derivatives ----------------------------------------------------------------------------------
WEIGHTS = np.linspace(0.5, 2.0, 24)


def _weighted(out):
    """A scalar of a program's outputs whose second derivative is not zero."""
    parts = out if isinstance(out, tuple) else (out,)
    total = 0.0
    for part in parts:
        total = total + np.sum(np.sin(part) * WEIGHTS[:part.size].reshape(part.shape))
    return total


def _loss(program):
    """``_weighted(program(...))`` with the program's parameters (a differentiated function
    takes no ``*args``)."""
    arity = program.__code__.co_argcount
    if arity == 1:
        def loss(a):
            return _weighted(program(a))
    elif arity == 2:
        def loss(a, b):
            return _weighted(program(a, b))
    else:
        def loss(a, b, c):
            return _weighted(program(a, b, c))
    return loss


def _float_arguments(args):
    return tuple(i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f")


def _cast(args, dtype):
    return tuple(a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
                 for a in args)


DERIVATIVE_CASES = [n for n in CASES if n != "traced position"]   # argmax: piecewise


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", DERIVATIVE_CASES)
@pytest.mark.parametrize("target", TARGETS)
def test_gradients_match_central_differences(name, target, dtype):
    program, args = CASES[name]
    args = _cast(args, dtype)
    wrt = _float_arguments(args)
    f = sg.differentiate(_loss(program), wrt=wrt, target=target)
    tol = 1e-7 if dtype == "float64" else 2e-3
    assert sg.check_grad(f, *args, wrt=wrt) < tol
    # second order: the gradient's own gradient (the Hessian's row sums) against differences
    first = wrt[0]
    g = sg.grad(_loss(program), wrt=first, target=target)
    assert sg.check_grad(g, *args, wrt=first) < (1e-6 if dtype == "float64" else 5e-3)


def test_gradient_goes_to_the_winner_only():
    x = np.arange(1.0, 7.0)
    for target in TARGETS:
        g = sg.grad(lambda x, idx: np.sum(assign(x, idx) * WEIGHTS[:6]), target=target)(x, REPEATED)
        # x[0] and x[1] lose (to x[2] at position 0 and x[5] at 2): no derivative; a winner
        # x[k] at position p gets 2 x[k] w[p]
        np.testing.assert_allclose(g, [0.0, 0.0, 6.0 * WEIGHTS[0], 8.0 * WEIGHTS[5],
                                       10.0 * WEIGHTS[3], 12.0 * WEIGHTS[2]], rtol=1e-14)
        y_grad = sg.grad(lambda x, y0, idx: np.sum(add_buffered(x, y0, idx) * WEIGHTS[:6]), wrt=1,
                         target=target)(x, np.zeros(6), REPEATED)
        np.testing.assert_allclose(y_grad, WEIGHTS[:6])     # y[idx] + v: y passes through


@pytest.mark.parametrize("name", ["repeated", "pairs", "add.at", "for", "traced mask update",
                                  "traced mask update rows"])
def test_gradients_in_the_cuda_plan(name):
    program, args = CASES[name]
    wrt = _float_arguments(args)
    f = sg.grad(_loss(program), wrt=wrt, target="python")
    got = ptx_emulate.run(f._graph(list(args)), list(args))
    want = f(*args)
    for a, b in zip(_flat(got), _flat(want)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["repeated", "rows", "add buffered", "add.at", "for"])
@pytest.mark.parametrize("target", TARGETS)
def test_forward_mode_jacobians_and_hessians(name, target):
    program, args = CASES[name]
    x = args[0]
    tangent = floats(*x.shape)
    loss = _loss(program)
    value, t = sg.jvp(loss, target=target)(*args, tangent)
    np.testing.assert_allclose(t, np.sum(sg.grad(loss, target="python")(*args) * tangent), rtol=1e-11)
    fwd = sg.jacobian(program, mode="fwd", target=target)(*args)
    rev = sg.jacobian(program, mode="rev", target=target)(*args)
    np.testing.assert_allclose(fwd, rev, rtol=1e-12, atol=1e-14)
    eps, numeric = 1e-6, np.zeros_like(fwd)
    for k in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[k] = eps
        column = (program(x + step, *args[1:]) - program(x - step, *args[1:])) / (2 * eps)
        numeric[(Ellipsis,) + k] = column
    np.testing.assert_allclose(fwd, numeric, rtol=1e-6, atol=1e-8)
    H = sg.hessian(loss, target=target)(*args)
    np.testing.assert_allclose(H, np.swapaxes(H, 0, 1) if H.ndim == 2 else H, rtol=1e-12, atol=1e-14)
    g = sg.grad(loss, target="python")
    column = (g(x + eps * tangent, *args[1:]) - g(x - eps * tangent, *args[1:])) / (2 * eps)
    np.testing.assert_allclose(np.tensordot(H, tangent, x.ndim), column, rtol=1e-5, atol=1e-7)


# -- vmap -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0), (1, 0)])
@pytest.mark.parametrize("target", TARGETS)
def test_vmap_of_the_writes(in_axes, target):
    X = {0: floats(4, 6), 1: floats(6, 4), None: floats(6)}[in_axes[0]]
    idx = np.stack([REPEATED, np.roll(REPEATED, 1), ints(5, 4, 3, 2, 1, 0), ints(0, 0, 0, 0, 0, -6)])
    args = (X, idx if in_axes[1] == 0 else REPEATED)
    for program in (assign, lambda x, idx: add_at(x, x[:6] * 0.5, idx)):
        got = sg.vmap(program, in_axes=in_axes, target=target)(*args)
        example = [[np.take(a, i, axis=ax) if ax is not None else a for a, ax in zip(args, in_axes)]
                   for i in range(4)]
        np.testing.assert_allclose(got, np.stack([program(*e) for e in example]), rtol=1e-14)
    per_example = sg.vmap(sg.grad(_loss(assign)), in_axes=in_axes, target=target)(*args)
    for i, e in enumerate(example):
        np.testing.assert_allclose(per_example[i], sg.grad(_loss(assign), target="python")(*e),
                                   rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_vmap_of_updates_through_a_traced_mask(target):
    X, S = floats(4, 6), floats(4)
    got = sg.vmap(update_traced_mask, in_axes=(0, 0), target=target)(X, S)
    np.testing.assert_array_equal(got, np.stack([update_traced_mask(x, s) for x, s in zip(X, S)]))
    g = sg.vmap(sg.grad(_loss(update_traced_mask), wrt=(0, 1)), in_axes=(0, 0), target=target)(X, S)
    for i in range(4):
        want = sg.grad(_loss(update_traced_mask), wrt=(0, 1), target="python")(X[i], S[i])
        np.testing.assert_allclose(g[0][i], want[0], rtol=1e-12)
        np.testing.assert_allclose(g[1][i], want[1], rtol=1e-12)


def _gathers(x, idx):
    return x[idx] * 2.0 + np.take(x, idx) * x[idx]


def test_vmap_of_gathers_counts_negative_indices_per_example():
    """vmap of a gather with both the array and the index batched gathers from the batch
    flattened: a negative index counts from its own example's end (it read the previous
    example's last element), one out of range raises (it read another example's element)."""
    X, idx = floats(3, 4), ints(0, -1, 3, -4, -2, 2).reshape(3, 2)
    want = np.stack([_gathers(x, i) for x, i in zip(X, idx)])
    loss = _loss(_gathers)
    for target in TARGETS:
        np.testing.assert_array_equal(sg.vmap(_gathers, target=target)(X, idx), want)
        per_example = sg.vmap(sg.grad(loss), target=target)(X, idx)
        for x, i, g in zip(X, idx, per_example):
            np.testing.assert_allclose(g, sg.grad(loss, target="python")(x, i), rtol=1e-13)
        for bad in (ints(0, 4, 1, 1, 1, 1), ints(0, 0, -5, 0, 1, 1)):
            with pytest.raises(IndexError):
                sg.vmap(_gathers, target=target)(X, bad.reshape(3, 2))
    f = sg.vmap(_gathers)
    np.testing.assert_array_equal(ptx_emulate.run(f._graph([X, idx]), [X, idx]), want)
    with pytest.raises(IndexError, match="out of bounds"):
        bad = ints(0, 4, 1, 1, 1, 1).reshape(3, 2)
        ptx_emulate.run(f._graph([X, bad]), [X, bad])


# -- indices out of range, empty ones, what is refused --------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
def test_out_of_range_indices_raise_index_error(target):
    f = sg.differentiate(assign, target=target)
    for bad in (ints(0, 6), ints(-7, 1)):
        with pytest.raises(IndexError):
            f(floats(2), bad)                        # traced: at the call
        with pytest.raises(IndexError):
            sg.grad(_loss(assign), target=target)(floats(2), bad)
    with pytest.raises(IndexError, match="index 7 is out of bounds"):
        f(floats(2), [0, 7])                        # constant: while tracing
    with pytest.raises(IndexError):
        sg.differentiate(add_at, target=target)(floats(2), floats(6), ints(1, 6))


@pytest.mark.parametrize("target", TARGETS)
def test_an_empty_index_writes_nothing(target):
    x, y0, empty = floats(0), floats(6), ints()
    np.testing.assert_array_equal(sg.differentiate(assign, target=target)(x, empty), np.zeros(6))
    np.testing.assert_array_equal(sg.differentiate(add_at, target=target)(x, y0, empty), y0)
    g = sg.grad(_loss(add_buffered), wrt=(0, 1), target=target)(x, y0, empty)
    assert g[0].shape == (0,)
    np.testing.assert_allclose(g[1], np.cos(y0) * WEIGHTS[:6])


def write_into_argument(y, idx):
    y[idx] = 1.0
    return y


def add_at_into_argument(y, idx):
    np.add.at(y, idx, 1.0)
    return y


def add_at_into_expression(x, idx):
    y = np.zeros((2, 6))
    np.add.at(y[0], idx, x)
    return y


def add_at_float_into_int(idx):
    y = np.zeros(6, dtype=np.int64)
    np.add.at(y, idx, 1.5)
    return y


def mismatched_value(x, idx):
    y = np.zeros(6)
    y[idx] = x
    return y


def traced_mask_with_an_array(x):
    y = x * 1.0
    y[x > 1.0] = x
    return y


def traced_mask_update_with_an_array(x):
    y = x * 1.0
    y[x > 1.0] += x
    return y


def traced_mask_update_int_by_float(x):
    y = np.arange(6)
    y[x > 1.0] += 1.5
    return y


def float_index(x, k):
    y = np.zeros(6)
    y[k] = x
    return y


def test_refusals_name_the_construct_and_line():
    x, idx = floats(6), REPEATED
    cases = [(write_into_argument, (x, idx), 1, r"argument array 'y'"),
             (add_at_into_argument, (x, idx), 1, r"np\.add\.at into argument array 'y'"),
             (add_at_into_expression, (x, idx), 2, r"np\.add\.at into an expression"),
             (traced_mask_with_an_array, (x,), 2, r"y\[mask\] = v with an array v"),
             (traced_mask_update_with_an_array, (x,), 2,
              r"y\[mask\] \+= v with a boolean mask from data and an array v of shape \(6,\)")]
    for program, args, line, construct in cases:   # line: of the write, below the def
        with pytest.raises(sg.UnsupportedSyntaxError, match=construct) as info:
            sg.differentiate(program, target="python")(*args)
        assert info.value.lineno == program.__code__.co_firstlineno + line
        assert info.value.filename == __file__


def test_wrong_values_and_dtypes_are_numpy_errors():
    with pytest.raises(TypeError, match="same_kind"):
        sg.differentiate(add_at_float_into_int, target="python")(REPEATED)
    with pytest.raises(ValueError, match="could not be broadcast"):
        sg.differentiate(mismatched_value, target="python")(floats(4), REPEATED)
    with pytest.raises(IndexError, match="integer"):
        sg.differentiate(float_index, target="python")(floats(2), np.array([0.0, 1.0]))
    with pytest.raises(TypeError, match="same_kind"):          # NumPy: y[mask] += 1.5 on ints
        traced_mask_update_int_by_float(floats(6))
    for target in TARGETS:
        with pytest.raises(TypeError, match="same_kind"):
            sg.differentiate(traced_mask_update_int_by_float, target=target)(floats(6))


def _add_at_copy(y, v, idx):
    y = y * 1.0
    np.add.at(y, idx, v)
    return y


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_add_at_leaves_an_untouched_negative_zero(target):
    # y - scatter(-v): y + scatter(v) made an untouched -0.0 into +0.0 (the scatter's +0 fill)
    y = np.array([-0.0, 1.0, -0.0, 2.0, 0.0])
    v = np.array([0.5, -0.25, 3.0])
    for idx in (np.array([1, 1, 3]), np.array([0, 4, 0]), np.array([-1, 1, -4])):
        got = sg.differentiate(_add_at_copy, target=target)(y, v, idx)
        want = _add_at_copy(y, v, idx)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
