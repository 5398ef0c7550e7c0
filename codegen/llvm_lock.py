"""Threads that compile at once in LLVM, past llvmlite's process-wide lock (codegen.jit's
pool of parts)."""
from __future__ import annotations

import contextlib
import threading


class PrivateLLVM:
    """llvmlite serialises every call into LLVM behind one process-wide lock (its objects may
    live in LLVM's global context, which is not thread-safe), so threads compiling at once
    would take turns. LLVM itself is thread-safe for work in separate contexts with separate
    target machines, which is all _compile_private does: inside ``calls()`` this thread's
    llvmlite calls skip that lock. Every other thread still takes it, so any other use of
    llvmlite in the process (another library, the engine) is serialised as before. Where
    llvmlite's lock is not where this expects, the lock stays and parts simply take turns.
    (Python's cycle collector could run, inside that window, the finalizer of another
    owner's llvmlite object: _compile_parts turns automatic collection off meanwhile.)"""

    def __init__(self):
        self.mine = threading.local()
        self.inner = None

    def install(self):
        try:
            from llvmlite.binding import ffi
            outer = ffi.lib._lock
            inner = outer._lock
        except AttributeError:
            return
        if self.inner is None and hasattr(inner, "acquire") and hasattr(inner, "release"):
            self.inner = inner
            outer._lock = self

    def acquire(self, *args, **kwargs):
        if getattr(self.mine, "private", False):
            return True
        return self.inner.acquire(*args, **kwargs)

    def release(self):
        if not getattr(self.mine, "private", False):
            self.inner.release()

    def __enter__(self):
        self.acquire()

    def __exit__(self, *exc):
        self.release()

    def calls(self):
        @contextlib.contextmanager
        def scope():
            self.mine.private = True
            try:
                yield
            finally:
                self.mine.private = False
        return scope()
