"""Every back end dispatches through tables keyed by op: every op of the op table is in exactly
one table of each back end or in its explicit UNSUPPORTED set, and an op whose entry is missing
fails with a Python exception naming the op and the target, never in native code."""
import dataclasses

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import lower, ptx, ptx_emulate, schedule
from symgrad import emit_python
from symgrad.ir import OPS


def test_every_op_has_a_python_spelling():
    for name, opdef in OPS.items():
        own = (name in emit_python.STATEMENTS) + (name in emit_python.EMITTER_SPELLINGS)
        assert own <= 1 and (own or opdef.python is not None), name
    assert set(emit_python.STATEMENTS) <= set(OPS)
    assert set(emit_python.EMITTER_SPELLINGS) <= set(OPS)


def test_every_op_is_in_one_cpu_table():
    for name in OPS:
        places = [name in lower.LOWER, name in schedule.SCHEDULE_RULES, name in schedule.UNSUPPORTED]
        assert sum(places) == 1, (name, places)


def test_every_op_is_in_one_cuda_table():
    tables = (lower.LOWER, ptx.VIEW_INDEX, ptx.COMPUTE_RULES, ptx.KERNEL_RULES, ptx.IN_MEMORY,
              ptx.UNSUPPORTED)
    for name in OPS:
        places = [name in t for t in tables]
        assert sum(places) == 1, (name, places)
    for t in tables:
        assert set(t) <= set(OPS)


def _sine_gradient():
    return sg.grad(lambda x: np.sum(np.sin(x) * x))


X = np.linspace(0.0, 1.0, 5)


def test_a_missing_cpu_lowering_is_a_clear_error(monkeypatch):
    monkeypatch.delitem(lower.LOWER, "sin")
    with pytest.raises(NotImplementedError, match=r"'sin'.*target='cpu'"):
        _sine_gradient()(X)


def test_a_missing_cpu_schedule_rule_is_a_clear_error(monkeypatch):
    monkeypatch.delitem(schedule.SCHEDULE_RULES, "matmul")
    f = sg.grad(lambda a: np.sum(a @ a))
    with pytest.raises(NotImplementedError, match=r"'matmul'.*target='cpu'"):
        f(np.eye(3))


def test_a_missing_cuda_lowering_is_a_clear_error(monkeypatch):
    graph = _sine_gradient()._compiled([X]).graph
    monkeypatch.delitem(lower.LOWER, "sin")
    with pytest.raises(NotImplementedError, match=r"'sin'.*target='cuda'"):
        ptx.plan(graph)
    with pytest.raises(NotImplementedError, match=r"'sin'.*target='cuda'"):
        ptx_emulate.run(graph, [X])


def test_a_missing_cuda_compute_rule_is_a_clear_error(monkeypatch):
    graph = sg.grad(lambda x: np.sum(np.concatenate([x, x]) ** 2))._compiled([X]).graph
    monkeypatch.delitem(ptx.COMPUTE_RULES, "concatenate")
    with pytest.raises(NotImplementedError, match=r"'concatenate'.*target='cuda'"):
        ptx.plan(graph)


def test_a_missing_python_spelling_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(OPS, "sin", dataclasses.replace(OPS["sin"], python=None))
    f = sg.grad(lambda x: np.sum(np.sin(x) * x), target="python")
    with pytest.raises(NotImplementedError, match=r"'sin'.*target='python'"):
        f(X)


def test_an_unsupported_op_names_its_reason(monkeypatch):
    monkeypatch.setitem(schedule.UNSUPPORTED, "sin", "not on this CPU")
    with pytest.raises(NotImplementedError, match=r"'sin'.*target='cpu': not on this CPU"):
        _sine_gradient()(X)
    graph = _sine_gradient()._compiled([X]).graph
    monkeypatch.setitem(ptx.UNSUPPORTED, "sin", "not on this GPU")
    with pytest.raises(NotImplementedError, match=r"'sin'.*target='cuda': not on this GPU"):
        ptx.plan(graph)
