"""symgrad: a source-to-source symbolic differentiation compiler for Python.

    import symgrad as sg

    @sg.differentiate
    def f(x, y):
        return x * sg.sin(y) + sg.exp(-x * x)

    f(1.0, 2.0), f.grad(1.0, 2.0)
    print(f.grad.source)
"""
from .api import Function, differentiate, grad, hvp, jvp, value_and_grad
from .check import check_grad
from .checkpoint import checkpoint
from .custom_gradient import custom_gradient
from .errors import UnsupportedSyntaxError
from .export import export
from .guards import WhileLimitError
from .jacobian import hessian, jacobian
from .numpy_api import DUALS as _DUALS
from .vmap import vmap
from .train.clip import clip_by_global_norm, clip_by_norm, clip_by_value, global_norm

__version__ = "0.1.0"

globals().update(_DUALS)   # sg.exp, sg.sum, sg.reduce_max, sg.stop_gradient, ...
stop_gradient = _DUALS["stop_gradient"]


def __getattr__(name):
    """``sg.optim`` is imported on first use: ``import symgrad`` stays light."""
    if name == "optim":
        from .train import optim
        globals()["optim"] = optim   # later lookups are plain attribute reads
        return optim
    raise AttributeError(f"module 'symgrad' has no attribute {name!r}")


__all__ = ["Function", "differentiate", "grad", "value_and_grad", "hvp", "jvp", "custom_gradient", "checkpoint",
           "vmap", "jacobian", "hessian", "check_grad", "stop_gradient", "UnsupportedSyntaxError", "WhileLimitError", "export", "clip_by_value",
           "clip_by_norm",
           "clip_by_global_norm", "global_norm", "optim", *sorted(_DUALS)]
