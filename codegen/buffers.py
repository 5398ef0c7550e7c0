"""Memory of a compiled program: the buffers a schedule (CPU) or plan (GPU) allocates, and the
C-order strides of a shape. Shared by both back ends, so a buffer means the same thing in
each."""
from __future__ import annotations

from dataclasses import dataclass

from .dtypes import storage


@dataclass
class Buffer:
    index: int
    # "arg" (an array argument; by pointer), "scalar" (a 0-d argument; by value on the GPU),
    # "const" (a constant array), "out" (an output), "tmp" (scratch), "flag" (the CPU's error
    # flag for out-of-bounds indices)
    kind: str
    dtype: str
    size: int            # elements
    ref: object = None   # parameter index (arg/scalar), output index (out), the ndarray (const)

    @property
    def nbytes(self) -> int:
        return self.size * storage(self.dtype).itemsize


def contiguous_strides(shape) -> tuple:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))
