"""In-place writes (item assignment, augmented assignment on arrays) follow NumPy where the
array written is private to the function, and are refused, naming the line, where it may
share memory with another live name or with memory the function does not own (an argument,
a global, a closure): a functional update could not show the write through the other name,
and we never mutate a caller's array."""
import inspect

import numpy as np
import pytest

import symgrad as sg

TARGETS = ("cpu", "python")
TABLE = np.array([1.0, 2.0, 3.0])      # a module global array


# -- writes through views and aliases are refused -----------------------------------------------
def write_through_slice_of_argument(x):
    v = x[1:]
    v[0] = 5.0
    return np.sum(x)


def augment_reshape_of_argument(x):
    v = x.reshape(-1)
    v += 1.0
    return np.sum(x)


def augment_transpose_of_argument(x):
    v = x.T
    v *= 2.0
    return np.sum(x)


def augment_asarray_of_argument(x):
    v = np.asarray(x)
    v -= 1.0
    return np.sum(x)


def local_alias_then_augment(x):
    a = x * 1.0
    b = a
    a += 1.0
    return np.sum(b)


def local_view_then_write(x):
    a = x * 1.0
    v = a[:2]
    v[0] = 7.0
    return np.sum(a)


def row_of_local_then_augment(x):
    a = x * 1.0
    for row in a:
        row += 1.0
    return np.sum(a)


def row_of_aliased_local_then_augment(x):
    a = x * 1.0
    b = a                # a second name for a's memory: the write through the row would show
    for row in a:        # in b too, which a functional update of a cannot give
        row += 1.0
    return np.sum(a * b)


def alias_held_by_a_list(x):
    a = x * 1.0
    keep = [a]
    a[0] = 3.0
    return np.sum(keep[0])


def write_through_helper_view(x):
    a = x * 1.0
    v = first_two(a)
    v[0] = 9.0
    return np.sum(a)


def first_two(a):
    return a[:2]


def write_into_global_view(x):
    v = TABLE[1:]
    v[0] = 4.0
    return np.sum(x * TABLE)


def augment_parameter_in_helper(x):
    a = x * 1.0
    bump(a)
    return np.sum(a)


def bump(a):
    a += 1.0
    return a


def row_at_loop_index_then_write(x):
    M = np.outer(x, x)
    t = 0.0
    for i in range(M.shape[0]):
        v = M[i]                     # a view of row i, as M[0] is
        M[i, 0] = M[i, 0] + 1.0      # NumPy: v sees this
        t = t + np.sum(v)
    return t


def row_at_data_index_then_write(x):
    M = np.outer(x, x)
    k = np.argmax(x)                 # a NumPy integer scalar: basic indexing, a view
    v = M[k]
    M[k, 0] = 9.0
    return np.sum(v)


def view_rebound_from_itself_next(x):
    a = x * 1.0
    v = a[1:]
    a[1] = 5.0
    v = v * 2.0          # reads the view NumPy changed
    return np.sum(v) + np.sum(a)


def view_rebound_by_a_call_next(x):
    a = x * 1.0
    v = a[1:]

    def peek():
        return np.sum(v)
    a[1] = 5.0
    v = peek()           # the call reads the changed view before v is rebound
    return v + np.sum(a)


def view_read_after_the_next_statement(x):
    a = x * 1.0
    v = a[1:]
    a[1] = 5.0
    w = a * 2.0
    v = v + np.sum(w)
    return np.sum(v)


REFUSED = [
    (row_at_loop_index_then_write, "'v'"),
    (row_at_data_index_then_write, "'v'"),
    (write_through_slice_of_argument, "argument 'x'"),
    (augment_reshape_of_argument, "argument 'x'"),
    (augment_transpose_of_argument, "argument 'x'"),
    (augment_asarray_of_argument, "argument 'x'"),
    (local_alias_then_augment, "'b'"),
    (local_view_then_write, "'a'"),
    (row_of_aliased_local_then_augment, "'b'"),
    (alias_held_by_a_list, "'keep'"),
    (write_through_helper_view, "'a'"),
    (write_into_global_view, "global 'TABLE'"),
    (augment_parameter_in_helper, "'a'"),
    (view_rebound_from_itself_next, "'v'"),
    (view_rebound_by_a_call_next, "'v'"),
    (view_read_after_the_next_statement, "'v'"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn, other", REFUSED, ids=[c[0].__name__ for c in REFUSED])
def test_write_to_shared_memory_is_refused_at_its_line(fn, other, target):
    x = np.array([[1.0, 2.0], [3.0, 4.0]]) if "transpose" in fn.__name__ or "row" in fn.__name__ \
        else np.array([1.0, 2.0, 3.0])
    before = x.copy()
    f = sg.differentiate(fn, target=target)
    with pytest.raises(sg.UnsupportedSyntaxError) as info:
        f(x)
    err = info.value
    assert other in str(err) and ".copy()" in str(err)
    assert err.filename == __file__
    lines, start = inspect.getsourcelines(fn)
    helper_lines, helper_start = inspect.getsourcelines(bump)
    assert start < err.lineno < start + len(lines) or \
        (fn is augment_parameter_in_helper and helper_start < err.lineno < helper_start + len(helper_lines))
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(TABLE, [1.0, 2.0, 3.0])


# -- writes to private arrays follow NumPy -------------------------------------------------------
def fresh_product_augmented(x):
    v = x * 2.0
    v *= x
    v *= x               # v stays private after an in-place update by an argument
    return np.sum(v)


def scalar_rebound_to_array(x, s):
    v = s
    v += x               # a Python float: rebinding to a fresh array
    v += x               # now an ndarray: in place, on memory the function owns
    return np.sum(v)


def copy_breaks_the_alias(x):
    a = x * 1.0
    b = a.copy()
    a += 1.0
    a[0] = 0.0
    return np.sum(a * b)


def rebinding_is_not_in_place(x):
    a = x * 1.0
    b = a
    a = a + 1.0          # a new array: b still sees the old one
    return np.sum(a * b)


def alias_dead_after_rebinding(x):
    a = x * 1.0
    b = a
    b = x * 3.0          # b no longer refers to a's memory
    a += 1.0
    return np.sum(a + b)


def view_of_fresh_read_before_write(x):
    a = np.sin(x)
    total = np.sum(a[1:])
    a[0] = 2.0           # total is a number computed before: no alias
    return total + np.sum(a)


def scalar_from_array_is_a_copy(x):
    s = x[0]
    s += 1.0             # a NumPy scalar: rebinding, x unchanged
    return s + np.sum(x)


def helper_returns_fresh(x):
    h = doubled(x)
    h += 1.0
    h[1] = x[0]
    return np.sum(h * x)


def doubled(a):
    return a * 2.0


def float32_in_place_keeps_dtype(x):
    v = x * 1.0
    v += np.float64(0.5) * x.astype(np.float64)
    return v


def rows_chained_through_a_view(x):
    """ADBench's lstm_predict: h is a view of row i - 2 while rows i, i + 1 are written, and
    the next statement rebinds it (no one reads the stale view)."""
    s = np.zeros((4, 3)) + x
    h = x * 2.0
    for i in range(0, 4, 2):
        (s[i], s[i + 1]) = np.tanh(h + s[i]), s[i + 1] * h
        h = s[i]
    return np.sum(h * h) + np.sum(s)


PRIVATE = [fresh_product_augmented, copy_breaks_the_alias, rebinding_is_not_in_place,
           alias_dead_after_rebinding, view_of_fresh_read_before_write,
           scalar_from_array_is_a_copy, helper_returns_fresh, rows_chained_through_a_view]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", PRIVATE, ids=[f.__name__ for f in PRIVATE])
def test_writes_to_private_arrays_follow_numpy(fn, target):
    x = np.array([0.3, -1.2, 2.0])
    before = x.copy()
    f = sg.differentiate(fn, target=target)
    np.testing.assert_allclose(f(x), fn(x.copy()), rtol=1e-13)
    np.testing.assert_array_equal(x, before)
    assert sg.check_grad(f, x) < 1e-6


@pytest.mark.parametrize("target", TARGETS)
def test_write_through_the_rows_of_a_local_follows_numpy(target):
    """A loop's row of a local array is a view of it: ``row += 1`` changes the array (it was
    refused while rows could only be copies)."""
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    f = sg.differentiate(row_of_local_then_augment, target=target)
    assert f(x) == pytest.approx(row_of_local_then_augment(x.copy()))
    assert sg.check_grad(f, x) < 1e-6


@pytest.mark.parametrize("target", TARGETS)
def test_scalar_rebound_to_array_then_augmented(target):
    x, s = np.array([0.3, -1.2, 2.0]), 0.5
    f = sg.differentiate(scalar_rebound_to_array, wrt=(0, 1), target=target)
    assert f(x, s) == pytest.approx(scalar_rebound_to_array(x, s))
    gx, gs = f.grad(x, s)
    np.testing.assert_allclose(gx, 2 * np.ones(3))
    assert gs == pytest.approx(3.0)


@pytest.mark.parametrize("target", TARGETS)
def test_in_place_update_keeps_the_arrays_dtype(target):
    x = np.array([0.25, 1.5], dtype=np.float32)
    f = sg.differentiate(float32_in_place_keeps_dtype, target=target)
    out = f(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, float32_in_place_keeps_dtype(x.copy()))


def in_place_broadcast_growth(x, y):
    v = x * 1.0
    v += y               # NumPy: non-broadcastable output operand
    return np.sum(v)


def test_in_place_update_cannot_grow_the_array():
    with pytest.raises(ValueError, match="broadcast"):
        sg.differentiate(in_place_broadcast_growth, target="python")(np.ones(3), np.ones((2, 3)))


# -- item updates on arrays made inside the function (item 15) -----------------------------------
def zeros_then_items(x):
    y = np.zeros(3)
    y[0] = x[1] * 2.0
    y[2] = np.sum(x)
    return np.sum(y * y)


def constant_items_stay_numpy(x):
    y = np.ones((2, 2))
    y[0, 1] = 5.0
    y[1] += 2.0
    return np.sum(y * x)


def full_empty_array_items(x):
    a = np.full(2, 3.0)
    a[1] = x[0]
    b = np.array([1.0, 2.0])
    b[0] = x[1] ** 2
    c = np.zeros((2, 3))
    c[:, 1] = x[:2]
    c += 1.0
    return np.sum(a) + np.sum(b * b) + np.sum(c * c)


LOCAL_ARRAYS = [zeros_then_items, constant_items_stay_numpy, full_empty_array_items]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", LOCAL_ARRAYS, ids=[f.__name__ for f in LOCAL_ARRAYS])
def test_item_updates_on_arrays_made_inside(fn, target):
    x = np.array([0.3, -1.2, 2.0]) if fn is not constant_items_stay_numpy else np.array([[0.5, 2.0], [1.0, -1.0]])
    f = sg.differentiate(fn, target=target)
    np.testing.assert_allclose(f(x), fn(x.copy()), rtol=1e-13)
    assert sg.check_grad(f, x) < 1e-6


def write_constant_twice_reads_between(x):
    y = np.zeros(2)
    first = y[0] + x[0]
    y[0] = 4.0
    return first * np.sum(y) + y[0] * x[1]


@pytest.mark.parametrize("target", TARGETS)
def test_constant_array_written_after_a_read(target):
    x = np.array([0.5, 2.0])
    f = sg.differentiate(write_constant_twice_reads_between, target=target)
    assert f(x) == pytest.approx(write_constant_twice_reads_between(x))


def global_array_item_write(x):
    TABLE[0] = 2.0
    return np.sum(x * TABLE)


def test_item_write_into_a_global_array_is_refused():
    with pytest.raises(sg.UnsupportedSyntaxError, match="global 'TABLE'"):
        sg.differentiate(global_array_item_write, target="python")(np.ones(3))
    np.testing.assert_array_equal(TABLE, [1.0, 2.0, 3.0])


def _closure_writer():
    weights = np.ones(3)

    def write_into_closure(x):
        weights[0] = x          # the closure's array belongs to the enclosing function
        return np.sum(weights * x)
    return write_into_closure, weights


def test_item_write_into_a_closure_array_is_refused():
    fn, weights = _closure_writer()
    with pytest.raises(sg.UnsupportedSyntaxError, match="closure variable 'weights'"):
        sg.differentiate(fn, target="python")(2.0)
    np.testing.assert_array_equal(weights, [1.0, 1.0, 1.0])


def gathered_rows_are_copies(x, idx):
    v = x[idx]              # an index array copies (NumPy): v is private
    v[0] = 10.0
    t = TABLE[[0, 2]]       # likewise for a constant table
    t[1] = 0.0
    return np.sum(v * x[:2]) + np.sum(t)


@pytest.mark.parametrize("target", TARGETS)
def test_gathers_make_private_arrays(target):
    x, idx = np.array([0.3, -1.2, 2.0]), np.array([2, 0])
    f = sg.differentiate(gathered_rows_are_copies, target=target)
    assert f(x, idx) == pytest.approx(gathered_rows_are_copies(x.copy(), idx))
    np.testing.assert_allclose(f.grad(x, idx), [10.0 + x[1], x[0], 0.0])   # 10 x0 + x0 x1
    np.testing.assert_array_equal(TABLE, [1.0, 2.0, 3.0])


def zeros_written(x):
    y = np.zeros(4)
    y[1] = x[0]
    z = np.array([0.0, -0.0, 0.0])
    z[0] = x[1]
    return np.sum(y * x), z[1:] * 1.0


def test_written_constant_zeros_read_as_zeros():
    f = sg.differentiate(zeros_written, target="python")
    x = np.array([0.3, -1.2, 2.0, 1.0])
    value, rest = f(x)
    assert "y = np.zeros" in f.source and "z = np.array(" in f.source
    np.testing.assert_array_equal(np.signbit(rest), [True, False])   # the -0.0 survived
    assert value == pytest.approx(zeros_written(x)[0])


LOG = []
CONFIG = {"scale": 2.0}


def appends_to_a_global_list(x):
    LOG.append(x)
    return np.sum(x)


def writes_a_global_dict(x):
    CONFIG["scale"] = 3.0
    return np.sum(x) * CONFIG["scale"]


def augments_a_global_name(x):
    LOG += [x]
    return np.sum(x)


def mutates_local_containers(x):
    rows, seen = [], {}
    rows.append(x)
    rows += [x * 2.0]
    seen["a"] = rows.pop()
    def add(v):
        rows.append(v)            # an enclosing function's list: state inside the trace
    add(x * 3.0)
    return np.sum(np.stack(rows)) + np.sum(seen["a"])


@pytest.mark.parametrize("fn", [appends_to_a_global_list, writes_a_global_dict])
def test_global_containers_are_not_mutated_while_tracing(fn):
    with pytest.raises(sg.UnsupportedSyntaxError, match="not a variable of the traced function"):
        sg.differentiate(fn, target="python")(np.ones(3))
    assert LOG == [] and CONFIG == {"scale": 2.0}


def test_augmented_assignment_to_a_global_is_unbound_as_in_python():
    with pytest.raises(UnboundLocalError):
        augments_a_global_name(np.ones(3))
    with pytest.raises(UnboundLocalError, match="line|LOG"):
        sg.differentiate(augments_a_global_name, target="python")(np.ones(3))
    assert LOG == []


@pytest.mark.parametrize("target", TARGETS)
def test_local_containers_mutate_freely(target):
    x = np.array([0.3, -1.2, 2.0])
    f = sg.differentiate(mutates_local_containers, target=target)
    assert f(x) == pytest.approx(mutates_local_containers(x))


def list_in_place_operators(x):
    a = [x]
    b = a
    a += [x * 2.0]           # extends the one list: b sees it
    c = [x * 3.0]
    c *= 2                   # the same array twice
    return np.sum(np.stack(b)) + np.sum(np.stack(c)) + len(b)


def repeated_item_written(x):
    c = [x * 3.0]
    c *= 2
    c[0] += 1.0              # NumPy changes c[1] too: refused
    return np.sum(np.stack(c))


@pytest.mark.parametrize("target", TARGETS)
def test_list_in_place_operators_follow_python(target):
    x = np.array([0.3, -1.2, 2.0])
    f = sg.differentiate(list_in_place_operators, target=target)
    assert f(x) == pytest.approx(list_in_place_operators(x))
    with pytest.raises(sg.UnsupportedSyntaxError, match="repeated"):
        sg.differentiate(repeated_item_written, target=target)(x)


# -- 0-d values: NumPy's 0-d ndarrays are mutable, its scalars are not --------------------------
# np.where, np.select, np.array, .copy() of a 0-d array return a 0-d ndarray even for scalar
# operands (`v2 = v1; v2 += 1` changes v1 too); ufuncs, arithmetic, reductions and x[0] return
# immutable NumPy scalars (`t = s; t += 1` rebinds t only).
def zero_d_where_alias_augmented(s):
    v1 = np.where(s > s, s * s, s - s)
    v2 = v1
    v2 -= ((s + s) * s)          # NumPy: v1 changes too
    return (v2 - v1), s


def zero_d_where_updated_then_aliased(s, t):
    v1 = np.where((t - t) > s, (t - t) * s, (t - t) - s)
    v1 -= s / (1.0 + s * s)      # in place on a fresh 0-d array: a functional update
    v2 = v1
    v2 += v1                     # NumPy: doubles v1 too
    return [v1, s]


def zero_d_copy_alias_item_assigned(s):
    v1 = np.array(s).copy()
    v2 = v1.reshape(())          # a view of v1
    v2[...] = s * 3.0
    return v1 + v2


ZERO_D_REFUSED = [(zero_d_where_alias_augmented, "'v1'"), (zero_d_where_updated_then_aliased, "'v1'"),
                  (zero_d_copy_alias_item_assigned, "'v1'")]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn, other", ZERO_D_REFUSED, ids=[c[0].__name__ for c in ZERO_D_REFUSED])
def test_write_to_shared_zero_d_array_is_refused(fn, other, target):
    args = (0.7,) * len(inspect.signature(fn).parameters)
    with pytest.raises(sg.UnsupportedSyntaxError) as info:
        sg.differentiate(fn, target=target)(*args)
    err = info.value
    assert other in str(err) and ".copy()" in str(err) and "rebind" in str(err)
    assert err.filename == __file__


def scalars_rebind(x):
    s2 = np.sum(x)
    t = s2
    t += 1.0                     # a NumPy scalar: t rebinds, s2 keeps its value
    u = x[0]
    w = u
    w *= 3.0
    m = np.minimum(s2, u)
    n = m
    n -= 2.0
    return s2 + 10.0 * t + 100.0 * u + 1000.0 * w + m * n


def fresh_zero_d_arrays_in_place(x):
    v = np.where(x[0] > 0.0, x[1] * x[2], x[2])
    v += x[0] * x[1]             # fresh, unshared: NumPy updates it in place
    v *= v
    c = np.sum(x).copy()         # a NumPy scalar's copy is a scalar: rebinds
    d = c
    d += 1.0
    i = np.zeros(())             # a float 0-d array keeps its dtype in place
    i += x[1]
    return v + c * d + i


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [scalars_rebind, fresh_zero_d_arrays_in_place])
def test_zero_d_values_follow_numpy(fn, target):
    x = np.array([0.3, -1.2, 2.0])
    f = sg.differentiate(fn, target=target)
    assert f(x) == pytest.approx(fn(x), rel=1e-12)
    eps, g = 1e-6, f.grad(x)
    for i in range(3):
        d = np.zeros(3)
        d[i] = eps
        assert g[i] == pytest.approx((fn(x + d) - fn(x - d)) / (2 * eps), rel=1e-5, abs=1e-6)


def zero_d_kind_chosen_by_data(x):
    if x[0] > 0.0:
        v = np.where(x[1] > 0.0, x[1], x[2])      # a 0-d array
    else:
        v = x[1] * 2.0                             # a NumPy scalar
    w = v
    w += 1.0                     # NumPy changes v on one branch only: refused
    return v + w


def zero_d_kind_chosen_by_data_unshared(x):
    if x[0] > 0.0:
        v = np.where(x[1] > 0.0, x[1], x[2])
    else:
        v = x[1] * 2.0
    v += 1.0                     # unshared, same dtype: both readings agree
    return v * x[2]


def zero_d_kind_chosen_by_data_dtype(x):
    if x[0] > 0.0:
        v = np.zeros((), dtype=np.float32)
    else:
        v = np.float32(x[1])
    v += x[2]                    # float32 in place, float64 rebound: refused
    return v


@pytest.mark.parametrize("target", TARGETS)
def test_zero_d_kind_chosen_by_data_is_conservative(target):
    x = np.array([0.3, -1.2, 2.0])
    with pytest.raises(sg.UnsupportedSyntaxError, match="'v'"):
        sg.differentiate(zero_d_kind_chosen_by_data, target=target)(x)
    f = sg.differentiate(zero_d_kind_chosen_by_data_unshared, target=target)
    for y in (x, -x):
        assert f(y) == pytest.approx(zero_d_kind_chosen_by_data_unshared(y), rel=1e-12)
    with pytest.raises(sg.UnsupportedSyntaxError, match="0-d array .* or a scalar"):
        sg.differentiate(zero_d_kind_chosen_by_data_dtype, target=target)(x)


def item_assignment_into_a_scalar(x):
    s = np.sum(x)
    s[...] = 1.0
    return s


def test_item_assignment_into_a_numpy_scalar_is_a_type_error():
    with pytest.raises(TypeError):
        item_assignment_into_a_scalar(np.ones(3))
    with pytest.raises(TypeError, match="scalar"):
        sg.differentiate(item_assignment_into_a_scalar, target="python")(np.ones(3))


def zero_d_kind_chosen_by_conditional_expression(x):
    v = np.where(x[1] > 0.0, x[1], x[2]) if x[0] > 0.0 else x[1] * 2.0
    w = v
    w += 1.0
    return v + w


def _zero_d_array_or_scalar(x):
    if x[0] > 0.0:
        return np.where(x[1] > 0.0, x[1], x[2])
    return x[1] * 2.0


def zero_d_kind_chosen_by_return(x):
    v = _zero_d_array_or_scalar(x)
    w = v
    w += 1.0
    return v + w


def zero_d_array_repeated_in_list(x):
    c = [np.where(x[0] > 0.0, x[1], x[2])] * 2
    c[0] += 1.0                  # NumPy changes c[1] too
    return c[0] + c[1]


def zero_d_array_in_list_and_name(x):
    v = np.where(x[0] > 0.0, x[1], x[2])
    items = [v, x[0]]
    items[0] += 1.0              # the 0-d array v itself
    return v + items[0]


def zero_d_view_of_local_array(x):
    a = x * 2.0
    e = a[0, ...]                # a 0-d ndarray view of a (x[0] would be a scalar)
    e += 1.0
    return np.sum(a)


ZERO_D_MAY_SHARE = [zero_d_kind_chosen_by_conditional_expression, zero_d_kind_chosen_by_return,
                    zero_d_array_repeated_in_list, zero_d_array_in_list_and_name,
                    zero_d_view_of_local_array]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", ZERO_D_MAY_SHARE, ids=[f.__name__ for f in ZERO_D_MAY_SHARE])
def test_zero_d_arrays_that_may_share_are_refused(fn, target):
    x = np.array([0.3, -1.2, 2.0])
    with pytest.raises(sg.UnsupportedSyntaxError, match="share memory|may be"):
        sg.differentiate(fn, target=target)(x)


def zero_d_items_written_unshared(x):
    v = np.where(x[0] > 0.0, x[1], x[2])
    v[...] += x[0]               # a private 0-d array: in place, as NumPy
    v[()] = v * 3.0
    u = np.array(x[2] * 1.0)
    u[...] = u + v
    e = x[0] * 1.0               # a scalar: rebinds
    e += 1.0
    return v * u + e


@pytest.mark.parametrize("target", TARGETS)
def test_private_zero_d_arrays_written_by_item_follow_numpy(target):
    x = np.array([0.3, -1.2, 2.0])
    f = sg.differentiate(zero_d_items_written_unshared, target=target)
    for y in (x, -x):
        assert f(y) == pytest.approx(zero_d_items_written_unshared(y), rel=1e-12)


def scalar_items_rebind(x):
    total = 0.0
    for e in x:                  # the items of a 1-d array are NumPy scalars
        f = e
        f += 1.0
        total = total + e * f
    a, b, c = x
    d = a
    d *= 2.0
    squares = [t for t in x]
    g = squares[0]
    h = g
    h += 5.0
    return total + a * d + b * c + g * h


def zero_d_array_taken_from_list(x):
    v = np.where(x[0] > 0.0, x[1], x[2])
    items = [v]
    w = items[0]                 # the 0-d array v itself
    w += 1.0
    return v + w


@pytest.mark.parametrize("target", TARGETS)
def test_items_of_lists_and_1d_arrays_keep_their_kind(target):
    x = np.array([0.3, -1.2, 2.0])
    f = sg.differentiate(scalar_items_rebind, target=target)
    assert f(x) == pytest.approx(scalar_items_rebind(x), rel=1e-12)
    with pytest.raises(sg.UnsupportedSyntaxError, match="'v'"):
        sg.differentiate(zero_d_array_taken_from_list, target=target)(x)


def zero_d_int_array_augmented_by_float(x):
    k = np.where(x[0] > 0.0, 1, 2)   # an int64 0-d array: NumPy's in-place cast rule applies
    k += x[1]
    return k * x[2]


@pytest.mark.parametrize("target", TARGETS)
def test_zero_d_array_keeps_its_dtype_in_place(target):
    x = np.array([0.3, -1.2, 2.0])
    with pytest.raises(TypeError):
        zero_d_int_array_augmented_by_float(x)
    with pytest.raises(TypeError, match="same_kind"):
        sg.differentiate(zero_d_int_array_augmented_by_float, target=target)(x)
