"""The layering the code promises: what imports what, and what ``import symgrad`` loads."""
import ast
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad import backends

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _imported_modules(path: pathlib.Path) -> set[str]:
    """Every module a file imports (absolute names; relative ones resolved in its package;
    the codegen/ folder is installed as the package symgrad.codegen)."""
    parts = path.relative_to(ROOT).with_suffix("").parts[:-1]
    package = ".".join(("symgrad",) + parts if parts[:1] == ("codegen",) else parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return found


def _fresh_modules(code: str) -> list[str]:
    script = f"import sys; {code}; print(' '.join(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return run.stdout.split()


def test_import_symgrad_loads_no_back_end_and_no_optimizers():
    loaded = _fresh_modules("import symgrad")
    assert not [m for m in loaded if m.split(".")[0] == "llvmlite" or m.startswith("symgrad.codegen")]
    assert "symgrad.train.optim" not in loaded


def test_optim_is_imported_on_first_access():
    loaded = _fresh_modules("import symgrad as sg; sg.optim.SGD")
    assert "symgrad.train.optim" in loaded
    from symgrad import optim
    assert optim is sg.optim and sg.optim.Adam.__module__ == "symgrad.train.optim"
    with pytest.raises(AttributeError):
        sg.no_such_name   # noqa: B018


def test_back_ends_never_import_the_api_and_the_api_names_no_back_end():
    for path in sorted((ROOT / "codegen").glob("*.py")):
        assert "symgrad.api" not in _imported_modules(path), path.name
    api = _imported_modules(ROOT / "symgrad" / "api.py")
    assert not [m for m in api if m.startswith("symgrad.codegen") or m.split(".")[0] == "codegen"]
    assert "codegen" not in (ROOT / "symgrad" / "api.py").read_text()


def test_every_registered_target_implements_the_interface():
    for target in backends.TARGETS:
        be = backends.backend(target)
        assert be.name == target
        assert callable(be.prepare) and callable(be.run)
    for view, target in backends.VIEWS.items():
        assert view in backends.backend(target).views, view


def test_an_unknown_view_or_target_is_a_clear_error():
    f = sg.differentiate(lambda x: x * x)
    with pytest.raises(ValueError, match="no back end shows 'hlo'"):
        backends.show("hlo", f._compiled([1.0]))
    with pytest.raises(ValueError, match="target must be one of"):
        sg.differentiate(lambda x: x, target="tpu")


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_a_back_end_registered_at_run_time_is_used_by_name(target, monkeypatch):
    """The API reaches a back end only through the registry: one wrapping another runs."""
    inner = backends.backend(target)
    calls = []

    class Counting(backends.Backend):
        name = "counting"

        def prepare(self, signature):
            calls.append("prepare")
            return inner.prepare(signature)

        def run(self, prepared, values, out):
            calls.append("run")
            return inner.run(prepared, values, out)

    monkeypatch.setitem(backends.REGISTRY, "counting", (__name__, "_COUNTING"))
    monkeypatch.setitem(globals(), "_COUNTING", Counting())
    f = sg.grad(lambda x: np.sum(x * x), target="counting")
    x = np.arange(3.0)
    np.testing.assert_array_equal(f(x), 2 * x)
    np.testing.assert_array_equal(f(x), 2 * x)
    assert calls == ["prepare", "run", "run"]
    backends._loaded.pop("counting", None)


def _top_level_imports(path: pathlib.Path) -> set[str]:
    """Modules a file imports when it is imported (not imports inside functions)."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            if node.module:   # ``from . import x`` imports x, not the package's other modules
                found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_symgrad_modules_import_each_other_without_cycles():
    """Module-level imports form a DAG (the op table's modules only look down)."""
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
               for p in (ROOT / "symgrad").rglob("*.py")}
    edges = {m: sorted(i for i in _top_level_imports(p) if i in modules and i != m)
             for m, p in modules.items()}
    state: dict = {}
    for root in sorted(edges):   # iterative depth-first search for a back edge
        stack = [(root, iter(edges[root]))]
        state.setdefault(root, "open")
        while stack:
            module, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[module] = "done"
                stack.pop()
            elif state.get(child) == "open":
                cycle = [m for m, _ in stack] + [child]
                raise AssertionError("import cycle: " + " -> ".join(cycle[cycle.index(child):]))
            elif child not in state:
                state[child] = "open"
                stack.append((child, iter(edges[child])))


def test_node_operators_are_defined_in_its_class_not_patched_on():
    """Node's dunders live in its class body (through ir.OPERATORS, filled by symgrad.ops)."""
    for path in sorted((ROOT / "symgrad").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr":
                assert getattr(node.args[0], "id", None) != "Node", path.name
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for t in getattr(target, "elts", [target]):
                        assert not (isinstance(t, ast.Attribute) and getattr(t.value, "id", None)
                                    == "Node"), f"{path.name}:{node.lineno}"
    from symgrad import ir, ops
    assert set(ir.OPERATORS) == set(ir.OPERATOR_NAMES)
    x = ops.lift(np.arange(3.0))
    assert (abs(-x)).op == "abs" and (2 - x).inputs[0].op == "const"
    m = ops.lift(np.ones((2, 2)))
    assert (m @ m).op == "matmul" and (np.ones((2, 2)) @ m).op == "matmul"
    assert [row.op for row in x] == ["getitem"] * 3 and len(x) == 3
    with pytest.raises(TypeError, match="truth value"):
        bool(x < 1)


def test_index_items_are_named_records_and_equal_indices_intern_to_one_node():
    from symgrad import ops
    from symgrad.ir import NEWAXIS, Slice
    x = ops.lift(np.arange(12.0).reshape(3, 4))
    a, b = ops.getitem(x, (slice(1, None), None, 2)), ops.getitem(x, (slice(1, 3), None, 2))
    assert a is b and a.attrs == ((Slice(1, 3, 1), NEWAXIS, 2),)
    assert ops.getitem(x, (slice(None, None, -1), 0)).attrs[0][0] == Slice(2, -1, -1)
    assert ops.setitem(x, 1.0, (0, slice(0, 2))) is ops.setitem(x, 1.0, (0, slice(None, 2)))
    with pytest.raises(TypeError):
        a.attrs[0][0][1]   # no reading by position   # noqa: B018


def test_no_long_module_without_a_stated_reason():
    """Modules stay small (~500 lines) unless their docstring says why not."""
    for path in sorted((ROOT / "symgrad").rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 520:
            doc = ast.get_docstring(ast.parse(text)) or ""
            assert "Why this module is long" in doc, f"{path.name}: {text.count(chr(10))} lines"


def test_elementwise_ops_reach_user_code_from_their_op_table_entry_alone():
    """``_u``/``_b`` record each op's NumPy function and builder; numpy_api and ops derive the
    user-facing names from that, so a new elementwise op needs no line elsewhere in symgrad."""
    from symgrad import elementwise, numpy_api, ops
    assert "exp" in elementwise.NUMPY_FUNCTIONS and "subtract" in elementwise.NUMPY_FUNCTIONS
    for name, (fn, build) in elementwise.NUMPY_FUNCTIONS.items():
        assert any(v is build for v in vars(ops).values()) or build.__name__ == "pow", name
        dual = numpy_api.DUALS[name]
        assert numpy_api.CALLABLES[fn] is dual and getattr(sg, name) is dual, name
    assert numpy_api.DUALS["absolute"] is numpy_api.DUALS["abs"]   # an alias still wins
