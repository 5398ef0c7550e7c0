"""Split a printed LLVM module into parts that compile separately (``codegen.jit`` compiles
them on several threads and links the objects into one engine).

LLVM's time grows with the code of a module, and one module runs on one core: the gradient
of ADBench's GMM is one module of 30+ stages, ~0.55 s of -O3 and instruction selection. Its
exported functions (``sg_run``, ``sg_stage<k>``, ``sg_init<k>``) only call each other, so
each part keeps some of them with every internal function they reach, and declares the
exported ones it calls that live elsewhere.

The split is a function of the text alone (never of the thread count), and it leaves every
function's code as the whole module would: exported functions are ``noinline``
(``codegen.kernel``), so no part could inline one that another part defines; roots that
share an internal function that is not ``alwaysinline`` (a matmul's epilogue kernel)
stay in one part, so that function is compiled once and inter-procedural passes see all its
call sites; ``alwaysinline`` helpers (our own ``exp``) are copied into each part that uses
them, as they would be inlined into each caller anyway.

The printed form is llvmlite's: a function is a ``define`` line, ``{``, its body and a line
``}``; everything outside functions (declarations, attribute groups, ``llvm.compiler.used``)
is copied into every part. A module that defines a global variable other than an internal
one stays whole (two parts would each define it).
"""
from __future__ import annotations

import re
from typing import NamedTuple

# The estimated cost of a function: its characters of IR, plus PHI_COST per phi (the loops
# and carried values the vectorisers work on: a 30-line loop with an inlined exp costs LLVM
# ~20 ms, as much as 20 KB of straight-line code), an optnone function 1/OPTNONE_SHARE of
# that. A module is cut into one part per PART_COST of it (the parts on as many threads as
# there are CPUs): below that, a part's fixed cost (~3 ms of re-parsed declarations and
# LLVM's per-module work) outweighs what a second core gains.
PART_COST = 12_000
PHI_COST = 1_000
MAX_PARTS = 8          # fixed, not the core count: the machine code must not depend on it
OPTNONE_SHARE = 8

_NAME = re.compile(r'@"([^"]+)"')
_GLOBAL_DEF = re.compile(r'^@"?[^\s=]+"?\s*=\s*(?!external\b)(\w+)')


class Function(NamedTuple):
    name: str
    head: str          # the define line
    text: str          # the whole definition
    internal: bool
    inlined: bool      # alwaysinline: copied into each part that calls it
    cost: int
    cooked: bool       # needs the IR pipeline: internal, neither optnone nor prevectorised


def _parse(text: str) -> tuple[list[str], list[Function]] | None:
    """The lines outside functions and the functions in order; None when the text is not in
    the expected form (then it is compiled whole)."""
    lines = text.split("\n")
    outside, functions = [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("define "):
            outside.append(line)
            i += 1
            continue
        try:
            end = lines.index("}", i)
        except ValueError:
            return None
        name = _NAME.search(line)
        if name is None:
            return None
        body = "\n".join(lines[i:end + 1])
        cost = len(body) + PHI_COST * body.count(" = phi ")
        if " optnone" in line:
            cost //= OPTNONE_SHARE
        internal = line.startswith("define internal ")
        # (a stage body several stages share is exported: codegen.kernel._shared_body)
        cooked = ((internal or '.body"(' in line) and " optnone" not in line
                  and '.wide"(' not in line)
        functions.append(Function(name.group(1), line, body, internal, " alwaysinline" in line,
                                  cost, cooked))
        i = end + 1
    return outside, functions


def _foreign_globals(outside: list[str]) -> bool:
    """Does the module define a global two parts could not both define?"""
    for line in outside:
        m = _GLOBAL_DEF.match(line)
        if m and m.group(1) not in ("internal", "private", "appending"):
            return True
    return False


def _reach(functions: list[Function]) -> dict[str, list[str]]:
    """For each exported function, the internal functions it reaches (iteratively)."""
    by_name = {f.name: f for f in functions}
    calls = {f.name: [n for n in dict.fromkeys(_NAME.findall(f.text)) if n != f.name and
                      n in by_name and by_name[n].internal] for f in functions}
    out = {}
    for f in functions:
        if f.internal:
            continue
        seen, todo = [], [f.name]
        while todo:
            for n in calls[todo.pop()]:
                if n not in seen:
                    seen.append(n)
                    todo.append(n)
        out[f.name] = seen
    return out


def _clusters(functions: list[Function], reach: dict[str, list[str]]) -> list[list[str]]:
    """Exported functions grouped so that no internal helper that is not inlined is shared
    between groups (union-find over the helpers)."""
    by_name = {f.name: f for f in functions}
    parent = {r: r for r in reach}
    first = {r: k for k, r in enumerate(reach)}     # a group is named by its first root

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict[str, str] = {}
    for root, helpers in reach.items():
        for h in helpers:
            if by_name[h].inlined:
                continue
            if h in owner:
                a, b = find(owner[h]), find(root)
                if a != b:
                    parent[max(a, b, key=first.get)] = min(a, b, key=first.get)
            else:
                owner[h] = root
    groups: dict[str, list[str]] = {}
    for root in reach:
        groups.setdefault(find(root), []).append(root)
    return list(groups.values())


def _declaration(head: str) -> str:
    """``declare`` for a function from its define line: the signature, no attributes."""
    close = head.index(")", head.index("("))
    return "declare" + head[len("define"):close + 1]


def cost(text: str) -> int:
    """The estimated LLVM cost of ``text`` (the sum of its functions', as above): jit's pool
    takes the costliest texts first, so that the longest one is not started last."""
    parsed = _parse(text)
    return len(text) if parsed is None else sum(f.cost for f in parsed[1])


def split(text: str) -> list[str]:
    """The module as one or more texts that compile and link to the same functions."""
    parsed = _parse(text)
    if parsed is None:
        return [text]
    outside, functions = parsed
    total = sum(f.cost for f in functions)
    parts = min(MAX_PARTS, (total + PART_COST // 2) // PART_COST)   # the nearest count
    if parts < 2 or _foreign_globals(outside):
        return [text]
    by_name = {f.name: f for f in functions}
    reach = _reach(functions)
    clusters = _clusters(functions, reach)
    members = [set(c) | {h for r in c for h in reach[r]} for c in clusters]
    costs = [sum(by_name[n].cost for n in m) for m in members]
    # longest processing time first: the heaviest cluster to the lightest part so far
    # a part needs a cluster worth a thread: one large stage and the small ones around it
    # (sg_run, the fills) stay one module
    parts = min(parts, sum(c >= PART_COST // 4 for c in costs))
    if any('.wide"(' in f.head for f in functions):
        cooked = [any(by_name[n].cooked for n in m) for m in members]
    else:   # (one pool: nothing skips the pipeline)
        cooked = [True] * len(members)
    bins = _pack(costs, cooked, max(1, parts))
    if len(bins) < 2:
        return [text]
    return [_part_text(outside, functions, set().union(*(members[k] for k in b)))
            for b in bins]


def _pack(costs: list[int], cooked: list[bool], parts: int) -> list[list[int]]:
    """Clusters into ``parts`` bins, longest processing time first (the heaviest cluster to
    the lightest bin so far). Clusters that need the IR pipeline and those that do not
    (prevectorised and optnone code, codegen.jit.is_prevectorised) go to separate bins, their
    counts in proportion to their costs: one cooked function in a part would run the whole
    part through the pipeline."""
    pools = [[k for k in range(len(costs)) if cooked[k] == c] for c in (True, False)]
    pools = [p for p in pools if p]
    if len(pools) == 2 and parts >= 2:
        share = sum(costs[k] for k in pools[0]) / max(1, sum(costs))
        first = min(parts - 1, max(1, round(parts * share)))
        counts = [first, parts - first]
    else:
        pools, counts = [list(range(len(costs)))], [parts]
    bins: list[list[int]] = []
    for pool, count in zip(pools, counts):
        mine: list[list[int]] = [[] for _ in range(count)]
        loads = [0] * count
        for k in sorted(pool, key=lambda k: (-costs[k], k)):
            j = min(range(count), key=lambda b: (loads[b], b))
            mine[j].append(k)
            loads[j] += costs[k]
        bins += [b for b in mine if b]
    return bins


def _part_text(outside: list[str], functions: list[Function], mine: set[str]) -> str:
    exported_elsewhere = [f for f in functions if not f.internal and f.name not in mine]
    body = [f.text for f in functions if f.name in mine]
    referenced = set(_NAME.findall("\n".join(body)))
    decls = [_declaration(f.head) for f in exported_elsewhere if f.name in referenced]
    return "\n".join(outside + decls + body) + "\n"
