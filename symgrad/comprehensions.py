"""Comprehensions and the walrus operator, for the tracer (a mixin of
:class:`symgrad.frontend.Tracer`): a comprehension over a static iterable runs in Python, one
scope per item, and its result records where each item may live (``origins``); ``:=`` binds in
the enclosing function's scope, as PEP 572 says.
"""
from __future__ import annotations

import ast

from .scope import Frame, is_data


class Comprehensions:
    def expr_ListComp(self, node, frame):
        return self.comprehension(node, frame, list)

    def expr_GeneratorExp(self, node, frame):
        return self.comprehension(node, frame, list)

    def expr_SetComp(self, node, frame):
        self.fail(node, "set comprehension")

    def expr_DictComp(self, node, frame):
        out, found = {}, set()
        for env in self.comprehension_envs(node.generators, frame):
            out[self.eval(node.key, env)] = self.eval(node.value, env)
            found |= self.origin_of(node.value, env)
        self.origins[node] = frozenset(found)
        return out

    def comprehension(self, node, frame, kind):
        out, found = [], set()
        for env in self.comprehension_envs(node.generators, frame):
            out.append(self.eval(node.elt, env))
            found |= self.origin_of(node.elt, env)
        self.origins[node] = frozenset(found)   # the items, wherever each may live
        return kind(out)

    def comprehension_envs(self, generators, frame):
        if not generators:
            yield frame
            return
        gen, rest = generators[0], generators[1:]
        if gen.is_async:
            self.fail(gen, "async comprehension")
        iterable = self.eval(gen.iter, frame)
        origin = self.items_origin(gen.iter, iterable, frame)
        for item in list(iterable):
            inner = Frame(self, frame.source, frame.globals, frame, {}, frame.name)
            inner.comprehension = True
            dummy = ast.Assign(targets=[gen.target], value=None, lineno=gen.target.lineno,
                               col_offset=gen.target.col_offset)
            self.assign(gen.target, item, inner, dummy, origin=origin)
            ok = True
            for cond in gen.ifs:
                c = self.eval(cond, inner)
                if is_data(c):
                    self.fail(cond, "comprehension filter on a data-dependent condition")
                if not c:
                    ok = False
                    break
            if ok:
                yield from self.comprehension_envs(rest, inner)

    def refuse_conditional_walrus(self, exprs, where: str):
        """Both sides of a choice on data are traced; a ``:=`` in one would bind whatever
        the data decides (Python binds it only where that side runs)."""
        walrus = next((n for e in exprs for n in ast.walk(e) if isinstance(n, ast.NamedExpr)), None)
        if walrus is not None:
            self.fail(walrus, f"walrus operator := in an operand of {where} decided by traced "
                      "data (it would be bound whichever side the data takes)",
                      "assign it in a statement before the choice")

    def expr_NamedExpr(self, node, frame):
        """``(y := expr)``: bind and return the value; in a comprehension the name belongs to
        the enclosing function's scope (PEP 572)."""
        value = self.eval(node.value, frame)
        origin = self.origin_of(node.value, frame)
        scope = frame
        while scope.comprehension:
            scope = scope.parent
        self.assign(node.target, value, scope, node, origin=origin)
        self.origins[node] = origin
        return value
