"""A Function pickles (by reference to its Python function) and deep-copies, so
multiprocessing, concurrent.futures and Dask can ship it; derived functions too. It used to
fail with "cannot pickle '_thread.lock'"."""
import concurrent.futures
import copy
import multiprocessing
import os
import pickle
import sys

import cloudpickle
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pickle_helpers as h  # noqa: E402

import symgrad as sg  # noqa: E402

X, Y = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, 3.0])


def _variants(target):
    plain = sg.differentiate(h.plain, wrt=(0, 1), target=target)
    return {
        "decorated": (h.decorated, (X,)),
        "decorated.grad": (h.decorated.grad, (X,)),
        "decorated.value_and_grad": (h.decorated.value_and_grad, (X,)),
        "plain": (plain, (X, Y)),
        "plain.grad": (plain.grad, (X, Y)),
        "sg.hvp(plain)": (sg.hvp(h.plain, target=target), (X, Y, Y)),
        "sg.grad(plain, wrt=1)": (sg.grad(h.plain, wrt=1, target=target), (X, Y)),
        "sg.value_and_grad(decorated)": (sg.value_and_grad(h.decorated, target=target), (X,)),
    }


def _assert_same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for u, v in zip(a, b):
            _assert_same(u, v)
    else:
        assert type(a) is type(b)
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_round_trip_in_process(target):
    for name, (f, args) in _variants(target).items():
        want = f(*args)              # a used Function: its caches hold graphs and code
        twin = pickle.loads(pickle.dumps(f))
        assert twin.target == f.target and twin.wrt == f.wrt, name
        _assert_same(twin(*args), want)
        _assert_same(copy.deepcopy(f)(*args), want)
        _assert_same(copy.copy(f)(*args), want)


def test_identity_of_module_level_functions_is_kept():
    assert pickle.loads(pickle.dumps(h.decorated)) is h.decorated
    assert pickle.loads(pickle.dumps(h.decorated.grad)) is h.decorated.grad
    twin = copy.deepcopy(h.decorated.grad)
    assert twin is not h.decorated.grad and twin._parent.grad is twin


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_local_function_is_a_clear_pickling_error_but_deep_copies(dumps):
    """By reference only: cloudpickle (what Dask uses) would copy a lambda or a local function
    by value, without the source symgrad needs where it runs; that is refused at once."""
    def local(x):
        return np.sum(x * x)
    f = sg.differentiate(local)
    for shipped in (f, f.grad, sg.grad(lambda x: np.sum(x ** 3.0))):
        with pytest.raises(pickle.PicklingError, match="top level of an importable module"):
            dumps(shipped)
    np.testing.assert_array_equal(copy.deepcopy(f).grad(X), 2 * X)
    np.testing.assert_array_equal(copy.deepcopy(f.grad)(X), 2 * X)


def test_cloudpickle_ships_module_level_functions():
    for name, (f, args) in _variants("cpu").items():
        _assert_same(cloudpickle.loads(cloudpickle.dumps(f))(*args), f(*args))
    assert cloudpickle.loads(cloudpickle.dumps(h.decorated.grad)) is h.decorated.grad


def test_unpickling_where_the_function_cannot_be_imported_is_a_clear_error():
    data = pickle.dumps(h.decorated).replace(b"pickle_helpers", b"pickle_helperz")
    with pytest.raises(pickle.UnpicklingError, match="pickle_helperz.decorated.*cannot import"):
        pickle.loads(data)


def test_spawned_process_pool_runs_shipped_functions():
    jobs = [(f, args) for f, args in _variants("cpu").values()]
    want = [f(*args) for f, args in jobs]
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        got = pool.starmap(h.call, [(f, *args) for f, args in jobs])
    for g, w in zip(got, want):
        _assert_same(g, w)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as executor:
        _assert_same(executor.submit(h.call, h.decorated.grad, X).result(), want[1])
