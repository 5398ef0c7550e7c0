"""Reading a Python function's source: the syntax tree and where its lines are in the file."""
from __future__ import annotations

import __future__
import ast
import functools
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


# id(code) -> (code, Source). Keyed by identity: code objects compare equal across files
# (equality ignores co_filename), so an equality-keyed cache could serve one module's text
# for another's function. Holding the code keeps its id from being reused.
_source_cache: dict = {}

_FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


def function_source(fn) -> Source:
    code = fn.__code__
    cached = _source_cache.get(id(code))
    if cached is not None and cached[0] is code:
        return cached[1]
    source, text = _read_source(fn)
    if not _matches(source, text, code):
        linecache.checkcache(source.filename)     # the file may have changed since it was cached
        source, text = _read_source(fn)
        if not _matches(source, text, code):
            raise UnsupportedSyntaxError(
                f"the source of {fn.__qualname__} in {source.filename} no longer matches the "
                "code being run (the file was edited after it was imported); reload the module "
                "or restart the process", source.filename, code.co_firstlineno) from None
    _source_cache[id(code)] = (code, source)
    return source


def _read_source(fn) -> tuple[Source, str]:
    """The parsed function and the (dedented) text it was parsed from."""
    code = fn.__code__
    filename = inspect.getsourcefile(fn) or code.co_filename
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise UnsupportedSyntaxError(
            f"cannot read the source of {fn.__qualname__} ({e}); symgrad needs the function's "
            "source code (functions defined in a file, not in exec or an interactive prompt "
            "without source)", filename, code.co_firstlineno) from None
    if fn.__name__ == "<lambda>":
        found = _lambda_in_file(code, filename)
        if found is not None:
            return found
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
        tree = next((n for n in ast.walk(module)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == fn.__name__), None)
        if tree is None:
            raise UnsupportedSyntaxError(
                f"the source of {fn.__qualname__} in {filename} no longer matches the code being "
                f"run (no def {fn.__name__} at line {start}: the file was edited after it was "
                "imported); reload the module or restart the process", filename, start)
        if isinstance(tree, ast.AsyncFunctionDef):
            raise UnsupportedSyntaxError("async def", filename, start + tree.lineno - 1, 0, lines[0])
    return Source(filename, tree, start - 1, indent), dedented


def _matches(source: Source, text: str, code) -> bool:
    """Whether the parsed function is the one ``code`` was compiled from: it starts on the
    same line, and compiling it again gives the same constants (an edit that
    keeps the lines, e.g. a changed number, shows there). Scope-dependent details (globals
    versus closure cells) are not compared: the function is compiled here on its own."""
    tree = source.tree
    first = min([tree.lineno] + [d.lineno for d in getattr(tree, "decorator_list", ())])
    if first + source.line_offset != code.co_firstlineno:
        return False
    if isinstance(tree, ast.Lambda):
        return True     # told apart by position already (_find_lambda)
    try:    # from the text: compiling the tree itself recurses on deep expressions
        compiled = compile(text, "<symgrad check>", "exec",
                           flags=code.co_flags & _FUTURE_FLAGS, dont_inherit=True)
    except (SyntaxError, RecursionError, MemoryError):
        return True      # cannot be compiled alone (nonlocal) or too deep: the line check holds
    recompiled = next((c for c in compiled.co_consts
                       if hasattr(c, "co_code") and c.co_name == tree.name), None)
    return recompiled is not None and _fingerprint(recompiled) == _fingerprint(code)


def _fingerprint(code) -> tuple:
    """Constants (of nested functions too, by type and repr) and argument counts. (Local
    names are left out: inside a class, private names are mangled.)"""
    consts, stack = [], [code]
    while stack:
        c = stack.pop()
        consts.append((c.co_name, c.co_argcount, c.co_kwonlyargcount))
        for k in c.co_consts:
            if hasattr(k, "co_code"):
                stack.append(k)
            else:
                consts.append((type(k).__name__, repr(k)))
    return tuple(consts)




def _lambda_in_file(code, filename: str) -> tuple[Source, str] | None:
    """A lambda read from its whole file, which parses wherever the lambda stands (a dict
    entry, an argument on a continued line), unlike the lines ``inspect`` cuts out; None when
    the file's text is not valid Python on its own or does not tell the lambda apart."""
    text = "".join(linecache.getlines(filename))
    module = _parsed_file(filename, text)
    if module is None:
        return None
    tree = _find_lambda(code, module, 0, 0, 0, line=code.co_firstlineno)
    return None if tree is None else (Source(filename, tree, 0, 0), text)


# filename -> (its text, its syntax tree or None): a file of many lambdas is parsed once.
_file_trees: dict = {}


def _parsed_file(filename: str, text: str):
    cached = _file_trees.get(filename)
    if cached is not None and cached[0] == text:
        return cached[1]
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        module = None
    _file_trees[filename] = (text, module)
    return module


def _find_lambda(code, module, line_offset: int, indent: int, wrapped: int, line=None):
    """The lambda whose code this is: the one with these parameters (starting on ``line``,
    if given) whose source span holds every instruction's position (Python 3.11+), the
    innermost if lambdas nest."""
    params = list(code.co_varnames[:code.co_argcount])
    candidates = [n for n in ast.walk(module) if isinstance(n, ast.Lambda)
                  and [a.arg for a in n.args.args] == params
                  and (line is None or n.lineno == line)]
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


_DUALS_MODULE = "symgrad.numpy_api"   # where sg.sin, sg.reduce_sum, ... are defined


def readable_function(fn):
    """``fn`` if symgrad can read its source (a def or lambda, a method of one, or a wrapper of
    one such as ``sg.checkpoint``'s); else a TypeError saying what it is and what to pass."""
    inner = inspect.unwrap(fn) if callable(fn) else fn
    if inspect.ismethod(inner):
        inner = inner.__func__
    module = getattr(fn, "__module__", None) or ""
    library = module.split(".")[0] == "numpy" or module == _DUALS_MODULE
    if inspect.isfunction(inner) and not library:
        return fn
    if library:
        prefix = "sg" if module == _DUALS_MODULE else "np" + module[len("numpy"):]
        hint = (f"{prefix}.{fn.__name__} is a library function, not source symgrad traces; "
                f"differentiate a function that calls it, e.g. lambda x: {prefix}.{fn.__name__}(x)")
    elif isinstance(fn, functools.partial):
        hint = ("functools.partial objects are not supported: differentiate a lambda that makes "
                "the call, e.g. lambda x: f(x, a=a)")
    elif callable(fn) and inspect.isfunction(getattr(type(fn), "__call__", None)):
        hint = f"pass its method: {type(fn).__name__}().__call__"
    elif callable(fn):
        name = getattr(fn, "__name__", type(fn).__name__)
        hint = (f"{name} has no Python source to read (a compiled function); differentiate a "
                f"function that calls it, e.g. lambda x: {name}(x)")
    else:
        hint = "it is not callable"
    raise TypeError(f"symgrad differentiates Python functions (def or lambda); got "
                    f"{type(fn).__name__}: {hint}")
