"""Environment variables: one validating reader (symgrad.settings); a bad value is a
ValueError naming the variable and what it accepts, at the first use, never at import."""
import os
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import jit
from symgrad.codegen import llvm as cpu
from symgrad import settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAD = {"SYMGRAD_NUM_THREADS": ["abc", "0", "-2", "1.5"],
       "SYMGRAD_PARALLEL_MIN": ["abc", "-1", "1e5"],
       "SYMGRAD_PRECISE_MATH": ["maybe", "2"],
       "SYMGRAD_NO_CACHE": ["perhaps", "10"],
       "SYMGRAD_TRACE_CACHE_SIZE": ["many", "0"]}   # (any path is a valid SYMGRAD_CACHE_DIR)


def test_every_variable_is_in_the_table():
    assert set(BAD) | {"SYMGRAD_CACHE_DIR"} == set(settings.VARIABLES)


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_values_name_the_variable_and_the_accepted_values(monkeypatch, name):
    for text in BAD[name]:
        monkeypatch.setenv(name, text)
        with pytest.raises(ValueError) as err:
            settings.read(name)
        msg = str(err.value)
        assert name in msg and settings.VARIABLES[name].accepts in msg, msg


def test_good_values_and_defaults(monkeypatch):
    for name in settings.VARIABLES:
        monkeypatch.delenv(name, raising=False)
        assert settings.read(name) == settings.VARIABLES[name].default
        monkeypatch.setenv(name, "  ")
        assert settings.read(name) == settings.VARIABLES[name].default
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", " 3 ")
    assert settings.read("SYMGRAD_NUM_THREADS") == 3 and cpu.num_threads() == 3
    monkeypatch.setenv("SYMGRAD_PARALLEL_MIN", "0")
    assert settings.read("SYMGRAD_PARALLEL_MIN") == 0
    for text, want in (("1", True), ("TRUE", True), ("on", True), ("0", False), ("no", False)):
        monkeypatch.setenv("SYMGRAD_NO_CACHE", text)
        assert settings.read("SYMGRAD_NO_CACHE") is want
    monkeypatch.setenv("SYMGRAD_NO_CACHE", "0")
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", "~/somewhere")
    assert jit.cache_dir() == os.path.join(os.path.expanduser("~"), "somewhere")


def test_bad_thread_count_fails_at_the_call_with_a_clear_error(monkeypatch):
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", "abc")
    f = sg.differentiate(lambda x: np.sum(np.sin(x) * 3.0))
    with pytest.raises(ValueError, match="SYMGRAD_NUM_THREADS='abc'.*positive integer"):
        f(np.ones(5))


CHILD = """
import numpy as np, symgrad as sg
from symgrad.codegen import llvm       # importing must not fail on a bad value

def f(x):
    return np.sum(x * 2.0)

try:
    sg.differentiate(f)(np.ones(3))
except ValueError as e:
    print("ValueError:", e)
"""


@pytest.mark.parametrize("name,text", [("SYMGRAD_PARALLEL_MIN", "lots"),
                                       ("SYMGRAD_PRECISE_MATH", "maybe")])
def test_bad_value_in_a_fresh_process_is_a_clear_error_not_a_failed_import(tmp_path, name, text):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=ROOT, SYMGRAD_NO_CACHE="1", **{name: text})
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"ValueError: environment variable {name}={text!r}"), proc.stdout
