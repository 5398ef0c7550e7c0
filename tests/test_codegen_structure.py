"""The back ends' modules have one job each: small (~500 lines, or a docstring saying why this
module is long, the rule symgrad's modules follow) and each says in its docstring what it owns."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_codegen_modules_are_small_and_say_what_they_own():
    for path in sorted((ROOT / "codegen").glob("*.py")):
        text = path.read_text()
        if path.name == "__init__.py" and not text.strip():
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        assert doc, f"{path.name} has no docstring"
        if text.count("\n") > 520:
            assert "Why this module is long" in doc, f"{path.name}: {text.count(chr(10))} lines"
