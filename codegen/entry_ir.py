"""``sg_enter``, the native entry's one generic function (``codegen.native_entry``), as LLVM
IR text, and the layout it reads: the descriptor's slots and records, and the byte offsets of
the CPython / NumPy / ctypes object fields it reads (which ``native_entry.available`` checks
against live objects before any entry is made). Hand-written IR: the function is fixed (no
part depends on a signature, so its machine code is compiled once and cached like a
kernel); each block is named for its step, as the module docstring of native_entry lists
them.
"""
from __future__ import annotations

import re

# Descriptor slots (8 bytes each) before the records: a PyMethodDef, then the call's constants.
SLOTS = ("ml_name", "ml_meth", "ml_flags", "ml_doc",
         "nargs", "miss", "tuple_type", "ndarray_type", "float_type",
         "table", "params", "run",
         "array_empty", "incref", "decref", "float_from_double", "tuple_new",
         "n_outs", "n_scalars", "n_pick", "args_at", "outs_at", "scalars_at", "pick_at")
SLOT = {name: k for k, name in enumerate(SLOTS)}
ARG_RECORD = 5      # kind (0 array, 1 float), destination, descr, nd, dims_at
OUT_RECORD = 5      # result index, table slot, descr, nd, dims_at
SCALAR_RECORD = 2   # result index, cell address
MAX_RESULTS = 8     # the entry's results live in a fixed stack array
KIND_ARRAY, KIND_FLOAT = 0, 1
METH_FASTCALL = 0x80
C_CONTIGUOUS_ALIGNED = 0x1 | 0x100   # NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED

# Byte offsets into CPython / NumPy / ctypes objects (checked by `available`)
OB_TYPE = 8
TUPLE_SIZE, TUPLE_ITEMS = 16, 24
FLOAT_VALUE = 16
ARRAY_DATA, ARRAY_ND, ARRAY_DIMS, ARRAY_DESCR, ARRAY_FLAGS = 16, 24, 32, 56, 64
CDATA_POINTER = 16

_IR = r"""
define ptr @"sg_enter"(ptr %self, ptr %args, i64 %nargs) {
entry:
  %results = alloca [MAX_RESULTS x ptr]
  %values = alloca [MAX_RESULTS x double]
  store [MAX_RESULTS x ptr] zeroinitializer, ptr %results
  %buffer.at = getelementptr inbounds i8, ptr %self, i64 CDATA_POINTER
  %d = load ptr, ptr %buffer.at
  %incref = call ptr @slot.ptr(ptr %d, i64 S_incref)
  %decref = call ptr @slot.ptr(ptr %d, i64 S_decref)
  %one.arg = icmp eq i64 %nargs, 1
  br i1 %one.arg, label %tuple, label %decline

tuple:
  %tup = load ptr, ptr %args
  %tup.type = call ptr @field.ptr(ptr %tup, i64 OB_TYPE)
  %want.tuple = call ptr @slot.ptr(ptr %d, i64 S_tuple_type)
  %is.tuple = icmp eq ptr %tup.type, %want.tuple
  br i1 %is.tuple, label %arity, label %decline

arity:
  %size = call i64 @field.i64(ptr %tup, i64 TUPLE_SIZE)
  %want.n = call i64 @slot.i64(ptr %d, i64 S_nargs)
  %items = getelementptr inbounds i8, ptr %tup, i64 TUPLE_ITEMS
  %ndarray = call ptr @slot.ptr(ptr %d, i64 S_ndarray_type)
  %float = call ptr @slot.ptr(ptr %d, i64 S_float_type)
  %args.at = call i64 @slot.i64(ptr %d, i64 S_args_at)
  %arg.records = getelementptr inbounds i64, ptr %d, i64 %args.at
  %arity.ok = icmp eq i64 %size, %want.n
  br i1 %arity.ok, label %check.cond, label %decline

check.cond:
  %i = phi i64 [0, %arity], [%i.next, %check.next]
  %check.more = icmp ult i64 %i, %want.n
  br i1 %check.more, label %check.body, label %alloc.start

check.body:
  %arg.at = getelementptr inbounds ptr, ptr %items, i64 %i
  %arg = load ptr, ptr %arg.at
  %rec.index = mul i64 %i, ARG_RECORD
  %rec = getelementptr inbounds i64, ptr %arg.records, i64 %rec.index
  %kind = call i64 @slot.i64(ptr %rec, i64 0)
  %arg.type = call ptr @field.ptr(ptr %arg, i64 OB_TYPE)
  %is.float.arg = icmp eq i64 %kind, KIND_FLOAT
  br i1 %is.float.arg, label %check.float, label %check.array

check.float:
  %is.float = icmp eq ptr %arg.type, %float
  br i1 %is.float, label %check.next, label %decline

check.array:                                   ; an ndarray's fields are read only once it is one
  %is.ndarray = icmp eq ptr %arg.type, %ndarray
  br i1 %is.ndarray, label %check.fields, label %decline

check.fields:
  %descr = call ptr @field.ptr(ptr %arg, i64 ARRAY_DESCR)
  %want.descr = call ptr @slot.ptr(ptr %rec, i64 2)
  %descr.ok = icmp eq ptr %descr, %want.descr
  %nd.at = getelementptr inbounds i8, ptr %arg, i64 ARRAY_ND
  %nd32 = load i32, ptr %nd.at
  %nd = sext i32 %nd32 to i64
  %want.nd = call i64 @slot.i64(ptr %rec, i64 3)
  %nd.ok = icmp eq i64 %nd, %want.nd
  %flags.at = getelementptr inbounds i8, ptr %arg, i64 ARRAY_FLAGS
  %flags = load i32, ptr %flags.at
  %layout = and i32 %flags, C_CONTIGUOUS_ALIGNED
  %layout.ok = icmp eq i32 %layout, C_CONTIGUOUS_ALIGNED
  %ok.1 = and i1 %descr.ok, %nd.ok
  %ok = and i1 %ok.1, %layout.ok
  br i1 %ok, label %dims.start, label %decline

dims.start:
  %dims = call ptr @field.ptr(ptr %arg, i64 ARRAY_DIMS)
  %dims.at = call i64 @slot.i64(ptr %rec, i64 4)
  %want.dims = getelementptr inbounds i64, ptr %d, i64 %dims.at
  br label %dims.cond

dims.cond:
  %j = phi i64 [0, %dims.start], [%j.next, %dims.body]
  %dims.more = icmp ult i64 %j, %want.nd
  br i1 %dims.more, label %dims.body, label %check.next

dims.body:
  %dim.at = getelementptr inbounds i64, ptr %dims, i64 %j
  %dim = load i64, ptr %dim.at
  %want.dim.at = getelementptr inbounds i64, ptr %want.dims, i64 %j
  %want.dim = load i64, ptr %want.dim.at
  %j.next = add i64 %j, 1
  %dim.ok = icmp eq i64 %dim, %want.dim
  br i1 %dim.ok, label %dims.cond, label %decline

check.next:
  %i.next = add i64 %i, 1
  br label %check.cond

alloc.start:
  %n.outs = call i64 @slot.i64(ptr %d, i64 S_n_outs)
  %outs.at = call i64 @slot.i64(ptr %d, i64 S_outs_at)
  %out.records = getelementptr inbounds i64, ptr %d, i64 %outs.at
  %empty = call ptr @slot.ptr(ptr %d, i64 S_array_empty)
  br label %alloc.cond

alloc.cond:
  %k = phi i64 [0, %alloc.start], [%k.next, %alloc.ok]
  %alloc.more = icmp ult i64 %k, %n.outs
  br i1 %alloc.more, label %alloc.body, label %fill.start

alloc.body:
  %orec.index = mul i64 %k, OUT_RECORD
  %orec = getelementptr inbounds i64, ptr %out.records, i64 %orec.index
  %out.index = call i64 @slot.i64(ptr %orec, i64 0)
  %out.descr = call ptr @slot.ptr(ptr %orec, i64 2)
  %out.nd = call i64 @slot.i64(ptr %orec, i64 3)
  %out.nd32 = trunc i64 %out.nd to i32
  %out.dims.at = call i64 @slot.i64(ptr %orec, i64 4)
  %out.dims = getelementptr inbounds i64, ptr %d, i64 %out.dims.at
  call void %incref(ptr %out.descr)              ; PyArray_Empty steals a reference
  %out = call ptr %empty(i32 %out.nd32, ptr %out.dims, ptr %out.descr, i32 0)
  %out.failed = icmp eq ptr %out, null
  br i1 %out.failed, label %fail.cond, label %alloc.ok

alloc.ok:
  %out.slot = getelementptr inbounds ptr, ptr %results, i64 %out.index
  store ptr %out, ptr %out.slot
  %k.next = add i64 %k, 1
  br label %alloc.cond

fill.start:
  %table = call ptr @slot.ptr(ptr %d, i64 S_table)
  br label %fill.cond

fill.cond:
  %f = phi i64 [0, %fill.start], [%f.next, %fill.next]
  %fill.more = icmp ult i64 %f, %want.n
  br i1 %fill.more, label %fill.body, label %fill.outs.cond

fill.body:
  %farg.at = getelementptr inbounds ptr, ptr %items, i64 %f
  %farg = load ptr, ptr %farg.at
  %frec.index = mul i64 %f, ARG_RECORD
  %frec = getelementptr inbounds i64, ptr %arg.records, i64 %frec.index
  %fkind = call i64 @slot.i64(ptr %frec, i64 0)
  %dest = call i64 @slot.i64(ptr %frec, i64 1)
  %fis.float = icmp eq i64 %fkind, KIND_FLOAT
  br i1 %fis.float, label %fill.float, label %fill.array

fill.float:
  %value.at = getelementptr inbounds i8, ptr %farg, i64 FLOAT_VALUE
  %value = load double, ptr %value.at
  %cell = inttoptr i64 %dest to ptr
  store double %value, ptr %cell
  br label %fill.next

fill.array:
  %data = call i64 @field.i64(ptr %farg, i64 ARRAY_DATA)
  %entry.at = getelementptr inbounds i64, ptr %table, i64 %dest
  store i64 %data, ptr %entry.at
  br label %fill.next

fill.next:
  %f.next = add i64 %f, 1
  br label %fill.cond

fill.outs.cond:
  %o = phi i64 [0, %fill.cond], [%o.next, %fill.outs.body]
  %fill.outs.more = icmp ult i64 %o, %n.outs
  br i1 %fill.outs.more, label %fill.outs.body, label %run

fill.outs.body:
  %prec.index = mul i64 %o, OUT_RECORD
  %prec = getelementptr inbounds i64, ptr %out.records, i64 %prec.index
  %pindex = call i64 @slot.i64(ptr %prec, i64 0)
  %ptable.slot = call i64 @slot.i64(ptr %prec, i64 1)
  %pres.at = getelementptr inbounds ptr, ptr %results, i64 %pindex
  %pres = load ptr, ptr %pres.at
  %pdata = call i64 @field.i64(ptr %pres, i64 ARRAY_DATA)
  %pentry.at = getelementptr inbounds i64, ptr %table, i64 %ptable.slot
  store i64 %pdata, ptr %pentry.at
  %o.next = add i64 %o, 1
  br label %fill.outs.cond

run:
  %params = call ptr @slot.ptr(ptr %d, i64 S_params)
  %kernel = call ptr @slot.ptr(ptr %d, i64 S_run)
  call void %kernel(ptr %table, ptr %params)
  %n.scalars = call i64 @slot.i64(ptr %d, i64 S_n_scalars)
  %scalars.at = call i64 @slot.i64(ptr %d, i64 S_scalars_at)
  %scalar.records = getelementptr inbounds i64, ptr %d, i64 %scalars.at
  br label %read.cond

read.cond:                                     ; the 0-d results, before any allocation
  %r = phi i64 [0, %run], [%r.next, %read.body]
  %read.more = icmp ult i64 %r, %n.scalars
  br i1 %read.more, label %read.body, label %box.start

read.body:
  %srec.index = mul i64 %r, SCALAR_RECORD
  %srec = getelementptr inbounds i64, ptr %scalar.records, i64 %srec.index
  %scell.addr = call i64 @slot.i64(ptr %srec, i64 1)
  %scell = inttoptr i64 %scell.addr to ptr
  %svalue = load double, ptr %scell
  %svalue.at = getelementptr inbounds double, ptr %values, i64 %r
  store double %svalue, ptr %svalue.at
  %r.next = add i64 %r, 1
  br label %read.cond

box.start:
  %from.double = call ptr @slot.ptr(ptr %d, i64 S_float_from_double)
  br label %box.cond

box.cond:
  %b = phi i64 [0, %box.start], [%b.next, %box.ok]
  %box.more = icmp ult i64 %b, %n.scalars
  br i1 %box.more, label %box.body, label %result

box.body:
  %brec.index = mul i64 %b, SCALAR_RECORD
  %brec = getelementptr inbounds i64, ptr %scalar.records, i64 %brec.index
  %bindex = call i64 @slot.i64(ptr %brec, i64 0)
  %bvalue.at = getelementptr inbounds double, ptr %values, i64 %b
  %bvalue = load double, ptr %bvalue.at
  %boxed = call ptr %from.double(double %bvalue)
  %box.failed = icmp eq ptr %boxed, null
  br i1 %box.failed, label %fail.cond, label %box.ok

box.ok:
  %boxed.at = getelementptr inbounds ptr, ptr %results, i64 %bindex
  store ptr %boxed, ptr %boxed.at
  %b.next = add i64 %b, 1
  br label %box.cond

result:
  %n.pick = call i64 @slot.i64(ptr %d, i64 S_n_pick)
  %single = icmp eq i64 %n.pick, 0
  br i1 %single, label %return.single, label %tuple.new

return.single:
  %first = load ptr, ptr %results
  ret ptr %first

tuple.new:
  %tuple.new.fn = call ptr @slot.ptr(ptr %d, i64 S_tuple_new)
  %packed = call ptr %tuple.new.fn(i64 %n.pick)
  %pack.failed = icmp eq ptr %packed, null
  %pick.at = call i64 @slot.i64(ptr %d, i64 S_pick_at)
  %picks = getelementptr inbounds i64, ptr %d, i64 %pick.at
  %packed.items = getelementptr inbounds i8, ptr %packed, i64 TUPLE_ITEMS
  br i1 %pack.failed, label %fail.cond, label %pack.cond

pack.cond:                                     ; each result moves into the tuple once
  %p = phi i64 [0, %tuple.new], [%p.next, %pack.body]
  %pack.more = icmp ult i64 %p, %n.pick
  br i1 %pack.more, label %pack.body, label %return.tuple

pack.body:
  %pick = call i64 @slot.i64(ptr %picks, i64 %p)
  %picked.at = getelementptr inbounds ptr, ptr %results, i64 %pick
  %picked = load ptr, ptr %picked.at
  %item.at = getelementptr inbounds ptr, ptr %packed.items, i64 %p
  store ptr %picked, ptr %item.at
  %p.next = add i64 %p, 1
  br label %pack.cond

return.tuple:
  ret ptr %packed

decline:                                       ; nothing allocated, nothing written
  %miss = call ptr @slot.ptr(ptr %d, i64 S_miss)
  call void %incref(ptr %miss)
  ret ptr %miss

fail.cond:                                     ; an allocation failed: its exception is set
  %e = phi i64 [0, %alloc.body], [0, %box.body], [0, %tuple.new], [%e.next, %fail.next]
  %fail.more = icmp ult i64 %e, MAX_RESULTS
  br i1 %fail.more, label %fail.body, label %fail.return

fail.body:
  %held.at = getelementptr inbounds ptr, ptr %results, i64 %e
  %held = load ptr, ptr %held.at
  %held.null = icmp eq ptr %held, null
  br i1 %held.null, label %fail.next, label %fail.release

fail.release:
  call void %decref(ptr %held)
  br label %fail.next

fail.next:
  %e.next = add i64 %e, 1
  br label %fail.cond

fail.return:
  ret ptr null
}
"""


# The typed loads the IR reads its memory with: ``slot.<type>(base, k)``, the k-th 8-byte slot
# of a descriptor or record; ``field.<type>(object, offset)``, an object's field at a byte
# offset. One template: they differ only in the unit of the index and the type loaded.
_ACCESSOR = """
define internal {value} @{name}.{value}(ptr %base, i64 %k) alwaysinline {{
  %at = getelementptr inbounds {unit}, ptr %base, i64 %k
  %v = load {value}, ptr %at
  ret {value} %v
}}
"""
_ACCESSORS = "".join(_ACCESSOR.format(name=name, unit=unit, value=value)
                     for name, unit in (("slot", "i64"), ("field", "i8"))
                     for value in ("ptr", "i64"))


def entry_text() -> str:
    """The IR of ``sg_enter`` with this module's constants (slots, offsets) filled in."""
    # every upper-case integer of this module, so a constant the IR names cannot be left out
    constants = {name: value for name, value in globals().items()
                 if name.isupper() and type(value) is int}
    constants.update({f"S_{name}": k for name, k in SLOT.items()})
    return _CONSTANT.sub(lambda m: str(constants[m.group(0)]), _IR) + _ACCESSORS


_CONSTANT = re.compile(r"\bS_[a-z_]+\b|\b[A-Z][A-Z_]+\b")
