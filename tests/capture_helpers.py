"""Functions reading module globals, closure cells and module attributes, for
test_captured_globals (a module of their own: the tests rebind its globals)."""
import types

import numpy as np

SCALE = 2.0
WEIGHTS = np.array([1.0, 2.0, 3.0])
config = types.ModuleType("capture_config")   # read as config.OFFSET: a module attribute
config.OFFSET = 1.0


def helper(x):
    return x * 1.0


def scaled(x):
    return np.sum(x * x) * SCALE


def weighted(x):
    return np.sum(WEIGHTS * x)


def offset(x):
    return np.sum(x + config.OFFSET)


def calls_helper(x):
    return np.sum(helper(x))


def uses_len(x):
    return len(x) * np.sum(x)


def closure(k):
    """A function of x closing over k, and a setter that rebinds the cell."""
    def inner(x):
        return np.sum(x) * k

    def set_k(value):
        nonlocal k
        k = value
    return inner, set_k
