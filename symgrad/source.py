"""Reading a Python function's source: the syntax tree and where its lines are in the file."""
from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass

from .errors import UnsupportedSyntaxError
from .ir import Loc

@dataclass
class Source:
    filename: str
    tree: ast.AST            # FunctionDef or Lambda
    line_offset: int         # add to tree line numbers to get file line numbers
    col_offset: int

    def loc(self, node: ast.AST) -> Loc:
        lineno = getattr(node, "lineno", 1) + self.line_offset
        col = getattr(node, "col_offset", 0) + self.col_offset
        text = linecache.getline(self.filename, lineno).strip()
        return Loc(self.filename, lineno, col, text)


_source_cache: dict = {}


def function_source(fn) -> Source:
    code = fn.__code__
    if code in _source_cache:
        return _source_cache[code]
    filename = inspect.getsourcefile(fn) or code.co_filename
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise UnsupportedSyntaxError(
            f"cannot read the source of {fn.__qualname__} ({e}); symgrad needs the function's "
            "source code (functions defined in a file, not in exec or an interactive prompt "
            "without source)", filename, code.co_firstlineno) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    indent = len(lines[0]) - len(lines[0].lstrip()) if dedented != text else 0
    try:
        module = ast.parse(dedented)
    except SyntaxError:  # e.g. a lambda in the middle of a larger expression spanning lines
        module = ast.parse("(" + dedented.strip().rstrip(",") + ")") if fn.__name__ == "<lambda>" else None
        if module is None:
            raise
    if fn.__name__ == "<lambda>":
        lambdas = [n for n in ast.walk(module) if isinstance(n, ast.Lambda)]
        params = list(code.co_varnames[:code.co_argcount])
        lambdas = [n for n in lambdas if [a.arg for a in n.args.args] == params] or lambdas
        if len(lambdas) != 1:
            raise UnsupportedSyntaxError("a lambda that shares its line with another lambda",
                                         filename, start, 0, lines[0])
        tree = lambdas[0]
    else:
        tree = next(n for n in ast.walk(module)
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == fn.__name__)
        if isinstance(tree, ast.AsyncFunctionDef):
            raise UnsupportedSyntaxError("async def", filename, start + tree.lineno - 1, 0, lines[0])
    source = Source(filename, tree, start - 1, indent)
    _source_cache[code] = source
    return source


