"""The environment variables symgrad reads (the API and the back ends): one table saying what
each accepts, and one reader that validates, so a bad value is a ``ValueError`` naming the
variable and what it accepts (never a bare ``int()`` error, and never at import time).

An unset or empty variable means its default.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _flag(text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(text)


def _integer(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip(), 10)
        if value < minimum:
            raise ValueError(text)
        return value
    return parse


def _directory(text: str) -> str:
    return os.path.expanduser(text)


@dataclass(frozen=True)
class Variable:
    parse: Callable[[str], object]
    default: object
    accepts: str     # for the error message
    meaning: str


FLAG = "0 or 1 (also false/true, no/yes, off/on)"
VARIABLES = {
    "SYMGRAD_NUM_THREADS": Variable(
        _integer(1), None, "a positive integer",
        "threads for large stages (default: the CPUs this process may use)"),
    "SYMGRAD_PARALLEL_MIN": Variable(
        _integer(0), 1 << 16, "a non-negative integer (loop iterations)",
        "work below which a stage stays on the calling thread"),
    "SYMGRAD_PRECISE_MATH": Variable(
        _flag, False, FLAG, "scalar glibc libm instead of SIMD libmvec"),
    "SYMGRAD_NO_CACHE": Variable(_flag, False, FLAG, "disable the on-disk machine-code cache"),
    "SYMGRAD_CACHE_DIR": Variable(
        _directory, None, "a directory path", "machine-code cache directory"),
    "SYMGRAD_TRACE_CACHE_SIZE": Variable(
        _integer(1), 64, "a positive integer",
        "the number of argument signatures each function keeps traced, default 64"),
}


def read(name: str):
    """The value of environment variable ``name`` (a key of VARIABLES), validated."""
    var = VARIABLES[name]
    text = os.environ.get(name)
    if text is None or not text.strip():
        return var.default
    try:
        return var.parse(text)
    except ValueError:
        raise ValueError(f"environment variable {name}={text!r} is invalid: expected "
                         f"{var.accepts} ({var.meaning})") from None
