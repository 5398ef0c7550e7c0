"""Random *source* programs for end-to-end checks, and the check itself.

``generate(seed)`` writes a small NumPy function as Python text from a seeded generator (the
same seed gives the same text on every machine), using the constructs that outside testing
found bugs in: data-dependent ``if``/``else``, conditional expressions and early returns;
item updates (``y[i] = ...``, ``y[i] += ...``) on local arrays made by ``np.zeros``,
``np.zeros_like`` or arithmetic; augmented assignment on fresh locals; aliases and views
(``b = a``, ``v = a[1:]``) with writes through them; max/min (reductions with and without
``axis``, ``np.maximum``/``np.minimum``) of transcendentals; loops over rows (``for row in X``,
``enumerate``, ``zip``), static loops with accumulation and list appends; tuple, nested-tuple
and list outputs; ``wrt`` as an index, a name, ``(k,)`` and longer tuples; float32 and float64;
scalars, vectors and matrices with broadcasting.

``check(program)`` runs one program through the front end and both CPU-side targets and
compares with NumPy executing the same text (the oracle: no model of NumPy's semantics is
kept here, so aliasing, dtype promotion and output structure are whatever NumPy does):

(a) tracing either succeeds or raises ``sg.UnsupportedSyntaxError``, and a refusal is accepted
    only where the program uses a construct the README or issue 8 lets the front end refuse
    (``Program.may_refuse``) and the error names one of that construct's lines; a write into
    an argument or a view of one must be refused (``Program.must_refuse``);
(b) values of ``target="python"`` and ``target="cpu"`` equal NumPy's to a tolerance by dtype;
(c) gradients agree between the targets, and (float64) with central differences of NumPy's
    execution where the program is smooth around the sample (two step sizes agree; inputs
    are redrawn a few times when they are not, e.g. at a branch's switching point);
(d) values and gradients have NumPy's structure (tuple/list nesting, shapes, dtypes), and a
    gradient has its argument's structure;
(e) the caller's arrays are left as they were.

The result is an :class:`Outcome` whose ``kind`` is one of ``OUTCOMES``.
"""
from __future__ import annotations

import importlib.util
import os
import random
import re
import sys
import warnings
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

OUTCOMES = ("ok", "refused-by-design", "refused-valid", "accepted-invalid", "mismatch-value",
            "mismatch-grad", "mismatch-structure", "mutated-argument", "wrong-exception",
            "crash", "hang")
FAILURES = tuple(k for k in OUTCOMES if k not in ("ok", "refused-by-design"))

# Parameters a program may take: name -> symbolic shape ("N", "M" are sizes drawn per program).
PARAM_SHAPES = {"x": ("N",), "X": ("M", "N"), "z": ("M",), "s": (), "t": ()}
SIGNATURES = [("x", "s"), ("x",), ("s",), ("s", "t"), ("x", "X", "s"), ("X", "z"),
              ("x", "X", "z", "s"), ("X", "s"), ("x", "z", "t"), ("x", "s", "t")]

# Elementwise maps, smooth on the sampled range and bounded enough to nest.
TRANSCENDENTAL = ["np.sin({0})", "np.cos({0})", "np.tanh({0})", "np.exp(np.tanh({0}))",
                  "np.log1p({0} * {0})", "np.arctan({0})", "np.exp(-({0}) * ({0}))",
                  "np.sqrt(1.0 + {0} * {0})"]
ALGEBRAIC = ["-{0}", "({0}) ** 2", "0.5 * {0}", "1.0 / (1.0 + {0} * {0})", "abs({0}) + 0.5",
             "np.square({0})"]
BINARY = ["({0} + {1})", "({0} - {1})", "({0} * {1})", "({0} / (1.0 + {1} * {1}))",
          "np.maximum({0}, {1})", "np.minimum({0}, {1})",
          "np.where({0} > {1}, {0} * {1}, {0} - {1})"]
CONSTANTS = ["0.0", "0.25", "-0.3", "0.1", "0.5"]

# Tolerances by the program's dtype: (values, gradients between targets).
RTOL = {"float64": 1e-9, "float32": 2e-4}
FD_RTOL = 1e-5


class Flag(NamedTuple):
    """A construct the front end may (or must) refuse, and the file lines it spans: a refusal
    is accepted only when it names one of these lines."""
    reason: str
    first: int
    last: int


HEADER_LINES = 4    # "import numpy as np", two blank lines, "def program(...):"


@dataclass
class Program:
    seed: int
    text: str                          # a module defining ``program``
    dtype: str                         # "float64" or "float32"
    params: tuple                      # parameter names, in order
    sizes: dict                        # {"N": int, "M": int}
    wrt: object                        # int, str or tuple, as passed to sg.differentiate
    may_refuse: list = field(default_factory=list)    # Flags: constructs it may refuse
    must_refuse: list = field(default_factory=list)   # Flags: constructs it must refuse

    def flagged_line(self, lineno) -> bool:
        return any(f.first <= lineno <= f.last for f in self.may_refuse + self.must_refuse)


@dataclass
class Outcome:
    kind: str
    detail: str = ""
    fd_checked: bool = False


# ---------------------------------------------------------------------------------------------
# generation

class _Builder:
    """Writes one function body statement by statement, tracking each local's symbolic shape
    and whether it owns its memory (only such locals are written into)."""

    def __init__(self, rng: random.Random, params, sizes, max_depth, dtype="float64"):
        self.rng = rng
        # np.zeros(n) is float64: in a float32 program it gets dtype=np.float32, since a branch
        # choosing between a float32 and a float64 value is refused (its dtype would depend on
        # the data) and the generator does not track dtypes to flag it
        self.zeros_dtype = "" if dtype == "float64" else ", dtype=np.float32"
        self.max_depth = max_depth
        self.params = params
        self.sizes = sizes
        self.lines: list[str] = []
        self.shape = {p: PARAM_SHAPES[p] for p in params}   # readable names -> shape
        self.owned: list[str] = []                           # fresh local arrays
        self.may_refuse: list[str] = []
        self.must_refuse: list[str] = []
        self.counter = 0
        self.out_shapes = self._output_shapes()
        # the tree's form is fixed once, so every return of the program has one structure
        n = len(self.out_shapes)
        self.out_form = self.choice(["bare"] * 4 + ["1-tuple"] if n == 1 else
                                    ["tuple"] * 5 + ["list"] + (["nested"] * 5 if n == 3 else []))

    # -- names and expressions ------------------------------------------------------------
    def fresh(self, prefix="v"):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def choice(self, seq):
        return self.rng.choice(seq)

    def pick(self, shapes=None):
        names = [n for n, s in self.shape.items() if shapes is None or s in shapes]
        return self.choice(names) if names else None

    def param_of(self, shape):
        """A parameter of this shape, else None."""
        for p in self.params:
            if PARAM_SHAPES[p] == shape:
                return p
        return None

    def like(self, shape):
        """An argument expression of this shape (every shape drawn comes from the arguments:
        a row or a column of X stands in for a missing vector)."""
        p = self.param_of(shape)
        if p is None and "X" in self.params:
            p = {("N",): "X[0]", ("M",): "X[:, 0]"}[shape]
        return p

    def owning(self, e):
        """``e`` as an expression that makes a new array: a bare array name would alias it, and
        an in-place update would then write through to the original."""
        return f"{e} * 1.0" if self.shape.get(e) else e

    def transcendental(self, e):
        return self.choice(TRANSCENDENTAL).format(e)

    def unary(self, e):
        return self.choice(TRANSCENDENTAL + ALGEBRAIC).format(e)

    def reduce_all(self, e):
        return self.choice([f"np.sum({e})", f"np.mean({e})", f"np.max({self.transcendental(e)})",
                            f"np.min({self.transcendental(e)})", f"np.sum({e} * {e})"])

    def coerce(self, e, frm, to):
        """Text of an expression of shape ``to`` computed from ``e`` of shape ``frm``."""
        if frm == to:
            return e
        if frm == ("M", "N") and to in (("N",), ("M",)):
            axis = 0 if to == ("N",) else self.choice(["1", "-1"])
            return self.choice([f"np.sum({e}, axis={axis})",
                                f"np.max({self.transcendental(e)}, axis={axis})",
                                f"np.min({self.transcendental(e)}, axis={axis})",
                                f"np.mean({e}, axis={axis})"])
        if frm == ("N",) and to == ("M", "N"):
            p = self.like(to)
            return self.choice([f"({e} * {p})", f"(np.zeros_like({p}) + {e})"])
        if to == ():
            return self.reduce_all(e)
        if frm == ():
            p = self.like(to)
            return self.choice([f"({e} + np.zeros_like({p}))", f"({e} * {self.unary(p)})"])
        return self.coerce(self.reduce_all(e), (), to)

    def operand(self, shape):
        """An expression of this shape from the names in scope."""
        name = self.pick([shape]) if self.rng.random() < 0.7 else None
        if name is None:
            name = self.pick()
            return self.coerce(name, self.shape[name], shape)
        return name

    def expression(self, shape, depth=0):
        """A random expression of the given shape."""
        r = self.rng.random()
        if depth >= self.max_depth or r < 0.2 + 0.3 * depth:
            return self.operand(shape)
        if r < 0.45:
            return self.unary(self.expression(shape, depth + 1))
        if r < 0.55:
            return (f"np.{self.choice(['maximum', 'minimum'])}("
                    f"{self.transcendental(self.expression(shape, depth + 1))}, "
                    f"{self.transcendental(self.operand(shape))})")
        if r < 0.65 and shape == ():
            other = self.pick([("N",), ("M", "N"), ("M",)])
            if other is not None:
                return self.reduce_all(self.expression(self.shape[other], depth + 1))
        if r < 0.7 and shape in (("N",), ("M",)):
            return self.coerce(self.expression(("M", "N"), depth + 1), ("M", "N"), shape) \
                if self.param_of(("M", "N")) else self.operand(shape)
        # a binary op with broadcasting: one side may be a scalar or a row vector
        other_shape = self.choice([shape, shape, ()] + ([("N",)] if shape == ("M", "N") else []))
        a, b = self.expression(shape, depth + 1), self.expression(other_shape, depth + 1)
        if self.rng.random() < 0.5:
            a, b = b, a
        return self.choice(BINARY).format(a, b)

    def condition(self):
        name = self.pick([()])
        lhs = name if name and self.rng.random() < 0.7 else self.reduce_all(self.pick())
        rhs = self.choice(CONSTANTS + ([self.pick([()])] if name else []))
        return f"{lhs} {self.choice(['>', '<', '>='])} {rhs}"

    def array_shape(self):
        shapes = [s for s in {PARAM_SHAPES[p] for p in self.params} if s]
        return self.choice(sorted(shapes)) if shapes else None

    def any_shape(self):
        return self.choice(sorted({PARAM_SHAPES[p] for p in self.params}))

    def bind(self, name, shape, owned=False, indent=1):
        self.shape[name] = shape
        if owned and shape:
            self.owned.append(name)

    def flag(self, flags, reason, start, to_end=False):
        """Record that body lines ``start`` .. now (or the end, for a return whose structure
        differs from the final one) hold a construct in ``flags``' class."""
        last = 10 ** 9 if to_end else len(self.lines) + HEADER_LINES
        flags.append(Flag(reason, start + HEADER_LINES + 1, last))

    def emit(self, line, indent=1):
        self.lines.append("    " * indent + line)

    # -- statements ---------------------------------------------------------------------
    def st_assign(self):
        shape = self.any_shape()
        name = self.fresh()
        self.emit(f"{name} = {self.expression(shape)}")
        self.bind(name, shape)

    def st_branch(self):
        shape = self.any_shape()
        name = self.fresh()
        cond = self.condition()
        form = self.rng.random()
        if form < 0.1:   # branches of different shapes: refusal is the answer for now
            arr = self.array_shape()
            if arr is not None:
                start = len(self.lines)
                self.emit(f"{name} = {self.expression(arr)} if {cond} else {self.expression(())}")
                total = self.fresh("s")
                self.emit(f"{total} = np.sum({name})")
                self.bind(total, ())
                self.flag(self.may_refuse, "branches of different shapes", start)
                return
        if form < 0.45:
            self.emit(f"{name} = {self.expression(shape)} if {cond} else {self.expression(shape)}")
        elif form < 0.65:
            self.emit(f"{name} = {self.expression(shape)}")
            self.emit(f"if {cond}:")
            self.emit(f"{name} = {self.expression(shape)}", 2)
        else:
            self.emit(f"if {cond}:")
            self.emit(f"{name} = {self.expression(shape)}", 2)
            if self.rng.random() < 0.3:
                extra = self.fresh()
                self.emit(f"{extra} = {self.unary(name)}", 2)
                self.emit(f"{name} = {name} + {extra}", 2)
            self.emit("else:")
            self.emit(f"{name} = {self.expression(shape)}", 2)
        self.bind(name, shape)

    def st_early_return(self):
        start = len(self.lines)
        self.emit(f"if {self.condition()}:")
        if self.rng.random() < 0.05:
            # a return whose structure differs from the final one
            self.emit(f"return {self.expression(())}", 2)
            self.flag(self.may_refuse, "returns of different structures", start, to_end=True)
            return
        self.emit(f"return {self.return_tree()}", 2)

    def new_local_array(self, shape):
        """Text making a fresh local array of this shape (it owns its memory)."""
        dims = [self.sizes[d] for d in shape]
        literal = f"{dims[0]}" if len(dims) == 1 else f"({dims[0]}, {dims[1]})"
        src = self.pick([shape])
        options = [f"np.zeros({literal}{self.zeros_dtype})", f"np.zeros_like({src})", f"{src} * 1.0",
                   f"{src} + 0.0", f"{src}.copy()", f"np.zeros({literal}, dtype={src}.dtype)",
                   f"{self.transcendental(src)}"]
        return self.choice(options)

    def index(self, dim):
        n = self.sizes[dim]
        return self.rng.randrange(-n, n)

    def write(self, name, shape, indent=1):
        """One item/slice update of the array ``name``."""
        op = self.choice(["=", "=", "+=", "-=", "*="])
        if len(shape) == 1:
            form = self.rng.random()
            if form < 0.7 or self.sizes[shape[0]] < 2:
                target, rhs_shape = f"{name}[{self.index(shape[0])}]", ()
            else:
                target, rhs_shape = f"{name}[1:]", self.choice([(), None])
                if rhs_shape is None:
                    self.emit(f"{target} {op} {self.coerce(name, shape, ())}", indent)
                    return
        else:
            form = self.rng.random()
            if form < 0.4:
                target, rhs_shape = f"{name}[{self.index('M')}]", self.choice([(), ("N",)])
            elif form < 0.7:
                target, rhs_shape = f"{name}[{self.index('M')}, {self.index('N')}]", ()
            else:
                target, rhs_shape = f"{name}[:, {self.index('N')}]", self.choice([(), ("M",)])
        rhs_shape = rhs_shape if rhs_shape == () or self.like(rhs_shape) else ()
        self.emit(f"{target} {op} {self.expression(rhs_shape)}", indent)

    def st_inplace(self):
        shape = self.array_shape()
        if shape is None:
            return self.st_augmented()
        name = self.fresh("y")
        self.emit(f"{name} = {self.new_local_array(shape)}")
        for _ in range(self.rng.randint(1, 3)):
            if self.rng.random() < 0.2:
                self.emit(f"if {self.condition()}:")
                self.write(name, shape, 2)
            else:
                self.write(name, shape)
        self.bind(name, shape, owned=True)

    def st_augmented(self):
        shape = self.any_shape()
        name = self.fresh()
        start, first = len(self.lines), None
        shape_first = shape and self.rng.random() < 0.6
        if shape_first:
            self.emit(f"{name} = {self.owning(self.expression(shape))} * 2.0")
            current = shape
        else:   # starts as a scalar and becomes whatever the right-hand side is
            first = self.owning(self.expression(()))
            self.emit(f"{name} = {first}")
            current = ()
        for _ in range(self.rng.randint(1, 2)):
            # the right-hand side broadcasts into the target (NumPy's rule for in-place ops)
            rhs_shape = self.choice([shape, ()]) if current else shape
            rhs = self.expression(rhs_shape)
            current = current or rhs_shape
            op = self.choice(["+=", "-=", "*=", "/="])
            self.emit(f"{name} {op} " + (f"(1.0 + {rhs} * {rhs})" if op == "/=" else rhs))
        if not shape_first:
            self.flag_zero_d_alias(first, start)
        self.bind(name, current, owned=bool(current))

    def flag_zero_d_alias(self, first, start):
        """``b = first`` then ``b += v``: where ``first`` is a bare 0-d local it may be a
        mutable 0-d ndarray (np.where's), so NumPy writes through to it too, which the front
        end refuses (``owning`` copies only arrays of at least one dimension)."""
        if first in self.shape and not self.shape[first]:
            self.flag(self.may_refuse, "augmented assignment to an alias of a 0-d value", start)

    def st_alias(self):
        """Aliases and views of a local array with writes through them: NumPy's aliasing
        semantics or a refusal (issue 8, item 6)."""
        if not self.owned:
            self.st_inplace()
        if not self.owned:
            return
        base = self.choice(self.owned)
        shape = self.shape[base]
        self.owned.remove(base)
        view = self.fresh("w")
        start = len(self.lines)
        form = self.choice(["alias", "reshape" if len(shape) == 1 else "T"]
                           + (["slice"] if self.sizes[shape[0]] > 1 else []))
        if form == "alias":
            self.emit(f"{view} = {base}")
            vshape = shape
        elif form == "slice":
            self.emit(f"{view} = {base}[1:]" if len(shape) == 1 else f"{view} = {base}[1]")
            vshape = None if len(shape) == 1 else ("N",)
        elif form == "reshape":
            self.emit(f"{view} = {base}.reshape(-1)")
            vshape = shape
        else:
            self.emit(f"{view} = {base}.T")
            vshape = None
        target = self.choice([view, base])
        if self.rng.random() < 0.5 or vshape is None:
            rhs = self.expression(())
            self.emit(f"{target} {self.choice(['+=', '*=', '-='])} {rhs}")
        else:
            self.write(target, shape if target == base else vshape)
        self.flag(self.may_refuse, "writes through aliases or views of local arrays", start)
        self.bind(base, shape)
        if vshape is not None:
            self.bind(view, vshape)
        else:
            total = self.fresh("s")
            self.emit(f"{total} = np.sum({view})")
            self.bind(total, ())

    def st_argument_view(self):
        """Read-only views of arguments: basic indexing, reversed slices, transposes."""
        arrays = [p for p in self.params if PARAM_SHAPES[p]]
        if not arrays:
            return self.st_assign()
        p = self.choice(arrays)
        name = self.fresh("w")
        if PARAM_SHAPES[p] == ("M", "N"):
            form = self.choice([(f"{p}[{self.index('M')}]", ("N",)),
                                (f"{p}[:, {self.index('N')}]", ("M",)),
                                (f"{p}.T", None), (f"{p}[::-1]", ("M", "N"))])
        else:
            forms = [(f"{p}[::-1]", PARAM_SHAPES[p])]
            if self.sizes[PARAM_SHAPES[p][0]] > 1:   # an empty slice would be a trace error
                forms += [(f"{p}[1:]", None), (f"{p}[:-1] * {p}[1:]", None)]
            form = self.choice(forms)
        self.emit(f"{name} = {form[0]}")
        if form[1] is not None:
            self.bind(name, form[1])
        else:
            total = self.fresh("s")
            self.emit(f"{total} = {self.reduce_all(name)}")
            self.bind(total, ())

    def st_argument_write(self):
        """Writes into an argument or a view of one: must be refused (never mutate the caller's
        array)."""
        arrays = [p for p in self.params if PARAM_SHAPES[p]]
        if not arrays:
            return self.st_assign()
        p = self.choice(arrays)
        form = self.rng.random()
        start = len(self.lines)
        if form < 0.3:
            self.write(p, PARAM_SHAPES[p])
        elif form < 0.6:
            view = self.fresh("w")
            if len(PARAM_SHAPES[p]) == 2:
                self.emit(f"{view} = {p}[0]")
            else:
                self.emit(f"{view} = {p}[1:]" if self.sizes["N"] > 1 else f"{view} = {p}[:]")
            self.emit(f"{view}[0] = {self.expression(())}")
        elif form < 0.8:
            view = self.fresh("w")
            self.emit(f"{view} = {p}")
            self.emit(f"{view} *= {self.expression(())}")
        else:
            self.emit(f"{p} += {self.expression(())}")
        self.flag(self.must_refuse, "write into an argument array", start)

    def st_rows(self):
        """Loops over the rows of a matrix (or the elements of a vector)."""
        mats = [n for n, s in self.shape.items() if s == ("M", "N")]
        vecs = [n for n, s in self.shape.items() if s == ("N",)]
        if not mats and not vecs:
            return self.st_static_loop()
        acc = self.fresh("acc")
        if mats and (not vecs or self.rng.random() < 0.7):
            m = self.choice(mats)
            form = self.rng.random()
            zs = [n for n, s in self.shape.items() if s == ("M",)]
            if form < 0.2:
                rows = self.fresh("rows")
                self.emit(f"{rows} = []")
                self.emit(f"for row in {m}:")
                self.emit(f"{rows}.append({self.transcendental('row')} * {self.operand(())})", 2)
                self.emit(f"{acc} = np.stack({rows})")
                self.bind(acc, ("M", "N"))
                return
            if form < 0.35:
                self.emit(f"{acc} = np.zeros_like({m})")
                self.emit(f"for i in range(len({m})):")
                self.emit(f"{acc}[i] = {self.transcendental(f'{m}[i]')} * {self.operand(())}", 2)
                self.bind(acc, ("M", "N"), owned=True)
                return
            init = self.choice(["0.0", f"np.zeros_like({m}[0])", f"{self.operand(('N',))} * 0.5"
                                if vecs else "0.0"])
            self.emit(f"{acc} = {init}")
            body_shape = ("N",)
            if form < 0.6:
                self.emit(f"for row in {m}:")
                body = f"{acc} + {self.transcendental('row')}"
            elif form < 0.8 or not zs:
                self.emit(f"for i, row in enumerate({m}):")
                body = f"{acc} * 0.5 + {self.unary('row')} * (i + 1.0)"
            else:
                self.emit(f"for row, w in zip({m}, {self.choice(zs)}):")
                body = f"{acc} + w * {self.transcendental('row')}"
            if self.rng.random() < 0.3:   # accumulate in place (a Python float rebinds)
                self.emit(f"{acc} += {body.split(' + ', 1)[1]}", 2)
            else:
                self.emit(f"{acc} = {body}", 2)
            self.bind(acc, body_shape)
        else:
            v = self.choice(vecs)
            self.emit(f"{acc} = {self.choice(['0.0', self.operand(())])}")
            self.emit(f"for xi in {v}:")
            self.emit(f"{acc} = {acc} * 0.5 + {self.transcendental('xi')}", 2)
            self.bind(acc, ())

    def st_static_loop(self):
        shape = self.any_shape()
        acc = self.fresh("acc")
        trips = self.rng.randint(1, 4)
        start, first = len(self.lines), self.owning(self.expression(shape))
        self.emit(f"{acc} = {first}")
        self.emit(f"for k in range({trips}):")
        if self.rng.random() < 0.5:
            self.emit(f"{acc} = {self.unary(acc)} * 0.5 + {self.operand(shape)} * k", 2)
        else:
            self.emit(f"{acc} {self.choice(['+=', '-='])} {self.transcendental(self.operand(self.choice([shape, ()])))}", 2)
            self.flag_zero_d_alias(first, start)
        self.bind(acc, shape)

    def st_region_loop(self):
        """A loop long enough to become a loop region (more than symgrad.loops.UNROLL_MAX
        trips): a recurrence in one of the forms people write, carried from a Python 0.0 (its
        first iteration is peeled; a scalar that becomes an array), a copy of an expression or
        a scaled operand. Bounded maps keep the recurrence finite and smooth."""
        shape = self.any_shape()
        acc = self.fresh("acc")
        trips = self.rng.randint(6, 8)   # 6 or more: a peeled loop still has 5 left
        start = len(self.lines)
        first = self.choice(["0.0", self.owning(self.expression(shape)),
                             f"{self.operand(shape)} * 0.5"])
        self.emit(f"{acc} = {first}")
        step = self.operand(shape)       # read from outside the body: a loop-invariant input
        form = self.choice(["recurrence", "recurrence", "where", "branch", "append", "nested",
                            "augmented", "index"])
        if form == "index" and self.param_of(("N",)) is None:
            form = "recurrence"
        new = f"{self.transcendental(acc)} * 0.5 + {step} * (k + 1.0) * 0.1"
        if form == "append":
            rows = self.fresh("rows")
            self.emit(f"{rows} = []")
        if form == "index":   # the elements of x read by the loop index (a sliced input)
            self.emit(f"for k in range(len({self.param_of(('N',))})):")
            new = f"{self.transcendental(acc)} * 0.5 + {step} * {self.param_of(('N',))}[k]"
        else:
            self.emit(f"for k in range({trips}):")
        if form in ("recurrence", "index"):
            self.emit(f"{acc} = {new}", 2)
        elif form == "where":
            self.emit(f"{acc} = np.where({acc} > 0.1, {self.transcendental(acc)}, 0.5 * {acc})"
                      f" + {step} * 0.1", 2)
        elif form == "branch":
            test = acc if not shape else f"np.sum({acc})"
            self.emit(f"if {test} > {self.choice(CONSTANTS)}:", 2)
            self.emit(f"{acc} = {new}", 3)
            self.emit("else:", 2)
            self.emit(f"{acc} = {acc} * 0.5 - {step} * 0.1", 3)
        elif form == "append":
            self.emit(f"{acc} = {new}", 2)
            self.emit(f"{rows}.append({acc} * (k + 1.0))", 2)
        elif form == "nested":
            self.emit("for j in range(5):", 2)
            self.emit(f"{acc} = {self.transcendental(acc)} * 0.5 + {step} * (j - k) * 0.05", 3)
        else:
            self.emit(f"{acc} {self.choice(['+=', '-='])} {self.transcendental(step)} * 0.1 * k", 2)
            self.flag_zero_d_alias(first, start)
        if form == "append":
            out = self.fresh("stacked")
            self.emit(f"{out} = np.{self.choice(['sum', 'mean'])}(np.stack({rows}), axis=0)")
            self.bind(out, shape)
        self.bind(acc, shape)

    # -- outputs ------------------------------------------------------------------------
    def _output_shapes(self):
        shapes = sorted({PARAM_SHAPES[p] for p in self.params})
        return [self.choice(shapes) for _ in range(self.choice([1, 1, 1, 2, 2, 3]))]

    def return_tree(self):
        leaves = []
        recent = list(self.shape)[-4:]
        for shape in self.out_shapes:
            name = self.choice(recent)
            leaves.append(self.coerce(name, self.shape[name], shape)
                          if self.rng.random() < 0.7 else self.expression(shape))
        if self.out_form == "bare":
            return leaves[0]
        if self.out_form == "1-tuple":
            return f"({leaves[0]},)"
        if self.out_form == "nested":
            return f"{leaves[0]}, ({leaves[1]}, {leaves[2]})"
        if self.out_form == "list":
            return "[" + ", ".join(leaves) + "]"
        return ", ".join(leaves)


# statement kind -> weight
STATEMENTS = {"assign": 3, "branch": 3, "early_return": 1, "inplace": 3, "augmented": 2,
              "alias": 1, "argument_view": 1, "argument_write": 0.25, "rows": 3,
              "static_loop": 1.5}
# The mix for programs built around loop regions (tests/test_loops.py): every program has
# at least one region loop among the other constructs.
LOOP_STATEMENTS = {"assign": 2, "branch": 1, "inplace": 1, "augmented": 1, "rows": 1,
                   "region_loop": 6}
REGION_LOOP = r"for k in range\(([5-9]|len\(\w+\))\):"   # st_region_loop's header


def generate(seed: int, max_statements: int = 4, max_depth: int = 2,
             statements: dict = STATEMENTS) -> Program:
    """The program for this seed (deterministic): candidates are drawn from one seeded stream
    until NumPy runs one without an error or a non-finite value at a sample point."""
    rng = random.Random(seed)
    while True:
        program = _candidate(rng, seed, max_statements, max_depth, statements)
        if _numpy_accepts(program) and ("region_loop" not in statements or
                                        re.search(REGION_LOOP, program.text)):
            return program


def _candidate(rng, seed, max_statements, max_depth, statements=STATEMENTS) -> Program:
    params = rng.choice(SIGNATURES)
    sizes = {"N": rng.choice([1, 3, 4, 4, 6]), "M": rng.choice([2, 3, 3])}
    dtype = rng.choice(["float64", "float64", "float32"])
    b = _Builder(rng, params, sizes, max_depth, dtype)
    kinds, weights = zip(*statements.items())
    returned_early = False
    for _ in range(rng.randint(1, max_statements)):
        kind = rng.choices(kinds, weights)[0]
        if kind == "early_return":
            if returned_early:
                continue
            returned_early = True
        getattr(b, f"st_{kind}")()
    b.emit(f"return {b.return_tree()}")
    text = ("import numpy as np\n\n\n"
            f"def program({', '.join(params)}):\n" + "\n".join(b.lines) + "\n")
    floats = list(range(len(params)))
    wrt = rng.choice([
        0, rng.choice(floats), (rng.choice(floats),), (0,), tuple(floats),
        tuple(rng.sample(floats, min(2, len(floats)))), params[rng.choice(floats)]])
    return Program(seed, text, dtype, params, sizes, wrt, b.may_refuse, b.must_refuse)


def _numpy_accepts(program: Program) -> bool:
    namespace: dict = {}
    exec(compile(program.text, f"<program {program.seed}>", "exec"), namespace)
    args = arguments(program, np.random.default_rng(program.seed))
    try:
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            out = namespace["program"](*args)
    except Exception:
        return False
    return _finite(out) and all(np.asarray(v).dtype.kind == "f" for _, v in _leaves(out)[0])


def arguments(program: Program, rng: np.random.Generator) -> list:
    """Arguments for one call: arrays of the program's dtype, scalars as Python floats
    (float64 programs) or NumPy scalars of the dtype. Values avoid exact ties."""
    dtype = np.dtype(program.dtype)
    out = []
    for p in program.params:
        shape = tuple(program.sizes[d] for d in PARAM_SHAPES[p])
        value = rng.uniform(-1.5, 1.5, shape) + rng.uniform(-0.01, 0.01, shape)
        if not shape:
            out.append(float(value) if dtype == np.float64 and rng.random() < 0.8
                       else dtype.type(value))
        else:
            out.append(value.astype(dtype))
    return out


# ---------------------------------------------------------------------------------------------
# running and checking

def load(program: Program, folder: str):
    """Write the program into ``folder`` and import it; returns the plain Python function."""
    stem = f"sg_random_program_{program.seed}"
    path = os.path.join(folder, stem + ".py")
    with open(path, "w") as f:
        f.write(program.text)
    spec = importlib.util.spec_from_file_location(stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[stem] = module
    spec.loader.exec_module(module)
    return module.program


def _copy(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _leaves(tree, path="out"):
    """(path, leaf) pairs of a nested tuple/list; the structure as a string for comparison."""
    if isinstance(tree, (tuple, list)):
        kind = "tuple" if isinstance(tree, tuple) else "list"
        pairs, parts = [], []
        for k, item in enumerate(tree):
            p, s = _leaves(item, f"{path}[{k}]")
            pairs += p
            parts.append(s)
        return pairs, f"{kind}({', '.join(parts)})"
    arr = np.asarray(tree)
    return [(path, tree)], f"{arr.dtype}{list(arr.shape)}"


def _numpy_run(fn, args):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*_copy(args))


def _total(fn, args):
    """The sum of all outputs (what a gradient is the gradient of), in float64."""
    pairs, _ = _leaves(_numpy_run(fn, args))
    return sum(float(np.sum(np.asarray(v, dtype=np.float64))) for _, v in pairs)


def _finite(tree):
    return all(np.all(np.isfinite(np.asarray(v, dtype=np.float64))) for _, v in _leaves(tree)[0])


def _compare(got, want, rtol, what):
    """None when ``got`` has ``want``'s structure and values, else a message."""
    gp, gs = _leaves(got)
    wp, ws = _leaves(want)
    if gs != ws:
        return "structure", f"{what}: structure {gs} != expected {ws}"
    for (path, g), (_, w) in zip(gp, wp):
        g64, w64 = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        scale = max(1.0, float(np.max(np.abs(w64), initial=0.0)))
        if not np.allclose(g64, w64, rtol=rtol, atol=rtol * scale, equal_nan=True):
            return "value", f"{what}: {path} = {g64!r}, expected {w64!r}"
    return None


def _wrt_indices(program):
    wrt = program.wrt
    items = wrt if isinstance(wrt, tuple) else (wrt,)
    return [program.params.index(w) if isinstance(w, str) else w for w in items]


def _expected_grad_structure(program, args):
    """A gradient has its arguments' structure: one per wrt item, a tuple for tuple wrt."""
    def like(a):
        return np.zeros_like(a) if isinstance(a, np.ndarray) else np.zeros((), np.asarray(a).dtype)
    grads = [like(args[k]) for k in _wrt_indices(program)]
    return tuple(grads) if isinstance(program.wrt, tuple) else grads[0]


def _finite_differences(fn, args, indices):
    """Central differences of the total wrt each element of the wrt arguments, with two step
    sizes; None where they disagree (a kink, a branch switch or a tie near the point)."""
    args64 = [np.asarray(a, dtype=np.float64).copy() if isinstance(a, np.ndarray)
              else float(a) for a in args]
    grads = []
    for k in indices:
        base = np.asarray(args64[k], dtype=np.float64)
        g = np.zeros(base.shape)
        for idx in np.ndindex(base.shape):
            est = []
            for h in (1e-6, 1e-4):
                plus, minus = base.copy(), base.copy()
                plus[idx] += h
                minus[idx] -= h
                a_p, a_m = list(args64), list(args64)
                a_p[k] = plus if base.shape else float(plus)
                a_m[k] = minus if base.shape else float(minus)
                est.append((_total(fn, a_p) - _total(fn, a_m)) / (2 * h))
            if not abs(est[0] - est[1]) <= 1e-4 * max(1.0, abs(est[0])):
                return None
            g[idx] = est[0]
        grads.append(g)
    return grads


class _Failed(Exception):
    """A check failed: carries the outcome."""

    def __init__(self, kind, detail):
        super().__init__(detail)
        self.outcome = Outcome(kind, detail)


def _call(target, what, f, args):
    """``f(*args)``; the caller's arrays must be unchanged afterwards."""
    before = _copy(args)
    result = f(*args)
    if not all(np.array_equal(a, b) for a, b in zip(args, before) if isinstance(a, np.ndarray)):
        raise _Failed("mutated-argument", f"{target} {what} changed an argument")
    return result


def _values_and_grads(program, funcs, args):
    """{target: (value, gradient)}; on odd seeds the CPU target is asked through
    ``value_and_grad`` (one compiled function instead of two), on even seeds through the plain
    call and ``.grad``. Raises sg.UnsupportedSyntaxError when the value call refuses."""
    import symgrad as sg

    results, refused = {}, {}
    for target, f in funcs.items():
        try:
            if target == "cpu" and program.seed % 2:
                value, grad = _call(target, "value_and_grad", f.value_and_grad, args)
            else:
                value = _call(target, "value", f, args)
                grad = None
        except sg.UnsupportedSyntaxError as e:
            refused[target] = e
            continue
        except _Failed:
            raise
        except Exception as e:
            raise _Failed("wrong-exception", f"{target} value: {type(e).__name__}: {e}")
        results[target] = [value, grad]
    if refused:
        if len(refused) == 1:
            target = next(iter(refused))
            raise _Failed("wrong-exception", f"only target={target} refused: {refused[target]}")
        raise next(iter(refused.values()))
    for target, f in funcs.items():   # tracing succeeded for the value: the gradient must exist
        if results[target][1] is None:
            try:
                results[target][1] = _call(target, "grad", f.grad, args)
            except _Failed:
                raise
            except Exception as e:
                raise _Failed("wrong-exception", f"{target} grad: {type(e).__name__}: {e}")
    return results


def _check_values(program, results, expected):
    rtol = RTOL[program.dtype]
    for target, (value, _) in results.items():
        bad = _compare(value, expected, 1e-12 if target == "python" and rtol < 1e-6 else rtol,
                       f"{target} value")
        if bad:
            raise _Failed("mismatch-structure" if bad[0] == "structure" else "mismatch-value",
                          bad[1])


def _check_grads(program, results, args):
    want = _leaves(_expected_grad_structure(program, args))[1]
    for target, (_, grad) in results.items():
        got = _leaves(grad)[1]
        if got != want:
            raise _Failed("mismatch-structure", f"{target} grad: structure {got} != expected {want}")
    bad = _compare(results["cpu"][1], results["python"][1], RTOL[program.dtype],
                   "cpu grad vs python grad")
    if bad:
        raise _Failed("mismatch-grad", bad[1])


def _check_finite_differences(program, fn, grad, args) -> bool:
    """False where the program is not smooth around ``args`` (nothing was compared)."""
    fd = _finite_differences(fn, args, _wrt_indices(program))
    if fd is None:
        return False
    flat = list(grad) if isinstance(program.wrt, tuple) else [grad]
    for k, (g, d) in enumerate(zip(flat, fd)):
        g = np.asarray(g, dtype=np.float64)
        if not np.allclose(g, d, rtol=FD_RTOL, atol=FD_RTOL):
            raise _Failed("mismatch-grad",
                          f"grad[{k}] = {g!r}, central differences {d!r} at "
                          f"args={[np.asarray(a).tolist() for a in args]}")
    return True


def check(program: Program, folder: str, fd_tries: int = 4) -> Outcome:
    """Run one program on both targets against NumPy; see the module docstring."""
    import symgrad as sg

    fn = load(program, folder)
    rng = np.random.default_rng(program.seed)
    args = arguments(program, rng)    # the point generate() validated
    expected = _numpy_run(fn, args)
    funcs = {t: sg.differentiate(fn, wrt=program.wrt, target=t) for t in ("python", "cpu")}
    try:
        try:
            results = _values_and_grads(program, funcs, args)
        except sg.UnsupportedSyntaxError as e:
            if program.flagged_line(e.lineno):
                return Outcome("refused-by-design", str(e))
            return Outcome("refused-valid", str(e))
        if program.must_refuse:
            return Outcome("accepted-invalid", f"{program.must_refuse[0].reason} (line "
                           f"{program.must_refuse[0].first}) was not refused")
        _check_values(program, results, expected)
        _check_grads(program, results, args)
        if program.dtype != "float64":
            return Outcome("ok")
        for attempt in range(fd_tries):
            if attempt:   # the last point sat near a kink: redraw, and compare targets there
                args = arguments(program, rng)
                expected = _numpy_run(fn, args)
                if not _finite(expected):
                    continue
                results = _values_and_grads(program, funcs, args)
                _check_values(program, results, expected)
                _check_grads(program, results, args)
            if _check_finite_differences(program, fn, results["python"][1], args):
                return Outcome("ok", fd_checked=True)
        return Outcome("ok")
    except _Failed as failure:
        return failure.outcome
