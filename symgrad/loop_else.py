"""``for ... else`` and ``while ... else`` as the loop without its ``else`` and an ``if``.

The ``else`` runs when the loop ended without ``break``. The tracer runs

    <broke> = False
    for ...:                     # each break of this loop: <broke> = True; break
        ...
    if not <broke>:
        <else body>

so every kind of loop keeps its own machinery: a static loop sets the hidden flag in Python, a
break on data inside a loop region (or a while loop on data) makes it a traced bool the region
carries, and the ``if`` is then decided on data like any other. The flag's name is not a Python
identifier, so it never meets a user's variable.
"""
from __future__ import annotations

import ast


def broke_name(loop: ast.stmt) -> str:
    return f"<broke {loop.lineno}:{loop.col_offset}>"


def _flag(name: str, value: bool, where: ast.AST) -> ast.Assign:
    node = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=ast.Constant(value=value))
    for n in ast.walk(node):
        ast.copy_location(n, where)
    return node


def _marked_breaks(stmts: list, name: str) -> list:
    """``stmts`` with each ``break`` of the loop they are the body of (not of a nested loop,
    nor inside a nested function) preceded by setting the flag. Iterative: a copy of each
    compound statement on the way, the originals untouched."""
    def rewrite(block):
        out = []
        for stmt in block:
            if isinstance(stmt, ast.Break):
                out += [_flag(name, True, stmt), stmt]
            elif isinstance(stmt, (ast.For, ast.While, ast.AsyncFor, ast.FunctionDef,
                                   ast.AsyncFunctionDef, ast.ClassDef)):
                out.append(stmt)   # its breaks are its own
            else:
                out.append(pending(stmt))
        return out

    copies = []   # (copy, field) pairs whose blocks still need rewriting, walked in a loop

    def pending(stmt):
        fields = [f for f in ("body", "orelse", "finalbody", "handlers", "cases")
                  if isinstance(getattr(stmt, f, None), list)]
        if not fields:
            return stmt
        copy = type(stmt)(**{f: getattr(stmt, f) for f in stmt._fields})
        ast.copy_location(copy, stmt)
        copies.extend((copy, f) for f in fields)
        return copy

    top = rewrite(stmts)
    while copies:
        node, field = copies.pop()
        items = getattr(node, field)
        if field in ("handlers", "cases"):   # except/case clauses hold blocks of their own
            setattr(node, field, [pending(h) for h in items])
        else:
            setattr(node, field, rewrite(items))
    return top


def without_else(loop: ast.stmt) -> list:
    """The statements that run ``loop`` (a For or While with an ``else``) as described above."""
    name = broke_name(loop)
    fields = {f: getattr(loop, f) for f in loop._fields}
    fields.update(body=_marked_breaks(loop.body, name), orelse=[])
    bare = ast.copy_location(type(loop)(**fields), loop)
    test = ast.UnaryOp(op=ast.Not(), operand=ast.Name(id=name, ctx=ast.Load()))
    check = ast.If(test=test, body=loop.orelse, orelse=[])
    for n in (test, test.operand, check):
        ast.copy_location(n, loop.orelse[0])
    return [_flag(name, False, loop), bare, check]
