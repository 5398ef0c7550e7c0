"""The lowering table: one entry per scalar (elementwise) op, from IR node to LLVM values.

Every rule has the signature ``rule(cx, node, args) -> ir.Value``: ``args`` are the lowered
operands (already of the node's operand dtype, since casts are explicit in the IR) and ``cx``
is a :class:`Scalar` context holding the builder and the target's math resolver. Nothing here
knows about loops, memory or the CPU: the CPU back end (``codegen.kernel``) and the NVPTX back
end call the same rules with their own :class:`~codegen.mathlib.MathTarget`.

Ops with loop structure (leaves, reductions, matmul, views, indexing, concatenation) have no
rule here: ``codegen.schedule.SCHEDULE_RULES`` (CPU) and ``codegen.ptx``'s tables (GPU) lower
them. tests/test_lowering_tables.py checks that every op of ``symgrad.ir.OPS`` is in exactly
one table of each back end, or in its explicit ``UNSUPPORTED`` set.
"""
from __future__ import annotations

from llvmlite import ir

from symgrad.ir import is_float

from .dtypes import info, is_unsigned, value_type
from .mathlib import INTRINSICS, MATH_NAMES, MathTarget

I1 = ir.IntType(1)


def _bits(dtype: str) -> int:
    return info(dtype).bits


class Scalar:
    """What a lowering rule may use: the builder, the math target, constants."""

    def __init__(self, builder: ir.IRBuilder, math: MathTarget):
        self.b = builder
        self.math = math

    def const(self, value, dtype: str) -> ir.Constant:
        if dtype == "bool":
            return ir.Constant(I1, int(bool(value)))
        if is_float(dtype):
            return ir.Constant(value_type(dtype), float(value))
        return ir.Constant(value_type(dtype), int(value))


def intrinsic(module: ir.Module, name: str, ty: ir.Type, nargs: int) -> ir.Function:
    """An overloaded float intrinsic ``name.<ty>`` taking ``nargs`` operands of type ``ty``."""
    return module.declare_intrinsic(name, [ty], ir.FunctionType(ty, [ty] * nargs))


def _float_or_int(fop, iop):
    def rule(cx, n, args):
        fn = getattr(cx.b, fop if is_float(n.dtype) else iop)
        return fn(*args, name=n.op)
    return rule


def _math(op):
    """The rule of an op that is one math-library call (``codegen.mathlib.MATH_NAMES``)."""
    if op not in MATH_NAMES and op not in INTRINSICS:   # caught at import, not in native code
        raise ImportError(f"symgrad.codegen.lower: op {op!r} is lowered as a math call but has no "
                          "entry in codegen.mathlib.MATH_NAMES")
    return lambda cx, n, args: cx.math.call(cx.b, op, n.dtype, args)


def _neg(cx, n, args):
    (x,) = args
    return cx.b.fneg(x, name="neg") if is_float(n.dtype) else cx.b.neg(x, name="neg")


def _abs(cx, n, args):
    (x,) = args
    if is_float(n.dtype):
        return cx.b.call(intrinsic(cx.b.module, "llvm.fabs", x.type, 1), [x], name="abs")
    if is_unsigned(n.dtype):
        return x
    return cx.b.select(cx.b.icmp_signed("<", x, cx.const(0, n.dtype)), cx.b.neg(x), x, name="abs")


def _sign(cx, n, args):
    (x,) = args
    b, one, zero = cx.b, cx.const(1, n.dtype), cx.const(0, n.dtype)
    if n.dtype == "bool":
        return x
    if is_float(n.dtype):   # as np.sign: NaN maps to itself, -0 and +0 to +0
        rest = b.select(b.fcmp_ordered("==", x, zero), zero, x)
        pos = b.select(b.fcmp_ordered(">", x, zero), one, rest)
        return b.select(b.fcmp_ordered("<", x, zero), cx.const(-1, n.dtype), pos, name="sign")
    gt = b.icmp_unsigned(">", x, zero) if is_unsigned(n.dtype) else b.icmp_signed(">", x, zero)
    out = b.select(gt, one, zero)
    if is_unsigned(n.dtype):
        return out
    return b.select(b.icmp_signed("<", x, zero), cx.const(-1, n.dtype), out, name="sign")


def _extremum(kind):
    def rule(cx, n, args):
        a, c = args
        if is_float(n.dtype):   # NaN-propagating, as np.maximum / np.minimum
            fn = intrinsic(cx.b.module, f"llvm.{kind}imum", a.type, 2)
            return cx.b.call(fn, [a, c], name=kind)
        if n.dtype == "bool":
            return (cx.b.or_ if kind == "max" else cx.b.and_)(a, c, name=kind)
        cmp = cx.b.icmp_unsigned if is_unsigned(n.dtype) else cx.b.icmp_signed
        return cx.b.select(cmp(">" if kind == "max" else "<", a, c), a, c, name=kind)
    return rule


def _compare(symbol):
    def rule(cx, n, args):
        a, c = args
        dtype = n.inputs[0].dtype
        if is_float(dtype):   # NaN compares false except !=, as NumPy
            cmp = cx.b.fcmp_unordered if symbol == "!=" else cx.b.fcmp_ordered
            return cmp(symbol, a, c, name="cmp")
        cmp = cx.b.icmp_unsigned if is_unsigned(dtype) else cx.b.icmp_signed
        return cmp(symbol, a, c, name="cmp")
    return rule


def _ipow(cx, n, args):
    """Integer power by squaring (NumPy wraps on overflow; negative exponents give 0 here
    where NumPy raises, but the front end only builds integer pow from Python ints)."""
    fn = _ipow_function(cx.b.module, value_type(n.dtype), is_unsigned(n.dtype))
    return cx.b.call(fn, args, name="ipow")


def _ipow_function(module, ty, unsigned):
    name = f"sg_ipow_{ty}{'u' if unsigned else ''}"
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ty, [ty, ty]), name)
    fn.linkage = "internal"
    base, exp = fn.args
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "pow.loop", "pow.done"))
    b = ir.IRBuilder(entry)
    zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
    b.cbranch(b.icmp_signed(">", exp, zero), loop, done)
    b = ir.IRBuilder(loop)
    acc = b.phi(ty, "acc")
    sq = b.phi(ty, "sq")
    e = b.phi(ty, "e")
    odd = b.icmp_unsigned("!=", b.and_(e, one), zero)
    acc2 = b.select(odd, b.mul(acc, sq), acc)
    sq2 = b.mul(sq, sq)
    e2 = b.lshr(e, one)
    for phi, start, nxt in ((acc, one, acc2), (sq, base, sq2), (e, exp, e2)):
        phi.add_incoming(start, entry)
        phi.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed(">", e2, zero), loop, done)
    b = ir.IRBuilder(done)
    res = b.phi(ty, "res")
    res.add_incoming(one, entry)   # x**0 == 1
    res.add_incoming(acc2, loop)
    b.ret(res)
    return fn


def _pow(cx, n, args):
    a, c = args
    if not is_float(n.dtype):
        return _ipow(cx, n, args)
    k = _const_exponent(n)
    b = cx.b
    if k == 1:
        return a
    if k == 2:   # NumPy's fast path for x**2 is a multiplication too
        return b.fmul(a, a, name="sq")
    if k == 3:
        return b.fmul(b.fmul(a, a), a, name="cube")
    if k == -1:
        return b.fdiv(cx.const(1, n.dtype), a, name="recip")
    if k == 0.5:  # NumPy's fast path: x**0.5 is sqrt(x)
        return cx.math.call(b, "sqrt", n.dtype, [a])
    return cx.math.call(b, "pow", n.dtype, [a, c])


def _const_exponent(n):
    e = n.inputs[1]
    if e.op in ("const", "full"):
        return e.attrs[0]
    return None


def _cast(cx, n, args):
    (x,) = args
    src, dst = n.inputs[0].dtype, n.dtype
    b = cx.b
    if src == dst:
        return x
    if dst == "bool":
        if is_float(src):   # NaN is truthy, as NumPy
            return b.fcmp_unordered("!=", x, cx.const(0, src), name="cast")
        return b.icmp_unsigned("!=", x, cx.const(0, src), name="cast")
    ty = value_type(dst)
    if is_float(src) and is_float(dst):
        return (b.fpext if dst == "float64" else b.fptrunc)(x, ty, name="cast")
    if is_float(dst):
        return (b.uitofp if is_unsigned(src) else b.sitofp)(x, ty, name="cast")
    if is_float(src):
        return (b.fptoui if is_unsigned(dst) else b.fptosi)(x, ty, name="cast")
    if _bits(dst) < _bits(src):
        return b.trunc(x, ty, name="cast")
    if _bits(dst) == _bits(src):
        return x
    return (b.zext if is_unsigned(src) else b.sext)(x, ty, name="cast")


def _logical(kind):
    def rule(cx, n, args):
        a, c = args
        return (cx.b.and_ if kind == "and" else cx.b.or_)(a, c, name=kind)
    return rule


# op -> rule. Leaves (arg, const, full, array, arange) are values the kernel reads, not rules.
LOWER = {
    "neg": _neg,
    "add": _float_or_int("fadd", "add"),
    "sub": _float_or_int("fsub", "sub"),
    "mul": _float_or_int("fmul", "mul"),
    "div": lambda cx, n, args: cx.b.fdiv(*args, name="div"),
    "pow": _pow,
    "exp": _math("exp"), "log": _math("log"), "log1p": _math("log1p"), "expm1": _math("expm1"),
    "sqrt": _math("sqrt"), "sin": _math("sin"), "cos": _math("cos"), "tan": _math("tan"),
    "arcsin": _math("arcsin"), "arccos": _math("arccos"), "arctan": _math("arctan"),
    "sinh": _math("sinh"), "cosh": _math("cosh"), "tanh": _math("tanh"),
    "arctan2": _math("arctan2"),
    "arcsinh": _math("arcsinh"), "arccosh": _math("arccosh"), "arctanh": _math("arctanh"),
    "exp2": _math("exp2"), "log2": _math("log2"), "log10": _math("log10"), "cbrt": _math("cbrt"),
    "erf": _math("erf"), "erfc": _math("erfc"), "lgamma": _math("lgamma"), "gamma": _math("gamma"),
    "hypot": _math("hypot"), "fmod": _math("fmod"),
    "floor": _math("floor"), "ceil": _math("ceil"), "rint": _math("rint"), "trunc": _math("trunc"),
    "abs": _abs,
    "sign": _sign,
    "maximum": _extremum("max"),
    "minimum": _extremum("min"),
    "lt": _compare("<"), "le": _compare("<="), "gt": _compare(">"), "ge": _compare(">="),
    "eq": _compare("=="), "ne": _compare("!="),
    "logical_and": _logical("and"),
    "logical_or": _logical("or"),
    "logical_not": lambda cx, n, args: cx.b.xor(args[0], ir.Constant(I1, 1), name="not"),
    "where": lambda cx, n, args: cx.b.select(*args, name="where"),
    "cast": _cast,
    "stop_gradient": lambda cx, n, args: args[0],   # identity forward
}
