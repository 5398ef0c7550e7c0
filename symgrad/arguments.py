"""The front end's arguments: what the traced body sees for each Python argument, and the
graph inputs it gives. A plain argument is one input (an ``arg`` node; None when static). A
pytree argument (tuples, lists, dicts, namedtuples, nested) is one input per float/array leaf,
named after its path (``params_W`` for ``params['W']``), and the body sees the pytree rebuilt
around their nodes; static leaves (ints, bools, strings, None) stay values of the signature.
``Graph.in_tree`` records which inputs each parameter became (``symgrad.runtime``).
"""
from __future__ import annotations

import keyword
import numbers
import re

import numpy as np

from .ir import make
from .runtime import StaticLeaf, build_tree, map_tree, tree_paths, unflatten_tree, value_leaves

MAX_NDIM = 32


def _arg_node(i: int, name: str, value):
    if isinstance(value, bool) or isinstance(value, numbers.Integral) and not isinstance(value, np.generic):
        return None   # static: the trace is specialised on it
    if isinstance(value, float):
        return make("arg", (), (i, name, "float64", ()))
    if isinstance(value, (np.ndarray, np.generic)):
        dtype = value.dtype.name
        if dtype not in ("float32", "float64", "bool") and value.dtype.kind not in "iu":
            raise TypeError(f"argument '{name}': unsupported dtype {value.dtype} "
                            "(use float32, float64, integer or bool arrays)")
        if value.ndim > MAX_NDIM:
            raise ValueError(f"argument '{name}': an array of {value.ndim} dimensions; symgrad "
                             f"takes up to {MAX_NDIM} (NumPy's broadcasting functions stop there)")
        return make("arg", (), (i, name, dtype, tuple(value.shape)))
    if value is None or isinstance(value, (str, tuple, list, dict)) or callable(value):
        return None   # static (a function is called while tracing), or a pytree without data
    raise TypeError(f"argument '{name}': expected a float, int, bool or NumPy array, "
                    f"got {type(value).__name__}")


def bind_argument(param: str, value, inputs: list, names: list, params: list):
    """What the body sees for one argument, and its ``in_tree`` entry: one input (an ``arg``
    node, or None for a static value) for a plain argument or a pytree without data leaves;
    one input per float/array leaf of a pytree (named after its path, ``params_W`` for
    ``params['W']``), the pytree rebuilt around their nodes, static leaves kept."""
    leaves = value_leaves(value) if isinstance(value, (tuple, list, dict)) else None
    if leaves is None or not any(_is_data_leaf(v) for v in leaves):
        node = _arg_node(len(inputs), param, value)
        inputs.append(node)
        names.append(param)
        return (value if node is None else node), len(inputs) - 1
    tree = build_tree(value, lambda v, counter=iter(range(len(leaves))): next(counter))
    slots, seen = [], set(params) | set(names)
    for path, leaf in zip(tree_paths(tree, param), leaves):
        if not _is_data_leaf(leaf):
            if not _is_static_leaf(leaf):
                raise TypeError(f"argument {path}: expected a float, a NumPy array or a static "
                                f"int, bool, str, None or function leaf, got {type(leaf).__name__}")
            slots.append(StaticLeaf(path))
            continue
        name = _leaf_name(path, seen)
        seen.add(name)
        inputs.append(_arg_node(len(inputs), name, leaf))
        names.append(name)
        slots.append(len(inputs) - 1)
    in_tree = map_tree(tree, slots.__getitem__)
    bound = [inputs[s] if type(s) is int else leaf for s, leaf in zip(slots, leaves)]
    return unflatten_tree(tree, bound), in_tree


def _is_data_leaf(value) -> bool:
    return isinstance(value, (float, np.ndarray, np.generic)) or (
        isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral))


def _is_static_leaf(value) -> bool:
    return value is None or isinstance(value, (bool, numbers.Integral, str)) or callable(value)


def _leaf_name(path: str, seen: set) -> str:
    """A parameter name for a leaf of the generated code: its path as an identifier
    (``params['W']`` -> ``params_W``), unique among the others."""
    base = re.sub(r"_+", "_", re.sub(r"\W", "_", path)).strip("_") or "leaf"
    name, k = base, 0
    while name in seen or keyword.iskeyword(name):
        k += 1
        name = f"{base}_{k}"
    return name
