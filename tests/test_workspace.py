"""A large workspace is allocated and its pages touched by a helper thread while LLVM
compiles (codegen.workspace.Workspace): the results are those of the plain allocation, a
concurrent call gets memory of its own, and an allocation that fails on the helper thread
fails on the calling thread with MemoryError."""
import threading

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import llvm, workspace


def model(x, w):
    h = np.tanh(x @ w)                     # temporaries: the workspace holds them
    return np.sum(np.exp(-h * h) * h) + np.sum((h @ w.T) * x)


def _args():
    rng = np.random.default_rng(5)
    return rng.normal(size=(64, 48)), rng.normal(size=(48, 48)) * 0.2


def _grads(x, w):
    return sg.differentiate(model, wrt=(0, 1)).grad(x, w)


def test_touched_workspace_gives_the_same_results(monkeypatch):
    x, w = _args()
    plain = _grads(x, w)
    monkeypatch.setattr(workspace, "TOUCH_MIN", 1)
    started = []
    real = threading.Thread

    def thread(*args, **kwargs):
        started.append(kwargs.get("name"))
        return real(*args, **kwargs)

    monkeypatch.setattr(threading, "Thread", thread)
    touched = _grads(x, w)
    assert "symgrad-workspace" in started
    for a, b in zip(plain, touched):
        assert np.array_equal(a, b)
    ref = sg.differentiate(model, wrt=(0, 1), target="python").grad(x, w)
    for a, b in zip(touched, ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_concurrent_calls_get_their_own_large_workspace(monkeypatch):
    monkeypatch.setattr(workspace, "TOUCH_MIN", 1)
    x, w = _args()
    f = sg.differentiate(model, wrt=(0, 1))
    want = f.grad(x, w)
    native = f.grad._inspect_entry(x, w).prepared["cpu"]
    state = native._state()                # what a call that finds the lock taken builds
    assert state[2][0].ctypes.data != native.cached[2][0].ctypes.data
    with native.lock:                      # the cached state is busy: private memory
        got = f.grad(x, w)
    for a, b in zip(want, got):
        assert np.array_equal(a, b)


def test_workspace_memory_and_its_alignment_slack():
    space = workspace.Workspace(workspace.TOUCH_MIN + 3)
    mem = space.memory()
    assert mem.nbytes == workspace.TOUCH_MIN + 3 and mem.flags.writeable
    assert space.memory() is mem
    small = workspace.Workspace(100).memory()
    assert small.nbytes == 100
    assert workspace.workspace_bytes([(0, 1), (1, 65)]) == 64 + 128 + 64
    assert workspace.workspace_bytes([]) == 65


def test_a_failed_allocation_on_the_helper_raises_memory_error_on_the_caller(monkeypatch):
    def no_memory(nbytes):
        raise MemoryError(f"cannot allocate a {nbytes}-byte workspace")

    monkeypatch.setattr(workspace, "allocate", no_memory)
    space = workspace.Workspace(workspace.TOUCH_MIN)
    with pytest.raises(MemoryError, match="workspace"):
        space.memory()
