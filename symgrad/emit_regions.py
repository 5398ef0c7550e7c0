"""The Python back end's statements for regions: a ``loop`` is a real ``for`` loop (``for i in
reversed(range(n))`` for a backward pass) filling preallocated stacks, a ``cond`` a real
``if``/``else``, the recomputation of a checkpoint (``remat``) its body's lines in a block of
their own. A body is emitted in its own scope (bodies are closed: they read nothing but
their params), indented under its statement; its params are bound to the carried variables,
the row ``xs[i]`` of each per-iteration input and the outer values it reads. A loop that stops
once its done flag is set is a ``while trips < cap and not done:`` (a ``while`` on data) or a
``for`` that breaks when done; its backward loop runs ``for i in reversed(range(trips))``.
"""
from __future__ import annotations

from . import spelling as sp
from .ir import Node, make, toposort
from .regions import UNTIL, loop_consts, loop_count

# The name of a while loop's hidden trip index (``symgrad.while_loops``) in generated code.
WHILE_INDEX = "trip"


def _scope(em):
    return (em.expr, em.var, em.nesting, em.python_numbers, em.counts, em.products,
            em.outputs, em.lines, em.last_comment)


def _restore(em, saved):
    (em.expr, em.var, em.nesting, em.python_numbers, em.counts, em.products, em.outputs,
     em.lines, em.last_comment) = saved


def named(em, n: Node) -> str:
    """A variable (or number) for an outer value a body reads: an expression is named once
    outside rather than recomputed in every iteration."""
    text, prec = em.expr[n]
    if prec == sp.ATOM and (text.isidentifier() or n.op in ("const",)):
        return text
    return em.statement(n, text) if n not in em.var else em.var[n]


def emit_body(em, body, bindings: dict, python_numbers=()) -> tuple[list[str], list[str]]:
    """The lines computing ``body``'s results with its params bound (``bindings``: param ->
    source text), and the results' source texts."""
    saved = _scope(em)
    em.expr, em.var, em.nesting = {}, {}, {}
    em.python_numbers = set(python_numbers)
    from .emit_python import STATEMENTS, _Emitter, display_counts
    (em.counts, em.products), em.outputs, em.lines = display_counts(body.results), \
        set(body.results), []
    for p in body.params:
        em.expr[p] = (bindings[p], sp.ATOM)
    for n in toposort(body.results, known=set(body.params)):
        STATEMENTS.get(n.op, _Emitter.expression)(em, n)
    # A result that is a Python number at run time becomes a NumPy scalar of its dtype: the
    # code after the region reads it as one (a Python float would promote float32 work).
    results = [f"{sp.dtype_name(r.dtype)}({em.expr[r][0]})" if r in em.python_numbers
               else em.expr[r][0] for r in body.results]
    lines = em.lines
    _restore(em, saved)
    return lines, results


def _assign(targets: list[str], values: list[str]) -> list[str]:
    """``a, b = x, y``: carries are rebound together (the new values read the old ones)."""
    pairs = [(t, v) for t, v in zip(targets, values) if t != v]
    if not pairs:
        return []
    if len(pairs) == 1:
        return [f"{pairs[0][0]} = {pairs[0][1]}"]
    return [", ".join(t for t, _ in pairs) + " = " + ", ".join(v for _, v in pairs)]


def _narrow_number(em, n: Node) -> bool:
    return n in em.python_numbers and n.dtype not in ("float64", "int64", "bool")


def loop_statement(em, n: Node):
    body, trips, nc, nx, reverse, exit_ = n.attrs
    names = list(body.names) + [None] * (len(body.params) - len(body.names))
    params = body.params
    # A carry started from a Python number of a narrow dtype (float32) starts as a NumPy scalar
    # of it: as a Python number, np.where(c, -x, x) in the body would make it float64.
    inits = [f"{sp.dtype_name(i.dtype)}({named(em, i)})" if _narrow_number(em, i) else named(em, i)
             for i in n.inputs[:nc]]
    xs = [named(em, i) for i in n.inputs[nc:nc + nx]]
    consts = [named(em, i) for i in loop_consts(n)]
    bound = str(trips) if loop_count(n) is None else named(em, loop_count(n))
    comment = em.comment_for(n)
    if comment is not None and comment != em.last_comment:
        em.lines.append(comment)
        em.last_comment = comment
    index = em.namer.name(names[0] or "i")
    carries = [em.namer.name(names[1 + k] or "c") for k in range(nc)]
    em.lines.extend(f"{c} = {v}" for c, v in zip(carries, inits))
    stacks = []
    for r in body.results[nc:]:
        var = em.namer.name(None)
        shape = sp.shape_text((trips,) + r.shape)
        tail = "" if r.dtype == "float64" else f", dtype={sp.dtype_name(r.dtype)}"
        fill = "zeros" if loop_count(n) is not None else "empty"   # rows past the trips: 0
        em.lines.append(f"{var} = np.{fill}({shape}{tail})")
        stacks.append(var)
    _, k, c = exit_ if exit_ is not None and exit_[0] == UNTIL else (None, None, None)
    if c is not None and n.inputs[c].op == "const" and n.inputs[c].attrs[0] == 0 and \
            names[0] in (None, WHILE_INDEX) and params[0] not in set(toposort(body.results)):
        index = carries[c]   # a while loop: its trips counter, from 0, is the loop index
    bindings = {params[0]: index}
    bindings.update(zip(params[1:1 + nc], carries))
    bindings.update((p, f"{x}[{index}]") for p, x in zip(params[1 + nc:1 + nc + nx], xs))
    bindings.update(zip(params[1 + nc + nx:], consts))
    numbers = [p for p, i in zip(params[1:1 + nc], n.inputs[:nc])
               if i in em.python_numbers and not _narrow_number(em, i)]
    lines, results = emit_body(em, body, bindings, [params[0], *numbers])
    lines += [f"{s}[{index}] = {r}" for s, r in zip(stacks, results[nc:])]
    if exit_ is not None and exit_[0] == UNTIL:
        _while_statement(em, n, index, carries, lines, results)
    else:
        lines += _assign(carries, results[:nc])
        loop = f"reversed(range({bound}))" if reverse else f"range({bound})"
        em.lines.append(f"for {index} in {loop}:")
        em.lines.extend("    " + line for line in (lines or ["pass"]))
    em.last_comment = None
    em.region_vars[n] = carries + stacks


def _while_statement(em, n: Node, index: str, carries, lines, results):
    """A loop that stops once its done flag is set: a ``while`` loop's (its index unread: a
    ``while trips < cap and not done:``, the trips counter its index), a ``for`` loop's (``for
    i in range(n):`` that breaks when done)."""
    _, k, c = n.attrs[5]
    nc, trips = n.attrs[2], n.attrs[1]
    lines = lines + _assign(carries, results[:nc])
    if index == carries[c]:
        em.lines.append(f"while {index} < {trips} and not {carries[k]}:")
    else:
        em.lines.append(f"for {index} in range({trips}):")
        lines = [f"if {carries[k]}:", "    break"] + lines
    em.lines.extend("    " + line for line in lines)


def cond_statement(em, n: Node):
    then, other = n.attrs
    pred = em.expr[n.inputs[0]][0]
    operands = [named(em, i) for i in n.inputs[1:]]
    comment = em.comment_for(n)
    if comment is not None and comment != em.last_comment:
        em.lines.append(comment)
    outs = [em.namer.name(em.graph.names.get(make("proj", (n,), (k,))))
            for k in range(len(then.results))]
    numbers = [p for p, i in zip(then.params, n.inputs[1:]) if i in em.python_numbers]
    em.lines.append(f"if {pred}:")
    for k, body in enumerate((then, other)):
        if k:
            em.lines.append("else:")
        lines, results = emit_body(em, body, dict(zip(body.params, operands)), numbers)
        lines += _assign(outs, results)
        em.lines.extend("    " + line for line in (lines or ["pass"]))
    em.last_comment = None
    em.region_vars[n] = outs


def remat_statement(em, n: Node):
    """A checkpoint's recomputation: its body's lines, under a comment saying so (its
    values are computed again here, not read from the forward pass)."""
    body, role = n.attrs
    operands = [named(em, i) for i in n.inputs]
    outs = [em.namer.name(em.graph.names.get(make("proj", (n,), (k,))))
            for k in range(len(body.results))]
    numbers = [p for p, i in zip(body.params, n.inputs) if i in em.python_numbers]
    lines, results = emit_body(em, body, dict(zip(body.params, operands)), numbers)
    em.lines.append(f"# {role} (sg.checkpoint) from {', '.join(operands)}")
    em.lines.extend(lines + _assign(outs, results))
    em.last_comment = None
    em.region_vars[n] = outs


def proj_expression(em, n: Node):
    var = em.region_vars[n.inputs[0]][n.attrs[0]]
    em.expr[n] = (var, sp.ATOM)
    em.var[n] = var
