"""Regressions in loop regions (symgrad.loops, symgrad.region_autodiff) found by
tests/test_loops.py, each on target="python" and target="cpu"."""
import numpy as np
import pytest

import symgrad as sg


def appended_rows(W, xs):
    h = np.zeros(W.shape[0])
    hs = []
    for x in xs:
        h = np.tanh(W @ h + x)
        hs.append(h)
    return np.sum(np.stack(hs) * np.arange(1.0, len(xs) + 1.0)[:, None])


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_list_appended_in_a_loop_becomes_a_stacked_output(target):
    """StackedList.append was a Python method: the tracer inlined it like user code and its
    alias analysis iterated the list (which refuses), so every loop appending to a list fell
    back to unrolling."""
    rng = np.random.default_rng(0)
    W, xs = 0.5 * rng.standard_normal((3, 3)), rng.standard_normal((7, 3))
    f = sg.differentiate(appended_rows, target=target)
    assert f.ir_for(W, xs).count("= loop(") == 1
    assert f(W, xs) == pytest.approx(appended_rows(W, xs), rel=1e-12)
    assert sg.check_grad(appended_rows, W, xs) < 1e-6


def nested_rows(w, X):
    acc = 0.0 * w
    for row in X:
        for v in row:
            acc = 0.9 * acc + np.sin(v * w)
    return np.sum(acc * acc)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_gradient_of_a_loop_inside_a_loop(target):
    """The outer backward body reads the values the inner (augmented) loop stored: they were
    collected as the inner loop node itself (a tuple, which a stack cannot hold: an
    AttributeError in the proj shape rule) instead of as the proj results the body reads."""
    rng = np.random.default_rng(0)
    w, X = rng.standard_normal(2), rng.standard_normal((6, 5))
    f = sg.differentiate(nested_rows, target=target)
    assert f.ir_for(w, X).count("= loop(") == 2            # the inner one listed in its body
    assert f.grad.source_for(w, X).count("in reversed(range(") == 2
    assert f(w, X) == pytest.approx(nested_rows(w, X), rel=1e-12)
    assert sg.check_grad(nested_rows, w, X) < 1e-6
    np.testing.assert_allclose(f.grad(w, X), sg.grad(nested_rows, target="python")(w, X), rtol=1e-11)


def index_as_float(x, t):
    acc = x * 0.5
    for k in range(7):
        acc = np.exp(np.tanh(acc)) * 0.5 + t * x * (k + 1.0) * 0.1
    return np.sum(acc)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_loop_unrolled_after_its_first_iteration_ran_runs_it_once(target):
    """In float32, ``k + 1.0`` (an int64 loop index) promoted the carry to float64, so the
    loop was peeled and then unrolled; the unrolling ran all 7 iterations again after the
    peeled one (8 in all: a wrong value, found by the random loop programs, seed 37). The
    index now promotes as the Python int it stands for: the loop stays one float32 region."""
    x, t = np.array([0.7, -0.2], np.float32), np.float32(0.3)
    f = sg.differentiate(index_as_float, target=target)
    assert f.ir_for(x, t).count("= loop(") == 1
    value = f(x, t)
    assert np.asarray(value).dtype == np.float32
    np.testing.assert_allclose(value, index_as_float(x, t), rtol=1e-6)
    np.testing.assert_allclose(f.grad(x, t), sg.grad(index_as_float, target="python")(
        x.astype(np.float64), 0.3), rtol=1e-5)


def write_into_argument_rows(X):
    acc = 0.0
    for row in X:
        row *= 2.0
        acc = acc + np.sum(row)
    return acc


def write_into_local_rows(X):
    Y = X * 1.0
    acc = 0.0
    for row in Y:
        row *= 2.0
        acc = acc + np.sum(row)
    return acc + np.sum(Y)


def write_into_enumerated_rows(X):
    Y = X * 1.0
    for i, row in enumerate(Y):
        row[0] = i * 1.0
    return np.sum(Y * X)


def write_into_enumerated_argument_rows(X):
    for i, row in enumerate(X):
        row[1] = i * 1.0
    return np.sum(X)


def write_into_zipped_rows(X):
    Y = X * 1.0
    Z = X + 1.0
    for a, b in zip(Y, Z):
        a[0] = np.sum(b)
        b += a               # b is a row of Z: Z changes too
    return np.sum(Y * Z) + np.sum(X * Y)


def write_then_read_the_array(X):
    Y = X * 1.0
    acc = 0.0
    for i, row in enumerate(Y):
        row[1:] = row[1:] * i + np.sum(Y)   # Y's earlier rows are already written
        acc = acc + np.sum(Y * row)
    return acc + np.sum(Y) + np.sum(row)    # row: the last row, as written


def write_into_zipped_argument_rows(X):
    Y = X * 1.0
    for a, b in zip(Y, X):
        b[0] = np.sum(a)
    return np.sum(Y)


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("fn", [write_into_argument_rows, write_into_enumerated_argument_rows,
                                write_into_zipped_argument_rows])
@pytest.mark.parametrize("rows", [3, 6])
def test_write_into_the_rows_of_an_argument_is_refused(fn, rows, target):
    """A row of the caller's array is a view of it: NumPy would modify the caller's array, so
    the write is refused with the line, unrolled (3 rows) and as a loop region (6 rows) alike.
    The items of enumerate()/zip() were bound without the array's buffers, so a write into
    them was accepted and silently lost."""
    f = sg.differentiate(fn, target=target)
    with pytest.raises(sg.UnsupportedSyntaxError,
                       match=r"(into|to) '(b|row)', a row of argument array 'X' \(it would modify the caller's array\)"):
        f(np.arange(3.0 * rows).reshape(rows, 3))


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("fn", [write_into_local_rows, write_into_enumerated_rows,
                                write_into_zipped_rows, write_then_read_the_array])
@pytest.mark.parametrize("rows", [3, 6])
def test_write_into_the_rows_of_a_local_array_changes_it(fn, rows, target):
    """A write into a row (``for row in Y``, ``enumerate(Y)``, ``zip(Y, Z)``) of a local array
    changes the array, as in NumPy: unrolled (3 rows) and as a loop region (6 rows, the array
    carried through the loop) alike. Writes into enumerate()/zip() items were lost; those
    into ``for row in Y`` were refused."""
    X = np.arange(3.0 * rows).reshape(rows, 3) / 7
    f = sg.differentiate(fn, target=target)
    assert f(X) == pytest.approx(fn(X.copy()), rel=1e-12)
    assert ("= loop(" in f.ir_for(X)) == (rows > 4)
    assert sg.check_grad(fn, X) < 1e-6


def mean_with_a_counter(w, xs):
    total = 0.0
    count = 0
    for x in xs:
        total += np.sum(np.tanh(w * x))
        count += x.shape[0]
    return total / count


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_python_int_counter_carried_through_a_loop(target):
    """``count += x.shape[0]`` (ADBench's LSTM objective) carries a Python int: only float64
    weak carries were allowed, so the whole loop fell back to unrolling (a 1024-step loop then
    took minutes to trace). In float32 too it is a loop (the counter promotes weakly, as the
    Python int NumPy sees)."""
    rng = np.random.default_rng(0)
    w, xs = rng.standard_normal(3), rng.standard_normal((9, 3))
    f = sg.differentiate(mean_with_a_counter, target=target)
    assert "= loop(" in f.ir_for(w, xs)
    assert f(w, xs) == pytest.approx(mean_with_a_counter(w, xs), rel=1e-12)
    assert sg.check_grad(mean_with_a_counter, w, xs) < 1e-6
    w32, xs32 = w.astype(np.float32), xs.astype(np.float32)
    assert "= loop(" in f.ir_for(w32, xs32)
    value = f(w32, xs32)
    assert np.asarray(value).dtype == np.asarray(mean_with_a_counter(w32, xs32)).dtype
    np.testing.assert_allclose(value, mean_with_a_counter(w32, xs32), rtol=1e-6)


def write_into_a_carried_argument(x):
    for i in range(6):
        x[i] = 1.0
    return np.sum(x)


def write_into_a_carried_alias(x):
    y = x * 1.0
    z = y
    for i in range(6):
        z[i] = 1.0       # y is z: NumPy changes y too
    return np.sum(y)


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("fn, message", [
    (write_into_a_carried_argument, "item assignment into argument array 'x'"),
    (write_into_a_carried_alias, "item assignment into 'z', which may share memory with 'y'")])
def test_write_into_a_carried_array_sees_its_memory(fn, message, target):
    """A loop region traced its carries as fresh memory (their buffers were dropped): a write
    into a carried argument was accepted (the caller's array not changed) and one into an
    alias of another live array silently lost (a wrong value)."""
    with pytest.raises(sg.UnsupportedSyntaxError, match=message):
        sg.differentiate(fn, target=target)(np.arange(6.0))


def break_on_a_one_element_array(x):
    s = 0.0
    for i in range(50):
        s = s + np.exp(x) * 0.1
        if s > 3:          # s has shape (1,): NumPy takes its one element as the truth value
            break
    return s * x


def break_on_a_vector(x):
    s = np.zeros(2)
    for i in range(50):
        s = s + np.exp(x) * 0.1
        if s > 3:
            break
    return np.sum(s)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_break_on_a_one_element_array_tests_its_element(target):
    """The hidden done flag took the condition's shape (1,) and the loop was refused naming
    '<break>'; Python (NumPy) takes a one-element array's element as its truth value."""
    f = sg.differentiate(break_on_a_one_element_array, target=target)
    for x in (np.array([0.5]), np.array([-2.0]), np.array([3.0])):
        np.testing.assert_allclose(f(x), break_on_a_one_element_array(x), rtol=1e-14)
        eps = 1e-6
        numeric = (break_on_a_one_element_array(x + eps) - break_on_a_one_element_array(x - eps)) / (2 * eps)
        np.testing.assert_allclose(f.grad(x), numeric, rtol=1e-6)
    with pytest.raises(sg.UnsupportedSyntaxError, match=r"array of shape \(2,\).*ambiguous"):
        sg.differentiate(break_on_a_vector, target=target)(np.array([0.5, 1.0]))


def rnn_over_a_list(W, U, xs):
    h = np.zeros(W.shape[0])
    for x in xs:
        h = np.tanh(W @ h + U @ x)
    return np.sum(h ** 2)


def rnn_indexing_a_list(W, U, xs):
    h = np.zeros(W.shape[0])
    for t in range(len(xs)):
        h = np.tanh(W @ h + U @ xs[-1 - t])   # (a negative index too)
    return np.sum(h ** 2)


def adds_into_list_items(W, U, xs):
    local = [x * 1.0 for x in xs]
    for x in local:
        x += 0.5             # in place too: NumPy changes the list's arrays
    return np.sum(W @ np.tanh(U @ local[3]))


def writes_into_list_items(W, U, xs):
    local = [x * 1.0 for x in xs]
    for x in local:
        x[0] = 0.5           # NumPy changes the list's arrays: seen below
    return np.sum(W @ np.tanh(U @ local[3]))


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_a_sequence_passed_as_a_list_is_one_loop_region(target):
    """A list of arrays iterated (for x in xs) or indexed by the loop index (xs[t]) was
    unrolled: a 100-step RNN took 36 s to its first gradient against 1 s for the same data as
    an array. Now it is the rows of their stack: the IR is as long at 100 steps as at 10."""
    rng = np.random.default_rng(0)
    W, U = rng.normal(size=(6, 6)) * 0.3, rng.normal(size=(6, 3)) * 0.3
    for fn, reference in ((rnn_over_a_list, lambda W, U, X: rnn_over_a_list(W, U, X)),
                          (rnn_indexing_a_list, lambda W, U, X: rnn_over_a_list(W, U, X[::-1]))):
        lengths = []
        for T in (10, 100):
            xs = [rng.normal(size=3) for _ in range(T)]
            f = sg.value_and_grad(fn, wrt=(0, 1), target=target)
            value, (gW, gU) = f(W, U, xs)
            want_value, (want_gW, want_gU) = sg.value_and_grad(reference, wrt=(0, 1), target="python")(
                W, U, np.stack(xs))
            assert value == pytest.approx(want_value, rel=1e-13)
            np.testing.assert_allclose(gW, want_gW, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(gU, want_gU, rtol=1e-12, atol=1e-14)
            ir = sg.differentiate(fn, target=target).grad.ir_for(W, U, xs)
            assert "= loop(" in ir
            lengths.append(len(ir.splitlines()))
        assert lengths[1] <= lengths[0] + 2 * 90   # the stack's inputs grow, the body does not


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_a_write_into_a_list_item_is_still_refused_not_lost(target):
    """A body writing into the items keeps iterating the list itself (a row of the stack is
    not the list's array): the write is refused as before, never silently lost."""
    rng = np.random.default_rng(1)
    W, U = rng.normal(size=(4, 4)), rng.normal(size=(4, 3))
    xs = [rng.normal(size=3) for _ in range(8)]
    with pytest.raises(sg.UnsupportedSyntaxError, match="may share memory with 'local'"):
        sg.differentiate(writes_into_list_items, target=target)(W, U, xs)
    # (an augmented assignment iterated the stack and failed with 'got list': it is refused too)
    with pytest.raises(sg.UnsupportedSyntaxError, match="augmented assignment to 'x', which may "
                                                        "share memory with 'local'"):
        sg.differentiate(adds_into_list_items, target=target)(W, U, xs)
