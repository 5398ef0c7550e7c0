"""Math functions per target: one table from op name to the C math name, and per-target
resolvers that turn it into an LLVM call.

The lowering table (``codegen.lower``) never names a math library: it asks the target's
:class:`MathTarget` for ``exp`` of a ``double`` and gets back a call. The CPU target calls
glibc's libm under private symbol names (``symgrad_exp``) and tags every call with the
``vector-function-abi-variant`` attribute pointing at glibc's libmvec SIMD versions
(``_ZGVdN4v_exp``), so LLVM's loop vectoriser widens the call instead of scalarising it. A
private name is needed because LLVM recognises ``exp`` and turns a side-effect-free call into
the ``llvm.exp`` intrinsic, which x86 expands lane by lane into scalar libm calls. The NVPTX
back end maps the same keys to libdevice (``codegen.libdevice.LibdeviceMath``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import re

from llvmlite import ir

# op name -> C math function name (double version; the float one appends "f"). The one list of
# math functions: the CPU binds the C library's functions the IR declares (CPUMath.bind), the
# GPU derives libdevice's names from it (codegen.libdevice.LIBDEVICE), and a lowering rule
# naming an op missing here fails at import (codegen.lower.math_call).
MATH_NAMES = {
    "exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1", "sqrt": "sqrt",
    "sin": "sin", "cos": "cos", "tan": "tan", "arcsin": "asin", "arccos": "acos",
    "arctan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
    "pow": "pow", "arctan2": "atan2",
}

# Functions the hardware does natively: an LLVM intrinsic beats any library call on every
# target (NVPTX has sqrt.rn.f64 too), so they are not resolved through a library.
INTRINSICS = {"sqrt": "llvm.sqrt"}


def llvm_type(dtype: str) -> ir.Type:
    return ir.DoubleType() if dtype == "float64" else ir.FloatType()


class MathTarget:
    """Resolves math calls for one target. Subclasses fill ``symbol``."""

    name = "abstract"

    def symbol(self, cname: str, dtype: str) -> str:
        raise NotImplementedError

    def attributes(self, cname: str, dtype: str, nargs: int) -> str | None:
        """Extra call-site attribute text (the CPU uses it for SIMD variants)."""
        return None

    def call(self, builder: ir.IRBuilder, op: str, dtype: str, args) -> ir.Value:
        module = builder.module
        ty = llvm_type(dtype)
        if op in INTRINSICS:
            fn = module.declare_intrinsic(INTRINSICS[op], [ty])
            return builder.call(fn, args, name=op)
        cname = MATH_NAMES.get(op)
        if cname is None:
            raise NotImplementedError(f"no math function for op {op!r} on the {self.name} "
                                      "target: add its C name to codegen.mathlib.MATH_NAMES")
        sym = self.symbol(cname, dtype)
        fn = module.globals.get(sym)
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(ty, [ty] * len(args)), sym)
        call = builder.call(fn, args, name=op)
        notes = getattr(module, "math_calls", None)
        if notes is not None:
            notes.add((cname, dtype, len(args), sym))
        return call


# The CPU's math calls go to these private names (see the module docstring), bound to the C
# library by CPUMath.bind.
PRIVATE_PREFIX = "symgrad_"
_PRIVATE_DECLARED = re.compile(r'^declare [^@]*@"?(' + PRIVATE_PREFIX + r'\w+)"?\(', re.M)


class CPUMath(MathTarget):
    """glibc libm for scalars, libmvec for SIMD lanes (when the CPU and glibc have them)."""

    name = "cpu"

    def __init__(self, features: str = "", precise: bool = False):
        # precise: scalar glibc libm only (< 1 ulp, no SIMD). libmvec trades up to ~3.5 ulp
        # (measured, f64 sin/cos) for 3-5x throughput; SYMGRAD_PRECISE_MATH=1 selects this.
        self.precise = precise
        self.bound: set[str] = set()   # symbols already given to LLVM (CPUMath.bind)
        self.libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        try:
            self.libmvec = ctypes.CDLL(ctypes.util.find_library("mvec") or "libmvec.so.1",
                                       mode=ctypes.RTLD_GLOBAL)
        except OSError:
            self.libmvec = None
        # ISA letters of the x86 vector function ABI: b=SSE, d=AVX2, e=AVX-512.
        self.isas = []
        if "+avx512f" in features:
            self.isas.append(("e", 8))
        if "+avx2" in features:
            self.isas.append(("d", 4))
        if "+sse4.2" in features or "+sse2" in features:
            self.isas.append(("b", 2))

    def symbol(self, cname, dtype):
        return PRIVATE_PREFIX + cname + ("f" if dtype == "float32" else "")

    def call(self, builder, op, dtype, args):
        if dtype == "float64" and op in OWN_F64 and not self.precise:
            name, body = OWN_F64[op]
            return builder.call(_define(builder.module, name, body), args, name=op)
        return super().call(builder, op, dtype, args)

    def scalar_address(self, sym: str) -> int:
        cname = sym[len(PRIVATE_PREFIX):]
        fn = getattr(self.libm, cname, None)
        if fn is None:
            raise NotImplementedError(f"the C math library has no function {cname!r} (called "
                                      f"as {sym}): the op cannot run on the CPU")
        return ctypes.cast(fn, ctypes.c_void_p).value

    def bind(self, text: str, add_symbol) -> None:
        """Give LLVM the address of every library function ``text`` declares, before its
        machine code is linked: derived from the IR itself, so no list of names can miss one
        (a symbol LLVM cannot resolve crashed the process)."""
        for sym in _PRIVATE_DECLARED.findall(text):
            if sym not in self.bound:
                add_symbol(sym, self.scalar_address(sym))
                self.bound.add(sym)

    def variants(self, cname: str, dtype: str, nargs: int) -> list[tuple[str, int]]:
        """(libmvec name, lanes) for every SIMD version glibc exports for this CPU."""
        if self.libmvec is None or self.precise:
            return []
        out = []
        f32 = dtype == "float32"
        for isa, lanes64 in self.isas:
            lanes = lanes64 * 2 if f32 else lanes64
            name = f"_ZGV{isa}N{lanes}{'v' * nargs}_{cname}{'f' if f32 else ''}"
            if hasattr(self.libmvec, name):
                out.append((name, lanes))
        return out


def finish_cpu_module(text: str, calls, math: CPUMath) -> str:
    """Attach SIMD variants to the math calls of a printed module.

    llvmlite cannot put string attributes on call sites, so this edits the text: every call
    of ``symgrad_<f>`` gets an attribute group naming its libmvec variants, the variants are
    declared, and ``llvm.compiler.used`` keeps those declarations alive until the vectoriser
    runs (global DCE would otherwise drop them as unused, and the mapping is then ignored).
    """
    groups, decls, used = [], [], []
    for k, (cname, dtype, nargs, sym) in enumerate(sorted(calls)):
        ty = "double" if dtype == "float64" else "float"
        scalar_call = f'call {ty} @"{sym}"('
        variants = math.variants(cname, dtype, nargs)
        attr = f"#{900 + k}"
        mapping = ",".join(f"{name[:name.index('_', 4) + 1]}{sym}({name})" for name, _ in variants)
        body = "nounwind willreturn memory(none)"
        if mapping:
            body += f' "vector-function-abi-variant"="{mapping}"'
        groups.append(f"attributes {attr} = {{ {body} }}")
        lines = []
        for line in text.split("\n"):
            if scalar_call in line and line.rstrip().endswith(")"):
                line = line + " " + attr
            elif line.startswith(f'declare {ty} @"{sym}"('):
                line = line + " " + attr
            lines.append(line)
        text = "\n".join(lines)
        for name, lanes in variants:
            vt = f"<{lanes} x {ty}>"
            decls.append(f'declare {vt} @"{name}"({", ".join([vt] * nargs)})')
            used.append(f'ptr @"{name}"')
    if used:
        decls.append(f"@llvm.compiler.used = appending global [{len(used)} x ptr] "
                     f"[{', '.join(used)}], section \"llvm.metadata\"")
    return text + "\n" + "\n".join(decls + groups) + "\n"


# ----------------------------------------------------------------------------------------------
# Our own float64 exp and expm1: branch-free IR the loop vectoriser widens like any arithmetic,
# accurate to < 1 ulp (libmvec's AVX2 exp/expm1 reach 2.9 ulp). Reduction x = k ln2 + r with
# ln2 split Cody-Waite style (k * LN2_HI is exact for |k| < 2^21), |r| <= ln2/2, then the
# Taylor series of e^r - 1 to r^13 (truncation 4e-18, far below half an ulp).

LN2_HI = 6.93147180369123816490e-01     # 0x3FE62E42FEE00000: 32 significant bits
LN2_LO = 1.90821492927058770002e-10
INV_LN2 = 1.44269504088896338700e+00
TAYLOR = [1.0 / __import__("math").factorial(i) for i in range(2, 14)]   # 1/2! .. 1/13!


def _exp_parts(b: ir.IRBuilder, x):
    """(k as i64, e^r - 1) for x clamped to [-746, 710] (NaN handled by the callers)."""
    d = ir.DoubleType()
    c = lambda v: ir.Constant(d, v)   # noqa: E731 - local shorthand
    mod = b.module
    rint = mod.declare_intrinsic("llvm.rint", [d], ir.FunctionType(d, [d]))
    # fmuladd: a fused multiply-add where the CPU has one (Horner at half the instructions)
    fma = mod.declare_intrinsic("llvm.fmuladd", [d], ir.FunctionType(d, [d, d, d]))
    # clamp with compares and selects (cheap blends; NaN is patched by the caller)
    xc = b.select(b.fcmp_ordered("<", x, c(-746.0)), c(-746.0), x)
    xc = b.select(b.fcmp_ordered(">", xc, c(710.0)), c(710.0), xc)
    kf = b.call(rint, [b.fmul(xc, c(INV_LN2))])
    r = b.fsub(b.fsub(xc, b.fmul(kf, c(LN2_HI))), b.fmul(kf, c(LN2_LO)))
    q = c(TAYLOR[-1])
    for coef in reversed(TAYLOR[:-1]):
        q = b.call(fma, [q, r, c(coef)])
    p = b.call(fma, [b.fmul(r, r), q, r])           # e^r - 1
    return b.fptosi(kf, ir.IntType(64)), p


def _pow2(b: ir.IRBuilder, k):
    """2^k as a double for k in [-1022, 1023] (built from the exponent bits)."""
    i64 = ir.IntType(64)
    bits = b.shl(b.add(k, ir.Constant(i64, 1023)), ir.Constant(i64, 52))
    return b.bitcast(bits, ir.DoubleType())


def _scale(b: ir.IRBuilder, v, k):
    """v * 2^k for k in [-1076, 1024], in two steps so neither factor leaves the normal range
    (overflow to inf and gradual underflow come out right)."""
    i64 = ir.IntType(64)
    k1 = b.ashr(k, ir.Constant(i64, 1))
    return b.fmul(b.fmul(v, _pow2(b, k1)), _pow2(b, b.sub(k, k1)))


def _define(module: ir.Module, name: str, body) -> ir.Function:
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    d = ir.DoubleType()
    fn = ir.Function(module, ir.FunctionType(d, [d]), name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")   # inlined before the vectoriser runs
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    out = body(b, x)
    isnan = b.fcmp_unordered("uno", x, x)
    b.ret(b.select(isnan, x, out))
    return fn


def _exp_body(b, x):
    k, p = _exp_parts(b, x)
    return _scale(b, b.fadd(ir.Constant(ir.DoubleType(), 1.0), p), k)


def _expm1_body(b, x):
    """e^x - 1 = 2^k p + (2^k - 1): both terms exact-ish for |k| <= 53 (no cancellation for
    k >= 0, mild for k < 0); beyond, 2^k (1 + p) - 1."""
    d, i64 = ir.DoubleType(), ir.IntType(64)
    k, p = _exp_parts(b, x)
    one = ir.Constant(d, 1.0)
    small = b.icmp_signed("<=", b.select(b.icmp_signed("<", k, ir.Constant(i64, 0)),
                                         b.neg(k), k), ir.Constant(i64, 53))
    ks = b.select(small, k, ir.Constant(i64, 0))     # keep _pow2 in range on both paths
    t = _pow2(b, ks)
    near = b.fadd(b.fmul(t, p), b.fsub(t, one))
    far = b.fsub(_scale(b, b.fadd(one, p), k), one)
    return b.select(small, near, far)


OWN_F64 = {"exp": ("sg_exp_f64", _exp_body), "expm1": ("sg_expm1_f64", _expm1_body)}
