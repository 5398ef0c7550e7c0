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


def shape_text(shape: tuple) -> str:
    return f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(map(str, shape))})"
