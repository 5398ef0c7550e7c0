"""Functions for test_pickle: importable by module and name, as pickling by reference (and a
spawned worker process, which imports this module afresh) needs."""
import numpy as np

import symgrad as sg


@sg.differentiate
def decorated(x):
    return np.sum(np.sin(x) * x)


def plain(x, y):
    return np.sum(x * y) + np.sum(np.exp(-x))


def call(fn, *args):
    """Run in a worker: call a shipped Function."""
    return fn(*args)
