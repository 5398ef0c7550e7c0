"""The functions a user may call: ``sg.exp``, ``np.exp``, ``math.exp`` ... and the table that
maps each Python callable to one of them.

Every function here is *dual*: given IR nodes (while tracing) it builds IR; given floats or
NumPy arrays it simply runs NumPy, so an undecorated function using ``sg.*`` still runs as
ordinary Python. The front end looks callables up in :data:`CALLABLES`.
"""
from __future__ import annotations

import builtins
import inspect
import math
import numbers
import sys

import numpy as np

from . import ops
from .ir import Node
from .op_base import _promote


def _traced(values) -> bool:
    for v in values:
        if isinstance(v, Node):
            return True
        if isinstance(v, (list, tuple)) and _traced(v):
            return True
    return False


def _dual(eager, build, name):
    def fn(*args, **kwargs):
        if _traced(args) or _traced(kwargs.values()):
            return build(*args, **kwargs)
        return eager(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.build = build
    fn.__doc__ = f"``np.{getattr(eager, '__name__', name)}`` that also traces into symgrad IR."
    return fn


def _as_node_list(xs):
    return [numpy_extra._as_array(x) for x in xs]


def _reduce(op):
    # keepdims is keyword-only: NumPy's third positional is dtype (sum, prod) or out (max,
    # min), which symgrad does not take (check_call refuses the call by name)
    def build(x, axis=None, *, keepdims=False, initial=None, where=True):
        if isinstance(x, (list, tuple)):
            x = ops.stack(_as_node_list(x))
        return numpy_extra.reductions.masked_reduce(op, x, axis, keepdims, where, initial)
    return build


def _tf_reduction(dual):
    """TensorFlow's ``reduce_*(input_tensor, axis=None, keepdims=False, name=None)`` (a list of
    axes too) over the NumPy reduction ``dual``, traced and eager alike."""
    def eager(input_tensor, axis=None, keepdims=False, name=None):
        return dual(input_tensor, axis=tuple(axis) if isinstance(axis, list) else axis,
                    keepdims=keepdims)

    def build(input_tensor, axis=None, keepdims=False, name=None):
        return dual.build(input_tensor, axis=tuple(axis) if isinstance(axis, list) else axis,
                          keepdims=keepdims)
    return eager, build


def _array(x, dtype=None):
    if isinstance(x, (list, tuple)):
        x = ops.stack(_as_node_list([_array(v) if isinstance(v, (list, tuple)) else v for v in x]))
    x = ops.lift(x)
    return ops.cast(x, np.dtype(dtype).name) if dtype is not None else x


def _zeros(shape, dtype=float):
    return ops.full(shape if isinstance(shape, tuple) else (shape,), 0, np.dtype(dtype).name)


def _ones(shape, dtype=float):
    return ops.full(shape if isinstance(shape, tuple) else (shape,), 1, np.dtype(dtype).name)


def _like(value):
    def build(x, dtype=None):
        x = ops.lift(x)
        return ops.full(x.shape, value, np.dtype(dtype).name if dtype else x.dtype)
    return build


def _filled(shape, fill, dtype: str) -> Node:
    """An array of ``shape`` holding ``fill`` cast to ``dtype``: a constant for a Python or
    NumPy number, a broadcast for a traced value or an array (``np.full((2, 3), row)``)."""
    shape = shape if isinstance(shape, tuple) else (shape,)
    if isinstance(fill, numbers.Number) or isinstance(fill, np.generic):
        return ops.full(shape, fill, dtype)
    return ops.broadcast_to(ops.cast(_array(fill), dtype), shape)


def _full(shape, fill_value, dtype=None):
    """NumPy's dtype: ``dtype``, else the fill value's (a Python float is float64)."""
    if dtype is None:
        dtype = _array(fill_value).dtype
    return _filled(shape, fill_value, np.dtype(dtype).name)


def _full_like(x, fill, dtype=None):
    x = ops.lift(x)
    return _filled(x.shape, fill, np.dtype(dtype).name if dtype else x.dtype)


def _pow(a, b):
    return ops.pow_(a, b)


def _square(x):
    x = ops.lift(x)
    return x * x


def _logaddexp(a, b):
    """NumPy's formula, ``larger + log1p(exp(smaller - larger))``, the sides chosen by one
    select (a tie takes a's): each side is analytic, so every derivative order is right at a
    tie (1/2 to each argument, 1/4 second order; an |a - b| form had abs'(0) = 0 inside), and
    the exp never overflows. Equal infinities give that infinity, as NumPy (their difference
    is nan)."""
    a, b = _promote((a, b), float_only=True)   # a Python number is weak: float32 stays float32
    a_larger = ops.ge(a, b)
    larger = ops.where(a_larger, a, b)
    gap = ops.where(a_larger, ops.sub(b, a), ops.sub(a, b))   # <= 0
    d = ops.sub(a, b)
    infinite_tie = ops.logical_and(ops.eq(a, b), ops.ne(d, d))
    return ops.where(infinite_tie, ops.stop_gradient(a), larger + ops.log1p(ops.exp(gap)))


def _sqrt_of_square_sum(s):
    """sqrt(s) for a sum of squares (std, norm), whose gradient at s == 0 is 0 rather than
    0 / 0 (the convention of abs'(0) = 0: the norm of one number is its absolute value)."""
    return ops.where(ops.eq(s, 0), 0.0, ops.sqrt(s))


def _outer(a, b):
    a, b = ops.reshape(a, (-1, 1)), ops.reshape(b, (1, -1))
    return a * b


def _stack(xs, axis=0):
    return ops.stack(_as_node_list(xs), axis)


def _concatenate(xs, axis=0):
    return ops.concatenate(_as_node_list(xs), axis)


def _abs(x):
    return ops.abs_(x)


def _stop_gradient_eager(x):
    return x


# name -> (eager implementation, builder). ``sg.<name>`` is the dual of the two. Every
# elementwise primitive comes under its NumPy name from the op table (ops.NUMPY_FUNCTIONS);
# the entries below are the composites and the ones whose user-facing form differs.
FUNCTIONS = {
    **ops.NUMPY_FUNCTIONS,
    "abs": (np.abs, _abs), "where": (np.where, ops.where),
    "sum": (np.sum, _reduce("sum")), "prod": (np.prod, _reduce("prod")),
    "max": (np.max, _reduce("max")), "min": (np.min, _reduce("min")),
    "dot": (np.dot, ops.dot), "matmul": (np.matmul, ops.matmul),
    "transpose": (np.transpose, ops.transpose), "reshape": (np.reshape, ops.reshape),
    "stack": (np.stack, _stack), "concatenate": (np.concatenate, _concatenate),
    "zeros": (np.zeros, _zeros), "ones": (np.ones, _ones),
    "zeros_like": (np.zeros_like, _like(0)), "ones_like": (np.ones_like, _like(1)),
    # NumPy leaves an empty array's contents unspecified: zeros are one choice (and the same
    # on every target, where a constant of NumPy's uninitialised memory would not be)
    "empty": (np.empty, _zeros), "empty_like": (np.empty_like, _like(0)),
    "full": (np.full, _full), "full_like": (np.full_like, _full_like), "arange": (np.arange, ops.arange),
    "power": (np.power, _pow), "square": (np.square, _square),
    "logaddexp": (np.logaddexp, _logaddexp), "outer": (np.outer, _outer),
    "array": (np.array, _array), "asarray": (np.asarray, _array),
    "asanyarray": (np.asanyarray, _array),
    # static facts of a traced array (Python ints and tuples, as NumPy gives)
    "shape": (np.shape, lambda a: tuple(_array(a).shape)), "ndim": (np.ndim, lambda a: _array(a).ndim),
    "size": (np.size, lambda a, axis=None: math.prod(_array(a).shape) if axis is None
             else _array(a).shape[axis]),
    # arrays are values in the IR: a copy is the array itself (no caller's array is written)
    "copy": (np.copy, lambda a, order="K", subok=False: _array(a)),
    "ascontiguousarray": (np.ascontiguousarray,
                          lambda a, dtype=None: DUALS["atleast_1d"](_array(a, dtype))),
    "asfortranarray": (np.asfortranarray,
                       lambda a, dtype=None: DUALS["atleast_1d"](_array(a, dtype))),
    "reciprocal": (np.reciprocal, lambda x: 1.0 / ops.to_float(x)),
    "stop_gradient": (_stop_gradient_eager, ops.stop_gradient),
}
ALIASES = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "atan2": "arctan2",
           "fabs": "abs", "pow": "power", "amax": "max", "amin": "min", "absolute": "abs",
           "reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min",
           "reduce_mean": "mean", "reduce_prod": "prod", "concat": "concatenate",
           "true_divide": "divide"}

# The rest of the NumPy surface (symgrad.numpy_extra: mean, var, std, norm, clip, squeeze, ...)
# joins the same tables.
from . import index_writes, numpy_extra  # noqa: E402 - they build on the helpers above
FUNCTIONS.update(numpy_extra.FUNCTIONS)
ALIASES.update(numpy_extra.ALIASES)

DUALS = {name: _dual(eager, build, name) for name, (eager, build) in FUNCTIONS.items()}
DUALS.update({alias: DUALS[name] for alias, name in ALIASES.items()})
for _alias in ("reduce_sum", "reduce_max", "reduce_min", "reduce_mean", "reduce_prod"):
    DUALS[_alias] = _dual(*_tf_reduction(DUALS[ALIASES[_alias]]), _alias)

# Python callables the front end recognises -> the dual that handles them.
CALLABLES: dict = {}
for _name, _dual_fn in DUALS.items():
    CALLABLES[_dual_fn] = _dual_fn
    for _module in (np, math):
        _obj = getattr(_module, _name, None)
        if _obj is not None and callable(_obj) and _obj not in CALLABLES:
            # math's functions keep Python's results on static values (math.floor(2.5) is
            # the int 2, a valid range() bound), NumPy's builders when traced
            CALLABLES[_obj] = _dual_fn if _module is np else _dual(_obj, _dual_fn.build, _name)
for _name, (_eager, _build) in FUNCTIONS.items():   # e.g. erf's, which NumPy lacks
    if callable(_eager):
        CALLABLES.setdefault(_eager, DUALS[_name])
CALLABLES.pop(math.remainder, None)   # IEEE remainder (nearest quotient), not np.remainder
CALLABLES[builtins.abs] = DUALS["abs"]
# Python's own round/divmod on static values (round(2.5) is the int 2), NumPy's when traced
CALLABLES[builtins.round] = _dual(builtins.round, FUNCTIONS["round"][1], "round")
CALLABLES[builtins.divmod] = _dual(builtins.divmod, FUNCTIONS["divmod"][1], "divmod")


def _builtin_pow(base, exp, mod=None):
    """``pow(a, b)`` is ``a ** b`` (its three-argument modular form is for integers)."""
    if mod is not None:
        raise TypeError("pow() with a modulus is not supported on traced values")
    return ops.pow_(base, exp)


CALLABLES[builtins.pow] = _dual(builtins.pow, _builtin_pow, "pow")
for _name in numpy_extra.numpy_linalg.LINALG_NAMES:   # np.linalg.det is sg.det, ...
    CALLABLES[getattr(np.linalg, _name)] = DUALS[_name]
for _name, (_eager, _build) in numpy_extra.reductions.UFUNC_METHODS.items():   # np.add.reduce
    CALLABLES[_eager] = _dual(_eager, _build, _name)
# scipy.special's functions we have, by their name there -> ours. scipy is not a dependency:
# they are recognised by identity once the user's code has imported scipy.special (a call
# can reach one only then), and keep scipy's own results on static values, as math's do.
SCIPY_SPECIAL = {"gammaln": "lgamma", "gamma": "gamma", "digamma": "digamma", "psi": "digamma",
                 "erf": "erf", "erfc": "erfc"}
_scipy_bound: list = []


def bind_scipy() -> None:
    """Add scipy.special's functions of :data:`SCIPY_SPECIAL`, and those symgrad.scipy_special
    composes from the surface here (logsumexp, expit, xlogy, ...), to :data:`CALLABLES`, once
    scipy.special has been imported (by anyone; symgrad never imports it)."""
    special = sys.modules.get("scipy.special")
    if special is None or _scipy_bound:
        return
    from .scipy_special import BUILDERS   # it builds on DUALS: imported once they exist
    builders = {name: (DUALS[ours].build, ours) for name, ours in SCIPY_SPECIAL.items()}
    builders.update({name: (build, name) for name, build in BUILDERS.items()})
    for name, (build, ours) in builders.items():
        fn = getattr(special, name, None)
        if fn is not None:
            CALLABLES.setdefault(fn, _dual(fn, build, ours))
    _scipy_bound.append(special)


CALLABLES[np.float64] = _dual(np.float64, lambda x: ops.cast(x, "float64"), "float64")
CALLABLES[np.float32] = _dual(np.float32, lambda x: ops.cast(x, "float32"), "float32")


def builtin_extremum(build):
    """``min``/``max`` on scalars: elementwise ``minimum``/``maximum`` when traced."""
    pick = builtins.min if build is ops.minimum else builtins.max

    def fn(*args, **kwargs):
        items = list(args[0]) if len(args) == 1 else list(args)
        if not _traced(items):
            return pick(*args, **kwargs)
        if kwargs:
            raise TypeError(f"{pick.__name__}() with keyword arguments on traced values is not supported")
        if any(isinstance(v, Node) and v.size > 1 for v in items):
            # Python compares the items (a < b): of arrays that is NumPy's ambiguity error
            raise ValueError(f"{pick.__name__}(): the truth value of an array with more than one "
                             f"element is ambiguous (use np.{'minimum' if pick is builtins.min else 'maximum'} "
                             "for elementwise, np.min/np.max to reduce)")
        out = items[0]
        for item in items[1:]:
            out = build(out, item)
        return out
    return fn


CALLABLES[builtins.min] = builtin_extremum(ops.minimum)
CALLABLES[builtins.max] = builtin_extremum(ops.maximum)


def _truth_items(items, pick) -> list:
    """The truth of each item of ``any``/``all``'s iterable as a 0-d bool node (NumPy's:
    nonzero, NaN true); an item of more than one element has none, as in NumPy."""
    out = []
    for item in items:
        node = ops.lift(item)
        if node.size != 1:
            raise ValueError(f"{pick}(): the truth value of an array with more than one element "
                             "is ambiguous (use np.any(...) or np.all(...) on it)")
        node = ops.reshape(node, ())
        out.append(node if node.dtype == "bool" else ops.ne(node, 0))
    return out


def builtin_truth(every: bool):
    """``any``/``all`` over an iterable with traced items: np.any/np.all of them (a traced
    bool). A static item that decides it decides it (Python's short circuit)."""
    pick = builtins.all if every else builtins.any

    def fn(iterable):
        items = list(iterable)
        if not _traced(items):
            return pick(items)
        static = [v for v in items if not isinstance(v, Node)]
        if static and (not builtins.all(static) if every else builtins.any(static)):
            return not every
        truths = _truth_items([v for v in items if isinstance(v, Node)], pick.__name__)
        combine = ops.logical_and if every else ops.logical_or
        out = truths[0]
        for t in truths[1:]:
            out = combine(out, t)
        return out
    fn.__name__ = pick.__name__
    return fn


def builtin_sorted(iterable, *, key=None, reverse=False):
    """``sorted(x)`` of a traced 1-d array or of a list of traced scalars: np.sort (its
    derivative routes each output to the element it came from), as a Python list."""
    items = iterable if isinstance(iterable, Node) else list(iterable)
    if not _traced(items if isinstance(items, list) else [items]):
        return builtins.sorted(items, key=key, reverse=reverse)
    if key is not None:
        raise numpy_extra.unsupported("sorted(..., key=...) of traced values",
                                      "sort by the key with np.argsort and index: x[np.argsort(k)]")
    x = items if isinstance(items, Node) else ops.stack(_as_node_list(items))
    if x.ndim != 1:
        raise numpy_extra.unsupported(f"sorted() of a traced {x.ndim}-d array",
                                      "its items are rows, which Python compares as booleans "
                                      "(ambiguous); use np.sort(x, axis=0)")
    ordered = DUALS["sort"](x)
    out = [ops.getitem(ordered, i) for i in range(x.shape[0])]
    return out[::-1] if reverse else out


CALLABLES[builtins.any] = builtin_truth(every=False)
CALLABLES[builtins.all] = builtin_truth(every=True)
CALLABLES[builtins.sorted] = builtin_sorted


_SIGNATURES: dict = {}


def check_call(handler, args, kwargs) -> None:
    """Refuse, as unsupported, a call whose arguments the builder does not take (a keyword
    NumPy has and symgrad does not, such as ``np.sum(x, dtype=...)``), instead of letting the
    builder fail with an internal TypeError."""
    build = getattr(handler, "build", None)
    if build is None or not _traced(args) and not _traced(kwargs.values()):
        return
    sig = _SIGNATURES.get(build)
    if sig is None:
        try:
            sig = _SIGNATURES[build] = inspect.signature(build)
        except (TypeError, ValueError):
            return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        words = [f"{k}=..." for k in kwargs]
        raise numpy_extra.unsupported(f"np.{handler.__name__}({', '.join(['...'] * len(args) + words)})",
                                      f"symgrad's np.{handler.__name__} takes {sig}: {e}") from None


def numpy_name(fn) -> str | None:
    """``np.<name>`` for a function or ufunc that NumPy defines (public or internal), else
    None: such a function is recognised by what it is, never traced through."""
    module = getattr(fn, "__module__", None)
    if not isinstance(module, str) and isinstance(fn, np.ufunc) and \
            getattr(np, getattr(fn, "__name__", ""), None) is fn:
        module = "numpy"      # (other libraries' ufuncs, scipy.special's, say nothing either)
    if not isinstance(module, str) or module.split(".")[0] != "numpy" or not callable(fn) \
            or isinstance(fn, type):
        return None
    public = module.split(".")
    public = [p for p in public[1:] if not p.startswith("_")]
    return ".".join(["np"] + public + [getattr(fn, "__name__", "?")])


def supported() -> list[str]:
    """Every function name of the tables, sorted: ``sg.<name>``, and ``np.<name>`` /
    ``math.<name>`` wherever the installed NumPy or Python has that name (``norm`` is
    ``np.linalg.norm``). From the tables alone, so the README's list generated from it does
    not depend on the versions installed."""
    return sorted(DUALS)


# Known gaps, with the reason a user sees in the UnsupportedSyntaxError (README lists them).
NOT_YET_SUPPORTED = {
    "np.linalg.norm(matrix, ord=2 / -2 / 'nuc')": "needs the singular values (an SVD), which "
    "no back end has yet",
    "np.linalg.svd, eig, eigh, qr, pinv, lstsq": "factorisations without a composition here yet",
    "np.argsort without kind='stable'": numpy_extra.numpy_sorting._ARGSORT_WHY,
    "x[x > 0] (a boolean mask computed from traced data)": "the result's length would depend on "
    "the data (use np.where)",
    "np.r_ / np.c_ directive strings ('0,2,1')": "use np.concatenate / np.stack with an axis",
    "np.multiply.at, np.maximum.at and the other ufuncs' .at": index_writes.UFUNC_AT_WHY,
}

README_BEGIN = "<!-- numpy-surface: generated by `python -m symgrad.readme_numpy`; do not edit -->"
README_END = "<!-- numpy-surface: end -->"


def readme_section() -> str:
    """The README's list of the supported NumPy surface, generated from the tables."""
    names = supported()
    lines = [README_BEGIN, "",
             f"Recognised while tracing ({len(names)} names): `sg.<name>` for each, and `np.<name>` "
             "or `math.<name>` wherever NumPy or Python's math has that name (`det`, `slogdet`, "
             "`inv`, `solve`, `cholesky`, `matrix_power` and `norm` are `np.linalg`'s; "
             "`math.remainder`, IEEE's, is not `np.remainder` and is not taken):", ""]
    lines.append(", ".join(f"`{n}`" for n in names))
    from .scipy_special import BUILDERS
    scipy_names = [*SCIPY_SPECIAL, *BUILDERS]
    lines += ["", "`scipy.special`'s " + ", ".join(f"`{n}`" for n in scipy_names) +
              " are recognised too, by identity, once the user's code has imported scipy.special "
              "(symgrad does not depend on scipy). `lgamma`/`gammaln` and `gamma` are C99's at the poles "
              "(lgamma +inf at 0 and the negative integers; gamma +-inf at +-0, NaN at the negative "
              "integers), where `math`'s raise on a static value; `digamma`/`psi` is scipy's there "
              "(-inf at +0, +inf at -0, NaN at the negative integers). The rest are compositions "
              "of the surface above following scipy's formulas (symgrad.scipy_special: logsumexp's "
              "log1p form, both tails of expit, log_ndtr's asymptotic series below -20) and its "
              "values at the special points; `xlogy`/`xlog1py`'s x-derivative at x = 0 is log(y) "
              "(JAX's), never NaN, and 0 where y is outside the domain; `entr`'s at 0 is the "
              "one-sided +inf and `rel_entr`/`kl_div`'s x-derivative at x = 0 the one-sided -inf "
              "(JAX's and PyTorch's)."]
    methods = numpy_extra.reductions.UFUNC_METHODS
    lines += ["", "and the ufunc methods " + ", ".join(f"`np.{n}`" for n in methods) + ", and the "
              "in-place " + ", ".join(f"`np.{n}.at`" for n in index_writes.UFUNC_AT) +
              " (unbuffered: a repeated index adds every time; see symgrad.index_writes).",
              "", "`np.sum`/`prod`/`max`/`min`/`mean` (and the methods) take `where=` (the masked-out "
              "elements are the identity; max/min need `initial=`, as in NumPy) and `sum`/`prod`/`max`/"
              "`min` take `initial=`. A ufunc's `out=` (by keyword: `np.add(a, b, out=y)`, `out=y[1:]`), "
              "`np.copyto(dst, src, casting=, where=)` and `np.fill_diagonal(a, val, wrap=)` are "
              "in-place writes with an item assignment's rules (the function's own arrays only: "
              "never an argument, a global or an alias; NumPy's `same_kind` casting, fill_diagonal's "
              "unsafe one as its flat write). `np.interp`'s derivative at a knot is one-sided "
              "as JAX's (the right segment's slope at `xp[0]` and inside, the left one's at `xp[-1]`, "
              "0 outside; `xp` is not differentiated; symgrad.numpy_polynomials)."]
    lines += ["", "Knowingly not supported yet (each raises `sg.UnsupportedSyntaxError` naming the "
              "function and your line; any other NumPy function does too):", ""]
    lines += [f"- {what}: {why}" for what, why in NOT_YET_SUPPORTED.items()]
    return "\n".join(lines + ["", README_END])


def rewrite_readme(path: str) -> None:
    with open(path) as f:
        text = f.read()
    start, end = text.index(README_BEGIN), text.index(README_END) + len(README_END)
    with open(path, "w") as f:
        f.write(text[:start] + readme_section() + text[end:])

