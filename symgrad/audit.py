"""``f.grad.stopped()``: what each ``stop_gradient`` removed from a derivative.

Reverse mode records, for every ``stop_gradient`` node it passes, the cotangent that reached it
(``Graph.stopped``): the derivative flowing into the cut. The term removed from the gradient is
that cotangent times the derivative of the expression under the cut. This module spells both as
Python (through the Python back end, so the names are those of the generated source) at the
user's line.
"""
from __future__ import annotations

import os

from .emit_python import emit
from .ir import Graph, Node
from .simplify import simplify_nodes


def _spell(graph: Graph, node: Node, memo: dict) -> list[str]:
    """``node`` as Python lines: helper statements, then ``return <expression>`` as the last."""
    (node,) = simplify_nodes([node], memo)
    small = graph.derive(graph.name, (node,), 0)
    small.locs, small.grad_origin = {}, {}   # no line comments inside the snippet
    source, _ = emit(small)
    return [line.strip() for line in source.splitlines()[1:] if line.strip()]


def _render(lines: list[str], label: str) -> list[str]:
    *body, last = lines
    value = last[len("return "):]
    if not body:
        return [f"    {label}: {value}"]
    return [f"    {label}:"] + [f"        {line}" for line in body] + [f"        {value}"]


def _where(graph: Graph, node: Node) -> str:
    loc = graph.locs.get(node)
    if loc is None:
        return "(no source line recorded)"
    name = loc.filename if os.path.isabs(loc.filename) is False else os.path.relpath(loc.filename)
    if name.startswith(".."):
        name = loc.filename
    return f"{name}:{loc.lineno}: {loc.text}"


SYMPY_CHECK_ELEMENTS = 16   # sizes small enough to ask sympy whether a removed term is zero


def identically_zero(graph: Graph, cotangent: Node) -> bool:
    """Whether sympy proves the cotangent zero (then the cut changed no derivative value, only
    the work): tried only on small signatures; anything sympy cannot express counts as no."""
    from . import sympy_form
    if any(x is not None and x.size > SYMPY_CHECK_ELEMENTS for x in graph.inputs):
        return False
    small = graph.derive(graph.name, (cotangent,), 0)
    try:
        value = sympy_form.to_sympy(small)
    except (NotImplementedError, ValueError):
        return False
    import sympy
    items = list(value) if hasattr(value, "__iter__") else [value]
    return all(sympy.simplify(v) == 0 for v in items)


def stopped_report(graph: Graph) -> str:
    """One block per ``stop_gradient`` site reverse mode passed, in source order."""
    sites = sorted(graph.stopped.items(), key=lambda item: (
        graph.locs[item[0]].lineno if item[0] in graph.locs else 0))
    if not sites:
        return f"{graph.name}: no stop_gradient site on the path of a derivative\n"
    memo: dict = {}
    lines = [f"{graph.name}: {len(sites)} stop_gradient site{'s' if len(sites) != 1 else ''}"]
    for node, cotangent in sites:
        lines.append(f"  {_where(graph, node)}")
        lines += _render(_spell(graph, node.inputs[0], memo), "derivative cut through")
        if cotangent is None:
            lines.append("    removed: nothing (no derivative reached it: it does not depend "
                         "on the wrt arguments)")
        else:
            lines += _render(_spell(graph, cotangent, memo),
                             "removed: this cotangent times the derivative of the cut expression")
            if identically_zero(graph, cotangent):
                lines.append("    (sympy simplifies this cotangent to 0: the cut removes work, "
                             "not value)")
    return "\n".join(lines) + "\n"
