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

float64 exp, expm1, sin, cos, tan, log1p and tanh are our own (``OWN_F64``, in
``codegen.f64math``): branch-free IR,
inlined, that the loop vectoriser widens with the rest of the fused loop at the host's width,
within 1.7 ulp over the whole float64 range (libmvec's reach 2-3.4 ulp). The only call they
keep is the far-argument check of sin/cos/tan (``_far_helper``), whose code is a small
library compiled once per process. float32 functions are our own too: on CPUs with FMA, exp,
sin, cos, log, log1p and tanh in float32 arithmetic at the full float32 vector width
(``codegen.f32single``, within ``f32single.ULP_BOUND``: 1 ulp); expm1, tan, log2 and log10,
and all of those without FMA, in float64 arithmetic sized for a float32 result (``OWN_F32``,
0.5 + 2^-6 ulp); the rest the float64 version of the widened arguments rounded once
(``F32_VIA_F64``, 0.5 + 2^-28 ulp). libmvec's float versions reach 3.8 ulp.
``SYMGRAD_PRECISE_MATH=1`` turns all of this off: scalar libm only (float32 through the
double functions, still widened).
"""
from __future__ import annotations

import ctypes
import re
from typing import TYPE_CHECKING, NamedTuple

# llvmlite.ir and our own maths' emitters (codegen.f64math, codegen.f32math) are imported
# where IR is built, not here: a process whose machine code and run plans are on disk links
# with CPUMath's addresses alone, and those imports cost it ~5 ms. (OWN_F64 and OWN_F32 are
# still read as attributes of this module: __getattr__ below.)
if TYPE_CHECKING:
    from llvmlite import ir


# names this module gives from the modules that define them, imported on first use
_FROM_F64MATH = frozenset({"OWN_F64", "_define", "_far_libraries", "_far_name",
                           "_mark_no_caller_saved", "_own_library_module", "_own_loops",
                           "_own_name"})


def __getattr__(name: str):
    """``OWN_F64`` and ``OWN_F32`` (the tables of our own float64 and float32 functions)
    and f64math's library builders, from the modules that define them."""
    if name in _FROM_F64MATH:
        from . import f64math
        return getattr(f64math, name)
    if name in ("OWN_F32", "f32math"):
        from . import f32math
        return f32math if name == "f32math" else f32math.OWN_F32
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# op name -> C math function name (double version; the float one appends "f"). The one list of
# math functions: the CPU binds the C library's functions the IR declares (CPUMath.bind), the
# GPU derives libdevice's names from it (codegen.libdevice.LIBDEVICE), and a lowering rule
# naming an op missing here fails at import (codegen.lower._math).
MATH_NAMES = {
    "exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1", "sqrt": "sqrt",
    "sin": "sin", "cos": "cos", "tan": "tan", "arcsin": "asin", "arccos": "acos",
    "arctan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
    "pow": "pow", "arctan2": "atan2",
    "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "exp2": "exp2", "log2": "log2",
    "log10": "log10", "cbrt": "cbrt", "erf": "erf", "erfc": "erfc", "hypot": "hypot",
    "fmod": "fmod", "lgamma": "lgamma", "gamma": "tgamma",
}

# C math functions that write a global: glibc's lgamma stores the sign of gamma in
# ``signgam``, a data race between the threads running one kernel. The CPU calls the
# reentrant version instead, ``lgamma_r(x, &sign)`` with a local ``sign`` (CPUMath.call);
# libdevice's ``__nv_lgamma`` writes nothing. C name -> its reentrant name.
REENTRANT = {"lgamma": "lgamma_r"}

# float32 functions computed as their float64 version on the widened arguments, rounded once
# to float32 (CPUMath.call): our own float64 code or libmvec's/libm's double functions are
# within 2 ulp of float64, 2^-28 ulp of float32, so the float32 result is within 0.5 + 2^-28
# ulp (libmvec's float versions reach 3.8 ulp), and NaN, inf and signed zeros come out as the
# float64 function's, the same C99 rules NumPy's float32 functions follow. Every function but
# sqrt (an intrinsic, correctly rounded in float32 already); benchmarks/math_speed.py empties
# the set to measure libmvec's float32 functions beside ours.
F32_VIA_F64 = set(MATH_NAMES) - {"sqrt"}

# Functions the hardware does natively: an LLVM intrinsic beats any library call on every
# target (NVPTX has sqrt.rn.f64 too), so they are not resolved through a library.
INTRINSICS = {"sqrt": "llvm.sqrt", "floor": "llvm.floor", "ceil": "llvm.ceil", "rint": "llvm.rint",
              "trunc": "llvm.trunc"}


def llvm_type(dtype: str) -> ir.Type:
    from llvmlite import ir
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
        from llvmlite import ir
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
# every function a module declares (a pending library's SIMD versions are _ZGV names)
_DECLARED = re.compile(r'^declare [^@]*@"?([\w.]+)"?\(', re.M)


def private_declared(text: str) -> list[str]:
    """The private math symbols (``symgrad_*``) ``text`` declares, as CPUMath.bind reads them."""
    return _PRIVATE_DECLARED.findall(text)


def declared(text: str) -> list[str]:
    """Every function ``text`` declares (a library's public names among them)."""
    return sorted(set(_DECLARED.findall(text)))


# Every library symbol any CPUMath linked, with its address: the machine code is the
# process's, so a library another math target linked (codegen.ptx_emulate's) resolves for
# every kernel (CPUMath.bind copies it into its own addresses).
_LINKED: dict[str, int] = {}


class PendingLibrary(NamedTuple):
    """A library module jit.load compiles with the first kernel that declares one of its
    functions: its text and {name kernels declare: its sg_ name in the text}."""
    text: str
    public: dict


def _load_library(soname: str, short: str, mode: int = ctypes.DEFAULT_MODE) -> ctypes.CDLL:
    """glibc's library by its soname, else wherever ``ctypes.util.find_library`` finds it.
    The soname first: ``find_library`` runs ``ldconfig -p`` (or a compiler) in a subprocess,
    ~15 ms of every process's first compiled call, for the name glibc has had for decades."""
    try:
        return ctypes.CDLL(soname, mode=mode)
    except OSError:
        from ctypes.util import find_library   # (imports subprocess: only when needed)
        found = find_library(short)
        if found is None:
            raise
        return ctypes.CDLL(found, mode=mode)


class CPUMath(MathTarget):
    """glibc libm for scalars, libmvec for SIMD lanes (when the CPU and glibc have them)."""

    name = "cpu"

    def __init__(self, features: str = "", precise: bool = False):
        # precise: scalar glibc libm only (< 1 ulp, no SIMD; but glibc's cos is 8 ulp off at
        # 6381956970095103 * 2^797). Otherwise our own float64 code (OWN_F64, <= 1.7 ulp),
        # float32 code (OWN_F32) and libmvec for the rest; SYMGRAD_PRECISE_MATH=1.
        self.precise = precise
        # symbol -> address of what kernels call that is not in their own code: C math
        # functions (bind) and library functions (linked); codegen.jit resolves them
        self.addresses: dict[str, int] = {}
        self.bound = self.addresses.keys()    # (the symbols already bound)
        self.fma = "+fma" in features.split(",")     # fused multiply-add in hardware
        self._far_loaded: set[bool] = set()        # far libraries loaded, by self.fma
        self._own_loaded: set[tuple] = set()       # (op, fma) of the out-of-line libraries
        self._pending: dict[str, PendingLibrary] = {}   # public name -> see add_library
        self.libm = _load_library("libm.so.6", "m")
        try:
            self.libmvec = _load_library("libmvec.so.1", "mvec", mode=ctypes.RTLD_GLOBAL)
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
        from . import f32math, f32single
        from .f64math import OWN_F64, _define
        if dtype == "float32" and op in f32single.SINGLE_F32 and self.fma and not self.precise:
            return f32single.call(builder, op, args[0], self)
        if dtype == "float32" and op in f32math.OWN_F32 and not self.precise:
            return f32math.call(builder, op, args[0], self)
        if dtype == "float32" and op in F32_VIA_F64:
            return _widened(self, builder, op, args)
        if dtype == "float64" and op in OWN_F64 and not self.precise:
            name, body = OWN_F64[op]
            fn = _define(builder.module, name, lambda b, x: body(b, x, self))
            return builder.call(fn, args, name=op)
        if MATH_NAMES.get(op) in REENTRANT:
            return _reentrant(self, builder, op, dtype, args)
        return super().call(builder, op, dtype, args)

    def far_library(self) -> None:
        """Hold the far-argument libraries for this target pending (see add_library), once
        per process and reduction: jit.load compiles (or fetches) the checks of each function
        a kernel declares, and the code they share, with the first kernel that declares one,
        in the same pool of threads as that kernel's parts."""
        if self.fma in self._far_loaded:
            return
        from .f64math import _far_libraries
        for text, public in _far_libraries(self):
            self.add_library_module(text, public, replace=True)
        self._far_loaded.add(self.fma)

    def own_library(self, op: str) -> str:
        """The public scalar symbol of our own float64 ``op`` out of line (its SIMD versions
        are the ``_ZGV`` names :meth:`variants` gives); its library is held pending (see
        add_library) once per process, function and reduction."""
        from .f64math import _own_library_module, _own_loops, _own_name
        if (op, self.fma) not in self._own_loaded:
            module, public = _own_library_module(op, self)
            text = _own_loops(finish_cpu_module(str(module), module.math_calls, self))
            self.add_library_module(text, public, replace=True)
            self._own_loaded.add((op, self.fma))
        return _own_name(op, self)

    def add_library(self, public: str, text: str, local: str) -> None:
        """A library function kernels declare as ``public``, defined as ``local`` (an sg_
        name) in the module ``text``: linked by jit.load with the first module that declares
        it, its compile in the same pool of threads as that module's parts."""
        self.add_library_module(text, {public: local})

    def add_library_module(self, text: str, public: dict[str, str],
                           replace: bool = False) -> None:
        """A library module of several functions: ``public`` maps each name kernels declare
        to its sg_ name in ``text``; the first module that declares any of them links them
        all. ``replace``: the names rebind even where bound already (a library rebuilt for
        other vector widths, as tests do), else a bound name keeps its function."""
        library = PendingLibrary(text, dict(public))
        for name in public:
            if replace:
                self.addresses.pop(name, None)
            if name not in self.bound:
                self._pending[name] = library

    def has_library(self, public: str) -> bool:
        return public in self.bound or public in self._pending

    def pending_in(self, text: str) -> list["PendingLibrary"]:
        """The pending libraries ``text`` declares and, before each, those it declares in
        turn (an out-of-line sin calls the far library): each once, every library after the
        ones it calls, in the order of the names that first reach them."""
        order: list[PendingLibrary] = []
        placed: set[str] = set()                 # by text: a library's identity
        # an iterative depth-first walk; a library is placed once all it calls are
        stack = [(None, self._declared_pending(text))]
        while stack:
            library, callees = stack[-1]
            if callees:
                callee = callees.pop(0)
                walking = {lib.text for lib, _ in stack if lib is not None}
                if callee.text not in placed and callee.text not in walking:
                    stack.append((callee, self._declared_pending(callee.text)))
                continue
            stack.pop()
            if library is not None:
                placed.add(library.text)
                order.append(library)
        return order

    def _declared_pending(self, text: str) -> list["PendingLibrary"]:
        """The distinct pending libraries of the names ``text`` declares, in name order."""
        out: dict[str, PendingLibrary] = {}
        for sym in sorted(set(_DECLARED.findall(text))):
            library = self._pending.get(sym)
            if library is not None:
                out.setdefault(library.text, library)
        return list(out.values())

    def linked(self, public: str, address: int) -> None:
        """``public`` now resolves to ``address`` for the kernels linked after it (CPUMath.bind
        leaves it alone)."""
        self.addresses[public] = address
        _LINKED[public] = address
        self._pending.pop(public, None)

    def link_pending(self, text: str) -> None:
        """Compile (or fetch from jit's caches) and bind now the pending libraries ``text``
        declares, each after those it calls: for a caller that links its machine code itself
        instead of through jit.load (codegen.ptx_emulate)."""
        from . import jit
        for library in self.pending_in(text):
            _, addresses = jit.load(library.text, sorted(library.public.values()))
            for public, local in library.public.items():
                self.linked(public, addresses[local])

    def outlined(self) -> "OutlinedMath":
        return OutlinedMath(self)

    def scalar_address(self, sym: str) -> int:
        cname = sym[len(PRIVATE_PREFIX):]
        fn = getattr(self.libm, cname, None)
        if fn is None:
            raise NotImplementedError(f"the C math library has no function {cname!r} (called "
                                      f"as {sym}): the op cannot run on the CPU")
        return ctypes.cast(fn, ctypes.c_void_p).value

    def bind(self, text: str, add_symbol=None) -> None:
        """Record the address of every C math function ``text`` declares, before its machine
        code is linked: derived from the IR itself, so no list of names can miss one (a
        symbol LLVM cannot resolve crashed the process). ``add_symbol``: also given every
        bound symbol ``text`` declares, libraries' included (``llvm.add_symbol``, for a caller
        that links with an LLVM engine of its own: codegen.ptx_emulate)."""
        self.bind_symbols(_PRIVATE_DECLARED.findall(text), add_symbol)

    def bind_symbols(self, declared: list, add_symbol=None) -> None:
        """:meth:`bind` of the private symbols a text declares (:func:`private_declared`),
        as ``codegen.jit`` records them with a run plan (a disk hit has no text to read)."""
        library = None
        for sym in declared:
            if sym in self.bound or sym in self._pending:   # (pending: jit.load links it)
                continue
            if sym in _LINKED:          # another CPUMath linked it (codegen.ptx_emulate's)
                self.addresses[sym] = _LINKED[sym]
                continue
            library = library or {self.symbol(c, dt) for c in (*MATH_NAMES.values(),
                                                                *REENTRANT.values())
                                  for dt in ("float64", "float32")}
            if sym not in library:
                raise NotImplementedError(f"a CPU kernel calls {sym}, which is neither a C math "
                                          "function of codegen.mathlib.MATH_NAMES nor a symbol "
                                          "codegen has bound")
            self.addresses[sym] = self.scalar_address(sym)
        for sym in declared if add_symbol is not None else ():
            if sym in self.addresses:
                add_symbol(sym, self.addresses[sym])

    def variants(self, cname: str, dtype: str, nargs: int) -> list[tuple[str, int]]:
        """(libmvec name, lanes) for every SIMD version glibc exports for this CPU."""
        from .f64math import _far_name, _own_name
        if "_far" in cname:             # our own SIMD versions (see _far_helper)
            scalar = _far_name(cname[:cname.index("_far")], self)
            if dtype == "float32":      # f32single's: 256- and 512-bit only (see FAR_F32)
                return [(f"_ZGV{isa}N{2 * lanes}v_{scalar}", 2 * lanes)
                        for isa, lanes in self.isas if isa != "b"]
            return [(f"_ZGV{isa}N{lanes}v_{scalar}", lanes) for isa, lanes in self.isas]
        if cname.endswith("_own"):      # the out-of-line library (see own_library)
            scalar = _own_name(cname[:-len("_own")], self)
            return [(f"_ZGV{isa}N{lanes}v_{scalar}", lanes) for isa, lanes in self.isas]
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


class OutlinedMath:
    """The CPU's math, with our own float64 functions called out of line (from
    ``CPUMath.own_library``) instead of inlined: for the loops of a kernel that would inline
    many (codegen.kernel.OUTLINE_MATH_CALLS). Everything else is the CPUMath's."""

    def __init__(self, base: CPUMath):
        self.base = base

    def __getattr__(self, name):
        return getattr(self.base, name)

    def call(self, builder, op, dtype, args):
        from llvmlite import ir

        from .f64math import OWN_F64
        if dtype == "float32" and op in F32_VIA_F64:
            return _widened(self, builder, op, args)
        if dtype != "float64" or op not in OWN_F64 or self.base.precise:
            return self.base.call(builder, op, dtype, args)
        sym = self.base.own_library(op)
        module = builder.module
        d = ir.DoubleType()
        fn = module.globals.get(sym) or ir.Function(module, ir.FunctionType(d, [d]), sym)
        call = builder.call(fn, args, name=op)
        notes = getattr(module, "math_calls", None)
        if notes is not None:
            notes.add((op + "_own", dtype, 1, sym))
        return call


def inlines_own_code(op: str, dtype: str) -> bool:
    """Does the CPU inline our own code for ``op`` in ``dtype`` (codegen.kernel counts them:
    OUTLINE_MATH_CALLS)? (SYMGRAD_PRECISE_MATH aside.)"""
    table = "OWN_F64" if dtype == "float64" else "OWN_F32" if dtype == "float32" else None
    return table is not None and op in __getattr__(table)


def _widened(math, builder: ir.IRBuilder, op: str, args) -> ir.Value:
    """float32 ``op`` as ``math``'s float64 ``op`` of the widened arguments, rounded once (see
    F32_VIA_F64): every float32 is a float64, so only the result is rounded."""
    from llvmlite import ir
    d = ir.DoubleType()
    wide = [builder.fpext(a, d, name=f"{op}.wide") for a in args]
    return builder.fptrunc(math.call(builder, op, "float64", wide), ir.FloatType(), name=op)


def _reentrant(math: CPUMath, builder: ir.IRBuilder, op: str, dtype: str, args) -> ir.Value:
    """``op`` through the reentrant C function of REENTRANT: an inlined wrapper whose local
    (an alloca, hoisted to the caller's entry when inlined) takes the value the plain function
    would write to a global. No SIMD variant: the call writes memory (its argument's)."""
    from llvmlite import ir
    module = builder.module
    ty = llvm_type(dtype)
    sym = math.symbol(REENTRANT[MATH_NAMES[op]], dtype)
    name = sym + ".local"
    wrapper = module.globals.get(name)
    if wrapper is None:
        i32 = ir.IntType(32)
        callee = module.globals.get(sym) or ir.Function(
            module, ir.FunctionType(ty, [ty, ir.PointerType()]), sym)
        wrapper = ir.Function(module, ir.FunctionType(ty, [ty]), name)
        wrapper.linkage = "internal"
        wrapper.attributes.add("alwaysinline")
        wrapper.attributes.add("nounwind")
        b = ir.IRBuilder(wrapper.append_basic_block("entry"))
        sign = b.alloca(i32, name="sign")
        b.ret(b.call(callee, [wrapper.args[0], sign], name=op))
    return builder.call(wrapper, args, name=op)


_SCALAR_CALL = re.compile(r'(?:call (?:preserve_allcc )?|^declare )(double|float) @"([^"]+)"\(')


def _mark_math_calls(text: str, attr_of: dict) -> str:
    """Every call (ending its line) and the declaration of a math symbol of ``attr_of`` gets
    that symbol's attribute group: one pass over the text, however many functions it calls
    (one pass per function made lowering grow with the product of the two)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if '@"' not in line:
            continue
        m = _SCALAR_CALL.search(line)
        if m is None:
            continue
        attr = attr_of.get((m.group(1), m.group(2)))
        if attr is not None and (line.startswith("declare") or line.rstrip().endswith(")")):
            lines[i] = line + " " + attr
    return "\n".join(lines)


def finish_cpu_module(text: str, calls, math: CPUMath) -> str:
    """Attach SIMD variants to the math calls of a printed module.

    llvmlite cannot put string attributes on call sites, so this edits the text: every call
    of ``symgrad_<f>`` gets an attribute group naming its libmvec variants, the variants are
    declared, and ``llvm.compiler.used`` keeps those declarations alive until the vectoriser
    runs (global DCE would otherwise drop them as unused, and the mapping is then ignored).
    """
    groups, decls, used = [], [], []
    attr_of: dict[tuple[str, str], str] = {}     # (value type, symbol) -> attribute group
    for k, (cname, dtype, nargs, sym) in enumerate(sorted(calls)):
        ty = "double" if dtype == "float64" else "float"
        variants = math.variants(cname, dtype, nargs)
        attr = f"#{900 + k}"
        attr_of.setdefault((ty, sym), attr)
        mapping = ",".join(f"{name[:name.index('_', 4) + 1]}{sym}({name})" for name, _ in variants)
        body = "nounwind willreturn memory(none)"
        if mapping:
            body += f' "vector-function-abi-variant"="{mapping}"'
        groups.append(f"attributes {attr} = {{ {body} }}")
        for name, lanes in variants:
            vt = f"<{lanes} x {ty}>"
            used.append(f'ptr @"{name}"')
            if f'declare {vt} @"{name}"(' not in text:   # (codegen.wide_stage calls it itself)
                decls.append(f'declare {vt} @"{name}"({", ".join([vt] * nargs)})')
    text = _mark_math_calls(text, attr_of)
    from .f64math import _mark_no_caller_saved
    decls = [_mark_no_caller_saved(line, groups) for line in decls]
    if used:
        decls.append(f"@llvm.compiler.used = appending global [{len(used)} x ptr] "
                     f"[{', '.join(used)}], section \"llvm.metadata\"")
    return text + "\n" + "\n".join(decls + groups) + "\n"
