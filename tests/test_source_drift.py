"""The source traced is the source of the code being run (issue 8, item 8): functions in two
files that compile to equal code objects are told apart, and a file edited after import is
refused rather than traced from its new text."""
import importlib.util
import os
import sys

import numpy as np
import pytest

import symgrad as sg

TARGETS = ("cpu", "python")


def _import(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# One function text in two files with different module constants: the code objects compare
# equal (code equality ignores the file name). File A is then edited (same lines, same size).
MODULE = "SCALE = {scale}\n\n\ndef f(x):\n    return x * SCALE\n"
EDITED = "SCALE = {scale}\n\n\ndef f(x):\n    return x * 2.250\n"


def _trace_value(f, x):
    try:
        return f(x)
    except sg.UnsupportedSyntaxError as e:
        assert "no longer matches" in str(e)
        return None


@pytest.mark.parametrize("target", TARGETS)
def test_equal_code_objects_in_two_files(tmp_path, target):
    a_path, b_path = tmp_path / f"drift_a_{target}.py", tmp_path / f"drift_b_{target}.py"
    a_path.write_text(MODULE.format(scale=1.5))
    b_path.write_text(MODULE.format(scale=3.0))
    a, b = _import(a_path, f"drift_a_{target}"), _import(b_path, f"drift_b_{target}")
    assert a.f.__code__ == b.f.__code__        # the premise: equal, though from two files
    a_path.write_text(EDITED.format(scale=1.5))
    fa, fb = sg.differentiate(a.f, target=target), sg.differentiate(b.f, target=target)
    assert _trace_value(fa, 2.0) in (3.0, None)     # never the edited text's 4.5
    assert fb(2.0) == 6.0 and fb.grad(2.0) == 3.0   # B is traced from B's own text


@pytest.mark.parametrize("target", TARGETS)
def test_file_edited_after_import(tmp_path, target):
    path = tmp_path / f"edited_{target}.py"
    path.write_text("def g(x):\n    return x * 1.5\n")
    module = _import(path, f"edited_{target}")
    stat = path.stat()
    path.write_text("def g(x):\n    return x * 2.5\n")     # same size, same lines
    os.utime(path, (stat.st_atime, stat.st_mtime + 5))
    f = sg.differentiate(module.g, target=target)
    try:
        value = f(2.0)
    except sg.UnsupportedSyntaxError as e:
        assert "no longer matches" in str(e) and "g" in str(e)
    else:
        assert value == 3.0                # never the edited text's 5.0


def test_function_moved_by_an_edit(tmp_path):
    path = tmp_path / "moved.py"
    path.write_text("def h(x):\n    return x * 2.0\n")
    module = _import(path, "moved")
    path.write_text("\n\n\ndef other(x):\n    return x\n\n\ndef h(x):\n    return x * 7.0\n")
    with pytest.raises(sg.UnsupportedSyntaxError, match="no longer matches"):
        sg.differentiate(module.h, target="python")(1.0)


def test_unedited_module_functions_share_one_parse():
    from symgrad.source import function_source
    assert function_source(_import.__globals__["_import"]) is function_source(_import)
    arr = np.ones(2)
    assert sg.differentiate(lambda v: v * 2.0, target="python")(arr)[0] == 2.0
