"""Unsupported syntax raises UnsupportedSyntaxError naming file, line, column, source line and
construct; bad calls raise TypeError/ValueError naming the user's line."""
import inspect

import numpy as np
import pytest

import symgrad as sg


def uses_async_for(x):   # while/for ... else work (tests/test_user_idioms.py)
    async def rows():
        yield x
    return x


def uses_try(x):
    try:
        return x * 2
    except ValueError:
        return x


def uses_with(x):
    with open("f") as fh:
        return x


def uses_global(x):
    global COUNTER
    return x


def uses_class(x):
    class A:
        pass
    return x


def uses_del(x):
    y = x
    del y
    return x


def uses_yield(x):
    yield x


def uses_print(x):
    print(x)
    return x


def uses_traced_mask(x):
    return np.sum(x[x > 0.5])


def uses_data_range(x):
    s = 0.0
    for i in range(x):
        s = s + i
    return s


def mutates_argument(x):
    x[0] = 1.0
    return np.sum(x)


def augassign_argument(x):
    x += 1.0
    return np.sum(x)


def break_in_data_if(x):
    s = 0.0
    for c in [0.0, 1.0, 2.0]:   # (a list of numbers unrolls; a range or an array is a region)
        if x > c:
            break
        s = s + x
    return s


def return_in_data_if_in_loop(x):
    for i in range(3):
        if x > i:
            return x
    return -x


def unsupported_library_call(x):
    return np.sum(np.linalg.svd(x)[1])


def shift_on_data(x):
    return x << 2


def int_of_data(x):   # float(x) stays traced (tests/test_user_idioms.py); int(x) is refused
    return np.zeros(int(x)) + x


def walrus(x):   # := in a condition works (tests/test_user_idioms.py); in a choice on data not
    return x if x > 0 else (y := x * 2)


def infinite_recursion(x):
    return infinite_recursion(x * 0.5) if x > 0 else x


def set_literal(x):
    s = {1, 2}
    return x


CASES = [
    (uses_async_for, (1.0,), "async"),
    (uses_try, (1.0,), "try statement"),
    (uses_with, (1.0,), "with statement"),
    (uses_global, (1.0,), "global statement"),
    (uses_class, (1.0,), "class definition"),
    (uses_del, (1.0,), "del statement"),
    (uses_print, (1.0,), "print() (I/O)"),
    (uses_traced_mask, (np.ones((2, 2)),), "boolean mask computed from traced data"),
    (uses_data_range, (3.0,), "range() over a traced value"),
    (mutates_argument, (np.ones(3),), "item assignment into argument array 'x'"),
    (augassign_argument, (np.ones(3),), "augmented assignment to argument array 'x'"),
    (break_in_data_if, (1.0,), "break/continue inside an if on a data-dependent condition"),
    (return_in_data_if_in_loop, (1.0,), "return inside a data-dependent if within a loop"),
    (unsupported_library_call, (np.eye(2),), "np.linalg.svd is not supported"),
    (shift_on_data, (1.0,), "operator '<<' on traced arrays"),
    (int_of_data, (1.0,), "int() of a traced value"),
    (walrus, (1.0,), "walrus operator"),
    (infinite_recursion, (1.0,), "recursion deeper than 40 calls"),
    (set_literal, (1.0,), "set literal"),
]


@pytest.mark.parametrize("fn, args, construct", CASES, ids=[c[0].__name__ for c in CASES])
def test_unsupported_construct_names_line(fn, args, construct):
    f = sg.differentiate(fn, target="python")
    with pytest.raises(sg.UnsupportedSyntaxError) as info:
        f.grad(*args)
    err = info.value
    message = str(err)
    assert construct in message
    assert err.filename == __file__
    lines, start = inspect.getsourcelines(fn)
    assert start < err.lineno < start + len(lines)
    assert f"{__file__}:{err.lineno}:" in message
    assert err.source_line.strip() in message and err.source_line.strip()
    assert isinstance(err, SyntaxError)   # tools that understand SyntaxError show the location


def test_generator_function_is_rejected():
    with pytest.raises(sg.UnsupportedSyntaxError, match="yield"):
        sg.differentiate(uses_yield, target="python")(1.0)


def shape_mismatch(x, y):
    z = x + y
    return np.sum(z)


def test_shape_error_points_at_user_line():
    f = sg.differentiate(shape_mismatch, target="python")
    with pytest.raises(ValueError) as info:
        f(np.ones(3), np.ones(4))
    lineno = inspect.getsourcelines(shape_mismatch)[1] + 1
    assert f"{__file__}:{lineno}" in str(info.value)
    assert "z = x + y" in str(info.value)
    assert "could not be broadcast" in str(info.value)


def test_bad_arguments():
    f = sg.differentiate(shape_mismatch, target="python")
    with pytest.raises(TypeError, match="missing"):
        f(np.ones(3))
    with pytest.raises(TypeError, match="set"):   # a list is a pytree argument; a set is not
        f({1.0, 2.0}, np.ones(2))
    with pytest.raises(TypeError, match="dtype"):
        f(np.ones(2, dtype=complex), np.ones(2))
    with pytest.raises(ValueError, match="40 dimensions"):   # not NumPy's RuntimeError inside
        sg.differentiate(shape_mismatch)(np.ones((1,) * 40), 1.0)
    with pytest.raises(ValueError, match="wrt"):
        sg.differentiate(shape_mismatch, wrt="nope")
    with pytest.raises(ValueError, match="target"):
        sg.differentiate(shape_mismatch, target="tpu")


def test_returning_none_is_an_error():
    def nothing(x):
        x * 2
    with pytest.raises(TypeError, match="returned None"):
        sg.differentiate(nothing, target="python")(1.0)


def test_one_branch_variable():
    def half_defined(x):
        if x > 0:
            y = x
        return y
    with pytest.raises(sg.UnsupportedSyntaxError, match="only one branch"):
        sg.differentiate(half_defined, target="python")(1.0)
