"""symgrad.runtime: the plumbing the API and every back end share."""
import numpy as np
import pytest

from symgrad import runtime


def test_output_trees_round_trip_without_recursion():
    value = 0.0
    for k in range(1, 5000):          # deeper than Python's recursion limit
        value = (value, float(k))
    leaves: list = []
    tree = runtime.build_tree(value, lambda v: leaves.append(v) or len(leaves) - 1)
    assert runtime.flatten_tree(value, tree) == leaves
    rebuilt = runtime.unflatten_tree(tree, leaves)   # (== on it would recurse: compare flat)
    assert rebuilt is not value and runtime.flatten_tree(rebuilt, tree) == leaves
    assert runtime.unflatten_tree(((0, 1), 2), "abc") == (("a", "b"), "c")
    list_tree = runtime.build_tree([1.0, (2.0,)], lambda v: int(v))
    assert list_tree == runtime.ListTree((1, (2,))) and tuple(list_tree) == (1, (2,))
    assert list_tree != (1, (2,))   # a list is not a tuple: different signatures
    assert runtime.top_level(0) == [0] and runtime.top_level((0, (1, 2))) == [0, (1, 2)]


def test_argument_keys_are_named_and_tell_bools_from_ints():
    a = np.ones((2, 3), np.float32)
    key = runtime.arg_key(a)
    assert (key.kind, key.dtype, key.shape) == ("array", np.float32, (2, 3))
    assert runtime.arg_key(True) != runtime.arg_key(1)            # a different specialisation
    assert runtime.arg_key(2.5) is runtime.FLOAT_KEY is runtime.arg_key(np.float64(1).item())
    assert runtime.arg_key(np.float32(1)) == runtime.ArgKey("scalar", np.dtype("float32"))
    for value in (a, np.int8(3), 2.0, True, 7, None, "mode"):
        standin = runtime.standin(runtime.arg_key(value))
        assert runtime.arg_key(standin) == runtime.arg_key(value)
    assert runtime.standin(key).strides == (0, 0)                  # takes no memory
    with pytest.raises(TypeError, match="expected a float, int, bool, NumPy array or function"):
        runtime.arg_key({1.0})   # a set: a list is a pytree (tests/test_pytrees.py)


def test_write_out_checks_every_array():
    out = (np.empty(2), np.empty(()))
    assert runtime.deliver((np.ones(2), np.array(3.0)), out) is out
    assert out[0].tolist() == [1.0, 1.0] and out[1] == 3.0
    with pytest.raises(ValueError, match="out= needs 2 arrays, got 1"):
        runtime.write_out((np.ones(2), 1.0), np.empty(2))
    with pytest.raises(ValueError, match="shape"):
        runtime.write_out(np.ones(2), np.empty(3))
