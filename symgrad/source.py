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
    wrapped = 0
    try:
        module = ast.parse(dedented)
    except SyntaxError:  # e.g. a lambda in the middle of a larger expression spanning lines
        if fn.__name__ != "<lambda>":
            raise
        module, wrapped = ast.parse("(" + dedented.strip().rstrip(",") + ")"), 1
    if fn.__name__ == "<lambda>":
        tree = _find_lambda(code, module, start - 1, indent, wrapped)
        if tree is None:
            raise UnsupportedSyntaxError("a lambda that cannot be told apart from another lambda "
                                         "on its line (give it a name with def; Python 3.11+ "
                                         "tells them apart by source positions)",
                                         filename, start, 0, lines[0])
    else:
        tree = next(n for n in ast.walk(module)
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == fn.__name__)
        if isinstance(tree, ast.AsyncFunctionDef):
            raise UnsupportedSyntaxError("async def", filename, start + tree.lineno - 1, 0, lines[0])
    source = Source(filename, tree, start - 1, indent)
    _source_cache[code] = source
    return source




def _find_lambda(code, module, line_offset: int, indent: int, wrapped: int):
    """The lambda whose code this is: the one with these parameters whose source span holds
    every instruction's position (Python 3.11+), the innermost if lambdas nest."""
    params = list(code.co_varnames[:code.co_argcount])
    candidates = [n for n in ast.walk(module) if isinstance(n, ast.Lambda)
                  and [a.arg for a in n.args.args] == params]
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    positions = getattr(code, "co_positions", None)
    # (line, col) of each instruction; (0, 0) columns mark bookkeeping instructions.
    spots = [(p[0], p[2]) for p in positions() if None not in p and p[2:] != (0, 0)] if positions else []
    if not spots:
        return None

    def absolute(lineno, col):
        return lineno + line_offset, col + indent - (wrapped if lineno == 1 else 0)

    inside = []
    for node in candidates:
        begin = absolute(node.lineno, node.col_offset)
        end = absolute(node.end_lineno, node.end_col_offset)
        if all(begin <= spot <= end for spot in spots):
            inside.append((end[0] - begin[0], end[1] - begin[1], node))
    if not inside:
        return None
    inside.sort(key=lambda t: (t[0], t[1]))
    return inside[0][2]
