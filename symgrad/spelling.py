"""Python spellings for the op table: a precedence table and helpers that add only the
parentheses Python needs (after sympy's ``printing/precedence.py``).

A spelling is ``(args, node) -> (text, precedence)`` where ``args`` are ``(text, precedence)``
pairs of the already-spelled inputs.
"""
from __future__ import annotations

import math

# Python's operator precedence, low to high.
IFEXP, OR, AND, NOT, COMPARE, BITOR, BITXOR, BITAND = 1, 2, 3, 4, 5, 6, 7, 8
ADD, MUL, UNARY, POW, ATOM = 10, 11, 12, 13, 15


def paren(arg, need: bool) -> str:
    text, _ = arg
    return f"({text})" if need else text


def infix(symbol: str, prec: int, right_assoc: bool = False):
    def spell(args, node):
        left, right = args
        if right_assoc:  # a ** b ** c == a ** (b ** c); (-a) ** b needs parentheses
            lhs, rhs = paren(left, left[1] <= prec), paren(right, right[1] < UNARY)
        elif prec == COMPARE:   # a < b != c would chain: (a < b) != c needs its parentheses
            lhs, rhs = paren(left, left[1] <= prec), paren(right, right[1] <= prec)
        else:
            lhs, rhs = paren(left, left[1] < prec), paren(right, right[1] <= prec)
        return f"{lhs} {symbol} {rhs}", prec
    return spell


def prefix(symbol: str, prec: int = UNARY):
    def spell(args, node):
        (arg,) = args
        return f"{symbol}{paren(arg, arg[1] < prec)}", prec
    return spell


def call(name: str):
    def spell(args, node):
        return f"{name}({', '.join(a[0] for a in args)})", ATOM
    return spell


def number(value) -> tuple[str, int]:
    """A Python literal for a scalar constant."""
    if isinstance(value, (bool,)):
        return repr(value), ATOM
    if isinstance(value, float):
        if math.isnan(value):
            return "np.nan", ATOM
        if math.isinf(value):
            return ("np.inf", ATOM) if value > 0 else ("-np.inf", UNARY)
    text = repr(value)
    return text, UNARY if text.startswith("-") else ATOM


def dtype_name(dtype: str) -> str:
    return f"np.{dtype}" if dtype != "bool" else "np.bool_"


# Constant arrays of up to this many elements are written into generated source as literals.
ARRAY_LITERAL_LIMIT = 64


def array_literal(value) -> str:
    """``np.array([...], dtype=...)`` that evaluates to exactly ``value`` (a NumPy array of
    bools, integers or floats): the repr of a float round-trips, nan / inf / -0.0 are kept."""
    if value.size == 0:
        return f"np.zeros({value.shape!r}, dtype={dtype_name(value.dtype.name)})"
    items = [number(v)[0] for v in value.ravel().tolist()]
    for length in reversed(value.shape):   # innermost axis first: [[1.0, 2.0], [3.0, 4.0]]
        items = ["[" + ", ".join(items[k:k + length]) + "]" for k in range(0, len(items), length)]
    return f"np.array({items[0]}, dtype={dtype_name(value.dtype.name)})"


def shape_text(shape: tuple) -> str:
    return f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(map(str, shape))})"
