"""The dtype table of the back ends: for each dtype symgrad compiles, its width in registers,
its signedness, its C type (a scalar passed by value) and its layout in memory. Every other
per-dtype mapping in codegen (LLVM register and memory types, NumPy storage, ctypes) is read
from here, so a new dtype is one row.

bool is an ``i1`` in registers and one byte (``uint8``) in memory.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
from llvmlite import ir


@dataclass(frozen=True)
class DType:
    name: str
    bits: int          # width in registers (bool: 1)
    kind: str          # "float" | "signed" | "unsigned" | "bool"
    ctype: type        # ctypes scalar of a by-value kernel parameter
    storage: np.dtype  # the NumPy dtype of its bytes in memory (bool: uint8)

    @property
    def itemsize(self) -> int:
        return self.storage.itemsize


def _row(name, bits, kind, ctype, storage=None):
    return name, DType(name, bits, kind, ctype, np.dtype(storage or name))


DTYPES = dict([
    _row("float64", 64, "float", ctypes.c_double),
    _row("float32", 32, "float", ctypes.c_float),
    _row("int64", 64, "signed", ctypes.c_int64),
    _row("int32", 32, "signed", ctypes.c_int32),
    _row("int16", 16, "signed", ctypes.c_int16),
    _row("int8", 8, "signed", ctypes.c_int8),
    _row("uint64", 64, "unsigned", ctypes.c_uint64),
    _row("uint32", 32, "unsigned", ctypes.c_uint32),
    _row("uint16", 16, "unsigned", ctypes.c_uint16),
    _row("uint8", 8, "unsigned", ctypes.c_uint8),
    _row("bool", 1, "bool", ctypes.c_bool, "uint8"),
])


def info(dtype: str) -> DType:
    row = DTYPES.get(dtype)
    if row is None:
        raise TypeError(f"the compiled back ends have no dtype {dtype!r}")
    return row


def value_type(dtype: str) -> ir.Type:
    """The register type of a dtype (bool is i1 in registers, i8 in memory)."""
    if dtype == "float64":
        return ir.DoubleType()
    if dtype == "float32":
        return ir.FloatType()
    return ir.IntType(info(dtype).bits)


def memory_type(dtype: str) -> ir.Type:
    return ir.IntType(8) if dtype == "bool" else value_type(dtype)


def is_unsigned(dtype: str) -> bool:
    return dtype.startswith("uint") or dtype == "bool"


def storage(dtype: str) -> np.dtype:
    """The NumPy dtype of a buffer's bytes (bool: uint8)."""
    return info(dtype).storage


def ctype(dtype: str) -> type:
    return info(dtype).ctype
