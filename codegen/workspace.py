"""A call's workspace memory (the temporaries of a compiled signature, one allocation):
its size, and its allocation and first touch on a helper thread while LLVM compiles."""
from __future__ import annotations

import threading

import numpy as np


def workspace_bytes(tmp) -> int:
    """Bytes of a call's workspace: every temporary 64-byte aligned, plus the alignment slack."""
    return max(sum((size + 63) // 64 * 64 for _, size in tmp), 1) + 64


# A workspace of at least this many bytes is allocated by a helper thread that touches its
# pages while LLVM compiles: the kernel's first-touch work (a page fault and zeroing per page
# and, for NumPy's large arrays, which ask for transparent huge pages, memory compaction where
# the kernel's THP defrag setting is "madvise") is otherwise all paid by the first call:
# 0.15 s of CPU for the 444 MB of ADBench GMM's gradient at d = 64 in 4 KiB pages, 0.9-1.0 s
# with the huge pages NumPy asks for (measured on the machine of benchmarks/RESULTS.md). The
# memory is NumPy's as before, so later calls run on the same (huge) pages.
TOUCH_MIN = 1 << 24
PAGE = 4096              # the smallest x86-64 page: one write per page touches every one


class Workspace:
    """A call's workspace memory; with ``touch`` and at least TOUCH_MIN bytes, allocated and
    touched (one byte a page; NumPy releases the GIL for it) on a helper thread until
    :meth:`memory` is asked for."""

    def __init__(self, nbytes: int, touch: bool = True):
        self.nbytes = nbytes
        self.work: np.ndarray | None = None
        self.thread = None
        if touch and nbytes >= TOUCH_MIN:
            self.thread = threading.Thread(target=self._fill, name="symgrad-workspace",
                                           daemon=True)
            self.thread.start()

    def _fill(self):
        try:
            work = allocate(self.nbytes)
            work[::PAGE] = 0
            self.work = work
        except MemoryError:
            pass           # memory() allocates again on the calling thread, raising there

    def memory(self) -> np.ndarray:
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.work is None:
            self.work = allocate(self.nbytes)
        return self.work


def allocate(nbytes: int) -> np.ndarray:
    return np.empty(nbytes, dtype=np.uint8)
