"""Binding the arguments of a call of a Hessian-vector product, ``hvp(f)(x, v, *rest)``: the
rest are the primal's other parameters, with their defaults and keywords, as in ``f(x, *rest)``
(scipy calls ``hessp(x, p, *args)``, so a parameter with a default is usually left out); and
of a Jacobian-vector product, ``jvp(f)(*args, *tangents)``, whose args likewise may leave out
parameters with defaults or pass them by keyword."""
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


def bind_jvp(fn, args, kwargs) -> list:
    """``[*values, *tangents]`` for a call of the jvp Function ``fn``: the last ``len(fn.wrt)``
    positional arguments are the tangents, the others bind to the primal's parameters as in
    ``f(*args, **kwargs)`` (``jvp(huber)(pred, y, t_pred)`` with ``huber(pred, y, delta=1.0)``)."""
    k = len(fn.wrt)
    if not kwargs and len(args) == len(fn.params):
        return list(args)
    if len(args) < k or len(fn.params) != len(fn._signature.parameters) + k:
        raise TypeError(f"{fn.__name__}() takes the {len(fn.params)} positional "
                        f"arguments ({', '.join(fn.params)})")
    try:
        bound = fn._signature.bind(*args[:len(args) - k], **kwargs)
    except TypeError as e:
        raise TypeError(f"{fn.__name__}(): {e} (the arguments come first, then the {k} "
                        "tangent(s), positional)") from None
    bound.apply_defaults()
    return [bound.arguments[p] for p in fn._signature.parameters] + list(args[len(args) - k:])


# The Function kinds whose calls bind their own way, by kind (the rest bind as the primal does)
BINDERS = {"hvp": bind_hvp, "jvp": bind_jvp}
