"""What generated source was generated for, said and checked at the top of its body.

A trace is specialised on its arguments' ranks, dtypes, sizes and static values, and the
generated code shows it: ``np.sum(x, axis=-1)`` of a 1-d ``x`` is printed as ``np.sum(x)``,
``x[-1]`` as ``x[2]``, ``len(x)`` as ``3.0``, a loop as ``range(30)``. Copied out of ``.source``
(or written by ``sg.export``) and run on other arguments, such code would return wrong numbers
without an error. So the source states the types it was made for in a comment, and checks,
in one ``if`` (wrapped at 99 columns) and one ``raise`` that lists every argument's expected and
given type, what a caller can get wrong:

* the rank of each array (and each 0-d value), and its sizes when the code depends on them;
* that float arguments are floats: any float dtype is accepted (a float32 source given float64
  data computes in float64, more precisely, which is not a wrong answer), integers are not
  (arrays made like them, ``np.zeros_like(x)``, would truncate the gradient written into them);
* the kind (integer, bool) of integer and bool data arrays;
* the value of each static int, bool, str or None argument (baked in; a function-valued one
  is named in the comment only).

Whether the code depends on sizes is found by tracing again with every size above 1 changed
(one consistent, one-to-one map, so sizes that were equal stay equal) and comparing the texts:
where they are the same, sizes are shown as letters (``float64[n]``) and only ranks are
checked; where they differ, or the other sizes cannot be traced, the sizes are checked too.
Sizes 0 and 1 are always checked (broadcasting and empty arrays are specialised on).

The ``python`` target runs the same source without these lines: it is only called after the
API matched the exact signature (``runtime.arg_key``: dtype, shape, static values), a stricter
check, so the per-call cost does not grow.
"""
from __future__ import annotations

from dataclasses import dataclass

from .emit_python import emit
from .runtime import ArgKey, standin

_LETTERS = ("n", "m", "k", "p", "q", "r", "s", "u", "v", "w")
SOURCE_HINT = "regenerate with .source_for(...)"
EXPORT_HINT = "export again with sg.export(f, path, *example_arguments)"
_KINDS = {"f": "f", "i": "iu", "b": "b"}   # dtype kinds accepted for float, integer, bool data


@dataclass(frozen=True)
class Contract:
    """One signature's facts: ``keys`` (the API's argument keys, ``runtime.ArgKey``) and
    whether the code was found to depend on the arrays' sizes."""
    keys: tuple
    sizes_fixed: bool


def contract(f, entry) -> Contract:
    """The contract of ``entry``, the signature ``f`` last compiled (``f._last_key``), found
    once per entry (a second trace at other sizes, cached like a call's)."""
    found = getattr(entry, "contract", None)
    if found is None:
        keys = f._last_key   # (set by the _compiled call that returned entry, as .source reads it)
        found = entry.contract = Contract(keys, _sizes_fixed(f, entry, keys))
    return found


def checked_source(f, entry, hint: str = SOURCE_HINT) -> str:
    """The generated source of ``entry`` with its contract lines (the comment and checks)."""
    return emit(entry.graph, header_lines(entry.graph, contract(f, entry), hint))[0]


# -- whether the code depends on sizes ---------------------------------------------------------

def _sizes(key: ArgKey) -> list:
    if key.kind == "array":
        return list(key.shape)
    if key.kind == "tree":
        return [s for leaf in key.value[1] for s in _sizes(leaf)]
    return []


def _resized(key: ArgKey, mapping: dict) -> ArgKey:
    if key.kind == "array":
        return key._replace(shape=tuple(mapping.get(s, s) for s in key.shape))
    if key.kind == "tree":
        shape, leaves = key.value
        return key._replace(value=(shape, tuple(_resized(k, mapping) for k in leaves)))
    return key


def _sizes_fixed(f, entry, keys) -> bool:
    """Whether the source of ``entry`` changes when every size above 1 does (s -> s + 1:
    one-to-one, so sizes that were equal stay equal and others stay apart)."""
    sizes = sorted({s for k in keys for s in _sizes(k) if s > 1})
    if not sizes:
        return False    # nothing to vary (0 and 1 are checked as they are)
    mapping = {s: s + 1 for s in sizes}
    chain, g = [], f
    while g is not None:   # the probe must not change what .source means later
        chain.append((g, g._last_key))
        g = g._parent
    try:
        probe = f._compiled([standin(_resized(k, mapping)) for k in keys])
        return emit(probe.graph)[0] != emit(entry.graph)[0]
    except Exception:  # noqa: BLE001 - other sizes cannot be traced: the code needs these
        return True
    finally:
        for g, key in chain:
            g._last_key = key


# -- the lines ---------------------------------------------------------------------------------

_WIDTH = 95        # columns of a header line, after the 4 of the function body's indent


def _static_values(graph, keys) -> dict:
    """Graph input index -> the key of the static argument it stands for."""
    if graph.in_tree is None:
        pairs = enumerate(keys) if len(keys) == len(graph.inputs) else ()
    else:
        pairs = ((t, k) for t, k in zip(graph.in_tree, keys) if isinstance(t, int))
    return {i: k for i, k in pairs if graph.inputs[i] is None}


def _letters(graph, sizes_fixed: bool) -> dict:
    """Each free size -> its letter in the comment (``float64[n, m]``)."""
    if sizes_fixed:
        return {}
    free = [s for x in graph.inputs if x is not None for s in x.shape if s > 1]
    letters = [c for c in _LETTERS if c not in graph.params]
    letters += [f"n{i}" for i in range(len(free))]
    return dict(zip(dict.fromkeys(free), letters))


def _type_text(x, letters: dict) -> str:
    if not x.ndim:
        return f"{x.dtype} scalar"
    return f"{x.dtype}[{', '.join(str(letters.get(s, s)) for s in x.shape)}]"


def _axis(name: str, axis: int) -> str:
    return f"len({name})" if axis == 0 else f"np.shape({name})[{axis}]"


def _shape_tests(name: str, x, letters: dict) -> list[str]:
    """The rank, and the sizes that are not letters (all of them: the whole shape)."""
    fixed = [(axis, s) for axis, s in enumerate(x.shape) if s not in letters]
    if len(fixed) == x.ndim:
        return [f"np.shape({name}) != {tuple(x.shape)!r}"]
    return [f"np.ndim({name}) != {x.ndim}"] + [f"{_axis(name, a)} != {s}" for a, s in fixed]


def _kind_test(kinds: str, names: list) -> str:
    """The dtype kinds of ``names`` are among ``kinds`` (``_KINDS``)."""
    if len(names) == 1:
        read = f"np.result_type({names[0]}).kind"
        return f"{read} != {kinds!r}" if len(kinds) == 1 else f"{read} not in {kinds!r}"
    read = f"{{np.result_type(a).kind for a in ({', '.join(names)})}}"
    return f"{read} != {{{kinds!r}}}" if len(kinds) == 1 else f"not {read} <= set({kinds!r})"


def _static_test(name: str, value) -> str | None:
    if not (value is None or isinstance(value, (bool, int, str))):
        return None    # a function (act=np.tanh): named in the comment only
    return f"{name} is not {value!r}" if value is None or isinstance(value, bool) else \
        f"{name} != {value!r}"


def _equal_sizes_tests(graph, letters: dict) -> list[str]:
    """One test per letter on several axes: the probe kept equal sizes equal, so the code was
    seen to work only where they are (``x: float64[n, n]`` is square). After the ranks'
    tests, so every axis read exists."""
    axes: dict = {}
    for name, x in zip(graph.params, graph.inputs):
        for axis, s in enumerate(x.shape if x is not None else ()):
            if s in letters:
                axes.setdefault(letters[s], []).append(_axis(name, axis))
    return [" != ".join(read) if len(read) == 2 else f"not {' == '.join(read)}"
            for read in axes.values() if len(read) > 1]


def _packed(items: list[str], first: str, rest: str, width: int = _WIDTH) -> list[str]:
    """``items`` (texts ending in their separators) on lines of at most ``width`` columns
    where each fits: the first line begins with ``first``, the others with ``rest``."""
    lines = [first]
    for item in items:
        if len(lines[-1]) + len(item.rstrip()) > width and lines[-1].strip() != first.strip():
            lines[-1] = lines[-1].rstrip()
            lines.append(rest)
        lines[-1] += item
    return [line.rstrip() for line in lines]


def _raise_lines(expected: list[str], given: list[list[str]], hint: str) -> list[str]:
    """``raise ValueError(...)``: what the code expected and what it was given, argument by
    argument (``given``: each one's parts, where a line may break), then ``hint``; the f-string
    wrapped as implicit concatenation."""
    def literal(text: str) -> str:
        return f"f{text!r}" if "{" in text else repr(text)
    items = [("expected " if i == 0 else "") + e + (", " if i < len(expected) - 1 else "; ")
             for i, e in enumerate(expected)]
    for i, parts in enumerate(given):
        parts = [("got " if i == 0 else "") + parts[0]] + parts[1:]
        items += parts[:-1] + [parts[-1] + (", " if i < len(given) - 1 else "; ")]
    first = "    raise ValueError("
    rest = " " * len(first)
    chunks = [""]     # the message, cut before an item that does not fit on its line
    for item in items + [hint]:
        if chunks[-1] and len(rest + literal(chunks[-1] + item)) > _WIDTH - 1:
            chunks.append("")
        chunks[-1] += item
    return [(rest if i else first) + literal(chunk) + (")" if i == len(chunks) - 1 else "")
            for i, chunk in enumerate(chunks)]


def header_lines(graph, contract: Contract, hint: str = SOURCE_HINT) -> list[str]:
    """The comment saying what the code was generated for, then one ``if`` testing every
    argument (rank, the sizes the code depends on, equal sizes, dtype kind, static values) and
    one ``raise`` listing what was expected and what was given."""
    letters = _letters(graph, contract.sizes_fixed)
    statics = _static_values(graph, contract.keys)
    said, expected, given, shapes, kinds, values = [], [], [], [], {}, []
    for i, (name, x) in enumerate(zip(graph.params, graph.inputs)):
        if x is not None:
            said.append(f"{name}: {_type_text(x, letters)}")
            expected.append(said[-1])
            given.append([f"{name}: {{np.result_type({name})}}", f"{{list(np.shape({name}))}}"])
            shapes += _shape_tests(name, x, letters)
            kind = "f" if x.dtype.startswith("float") else "b" if x.dtype == "bool" else "i"
            kinds.setdefault(_KINDS[kind], []).append(name)
        elif i in statics:
            value = statics[i].value
            test = _static_test(name, value)
            shown = repr(value) if test is not None else getattr(value, "__name__", "a value")
            said.append(f"{name} = {shown} (baked in{'' if test else ', not checked'})")
            if test is not None:
                values.append(test)
                expected.append(f"{name} = {shown}".replace("{", "{{").replace("}", "}}"))
                given.append([f"{name} = {{{name}!r}}"])
    if not said:
        return []
    baked = "; sizes baked in" if contract.sizes_fixed and any(
        x is not None and x.ndim for x in graph.inputs) else ""
    comment = _packed([s + ", " for s in said[:-1]] + [said[-1] + baked],
                      "# generated for ", "#               ")
    tests = shapes + _equal_sizes_tests(graph, letters) + values + \
        [_kind_test(k, names) for k, names in kinds.items()]
    if not tests:
        return comment
    terms = [t + " or " for t in tests[:-1]] + [tests[-1] + ":"]
    if len("if " + "".join(terms)) <= _WIDTH:
        condition = ["if " + "".join(terms)]
    else:   # PEP 8: in parentheses, a break before each ``or`` that does not fit
        terms = [tests[0]] + [" or " + t for t in tests[1:-1]] + [" or " + tests[-1] + "):"]
        condition = _packed(terms, "if (", "        ")
        condition[1:] = [line[:8] + line[8:].removeprefix(" ") for line in condition[1:]]
    return comment + condition + _raise_lines(expected, given, hint)
