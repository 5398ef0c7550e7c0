"""A register-blocked, vectorised matmul for float stages (``codegen.kernel`` calls it).

The plain loop nest of a ``matmul`` stage (``out[i, j] += a[i, k] * b[k, j]``, one element at a
time) reloads and stores the output once per product. This kernel computes an ``MR x NR``
tile of the output in vector registers (``NR`` = two SIMD vectors of the target's width) over a
block of ``KC`` values of ``k``: per ``k`` it loads two vectors of a row of ``b``, broadcasts
``MR`` values of a column of ``a`` and issues ``2 * MR`` fused multiply-adds. Blocking ``k`` keeps
the ``KC x NR`` panel of ``b`` a tile reads in the L1/L2 cache while the tiles of one column of
tiles sweep ``a``. The panel is packed (copied to a contiguous stack buffer) first: rows of
``b`` a multiple of 4 KiB apart would all fall into one L1 set, and a transposed ``b`` (the
``x @ L.T`` of the GMM objective) is gathered there, so the tiles always read unit-stride vectors.
``a`` is read one scalar at a time, so its layout (transposed, broadcast) does not matter.
The last ``n mod NR`` columns are one tile of two vectors (the second masked) or one masked
vector, and the last ``m mod MR`` rows of a row block one tile whose extra rows repeat the last
row, so narrow products (the GMM's d = 10 or 20 columns and rows) run in full register tiles
too.

It applies to float matmul stages (the output is always the stage's own contiguous buffer);
integer matmuls keep the plain loop nest. Unlike the plain nest it needs no zero fill first: a
tile starts from zero in the first k block and from the output in later ones, so a product
with a short k (the GMM's k = d) touches its output once, a store. Fused multiply-adds round
once per product.

A stage with an *epilogue* (``codegen.schedule.Epilogue``: the loop after the matmul, which
does arithmetic on the product and sums it over the rows or stores it) gets a kernel of its
own: after a tile's last k block its accumulators go through the epilogue's arithmetic in
registers, a sum over rows adds the tile's rows one after the other into its row vector
(row order, as the loop did), and the loop, which read the product back from memory, is gone.

Exported to ``codegen.kernel``: :func:`applies`, :func:`emit_stage`, :func:`epilogue_views`. The
2-D kernel without epilogue is one library function per (dtype, vector width, layout of b)
(``codegen.libraries``: compiled once per process, not in every module),
``symgrad_mm_<dtype>_<w>[_bstrided]``:

    void mm(T* a, T* b, T* c, i64 m, i64 n, i64 k, i64 sa_i, i64 sa_k, i64 sb_k, i64 sc_i
            [, i64 sb_j], i64 lower)  (sb_j only in the ``_bstrided`` variant; strides in
                                       elements; lower: see :func:`lower_applies`)

A kernel with an epilogue is an internal function of its module, ``sg_mm<stage>.epilogue``.

Why this module is long: it is one kernel's IR, the tile loops, the panel packing, the masked
column tails, the epilogue and the symmetric product's triangle sharing the tile's registers
and loop structure; split up, each part would need the others' loop state passed in.
"""
from __future__ import annotations

from llvmlite import ir

from .dtypes import memory_type
from .libraries import library_function
from .loops import close_loop, open_loop
from .lower import LOWER, Scalar
from .loop_body import const_key
from .opsets import CONSTANTS as LEAF_INLINE

I64 = ir.IntType(64)
PTR = ir.PointerType()

MR = 6            # output rows per tile: 2 * MR accumulators + 2 loads + 1 broadcast <= 16 registers
VECTORS = 2       # SIMD vectors per tile row (NR = VECTORS * lanes)
KC = 256          # k values per block: the packed b panel (KC x NR) stays in L1
MC = 96           # rows of a per block (a multiple of MR): a's MC x KC block stays in L2
FLOATS = ("float32", "float64")


def lanes(features: str, dtype: str) -> int:
    """SIMD lanes of ``dtype`` on the host (512-bit vectors with AVX-512, else 256-bit); any
    x86-64 runs the IR, LLVM splits wider vectors than the CPU has."""
    bits = 512 if "+avx512f" in features.split(",") else 256
    return bits // (32 if dtype == "float32" else 64)


def applies(stage, buffers) -> bool:
    """A matmul stage of one float dtype whose right operand and output are unit-stride in j."""
    if stage.kind != "matmul" or stage.ssa or len(stage.sinks) != 1:
        return False
    sink = stage.sinks[0]
    if sink.kind != "matmul" or len(stage.shape) < 3:
        return False
    a, b = sink.operands
    dtypes = {buffers[v.buf].dtype for v in (a, b, sink.dest)}
    # each output element belongs to one (batch, i, j): the kernel writes it, no sum across
    # batch entries (which a zero stride would ask for)
    d = len(stage.shape)
    distinct = all(s != 0 or e == 1 for j, (s, e) in enumerate(zip(sink.dest.strides, stage.shape))
                   if j != d - 2)
    return (len(dtypes) == 1 and dtypes <= set(FLOATS) and sink.node.dtype in FLOATS
            and sink.dest.strides[-1] == 1 and distinct)


def host_features() -> str:
    from . import jit     # (jit imports kernel, which imports this module)
    return jit.target()["features"]


def emit_stage(km, b: ir.IRBuilder, stage, argmap, params, begin, end) -> None:
    """The stage body: a loop over the batch axes (the outermost one over ``[begin, end)``,
    what the threads split), calling the 2-D kernel on each matrix; without batch axes the
    threads split the rows of the output."""
    sink = stage.sinks[0]
    a, bv, dest = sink.operands[0], sink.operands[1], sink.dest
    dtype = km.s.buffers[dest.buf].dtype
    ty = memory_type(dtype)
    unit_b = bv.strides[-1] == 1
    w = lanes(host_features(), dtype)
    d = len(stage.shape)
    nb = d - 3
    if stage.epilogue is None:
        kernel = _library_kernel(km, dtype, w, unit_b)
    else:   # a kernel of its own, the epilogue's work after each tile's last k block
        kernel = _epilogue_kernel(km.module, dtype, w, unit_b, stage.epilogue,
                                  f"{km.prefix}mm{stage.index}.epilogue")

    def p(value, name):
        return km.load_param(b, params, km.param(value), name)

    m, kk, n = (p(e, nm) for e, nm in zip(stage.shape[-3:], ("m", "k", "n")))
    sa_i, sa_k = p(a.strides[-3], "sa_i"), p(a.strides[-2], "sa_k")
    sb_k, sc_i = p(bv.strides[-2], "sb_k"), p(dest.strides[-3], "sc_i")
    extra = [] if unit_b else [p(bv.strides[-1], "sb_j")]
    if stage.epilogue is None:     # the library kernel's flag: a symmetric product's triangle
        extra.append(ir.Constant(I64, int(nb > 0 and lower_applies(stage))))
    bases = [b.gep(argmap[v.buf], [p(v.offset, f"{nm}.off")], source_etype=ty, name=nm)
             for v, nm in ((a, "a"), (bv, "b"), (dest, "c"))]
    if nb == 0:   # the threads split the rows: [begin, end) of m (never with an epilogue)
        rows = b.sub(end, begin, name="rows")
        pa = b.gep(bases[0], [b.mul(begin, sa_i)], source_etype=ty)
        pc = b.gep(bases[2], [b.mul(begin, sc_i)], source_etype=ty)
        b.call(kernel, [pa, bases[1], pc, rows, n, kk, sa_i, sa_k, sb_k, sc_i] + extra)
        return
    views = [(a, "a"), (bv, "b"), (dest, "c")]
    ep = stage.epilogue
    ep_views = [] if ep is None else [(v, f"e{i}") for i, v in enumerate(epilogue_views(stage))]
    for v, nm in ep_views:
        bases.append(b.gep(argmap[v.buf], [p(v.offset, f"{nm}.off")], source_etype=ty, name=nm))
    strides = [[p(v.strides[j], f"{nm}.s{j}") for j in range(nb)] for v, nm in views + ep_views]
    rows = [p(v.strides[-2], f"{nm}.row") for v, nm in ep_views]   # 0: one row for all
    consts = [] if ep is None else [km.constant(b, params, x.attrs[0], x.dtype)
                                    for x in epilogue_constants(ep)]
    levels = [open_loop(b, begin if j == 0 else ir.Constant(I64, 0),
                        end if j == 0 else p(stage.shape[j], f"nb{j}"),
                        tuple(f"batch{j}.{s}" for s in ("head", "body", "exit")), f"t{j}")
              for j in range(nb)]
    ptrs = []
    for base, st in zip(bases, strides):
        off = ir.Constant(I64, 0)
        for loop, s in zip(levels, st):
            off = b.add(off, b.mul(loop.index, s))
        ptrs.append(b.gep(base, [off], source_etype=ty))
    if ep is not None:   # the sums over rows start from zero, once per matrix
        for ptr, sk in zip(ptrs[3 + len(ep.loads):], ep.sinks):
            if sk.kind == "reduce":
                fill = open_loop(b, ir.Constant(I64, 0), n, ("efill.head", "efill.body", "efill.exit"),
                                 "j")
                b.store(ir.Constant(ty, 0.0), b.gep(ptr, [fill.index], source_etype=ty))
                close_loop(b, fill)
    tail = [] if ep is None else [x for pair in zip(ptrs[3:], rows) for x in pair] + consts
    b.call(kernel, ptrs[:3] + [m, n, kk, sa_i, sa_k, sb_k, sc_i] + extra + tail)
    for loop in reversed(levels):
        close_loop(b, loop)


def epilogue_views(stage) -> list:
    """The views an epilogue reads or writes, in its kernel's argument order: the loads,
    then one per sink (codegen.kernel passes their buffers to the stage)."""
    ep = stage.epilogue
    if ep is None:
        return []
    return list(ep.loads.values()) + [sk.dest for sk in ep.sinks]


def epilogue_constants(ep) -> list:
    """The epilogue's constant operands, each once, in order (kernel arguments)."""
    seen, out = set(), []
    for n in ep.ssa:
        for x in n.inputs:
            if x.op in LEAF_INLINE and const_key(x) not in seen:
                seen.add(const_key(x))
                out.append(x)
    return out


def _epilogue_kernel(module: ir.Module, dtype: str, w: int, unit_b: bool, ep, name: str
                     ) -> ir.Function:
    """The kernel of a stage with the epilogue ``ep``, in the module as ``name``: after the
    usual arguments, a (pointer, row stride) pair per epilogue view and ep's constants."""
    if name in module.globals:
        return module.globals[name]
    fn = _declare(module, name, dtype, unit_b, ep)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    _TileKernel(fn, memory_type(dtype), w, unit_b, ep).emit()
    return fn


def _declare(module: ir.Module, name: str, dtype: str, unit_b: bool, ep=None) -> ir.Function:
    names = (ARGS if unit_b else ARGS + ("sb_j",)) + (("lower",) if ep is None else ())
    types = [PTR] * 3 + [I64] * (len(names) - 3)
    ty = memory_type(dtype)
    if ep is not None:
        count = len(ep.loads) + len(ep.sinks)
        names = names + tuple(f"{kind}{i}" for i in range(count) for kind in ("ep", "ep.row")) \
            + tuple(f"const{i}" for i in range(len(epilogue_constants(ep))))
        types += [PTR, I64] * count + [ty] * len(epilogue_constants(ep))
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), types), name)
    fn.attributes.add("nounwind")
    for arg, nm in zip(fn.args, names):
        arg.name = nm
    for arg in fn.args[:3]:
        arg.add_attribute("noalias")
    return fn


def lower_applies(stage) -> bool:
    """A product symmetric in exact arithmetic (``x^T diag(s) x``, symgrad.gram_pull): the
    library kernel's ``lower`` flag set, it computes the tiles that hold an entry on or below
    the diagonal and mirrors the lower triangle (at d = 64 29 of 44 tiles). A flag, not a
    library of its own: one more library is ~0.1 s of LLVM in the first call. Only with
    batch axes: without them the threads split the rows, and a row range of the lower
    triangle is not one of the upper."""
    from symgrad.gram_pull import symmetric_gram
    sink = stage.sinks[0]
    m, n = stage.shape[-3], stage.shape[-1]
    return m == n and sink.operands[1].strides[-1] == 1 and symmetric_gram(sink.node)


def _library_kernel(km, dtype: str, w: int, unit_b: bool) -> ir.Function:
    """The kernel without epilogue, the same for every module of a (dtype, vector width,
    layout of b): a library function (codegen.libraries). It was the largest item of LLVM time
    of ADBench GMM's gradient (d = 10: 227 of 712 ms CPU for the two variants)."""
    return library_function(
        km, f"symgrad_mm_{dtype}_{w}" + ("" if unit_b else "_bstrided"),
        lambda module, name: _declare(module, name, dtype, unit_b),
        lambda fn: _TileKernel(fn, memory_type(dtype), w, unit_b).emit())


ARGS = ("a", "b", "c", "m", "n", "k", "sa_i", "sa_k", "sb_k", "sc_i")


class _TileKernel:
    """The body of a matmul kernel: every output element belongs to one register tile.

    Columns: tiles of two vectors, then at most one tail tile for the last ``n mod NR``
    columns: two vectors with the second masked, or one masked vector (masked loads and
    stores of c; the panel's lanes beyond them are zero and feed only lanes that are never
    stored). Rows: tiles of MR rows; the last of a row block repeats its last row in the rows
    past it (see _tile)."""

    def __init__(self, fn, ty, w, unit_b=True, epilogue=None):
        self.fn, self.ty, self.w = fn, ty, w
        self.vty = ir.VectorType(ty, w)
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        (self.a, self.bm, self.c, self.m, self.n, self.k,
         self.sa_i, self.sa_k, self.sb_k, self.sc_i) = fn.args[:len(ARGS)]
        first = len(ARGS) + (not unit_b)
        self.sb_j = None if unit_b else fn.args[len(ARGS)]   # None: unit
        # the library kernel's flag (nonzero: a symmetric product, the tiles on or below the
        # diagonal, mirrored); an epilogue kernel has none
        self.lower = fn.args[first] if epilogue is None else None
        first += epilogue is None
        self.ep = epilogue
        if epilogue is not None:
            count = len(epilogue.loads) + len(epilogue.sinks)
            pairs = fn.args[first:first + 2 * count]
            self.ep_args = list(zip(pairs[::2], pairs[1::2]))
            self.ep_consts = fn.args[first + 2 * count:]
        self.align = 8 if isinstance(ty, ir.DoubleType) else 4   # element alignment

    def c64(self, v):
        return ir.Constant(I64, v)

    def at(self, base, index, name=""):
        return self.b.gep(base, [index], source_etype=self.ty, name=name)

    def emit(self):
        b, w = self.b, self.w
        # the packed b panel: KC rows of NR contiguous values (b's rows may be far apart: at a
        # 4 KiB multiple they all fall in one L1 set, and the panel would not stay in cache)
        self.panel = b.alloca(self.ty, size=self.c64(KC * VECTORS * w), name="panel")
        self.panel.align = 64
        nr = self.c64(VECTORS * w)
        j_full = b.mul(b.sdiv(self.n, nr), nr, name="n.full")
        rest = b.sub(self.n, j_full, name="n.rest")       # < NR columns: one tail tile
        lane = ir.Constant(ir.VectorType(I64, w), list(range(w)))
        vi64 = ir.VectorType(I64, w)
        # The tail tile: two vectors, the second masked, when more than w columns are left,
        # else one masked vector. One tile row then issues two FMAs per broadcast of a (the
        # GMM's d = 10 columns used to take a one-vector and a masked-vector pass, each
        # loading every a value).
        two = b.icmp_signed(">", rest, self.c64(w), name="tail.two")
        one = b.and_(b.icmp_signed(">", rest, self.c64(0)), b.not_(two), name="tail.one")
        masks = {2: b.icmp_signed("<", lane, self._splat(b.sub(rest, self.c64(w)), vi64),
                                  name="mask.two"),
                 1: b.icmp_signed("<", lane, self._splat(rest, vi64), name="mask.one")}
        spans = [(VECTORS, None, self.c64(0), j_full),
                 (2, masks[2], j_full, b.select(two, self.n, j_full, name="n.two")),
                 (1, masks[1], j_full, b.select(one, self.n, j_full, name="n.one"))]
        # at least one k block, so that k = 0 still writes (zeros) into the output
        k_stop = b.select(b.icmp_signed("==", self.k, self.c64(0)), self.c64(1), self.k, name="k.stop")
        kb = open_loop(b, self.c64(0), k_stop, ("kb.head", "kb.body", "kb.exit"), "k0")
        k_end = self.min(b.add(kb.index, self.c64(KC)), self.k, "k.end")
        ib = open_loop(b, self.c64(0), self.m, ("ib.head", "ib.body", "ib.exit"), "ib")
        i_end = self.min(b.add(ib.index, self.c64(MC)), self.m, "i.end")
        i_last = b.sub(i_end, self.c64(1), name="i.last")
        for nv, mask, lo, hi in spans:
            tag = f"v{nv}" + ("m" if mask is not None else "")
            jt = open_loop(b, lo, hi, (f"{tag}.jt.head", f"{tag}.jt.body", f"{tag}.jt.exit"), "j0")
            self._pack(nv, mask, jt.index, kb.index, k_end)
            it = open_loop(b, self._first_row(ib.index, jt.index), i_end,
                           tuple(f"{tag}.rt.{s}" for s in ("head", "body", "exit")), "i0")
            self._tile(nv, mask, it.index, i_last, jt.index, kb.index, k_end)
            close_loop(b, it, step=self.c64(MR))
            close_loop(b, jt, step=self.c64(nv * w))
        close_loop(b, ib, step=self.c64(MC))
        close_loop(b, kb, step=self.c64(KC))
        if self.lower is not None:
            self._mirror()
        b.ret_void()

    def _first_row(self, i_block, j0):
        """The first row tile of the block to compute for the columns from ``j0``: the block's
        first, or with ``lower`` the first whose last row ``i0 + MR - 1`` reaches ``j0``
        (the tiles above it hold entries above the diagonal only), ``i_block + MR *
        floor((j0 - i_block) / MR)``."""
        if self.lower is None:
            return i_block
        b = self.b
        ahead = b.sub(j0, i_block)
        ahead = b.select(b.icmp_signed(">", ahead, self.c64(0)), ahead, self.c64(0))
        first = b.add(i_block, b.mul(b.sdiv(ahead, self.c64(MR)), self.c64(MR)))
        return b.select(self._is_lower(), first, i_block, name="i.first")

    def _is_lower(self):
        return self.b.icmp_signed("!=", self.lower, self.c64(0), name="lower")

    def _mirror(self):
        """c[i, j] = c[j, i] for j > i: the entries above the diagonal from those below (the
        tiles above it were skipped; those across it computed them too, overwritten alike)."""
        b = self.b
        rows = b.select(self._is_lower(), self.m, self.c64(0), name="mirror.rows")
        li = open_loop(b, self.c64(0), rows, ("mirror.i.head", "mirror.i.body", "mirror.i.exit"),
                       "mi")
        lj = open_loop(b, b.add(li.index, self.c64(1)), self.n,
                       ("mirror.j.head", "mirror.j.body", "mirror.j.exit"), "mj")
        below = self.at(self.c, b.add(b.mul(lj.index, self.sc_i), li.index))
        above = self.at(self.c, b.add(b.mul(li.index, self.sc_i), lj.index))
        b.store(b.load(below, typ=self.ty), above)
        close_loop(b, lj)
        close_loop(b, li)

    def _splat(self, x, vty):
        b = self.b
        one = b.insert_element(ir.Constant(vty, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
        return b.shuffle_vector(one, ir.Constant(vty, ir.Undefined),
                                ir.Constant(ir.VectorType(ir.IntType(32), vty.count), [0] * vty.count))

    def vload(self, ptr, name="", mask=None):
        if mask is not None:   # the last columns: lanes beyond them read as zero, not memory
            return self.b.call(self._masked("load"), [ptr, ir.Constant(ir.IntType(32), self.align),
                                                      mask, ir.Constant(self.vty, None)],
                               name=name)
        return self.b.load(self._vptr(ptr), typ=self.vty, align=self.align, name=name)

    def vstore(self, value, ptr, mask=None):
        if mask is not None:
            self.b.call(self._masked("store"), [value, ptr, ir.Constant(ir.IntType(32), self.align),
                                                mask])
            return
        self.b.store(value, self._vptr(ptr), align=self.align)

    def _masked(self, kind):
        suffix = ("f64" if isinstance(self.ty, ir.DoubleType) else "f32")
        name = f"llvm.masked.{kind}.v{self.w}{suffix}.p0"
        module = self.fn.module
        if name in module.globals:
            return module.globals[name]
        i32, mty = ir.IntType(32), ir.VectorType(ir.IntType(1), self.w)
        fty = (ir.FunctionType(self.vty, [PTR, i32, mty, self.vty]) if kind == "load" else
               ir.FunctionType(ir.VoidType(), [self.vty, PTR, i32, mty]))
        return ir.Function(module, fty, name)

    def _vptr(self, ptr):
        """The panel is a typed alloca (llvmlite's alloca); memory arguments are opaque."""
        if getattr(ptr.type, "is_opaque", False):
            return ptr
        return self.b.bitcast(ptr, self.vty.as_pointer())

    def min(self, x, y, name):
        return self.b.select(self.b.icmp_signed("<", x, y), x, y, name=name)

    def _pack(self, nv, mask, j0, k0, k_end):
        """panel[kk - k0, :] = b[kk, j0 : j0 + nv * w] for kk in [k0, k_end); with a mask,
        only the last vector's first columns (the n - j0 left), the other lanes zero."""
        b, w = self.b, self.w
        nr = nv * w
        lp = open_loop(b, k0, k_end, ("pack.head", "pack.body", "pack.exit"), "kp")
        src = self.at(self.bm, b.add(b.mul(lp.index, self.sb_k), self.b_offset(j0)), "psrc")
        dst = self.at(self.panel, b.mul(b.sub(lp.index, k0), self.c64(nr)), "pdst")
        if self.sb_j is None:     # unit stride: vector copies (a masked load for the tail)
            for v in range(nv):
                last = mask if v == nv - 1 else None
                self.vstore(self.vload(self.at(src, self.c64(v * w)), mask=last),
                            self.at(dst, self.c64(v * w)))
        elif mask is None:        # a transposed b: gather the row, one value at a time
            for j in range(nr):
                x = b.load(self.at(src, b.mul(self.c64(j), self.sb_j)), typ=self.ty)
                b.store(x, self.at(dst, self.c64(j)))
        else:                     # a transposed b's last columns: the n - j0 there are, then
            # zeros (stack garbage could hold subnormals, which cost microcode assists)
            cols = self.min(b.sub(self.n, j0), self.c64(nr), "pack.n")
            lj = open_loop(b, self.c64(0), cols, ("packj.head", "packj.body", "packj.exit"), "jp")
            x = b.load(self.at(src, self.b_offset(lj.index)), typ=self.ty)
            b.store(x, self.at(dst, lj.index))
            close_loop(b, lj)
            lz = open_loop(b, cols, self.c64(nr), ("packz.head", "packz.body", "packz.exit"), "jz")
            b.store(ir.Constant(self.ty, 0.0), self.at(dst, lz.index))
            close_loop(b, lz)
        close_loop(b, lp)

    def _tile(self, nv, mask, i0, i_last, j0, k0, k_end):
        """c[i0 : i0 + MR, j0 : j0 + nv * w] += a[...] @ panel, in vector registers.

        Rows past the block's last (i_last) are that last row again: the tile computes it
        twice, bit for bit alike, and stores it twice. The last m mod MR rows of a block so
        run as one tile of MR independent FMA chains instead of single-row tiles, whose one
        chain waits out the FMA latency at every k (the GMM gradient's (d, n) @ (n, d)
        products have m = d = 10: a third of their time went to four single-row tiles)."""
        b, w, vty, mr = self.b, self.w, self.vty, MR
        vfma = _fma(self.fn.module, vty)
        index = [self.min(b.add(i0, self.c64(r)), i_last, f"row{r}") for r in range(mr)]
        rows = [b.mul(index[r], self.sa_i, name=f"arow{r}") for r in range(mr)]
        crow = [self.at(self.c, b.add(b.mul(index[r], self.sc_i), j0), f"crow{r}")
                for r in range(mr)]
        cptr = [[self.at(crow[r], self.c64(v * w)) for v in range(nv)] for r in range(mr)]
        vmask = [mask if v == nv - 1 else None for v in range(nv)]
        init = self._tile_start(k0, [cptr[r][v] for r in range(mr) for v in range(nv)],
                                vmask * mr)
        kl = open_loop(b, k0, k_end, ("tk.head", "tk.body", "tk.exit"), "kk",
                       carried=[(f"acc{r}.{v}", init[r * nv + v])
                                for r in range(mr) for v in range(nv)])
        kk = kl.index
        brow = self.at(self.panel, b.mul(b.sub(kk, k0), self.c64(nv * w)), "brow")
        bvec = [self.vload(self.at(brow, self.c64(v * w)), f"b{v}") for v in range(nv)]
        a_k = b.mul(kk, self.sa_k)
        new = []
        for r in range(mr):
            x = b.load(self.at(self.a, b.add(rows[r], a_k)), typ=self.ty, name=f"a{r}")
            splat = self._splat(x, vty)
            for v in range(nv):
                new.append(b.call(vfma, [splat, bvec[v], kl.carried[r * nv + v]]))
        close_loop(b, kl, carried=new)
        for r in range(mr):
            for v in range(nv):
                self.vstore(kl.carried[r * nv + v], cptr[r][v], mask=vmask[v])
        if self.ep is not None:
            self._epilogue(nv, vmask, index, i0, i_last, j0, k_end, kl.carried)

    def _epilogue(self, nv, vmask, index, i0, i_last, j0, k_end, accs):
        """After the last k block, each row of the tile through the epilogue's arithmetic.
        A sum over rows loads its row vector once per tile and adds the tile's rows to it
        one after the other, in row order (the order of the loop it replaces, so the same
        additions in the same order), skipping the repeats past i_last; a store writes a
        repeated row twice, the same values (as the tile's own stores do)."""
        b, fn, ep = self.b, self.fn, self.ep
        last = b.icmp_signed("==", k_end, self.k)
        run, done = fn.append_basic_block("ep.run"), fn.append_basic_block("ep.done")
        b.cbranch(last, run, done)
        b.position_at_end(run)
        first = len(ep.loads)
        for v in range(nv):
            j = b.add(j0, self.c64(v * self.w), name=f"ep.j{v}")
            sums = {k: self.vload(self.at(self.ep_args[first + k][0], j), mask=vmask[v])
                    for k, sk in enumerate(ep.sinks) if sk.kind == "reduce"}
            for r in range(MR):
                value = self._epilogue_values(accs[r * nv + v], index[r], j, vmask[v])
                valid = b.icmp_signed("<=", b.add(i0, self.c64(r)), i_last)
                for k, sk in enumerate(ep.sinks):
                    if sk.kind == "reduce":
                        added = b.fadd(sums[k], value[sk.node.inputs[0]])
                        sums[k] = b.select(valid, added, sums[k])
                    else:
                        ptr, rs = self.ep_args[first + k]
                        self.vstore(value[sk.node], self.at(ptr, b.add(b.mul(index[r], rs), j)),
                                    mask=vmask[v])
            for k, total in sums.items():
                self.vstore(total, self.at(self.ep_args[first + k][0], j), mask=vmask[v])
        b.branch(done)
        b.position_at_end(done)

    def _epilogue_values(self, product, row, j, mask) -> dict:
        """node -> its vector at (row, j..j+w): the product, the loads, the arithmetic."""
        b, ep = self.b, self.ep
        cx = Scalar(b, None)
        value = {ep.node: product}
        consts = {const_key(x): self._splat(c, self.vty)
                  for x, c in zip(epilogue_constants(ep), self.ep_consts)}
        for (x, view), (ptr, rs) in zip(ep.loads.items(), self.ep_args):
            at = b.mul(row, rs)
            if view.strides[-1] == 1:
                value[x] = self.vload(self.at(ptr, b.add(at, j)), mask=mask)
            else:   # one value per row
                value[x] = self._splat(b.load(self.at(ptr, at), typ=self.ty), self.vty)
        for n in ep.ssa:
            value[n] = LOWER[n.op](cx, n, [consts[const_key(x)] if x.op in LEAF_INLINE
                                           else value[x] for x in n.inputs])
        return value

    def _tile_start(self, k0, ptrs, masks):
        """The accumulators' first values: zero in the first k block, else what the earlier
        blocks stored (loaded only then, so the first block never reads the output)."""
        b = self.b
        entry = b.block
        fn = self.fn
        load_bb, join = fn.append_basic_block("tile.reload"), fn.append_basic_block("tile.start")
        b.cbranch(b.icmp_signed("==", k0, self.c64(0)), join, load_bb)
        b.position_at_end(load_bb)
        loaded = [self.vload(p, mask=m) for p, m in zip(ptrs, masks)]
        b.branch(join)
        b.position_at_end(join)
        starts = []
        for i, x in enumerate(loaded):
            phi = b.phi(self.vty, name=f"start{i}")
            phi.add_incoming(ir.Constant(self.vty, None), entry)
            phi.add_incoming(x, load_bb)
            starts.append(phi)
        return starts

    def b_offset(self, j):
        """Element offset of column j in a row of b (a plain ``j`` when b is unit-stride)."""
        return j if self.sb_j is None else self.b.mul(j, self.sb_j)


def _fma(module: ir.Module, ty) -> ir.Function:
    """``llvm.fma`` for a scalar or vector float type (llvmlite names vector intrinsics not)."""
    elem = ty.element if isinstance(ty, ir.VectorType) else ty
    suffix = ("f64" if isinstance(elem, ir.DoubleType) else "f32")
    name = f"llvm.fma.v{ty.count}{suffix}" if isinstance(ty, ir.VectorType) else f"llvm.fma.{suffix}"
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(ty, [ty, ty, ty]), name)
