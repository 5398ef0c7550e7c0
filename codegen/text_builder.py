"""A stand-in for llvmlite's IRBuilder that writes each instruction as a line of IR text.

llvmlite.ir makes a Python object per instruction, names it through its function's scope, and
prints it later by formatting every operand again: for straight-line code of 1000 statements
on a vector that was ~0.35 s of the gradient's first call, more than LLVM's code generation of
the same code at -O0. A wide stage's loop body (``codegen.wide_stage``) is one basic block of
~2000 instructions that nothing reads back, so there each instruction is formatted once, when
it is made, and the lines join the llvmlite function as one opaque item of its block
(:class:`Lines`).

The lowering rules (``codegen.lower.LOWER``) run on this builder unchanged: it has the subset
of IRBuilder's methods they and wide_stage call, with llvmlite's spelling of each instruction,
so the text is llvmlite's but for the value names (``%_<k>``: short, and never one llvmlite
gives; tests/test_wide_stage.py compares the two with names normalised). A rule calling a
method this builder lacks fails with AttributeError at compile time, never with other code.
"""
from __future__ import annotations

from llvmlite import ir

_FCMP_ORDERED = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "one",
                 "ord": "ord", "uno": "uno"}
_FCMP_UNORDERED = {"<": "ult", "<=": "ule", ">": "ugt", ">=": "uge", "==": "ueq", "!=": "une",
                   "ord": "ord", "uno": "uno"}
_ICMP_SIGNED = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}
_ICMP_UNSIGNED = {"<": "ult", "<=": "ule", ">": "ugt", ">=": "uge", "==": "eq", "!=": "ne"}
I1 = ir.IntType(1)


class Value:
    """An instruction's result: its type (an llvmlite type) and its reference text."""
    __slots__ = ("type", "ref")

    def __init__(self, type_, ref: str):
        self.type, self.ref = type_, ref

    def get_reference(self) -> str:
        return self.ref


class Lines:
    """The builder's lines as one item of an llvmlite block's instruction list (a block
    prints each item as two spaces, its text and a newline)."""

    def __init__(self, lines: list[str]):
        self.lines = lines

    def __str__(self):
        return "\n  ".join(self.lines)


class TextBuilder:
    """Instructions of one basic block, in order; ``module``: the llvmlite module that holds
    the declarations the calls name (intrinsics, SIMD maths)."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.lines: list[str] = []
        self._types: dict[int, tuple] = {}   # id(type) -> (type, its text): kept alive here

    # -- formatting --------------------------------------------------------------------------
    def _text(self, t) -> str:
        hit = self._types.get(id(t))
        if hit is None:
            hit = self._types[id(t)] = (t, str(t))
        return hit[1]

    def _operand(self, v) -> str:
        return f"{self._text(v.type)} {v.get_reference()}"

    def _def(self, type_, text: str) -> Value:
        ref = f"%_{len(self.lines)}"
        self.lines.append(f"{ref} = {text}")
        return Value(type_, ref)

    def _binary(self, op: str, a, c) -> Value:
        return self._def(a.type, f"{op} {self._operand(a)}, {c.get_reference()}")

    def _compare(self, table: dict, kind: str, op: str, a, c) -> Value:
        count = getattr(a.type, "count", None)
        result = I1 if count is None else ir.VectorType(I1, count)
        return self._def(result, f"{kind} {table[op]} {self._operand(a)}, {c.get_reference()}")

    # -- the instructions the lowering rules and wide_stage use ---------------------------------
    def fadd(self, a, c, name=""):
        return self._binary("fadd", a, c)

    def fsub(self, a, c, name=""):
        return self._binary("fsub", a, c)

    def fmul(self, a, c, name=""):
        return self._binary("fmul", a, c)

    def fdiv(self, a, c, name=""):
        return self._binary("fdiv", a, c)

    def add(self, a, c, name=""):
        return self._binary("add", a, c)

    def mul(self, a, c, name=""):
        return self._binary("mul", a, c)

    def and_(self, a, c, name=""):
        return self._binary("and", a, c)

    def or_(self, a, c, name=""):
        return self._binary("or", a, c)

    def xor(self, a, c, name=""):
        return self._binary("xor", a, c)

    def fneg(self, a, name=""):
        return self._def(a.type, f"fneg {self._operand(a)}")

    def fcmp_ordered(self, op, a, c, name=""):
        return self._compare(_FCMP_ORDERED, "fcmp", op, a, c)

    def fcmp_unordered(self, op, a, c, name=""):
        return self._compare(_FCMP_UNORDERED, "fcmp", op, a, c)

    def icmp_signed(self, op, a, c, name=""):
        return self._compare(_ICMP_SIGNED, "icmp", op, a, c)

    def icmp_unsigned(self, op, a, c, name=""):
        return self._compare(_ICMP_UNSIGNED, "icmp", op, a, c)

    def select(self, cond, a, c, name=""):
        return self._def(a.type, f"select  {self._operand(cond)}, {self._operand(a)}, "
                                 f"{self._operand(c)}")

    def zext(self, a, type_, name=""):
        return self._def(type_, f"zext {self._operand(a)} to {self._text(type_)}")

    def call(self, fn: ir.Function, args, name=""):
        ret = fn.function_type.return_type
        text = (f"call {self._text(ret)} {fn.get_reference()}"
                f"({', '.join(self._operand(a) for a in args)})")
        if isinstance(ret, ir.VoidType):
            self.lines.append(text)
            return None
        return self._def(ret, text)

    def gep(self, ptr, indices, source_etype=None, name=""):
        idx = ", ".join(self._operand(i) for i in indices)
        return self._def(ptr.type, f"getelementptr {self._text(source_etype)}, "
                                   f"{self._operand(ptr)}, {idx}")

    def load(self, ptr, typ=None, name=""):
        return self._def(typ, f"load {self._text(typ)}, {self._operand(ptr)}")

    def insert_element(self, vector, value, idx, name=""):
        return self._def(vector.type, f"insertelement {self._operand(vector)}, "
                                      f"{self._operand(value)}, {self._operand(idx)}")

    def shuffle_vector(self, a, c, mask, name=""):
        count = mask.type.count   # (a's own type when as long: it may name intrinsics)
        result = a.type if a.type.count == count else ir.VectorType(a.type.element, count)
        return self._def(result, f"shufflevector {self._operand(a)}, {self._operand(c)}, "
                                 f"{self._operand(mask)}")
