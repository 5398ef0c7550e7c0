"""The per-signature trace cache is bounded: each Function keeps its most recently used
SYMGRAD_TRACE_CACHE_SIZE signatures (64 by default), so calling with ever new shapes no longer
grows memory without bound (1000 new 2-D shapes added 378 MB); results stay right."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import api


def loss(x):
    return np.sum(np.tanh(x) * x)


def _truth_grad(x):
    t = np.tanh(x)
    return t + x * (1 - t * t)


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_cache_stays_bounded_over_500_new_shapes(monkeypatch, target):
    monkeypatch.setenv("SYMGRAD_TRACE_CACHE_SIZE", "16")
    f = sg.differentiate(loss, target=target)
    g = f.grad
    for n in range(1, 501):
        x = np.linspace(-1.0, 1.0, n)
        np.testing.assert_allclose(g(x), _truth_grad(x), rtol=1e-13, atol=1e-15)
        assert len(g._cache) <= 16 and len(f._cache) <= 16
    assert len(g._cache) == 16
    x = np.linspace(-1.0, 1.0, 3)   # evicted long ago: traced again, still right
    np.testing.assert_allclose(g(x), _truth_grad(x), rtol=1e-13, atol=1e-15)


def test_default_bound(monkeypatch):
    monkeypatch.delenv("SYMGRAD_TRACE_CACHE_SIZE", raising=False)
    assert sg.differentiate(loss)._cache_size == api.DEFAULT_TRACE_CACHE_SIZE == 64


def test_least_recently_used_is_dropped(monkeypatch):
    monkeypatch.setenv("SYMGRAD_TRACE_CACHE_SIZE", "2")
    f = sg.differentiate(loss, target="python")
    a, b, c = np.ones(1), np.ones(2), np.ones(3)
    f(a)
    f(b)
    f(a)          # a is now the most recent
    f(c)          # drops b
    shapes = [key[0][2] for key in f._cache]
    assert shapes == [(1,), (3,)]


@pytest.mark.parametrize("value", ["abc", "0", "-3", "1.5"])
def test_bad_size_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("SYMGRAD_TRACE_CACHE_SIZE", value)
    with pytest.raises(ValueError, match="SYMGRAD_TRACE_CACHE_SIZE.*positive integer"):
        sg.differentiate(loss)


def test_threads_sharing_a_small_cache_get_right_results(monkeypatch):
    """Eviction by one thread while another uses the entry it just looked up is harmless."""
    import threading
    monkeypatch.setenv("SYMGRAD_TRACE_CACHE_SIZE", "2")
    g = sg.differentiate(loss).grad
    errors = []

    def work(seed):
        try:
            for i in range(40):
                x = np.linspace(-1.0, 1.0, 1 + (seed * 7 + i) % 5)
                np.testing.assert_allclose(g(x), _truth_grad(x), rtol=1e-13, atol=1e-15)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(g._cache) <= 2
