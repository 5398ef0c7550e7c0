"""Large elementwise stages emitted as SIMD code directly, compiled without LLVM's IR pipeline.

A stage of long straight-line elementwise code (hundreds of ops, ``codegen.schedule.STAGE_OPS``
per loop) cost LLVM's -O3 pipeline ~90 ms a stage: the loop vectoriser's dependence analysis
over the loop's ~100 memory streams, its cost model, then a scalar copy of the whole body for
the remainder, and GVN, InstCombine and loop-load elimination over both (straight-line code of
1000 statements on a vector: 3.5 s of LLVM for its gradient's 44 stages). Such a body needs
none of that: it is already one loop of independent lanes. So a stage of at least
``WIDE_MIN_OPS`` ops whose every value, load and store this module can widen is emitted here
with ``<lanes x double>`` values at the host's widest SIMD width: unit-stride loads and stores
as masked vector loads and stores (the last, partial step runs the same body with the lanes
past the end switched off, so there is no scalar remainder copy), broadcast operands as
splats, math calls as the SIMD versions the loop vectoriser would have called
(``CPUMath.variants``). Its function is named ``<stage>.wide``; ``codegen.jit`` compiles a module
(or a part, ``codegen.module_split``) of nothing but such functions and ``optnone`` ones with
the -O3 code generator alone.

Values are float64 (and bool, from comparisons; one byte in memory). Smaller stages (every
stage of W1-W3 and ADBench's GMM: at most ~10 ops) keep LLVM's loop vectoriser, which also
handles what this does not: reductions, gathers, strided inner axes, integer and float32
values, loops reading what they write. Since their compile time grows only linearly, loops
made of such code alone may grow to ``WIDE_STAGE_OPS`` ops (``codegen.wide_growth``), eight times
the loop vectoriser's bound: fewer values handed between loops through memory.

Lanes compute the same IEEE operations, in the same order, as the scalar loop; the masked-off
lanes of the last step compute on zeros and are never stored.
"""
from __future__ import annotations


from llvmlite import ir

from symgrad.ir import Node

from .lower import LOWER, Scalar
from .mathlib import INTRINSICS, MATH_NAMES, OWN_F64, CPUMath
from .text_builder import Lines, TextBuilder, Value
from .opsets import CONSTANTS as LEAF_INLINE   # (schedule.LEAF_INLINE; schedule imports this)

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F64 = ir.DoubleType()
PTR = ir.PointerType()
MEMORY = ("float64", "bool")   # the dtypes a wide stage loads and stores (bool: one byte)

# Fewer ops than this stay with the loop vectoriser (see the module docstring).
WIDE_MIN_OPS = 64
# A loop of such code alone grows to this many ops (schedule.STAGE_OPS for the others). Fewer,
# longer loops hand fewer values over in memory (straight-line code of 1000 statements on a
# vector: 2.1 -> 1.5 MB of IR at 1024, LLVM 1.24 -> 0.83 s; 2048 with Growth.may_recompute's
# rule: 1.38 -> 1.09 MB, code generation 449 -> 388 ms on one thread); at 4096 the code
# generator's cost per op rises (0.86 MB, but more code generation than at 1024).
WIDE_STAGE_OPS = 2048
SUFFIX = ".wide"
# The loop body as IR text made line by line (codegen.text_builder) instead of llvmlite objects:
# the same instructions (tests compare the two), a third of the lowering's time.
TEXT_BODY = True

_ARITH = {"neg", "add", "sub", "mul", "div", "abs", "sign", "maximum", "minimum", "where",
          "stop_gradient", "lt", "le", "gt", "ge", "eq", "ne", "logical_and", "logical_or"}
_COMPARES = {"lt", "le", "gt", "ge", "eq", "ne"}
_POW_EXPONENTS = (1, 2, 3, -1, 0.5)   # codegen.lower._pow's arithmetic spellings


class _Vector(ir.VectorType):
    """A vector type that names itself in overloaded intrinsics (``llvm.fabs.v8f64``)."""

    @property
    def intrinsic_name(self):
        return f"v{self.count}{self.element.intrinsic_name}"


class _Literal(ir.Constant):
    """A constant spelled as LLVM reads it (``zeroinitializer``, ``poison``): llvmlite spells
    vector constants lane by lane, which made the printed IR of a wide stage a third longer."""

    def __init__(self, typ, text: str):
        super().__init__(typ, None)
        self.text = text

    def get_reference(self):
        return self.text

    def _to_string(self):
        return f"{self.type} {self.text}"

    __str__ = _to_string


def lanes(math) -> int:
    """float64 lanes of the host's widest SIMD ISA (0: none, or not the CPU's math)."""
    isas = getattr(math, "isas", None) if isinstance(math, CPUMath) else None
    return isas[0][1] if isas else 0


def _variant(math: CPUMath, op: str, nargs: int, width: int) -> str | None:
    """The ``width``-lane float64 SIMD function of math op ``op``, if the host has one."""
    if math.precise:
        return None
    cname = op + "_own" if op in OWN_F64 else MATH_NAMES.get(op)
    if cname is None:
        return None
    for name, count in math.variants(cname, "float64", nargs):
        if count == width:
            return name
    return None


def _node_widens(math, n: Node, width: int) -> bool:
    if n.op == "pow":
        e = n.inputs[1]
        return (n.dtype == "float64" and e.dtype == "float64" and e.op in ("const", "full")
                and e.attrs[0] in _POW_EXPONENTS)
    if n.op in INTRINSICS:
        return n.dtype == "float64"
    if n.op in _ARITH:
        operands = [x.dtype for x in n.inputs]
        if n.op in _COMPARES:
            return all(t == "float64" for t in operands)
        if n.op in ("logical_and", "logical_or"):
            return all(t == "bool" for t in operands)
        if n.op == "where":
            return operands == ["bool", "float64", "float64"]
        return n.dtype == "float64" and all(t == "float64" for t in operands)
    if n.op in MATH_NAMES:
        return (n.dtype == "float64" and all(x.dtype == "float64" for x in n.inputs)
                and _variant(math, n.op, len(n.inputs), width) is not None)
    return False


def applies(km, st, loads: dict, gathers: dict) -> bool:
    """Is stage ``st`` (its axes merged; ``loads``: node -> view) emitted here?"""
    width = lanes(km.math)
    if (width < 2 or len(st.ssa) < WIDE_MIN_OPS or gathers or st.region is not None
            or not st.shape or km.all_light or km.prefix != "sg_"):
        return False
    if any(n.op not in LOWER or not _node_widens(km.math, n, width) for n in st.ssa):
        return False
    consts = {x for n in st.ssa for x in n.inputs if x.op in LEAF_INLINE}
    if any(x.dtype not in ("float64", "bool") for x in consts):
        return False
    buffers = km.s.buffers
    read: dict[int, set] = {}   # buffer -> the views the stage reads it through
    for v in loads.values():
        if buffers[v.buf].dtype not in MEMORY or v.strides[-1] not in (0, 1):
            return False
        read.setdefault(v.buf, set()).add(v)
    written = set()
    for sk in st.sinks:
        if (sk.kind != "store" or sk.node.dtype not in MEMORY or sk.node.op in LEAF_INLINE
                or buffers[sk.dest.buf].dtype != sk.node.dtype or sk.dest.strides[-1] != 1
                or sk.dest.buf in written or read.get(sk.dest.buf, {sk.dest}) != {sk.dest}):
            return False   # lanes in one step must not see each other's stores
        written.add(sk.dest.buf)
    return True


class _WideScalar(Scalar):
    """The lowering rules' context, with constants as splat vectors."""

    def __init__(self, builder, math, width):
        super().__init__(builder, math)
        self.width = width

    def const(self, value, dtype):
        c = super().const(value, dtype)
        return _Literal(_Vector(c.type, self.width), f"splat ({c})")


class _WideMath:
    """Math calls on ``width`` lanes: LLVM intrinsics at the vector type, otherwise the SIMD
    version of the function (ours from ``CPUMath.own_library``, else libmvec's)."""

    def __init__(self, base: CPUMath, width: int):
        self.base, self.width = base, width

    def call(self, builder, op, dtype, args):
        module = builder.module
        vt = args[0].type
        if op in INTRINSICS:
            return builder.call(module.declare_intrinsic(INTRINSICS[op], [vt]), args, name=op)
        if op in OWN_F64:
            self.base.own_library(op)   # compiled and bound once per process
        name = _variant(self.base, op, len(args), self.width)
        fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(vt, [vt] * len(args)),
                                                     name)
        return builder.call(fn, args, name=op)


def _splat(b: ir.IRBuilder, x: ir.Value, width: int) -> ir.Value:
    vt = _Vector(x.type, width)
    one = b.insert_element(_Literal(vt, "poison"), x, ir.Constant(I32, 0))
    return b.shuffle_vector(one, _Literal(vt, "poison"),
                            _Literal(_Vector(I32, width), "zeroinitializer"))


def _masked(module: ir.Module, what: str, vt) -> ir.Function:
    """``llvm.masked.load`` / ``llvm.masked.store`` at ``vt`` (the four-operand form with the
    alignment operand, which newer LLVM upgrades when it parses it)."""
    mask = ir.VectorType(ir.IntType(1), vt.count)
    name = f"llvm.masked.{what}.v{vt.count}{vt.element.intrinsic_name}.p0"
    if name in module.globals:
        return module.globals[name]
    ptr = ir.PointerType()
    fty = (ir.FunctionType(vt, [ptr, I32, mask, vt]) if what == "load"
           else ir.FunctionType(ir.VoidType(), [vt, ptr, I32, mask]))
    return ir.Function(module, fty, name)


def _address(b, access, idx, element):
    base, strides, _ = access
    off = None
    for i, s in zip(idx, strides):
        if s is None:
            continue
        term = i if s == 1 else b.mul(i, s)
        off = term if off is None else b.add(off, term)
    return base if off is None else b.gep(base, [off], source_etype=element)


def emit(km, b: ir.IRBuilder, st, loads: dict, ptrs, params, consts: dict, extents,
         begin, end):
    """The loop nest of ``st``: scalar loops over its outer axes, the innermost one stepping
    ``lanes`` at a time. ``loads``: node -> the View it is read from; ``ptrs``/``params``:
    the stage's buffer table and parameters; ``consts``: const_key -> scalar value."""
    from .loops import close_loop, open_loop
    width = lanes(km.math)
    d = len(st.shape)
    splats = {k: _splat(b, v, width) for k, v in consts.items()}
    outer = []
    for j in range(d - 1):
        outer.append(open_loop(b, begin if j == 0 else ir.Constant(I64, 0),
                               end if j == 0 else extents[j],
                               tuple(f"loop{j}.{s}" for s in ("head", "body", "exit")), f"i{j}"))
    start, stop = (begin, end) if d == 1 else (ir.Constant(I64, 0), extents[-1])
    stops = _splat(b, stop, width)
    inner = open_loop(b, start, stop, tuple(f"loop{d - 1}.{s}" for s in ("head", "body", "exit")),
                      f"i{d - 1}")
    idx = [loop.index for loop in outer] + [inner.index]
    ramp = ir.Constant(_Vector(I64, width), list(range(width)))
    on = b.icmp_signed("<", b.add(_splat(b, inner.index, width), ramp), stops, name="lanes")
    text = TextBuilder(b.module) if TEXT_BODY else b   # the step's straight-line code
    _step(km, text, st, _Addresses(km, text, ptrs, params, d, loads), splats, idx, on, width)
    if TEXT_BODY:
        b.block.instructions.append(Lines(text.lines))
        b.position_at_end(b.block)   # (after the lines: the builder keeps an insertion index)
    close_loop(b, inner, step=ir.Constant(I64, width), next_name=f"i{d - 1}.next")
    for j in reversed(range(d - 1)):
        close_loop(b, outer[j], next_name=f"i{j}.next")


class _Addresses:
    """Each view's codegen.loop_body.Access, made in the step right before the load or store
    that uses it: the buffer's address read from the stage's table (``ptrs``), its offset and
    strides from the parameters. Read once in the function's entry, the ~300 addresses of a
    stage were each live across the whole loop, spilled and reloaded: register allocation
    over them was superlinear in the stage's streams (1000 / 2000 / 4000 statements: code
    generation 0.48 / 1.33 / 3.21 s, made here 0.33 / 0.79 / 1.80 s); a load from the table
    costs what a reload from the stack did."""

    def __init__(self, km, b, ptrs, params, d: int, loads: dict):
        self.km, self.b, self.ptrs, self.params, self.d = km, b, ptrs, params, d
        self.names = {x: f"in{i}" for i, x in enumerate(loads)}
        self.loads = loads

    def __getitem__(self, buf: int):   # (KernelModule._access reads the base as argmap[buf])
        b = self.b
        return b.load(b.gep(self.ptrs, [ir.Constant(I64, buf)], source_etype=PTR), typ=PTR,
                      name=f"buf{buf}")

    def load(self, x):
        return self.km._access(self.b, self, self.params, self.d, self.loads[x], self.names[x])

    def store(self, k: int, sink):
        return self.km._access(self.b, self, self.params, self.d, sink.dest, f"out{k}")


class _UnitText:
    """The loads and stores of a 1-d step's unit-stride float64 views at offset 0 (almost
    every access of straight-line code on a vector), written as their lines directly: the
    address read from the stage's table, offset by the index, then the masked load or
    store. The text is what the generic path (_Addresses, KernelModule._access, _address and
    the builder's gep/load/call) writes for them, line for line (tests compare the two):
    the gradient's steps of 1000 / 4000 statements lowered in 40 / 197 ms instead of 94 /
    374 ms."""

    def __init__(self, b: TextBuilder, addresses: _Addresses, idx: list, on, width: int):
        self.b, self.type, self.buffers = b, _Vector(F64, width), addresses.km.s.buffers
        self.table = b._operand(addresses.ptrs)
        self.index = b._operand(idx[0]) if len(idx) == 1 else None
        self.tail = f"i32 8, {b._operand(on)}"
        self.calls: dict = {}   # "load"/"store" -> the call's text around its operands

    def _call(self, what: str) -> tuple:
        """The masked call's text (its intrinsic declared at its first use, as the generic
        path declares it: the module's declarations stay in the same order)."""
        if what not in self.calls:
            ref = _masked(self.b.module, what, self.type).get_reference()
            vector = self.b._text(self.type)
            self.calls[what] = ((f"call {vector} {ref}(ptr ", f", {self.tail}, {vector} "
                                 "zeroinitializer)") if what == "load"
                                else (f"call void {ref}(", f", {self.tail})"))
        return self.calls[what]

    def takes(self, view) -> bool:
        return (self.index is not None and view.offset == 0 and view.strides[-1] == 1
                and self.buffers[view.buf].dtype == "float64")

    def _element(self, buf: int) -> str:
        lines, k = self.b.lines, len(self.b.lines)
        lines += (f"%_{k} = getelementptr ptr, {self.table}, i64 {buf}",
                  f"%_{k + 1} = load ptr, ptr %_{k}",
                  f"%_{k + 2} = getelementptr double, ptr %_{k + 1}, {self.index}")
        return f"%_{k + 2}"

    def load(self, view):
        ptr, (head, tail) = self._element(view.buf), self._call("load")
        ref = f"%_{len(self.b.lines)}"
        self.b.lines.append(f"{ref} = {head}{ptr}{tail}")
        return Value(self.type, ref)

    def store(self, v, view):
        ptr, (head, tail) = self._element(view.buf), self._call("store")
        self.b.lines.append(f"{head}{self.b._operand(v)}, ptr {ptr}{tail}")


def _step(km, b, st, addresses: _Addresses, splats: dict, idx: list, on, width: int):
    """One step of ``width`` lanes: the loads, the stage's ops, the stores, in ``b`` (a
    TextBuilder, or llvmlite's IRBuilder)."""
    from .loop_body import const_key
    vt = _Vector(F64, width)
    memory = {"float64": (vt, ir.Constant(I32, 8)),        # dtype -> (vector type, alignment)
              "bool": (_Vector(I8, width), ir.Constant(I32, 1))}
    cx = _WideScalar(b, _WideMath(km.math, width), width)
    memo: dict = {}

    unit = _UnitText(b, addresses, idx, on, width) if isinstance(b, TextBuilder) else None

    def value(x):
        if x.op in LEAF_INLINE:
            return splats[const_key(x)]
        if x not in memo:
            view = addresses.loads[x]
            memo[x] = (unit.load(view) if unit is not None and unit.takes(view)
                       else load(addresses.load(x)))
        return memo[x]

    def load(access):
        mt, align = memory[access.dtype]
        if access.strides[-1] is None:     # broadcast along the lanes
            v = _splat(b, b.load(_address(b, access, idx, mt.element), typ=mt.element), width)
        else:                              # (masked-off lanes read zeros)
            v = b.call(_masked(b.module, "load", mt),
                       [_address(b, access, idx, mt.element), align, on,
                        _Literal(mt, "zeroinitializer")], name="x")
        if access.dtype == "bool":
            v = b.icmp_unsigned("!=", v, _Literal(mt, "zeroinitializer"))
        return v

    def store(v, access):
        mt, align = memory[access.dtype]
        if access.dtype == "bool":
            v = b.zext(v, mt)
        b.call(_masked(b.module, "store", mt), [v, _address(b, access, idx, mt.element), align, on])

    # Each value is stored as soon as it is computed: stored at the end of the step, the
    # hundreds of values a gradient's stage writes were all live across every SIMD maths
    # call after them (each call clobbers every vector register), so each was spilled to the
    # stack and reloaded for its store. (Lanes of one step never read what another lane
    # stores: applies() admits a buffer both read and written only through one view.)
    # A buffer the stage both reads and writes (a value updated in place: applies() admits
    # only the very view it stores to) is read in full before the step's first store to it,
    # so each lane reads the old element, as the scalar loop does.
    written = {sk.dest.buf for sk in st.sinks}
    unread: dict = {}   # buffer -> the values read from it that the step has not loaded yet
    for x, view in addresses.loads.items():
        if view.buf in written:
            unread.setdefault(view.buf, []).append(x)

    def store_sink(v, k, sk):
        for x in unread.pop(sk.dest.buf, ()):
            value(x)
        if unit is not None and unit.takes(sk.dest):
            unit.store(v, sk.dest)
        else:
            store(v, addresses.store(k, sk))

    stores: dict = {}
    for k, sk in enumerate(st.sinks):
        stores.setdefault(sk.node, []).append((k, sk))
    for n in st.ssa:
        memo[n] = LOWER[n.op](cx, n, [value(x) for x in n.inputs])
        for k, sk in stores.pop(n, ()):
            store_sink(memo[n], k, sk)
    for node, sinks in stores.items():   # values the step loads or constants
        for k, sk in sinks:
            store_sink(value(node), k, sk)
