"""The quickstart's function, importable by tests (the golden files pin its derivative)."""
import numpy as np

import symgrad as sg


@sg.differentiate(wrt=(0, 1))
def f(x, y):
    z = x * y
    return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(z)
