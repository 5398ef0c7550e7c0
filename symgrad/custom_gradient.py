"""``@sg.custom_gradient`` in TensorFlow's form: the function returns ``(value, grad_fn)`` and
``grad_fn(upstream)`` gives the gradient(s) of its float arguments.

Traced, the rule is code like any other: the front end calls ``grad_fn`` on a placeholder for
the upstream cotangent, and the nodes it builds become the rule. The call's result is one
``custom_gradient`` node, ``(value, *float args, *captured)`` with the rule in its attrs as a
closed sub-graph (:class:`Rule`: placeholders for the upstream and for every outer value the
rule reads, which are the node's ``captured`` inputs), so substitution and simplification of
the outer graph keep the rule pointing at the right values. Its VJP is the rule with the
placeholders replaced by the cotangent and the captured inputs: ordinary nodes, which later
passes differentiate again (grad of grad works where the rule is differentiable). Its JVP is
the rule's transpose (``J t = d/du <rule(u), t>``), derived by reverse mode over the rule when
the rule is linear in the upstream (a true VJP); a nonlinear rule, such as gradient clipping,
has no Jacobian to transpose and forward mode says so.

The value's own derivative is replaced, never combined: back ends never see the node
(:func:`lowerable` replaces it by its value before lowering).
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from .elementwise import mul
from .ir import Graph, Node, OpDef, is_float, make, register, substitute, toposort
from .op_base import broadcast_shapes, cast, lift, zeros_like
from .shape_ops import broadcast_to, reduce

_ids = itertools.count(1)    # placeholders are distinct per rule (rules may nest)
OP = "custom_gradient"


class CustomGradient:
    """What ``@sg.custom_gradient`` makes of a function: called eagerly it returns the value;
    called while tracing (or differentiated itself) its rule defines the derivative."""

    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self.fn = fn

    def __call__(self, *args, **kwargs):
        value, _ = split_result(self.fn(*args, **kwargs), self.__name__)
        return value

    def __repr__(self):
        return f"<symgrad.custom_gradient {self.__name__}>"


def custom_gradient(fn) -> CustomGradient:
    """Decorator: ``fn`` returns ``(value, grad_fn)``, ``grad_fn(upstream)`` the gradient of
    each float argument (one value for one, a tuple or list for several; None for a zero)."""
    return CustomGradient(fn)


@dataclass(frozen=True, eq=False)
class Rule:
    """A custom gradient rule as a closed sub-graph: ``gradients`` (one per float argument,
    None for a zero) over the ``upstream`` placeholder and the ``captured`` placeholders."""
    name: str
    upstream: Node
    captured: tuple
    gradients: tuple

    def __repr__(self):
        return f"rule({self.name})"

    def instantiate(self, g: Node, node: Node) -> list:
        """The gradients for cotangent ``g`` of ``node`` (a custom_gradient node)."""
        k = len(self.gradients)
        mapping = {self.upstream: g}
        mapping.update(zip(self.captured, node.inputs[1 + k:]))
        present = [r for r in self.gradients if r is not None]
        built = iter(substitute(present, mapping))
        return [None if r is None else next(built) for r in self.gradients]


def fresh_hole(name: str, dtype: str, shape) -> Node:
    """A placeholder of a rule (the upstream, a captured value): an ``arg`` no graph has."""
    return make("arg", (), (-next(_ids), name, dtype, tuple(shape)))


def split_result(result, name: str):
    from .scope import InterpFunction   # a function defined while tracing (scope sits above)
    if not (isinstance(result, tuple) and len(result) == 2 and
            (callable(result[1]) or isinstance(result[1], InterpFunction))):
        raise TypeError(f"{name}: a @custom_gradient function must return (value, grad_fn), "
                        f"got {type(result).__name__}")
    return result


def apply_rule(tracer, name: str, result, args, node) -> Node:
    """The traced result of a custom-gradient function: its value as a ``custom_gradient``
    node whose rule is ``grad_fn`` traced on an upstream placeholder."""
    from .scope import walk_nodes
    value, grad_fn = split_result(result, name)
    if isinstance(value, (tuple, list, dict)) or not is_float(lift(value).dtype):
        raise TypeError(f"{name}: a @custom_gradient function's value must be one float array "
                        f"(got {type(value).__name__})")
    value = lift(value)
    for a in args:
        if isinstance(a, (tuple, list, dict)) and any(True for _ in walk_nodes(a)):
            raise TypeError(f"{name}: a @custom_gradient function takes its float inputs as "
                            "separate array arguments, not inside a tuple, list or dict")
    float_args = [a for a in args if isinstance(a, Node) and is_float(a.dtype)]
    upstream = make("arg", (), (-next(_ids), "upstream", value.dtype, value.shape))
    grads = tracer.call(grad_fn, [upstream], {}, node)
    grads = _one_per_argument(grads, len(float_args), name)
    grads = [None if g is None else _shaped(lift(g), x, name) for g, x in zip(grads, float_args)]
    captured, rule = _close(name, upstream, grads)
    return make(OP, (value, *float_args, *captured), (rule,))


def _one_per_argument(grads, count: int, name: str) -> list:
    grads = list(grads) if isinstance(grads, (tuple, list)) else [grads]
    if len(grads) != count:
        raise TypeError(f"{name}: grad_fn returned {len(grads)} gradient(s); the function has "
                        f"{count} float argument(s)")
    return grads


def _shaped(g: Node, x: Node, name: str) -> Node:
    """A rule's gradient for ``x``, broadcast to its shape (a scalar gradient of an array
    argument means every element); a shape that does not fit is an error."""
    if broadcast_shapes(g.shape, x.shape) != x.shape:
        raise ValueError(f"{name}: grad_fn returned a gradient of shape {g.shape} for an "
                         f"argument of shape {x.shape}")
    return cast(broadcast_to(g, x.shape), x.dtype)


def _close(name: str, upstream: Node, grads: list) -> tuple[list, Rule]:
    """The outer values the rule reads (every maximal part independent of the upstream) and
    the rule with each replaced by a placeholder."""
    present = [g for g in grads if g is not None]
    order = toposort(present)
    depends = set()
    for n in order:
        if n is upstream or any(i in depends for i in n.inputs):
            depends.add(n)
    captured: list = []

    def capture(n):
        if n not in depends and n.inputs or n.op == "arg" and n is not upstream:
            if n not in captured:
                captured.append(n)
    for n in order:
        if n in depends:
            for i in n.inputs:
                capture(i)
    for g in present:
        capture(g)
    holes = [make("arg", (), (-next(_ids), f"captured{k}", c.dtype, c.shape))
             for k, c in enumerate(captured)]
    body = iter(substitute(present, dict(zip(captured, holes))))
    rule = Rule(name, upstream, tuple(holes), tuple(None if g is None else next(body) for g in grads))
    return captured, rule


def _vjp(g, n):
    rule = n.attrs[0]
    return (None, *rule.instantiate(g, n), *[None] * len(rule.captured))


# Ops through which a rule stays linear in the upstream: (op, which operands may carry it).
_LINEAR_ANY = {"add", "sub", "neg", "sum", "reshape", "transpose", "broadcast_to", "getitem",
               "concatenate", "stack", "cast", "index_add", "take", "scatter_add"}
_LINEAR_ONE = {"mul", "matmul"}            # one operand carries it
_LINEAR_FIRST = {"div": 0, "where": None}  # the numerator; where: not the condition


def _linear_in(rule: Rule) -> str | None:
    """None if every path from the upstream to a gradient is linear; else the op that is not."""
    depends = set()
    for n in toposort([g for g in rule.gradients if g is not None]):
        carrying = [k for k, i in enumerate(n.inputs) if i in depends]
        if n is rule.upstream:
            depends.add(n)
            continue
        if not carrying:
            continue
        depends.add(n)
        ok = n.op in _LINEAR_ANY or (n.op in _LINEAR_ONE and len(carrying) == 1) or \
            (n.op == "div" and carrying == [0]) or (n.op == "where" and 0 not in carrying)
        if not ok:
            return n.op
    return None


def _jvp(tangents, n):
    """``J t``: the gradient with respect to the upstream u of ``sum_i <rule_i(u), t_i>``,
    which does not depend on u when the rule is linear in it."""
    rule = n.attrs[0]
    k = len(rule.gradients)
    terms = [(r, t) for r, t in zip(rule.instantiate(rule.upstream, n), tangents[1:1 + k])
             if r is not None and t is not None]
    if not terms:
        return None
    culprit = _linear_in(rule)
    if culprit is not None:
        raise TypeError(f"forward mode through the @custom_gradient rule of {rule.name}: the rule "
                        f"is not linear in the upstream gradient (it applies '{culprit}' to it), "
                        "so it is not a vector-Jacobian product whose transpose is the JVP")
    from .autodiff import backward   # autodiff sits above the op table
    total = reduce("sum", mul(terms[0][0], terms[0][1]))
    for r, t in terms[1:]:
        total = total + reduce("sum", mul(r, t))
    u = rule.upstream
    (t_out,), _ = backward(Graph(f"transpose_{rule.name}", ("upstream",), (u,), (total,)), [u])
    return substitute([t_out], {u: zeros_like(u)})[0]


register(OpDef(OP, "shape", infer=lambda inputs, attrs: (inputs[0].dtype, inputs[0].shape),
               numpy=lambda value, *rest: value, python=lambda args, node: args[0],
               vjp=_vjp, jvp=_jvp))


def lowerable(graph: Graph) -> Graph:
    """``graph`` with each custom_gradient node replaced by its value, in loop and branch
    bodies too (what back ends run); ``graph`` itself when it has none."""
    return graph.rewritten(_strip)


def _strip(outputs, memo: dict) -> list:
    """``outputs`` rebuilt without custom_gradient nodes; a region's bodies (attrs that are
    ``symgrad.regions.Body``) are rebuilt the same way (nesting depth is the source's)."""
    from .regions import Body   # regions sits above the op table
    for n in toposort(outputs):
        if n in memo:
            continue
        if n.op == OP:
            memo[n] = memo[n.inputs[0]]
            continue
        inputs = tuple(memo[i] for i in n.inputs)
        attrs = tuple(Body(a.params, tuple(_strip(a.results, {})), a.names, a.derivative)
                      if isinstance(a, Body) else a for a in n.attrs)
        same = all(x is y for x, y in zip(inputs, n.inputs)) and all(
            x is y or (isinstance(x, Body) and x == y) for x, y in zip(attrs, n.attrs))
        memo[n] = n if same else make(n.op, inputs, attrs)
    return [memo[o] for o in outputs]
