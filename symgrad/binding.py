"""Binding the arguments of a call of a Hessian-vector product, ``hvp(f)(x, v, *rest)``: the
rest are the primal's other parameters, with their defaults and keywords, as in ``f(x, *rest)``
(scipy calls ``hessp(x, p, *args)``, so a parameter with a default is usually left out)."""
from __future__ import annotations


def bind_hvp(fn, args, kwargs) -> list:
    """``[x, v, *others]`` for a call of the hvp Function ``fn`` (``fn.wrt[0]`` is x's
    position among the primal's parameters ``fn.params``), or a clear TypeError."""
    if not kwargs and len(args) == len(fn.params) + 1:
        return list(args)
    if len(args) < 2 or len(fn.params) != len(fn._signature.parameters):
        raise TypeError(f"{fn.__name__}() takes the arguments (x, v, *rest): "
                        f"{len(fn.params) + 1} positional arguments")
    i, rest = fn.wrt[0], list(args[2:])
    try:
        bound = (fn._signature.bind(*rest[:i], args[0], *rest[i:], **kwargs) if len(rest) >= i
                 else fn._signature.bind(*rest, **{fn.params[i]: args[0]}, **kwargs))
    except TypeError as e:
        raise TypeError(f"{fn.__name__}(): {e}") from None
    bound.apply_defaults()
    values = [bound.arguments[p] for p in fn.params]
    return [values[i], args[1]] + [v for k, v in enumerate(values) if k != i]
