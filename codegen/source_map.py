"""Source maps for inspection: which of the user's lines each fused loop (CPU stage, GPU kernel)
computes, as comments in the LLVM IR and PTX text that ``f.llvm_ir()`` / ``f.ptx()`` return.

Before each stage's loop function (``sg_stage<k>.body``) and each PTX ``.entry`` the text gets
one comment line per user line whose nodes the loop computes (``grad of`` for derivative terms
the rule of that line produced), in source order.

The comments are added to the *displayed* text only. The text that is hashed for the
machine-code cache and compiled carries none, so identical kernels traced from different files
(or lines) still share one cache entry, and moving a function in its file does not recompile.
"""
from __future__ import annotations

import os
import re

from symgrad.ir import Graph, Node


def node_location(graph: Graph, n: Node) -> tuple | None:
    """``(filename, lineno, "grad of " or "", text)`` of the user's line ``n`` came from."""
    loc, prefix = graph.locs.get(n), ""
    if loc is None:
        origin = graph.grad_origin.get(n)
        loc, prefix = (graph.locs.get(origin) if origin is not None else None), "grad of "
    if loc is None:
        return None
    return loc.filename, loc.lineno, prefix, loc.text


def describe(graph: Graph, nodes) -> list[str]:
    """Distinct ``file:line: [grad of] text`` entries of ``nodes``, in source order."""
    seen = {}
    for n in nodes:
        where = node_location(graph, n)
        if where is not None:
            seen.setdefault(where, None)
    return [f"{os.path.basename(f)}:{line}: {prefix}{text}"
            for f, line, prefix, text in sorted(seen, key=lambda w: (w[0], w[1], w[2]))]


def _insert_before(text: str, headers: dict, comment: str) -> str:
    """``headers``: key -> (line matcher, entries). The entries go, as comments, before the
    first line each matcher accepts."""
    out, done = [], set()
    for line in text.splitlines(keepends=True):
        key = next((k for k, match in headers.items() if k not in done and match[0](line)), None)
        if key is not None:
            done.add(key)
            out += [f"{comment} {entry}\n" for entry in headers[key][1]]
        out.append(line)
    return "".join(out)


def annotate_llvm(text: str, schedule) -> str:
    """CPU back end: each stage's loop function preceded by the user's lines it computes."""
    graph = schedule.graph
    headers = {}
    for k, st in enumerate(schedule.stages):
        nodes = list(st.ssa) + [s.node for s in st.sinks]
        if st.region is not None:   # a loop or branch: what its bodies compute
            from .regions import region_nodes
            nodes += region_nodes(st.region)
        shape = f"{st.kind} over {'x'.join(map(str, st.shape))}" if st.shape else "scalar"
        if st.region is not None:
            shape = st.region.label
        lines = [f"stage {k} ({shape}) computes:"] + [
            f"  {entry}" for entry in describe(graph, nodes)]
        # the stage's loop (``.body``; inlined into the stage function once optimised)
        pattern = re.compile(rf'^define .*@"?sg_stage{k}(\.body)?"?\(')
        headers[k] = (pattern.match, lines)
    return _insert_before(text, headers, ";")


def _fused(plan, roots) -> list:
    """The roots and everything a kernel recomputes for them (up to what it reads from
    memory: ``plan.source``)."""
    seen, stack = set(), list(roots)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(i for i in n.inputs if i not in plan.source)
    return list(seen)


def annotate_ptx(text: str, plan) -> str:
    """GPU back end: each ``.entry`` preceded by the user's lines its kernel computes."""
    graph = plan.graph
    headers = {}
    from .ptx_regions import all_kernels
    for sub, kernel in all_kernels(plan):   # with the kernels of loop bodies
        nodes = _fused(sub, [job.node for job in kernel.jobs])
        lines = [f"kernel {kernel.name} ({kernel.kind}) computes:"] + [
            f"  {entry}" for entry in describe(graph, nodes)]
        pattern = re.compile(rf"^\.visible \.entry {re.escape(kernel.name)}\(")
        headers[kernel.name] = (pattern.match, lines)
    return _insert_before(text, headers, "//")
