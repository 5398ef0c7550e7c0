"""``sg_enter``, the native entry's one generic function (``codegen.native_entry``), as LLVM
IR text, and the layout it reads: the descriptor's slots and records, and the byte offsets of
the CPython / NumPy / ctypes object fields it reads (which ``native_entry.available`` checks
against live objects before any entry is made). Hand-written IR: the function is fixed (no
part depends on a signature, so its machine code is compiled once and cached like a
kernel); each block is named for its step, as the module docstring of native_entry lists
them. Why this module is long: it is one function's IR, its blocks in the order of those
steps (a guarded signature's ones beside the rest), which reads best in one place.
"""
from __future__ import annotations

import re

# Descriptor slots (8 bytes each) before the records: a PyMethodDef, then the call's constants.
SLOTS = ("ml_name", "ml_meth", "ml_flags", "ml_doc",
         "nargs", "miss", "tuple_type", "ndarray_type", "float_type",
         "table", "params", "run",
         "array_empty", "incref", "decref", "float_from_double", "tuple_new",
         "n_outs", "n_scalars", "n_pick", "n_top", "args_at", "outs_at", "scalars_at", "top_at",
         "n_guards", "guards_at", "out_alone")
SLOT = {name: k for k, name in enumerate(SLOTS)}
ARG_RECORD = 6      # kind (0 array, 1 float), destination, descr, nd, dims_at, bytes
OUT_RECORD = 5      # result index, table slot, descr, nd, dims_at
SCALAR_RECORD = 2   # result index, cell address
TOP_RECORD = 6      # per top-level result (what out= matches): result index, descr, nd,
                    # dims_at, bytes, kind (0 an array the kernel writes, 1 a 0-d result)
GUARD_RECORD = 1    # per guard flag (symgrad.guards): the address of its cell (a bool byte)
MAX_RESULTS = 8     # the entry's results live in fixed stack arrays
KIND_ARRAY, KIND_FLOAT = 0, 1
METH_FASTCALL = 0x80
# NumPy's flags an argument's and an out= array's memory must have
C_CONTIGUOUS_ALIGNED = 0x1 | 0x100                  # NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED
C_CONTIGUOUS_ALIGNED_WRITEABLE = 0x1 | 0x100 | 0x400   # ... | NPY_ARRAY_WRITEABLE

# Byte offsets into CPython / NumPy / ctypes objects (checked by `available`)
OB_TYPE = 8
TUPLE_SIZE, TUPLE_ITEMS = 16, 24
FLOAT_VALUE = 16
ARRAY_DATA, ARRAY_ND, ARRAY_DIMS, ARRAY_DESCR, ARRAY_FLAGS = 16, 24, 32, 56, 64
CDATA_POINTER = 16

_IR = r"""
define ptr @"sg_enter"(ptr %self, ptr %args, i64 %nargs) {
entry:
  %results = alloca [MAX_RESULTS x ptr]           ; what the entry made, by result index
  %given = alloca [MAX_RESULTS x ptr]             ; the out= arrays, by result index
  %values = alloca [MAX_RESULTS x double]         ; the 0-d results, by result index
  store [MAX_RESULTS x ptr] zeroinitializer, ptr %results
  %buffer.at = getelementptr inbounds i8, ptr %self, i64 CDATA_POINTER
  %d = load ptr, ptr %buffer.at
  %incref = call ptr @slot.ptr(ptr %d, i64 S_incref)
  %decref = call ptr @slot.ptr(ptr %d, i64 S_decref)
  %out.at = getelementptr inbounds ptr, ptr %args, i64 1
  %with.out = icmp eq i64 %nargs, 2                ; entry(args, out)
  %one.arg = icmp eq i64 %nargs, 1                 ; entry(args)
  %call.ok = or i1 %one.arg, %with.out
  br i1 %call.ok, label %tuple, label %decline

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
  br i1 %check.more, label %check.body, label %checked

check.body:
  %arg.at = getelementptr inbounds ptr, ptr %items, i64 %i
  %arg = load ptr, ptr %arg.at
  %rec = call ptr @record(ptr %arg.records, i64 %i, i64 ARG_RECORD)
  %kind = call i64 @slot.i64(ptr %rec, i64 0)
  %is.float.arg = icmp eq i64 %kind, KIND_FLOAT
  br i1 %is.float.arg, label %check.float, label %check.array

check.float:
  %arg.type = call ptr @field.ptr(ptr %arg, i64 OB_TYPE)
  %is.float = icmp eq ptr %arg.type, %float
  br i1 %is.float, label %check.next, label %decline

check.array:
  %want.descr = call ptr @slot.ptr(ptr %rec, i64 2)
  %want.nd = call i64 @slot.i64(ptr %rec, i64 3)
  %dims.at = call i64 @slot.i64(ptr %rec, i64 4)
  %want.dims = getelementptr inbounds i64, ptr %d, i64 %dims.at
  %arg.ok = call i1 @array.is(ptr %arg, ptr %ndarray, ptr %want.descr, i64 %want.nd,
                              ptr %want.dims, i32 C_CONTIGUOUS_ALIGNED)
  br i1 %arg.ok, label %check.next, label %decline

check.next:
  %i.next = add i64 %i, 1
  br label %check.cond

checked:
  %n.outs = call i64 @slot.i64(ptr %d, i64 S_n_outs)
  %outs.at = call i64 @slot.i64(ptr %d, i64 S_outs_at)
  %out.records = getelementptr inbounds i64, ptr %d, i64 %outs.at
  %n.top = call i64 @slot.i64(ptr %d, i64 S_n_top)
  %top.at = call i64 @slot.i64(ptr %d, i64 S_top_at)
  %top.records = getelementptr inbounds i64, ptr %d, i64 %top.at
  %n.guards = call i64 @slot.i64(ptr %d, i64 S_n_guards)
  %unguarded = icmp eq i64 %n.guards, 0            ; else out= is written only once the
  %in.place = and i1 %with.out, %unguarded         ; guards passed, from fresh arrays
  br i1 %with.out, label %out.start, label %alloc.start

out.start:                                     ; out=: a tuple, one array per top-level result,
  %out = load ptr, ptr %out.at                 ; or an array alone, read as a 1-tuple
  %out.type = call ptr @field.ptr(ptr %out, i64 OB_TYPE)
  %out.is.tuple = icmp eq ptr %out.type, %want.tuple
  br i1 %out.is.tuple, label %out.tuple, label %out.alone

out.tuple:
  %out.size = call i64 @field.i64(ptr %out, i64 TUPLE_SIZE)
  %out.tuple.items = getelementptr inbounds i8, ptr %out, i64 TUPLE_ITEMS
  %out.size.ok = icmp eq i64 %out.size, %n.top
  br i1 %out.size.ok, label %out.items, label %decline

out.alone:
  %alone.slot = call i64 @slot.i64(ptr %d, i64 S_out_alone)   ; where the full path reads
  %alone.ok = icmp ne i64 %alone.slot, 0                      ; it as a 1-tuple
  br i1 %alone.ok, label %out.items, label %decline

out.items:
  %outs = phi ptr [%out.tuple.items, %out.tuple], [%out.at, %out.alone]
  br label %out.cond

out.cond:
  %q = phi i64 [0, %out.items], [%q.next, %out.next]
  %out.more = icmp ult i64 %q, %n.top
  br i1 %out.more, label %out.body, label %out.checked

out.body:
  %o.at = getelementptr inbounds ptr, ptr %outs, i64 %q
  %o = load ptr, ptr %o.at
  %trec = call ptr @record(ptr %top.records, i64 %q, i64 TOP_RECORD)
  %o.descr = call ptr @slot.ptr(ptr %trec, i64 1)
  %o.nd = call i64 @slot.i64(ptr %trec, i64 2)
  %o.dims.at = call i64 @slot.i64(ptr %trec, i64 3)
  %o.dims = getelementptr inbounds i64, ptr %d, i64 %o.dims.at
  %o.ok = call i1 @array.is(ptr %o, ptr %ndarray, ptr %o.descr, i64 %o.nd, ptr %o.dims,
                            i32 C_CONTIGUOUS_ALIGNED_WRITEABLE)
  br i1 %o.ok, label %out.take, label %decline

out.take:
  %o.index = call i64 @slot.i64(ptr %trec, i64 0)
  %o.given.at = getelementptr inbounds ptr, ptr %given, i64 %o.index
  store ptr %o, ptr %o.given.at
  %o.kind = call i64 @slot.i64(ptr %trec, i64 5)
  %o.array = icmp eq i64 %o.kind, KIND_ARRAY
  %o.direct = and i1 %o.array, %unguarded        ; (a copy afterwards may overlap anything)
  br i1 %o.direct, label %overlap.start, label %out.next

overlap.start:                                 ; the kernel writes it: it must not overlap an
  %o.lo = call i64 @field.i64(ptr %o, i64 ARRAY_DATA)   ; array argument (as the full path
  %o.bytes = call i64 @slot.i64(ptr %trec, i64 4)       ; compares: byte ranges, 0-d ones
  %o.hi = add i64 %o.lo, %o.bytes                       ; left out), else the full path copies
  br label %overlap.cond

overlap.cond:
  %a = phi i64 [0, %overlap.start], [%a.next, %overlap.next]
  %overlap.more = icmp ult i64 %a, %want.n
  br i1 %overlap.more, label %overlap.body, label %out.next

overlap.body:
  %arec = call ptr @record(ptr %arg.records, i64 %a, i64 ARG_RECORD)
  %a.kind = call i64 @slot.i64(ptr %arec, i64 0)
  %a.nd = call i64 @slot.i64(ptr %arec, i64 3)
  %a.is.array = icmp eq i64 %a.kind, KIND_ARRAY
  %a.has.dims = icmp ne i64 %a.nd, 0
  %a.spans = and i1 %a.is.array, %a.has.dims
  br i1 %a.spans, label %overlap.test, label %overlap.next

overlap.test:
  %a.obj.at = getelementptr inbounds ptr, ptr %items, i64 %a
  %a.obj = load ptr, ptr %a.obj.at
  %a.lo = call i64 @field.i64(ptr %a.obj, i64 ARRAY_DATA)
  %a.bytes = call i64 @slot.i64(ptr %arec, i64 5)
  %a.hi = add i64 %a.lo, %a.bytes
  %starts.below = icmp ult i64 %o.lo, %a.hi
  %ends.above = icmp ult i64 %a.lo, %o.hi
  %overlaps = and i1 %starts.below, %ends.above
  br i1 %overlaps, label %decline, label %overlap.next

overlap.next:
  %a.next = add i64 %a, 1
  br label %overlap.cond

out.next:
  %q.next = add i64 %q, 1
  br label %out.cond

out.checked:                                   ; guarded: the kernel writes fresh arrays
  br i1 %unguarded, label %fill.start, label %alloc.start

alloc.start:
  %empty = call ptr @slot.ptr(ptr %d, i64 S_array_empty)
  br label %alloc.cond

alloc.cond:
  %k = phi i64 [0, %alloc.start], [%k.next, %alloc.ok]
  %alloc.more = icmp ult i64 %k, %n.outs
  br i1 %alloc.more, label %alloc.body, label %fill.start

alloc.body:
  %orec = call ptr @record(ptr %out.records, i64 %k, i64 OUT_RECORD)
  %out.index = call i64 @slot.i64(ptr %orec, i64 0)
  %out.descr = call ptr @slot.ptr(ptr %orec, i64 2)
  %out.nd = call i64 @slot.i64(ptr %orec, i64 3)
  %out.nd32 = trunc i64 %out.nd to i32
  %out.dims.at = call i64 @slot.i64(ptr %orec, i64 4)
  %out.dims = getelementptr inbounds i64, ptr %d, i64 %out.dims.at
  call void %incref(ptr %out.descr)              ; PyArray_Empty steals a reference
  %made = call ptr %empty(i32 %out.nd32, ptr %out.dims, ptr %out.descr, i32 0)
  %made.failed = icmp eq ptr %made, null
  br i1 %made.failed, label %fail, label %alloc.ok

alloc.ok:
  %made.at = getelementptr inbounds ptr, ptr %results, i64 %out.index
  store ptr %made, ptr %made.at
  %k.next = add i64 %k, 1
  br label %alloc.cond

fill.start:                                    ; from here on, nothing allocates until the run
  %table = call ptr @slot.ptr(ptr %d, i64 S_table)
  %written = select i1 %in.place, ptr %given, ptr %results   ; the arrays the kernel writes
  br label %fill.cond

fill.cond:
  %f = phi i64 [0, %fill.start], [%f.next, %fill.next]
  %fill.more = icmp ult i64 %f, %want.n
  br i1 %fill.more, label %fill.body, label %fill.outs.cond

fill.body:
  %farg.at = getelementptr inbounds ptr, ptr %items, i64 %f
  %farg = load ptr, ptr %farg.at
  %frec = call ptr @record(ptr %arg.records, i64 %f, i64 ARG_RECORD)
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
  %w = phi i64 [0, %fill.cond], [%w.next, %fill.outs.body]
  %fill.outs.more = icmp ult i64 %w, %n.outs
  br i1 %fill.outs.more, label %fill.outs.body, label %run

fill.outs.body:
  %prec = call ptr @record(ptr %out.records, i64 %w, i64 OUT_RECORD)
  %pindex = call i64 @slot.i64(ptr %prec, i64 0)
  %ptable.slot = call i64 @slot.i64(ptr %prec, i64 1)
  %pres.at = getelementptr inbounds ptr, ptr %written, i64 %pindex
  %pres = load ptr, ptr %pres.at
  %pdata = call i64 @field.i64(ptr %pres, i64 ARRAY_DATA)
  %pentry.at = getelementptr inbounds i64, ptr %table, i64 %ptable.slot
  store i64 %pdata, ptr %pentry.at
  %w.next = add i64 %w, 1
  br label %fill.outs.cond

run:
  %params = call ptr @slot.ptr(ptr %d, i64 S_params)
  %kernel = call ptr @slot.ptr(ptr %d, i64 S_run)
  call void %kernel(ptr %table, ptr %params)
  %guards.at = call i64 @slot.i64(ptr %d, i64 S_guards_at)
  %guard.records = getelementptr inbounds i64, ptr %d, i64 %guards.at
  br label %guard.cond

guard.cond:                                    ; the guard flags (symgrad.guards), read first
  %g = phi i64 [0, %run], [%g.next, %guard.body]
  %guard.more = icmp ult i64 %g, %n.guards
  br i1 %guard.more, label %guard.body, label %read.start

guard.body:
  %grec = call ptr @record(ptr %guard.records, i64 %g, i64 GUARD_RECORD)
  %gcell = call ptr @slot.ptr(ptr %grec, i64 0)
  %gflag = load i8, ptr %gcell
  %g.fired = icmp ne i8 %gflag, 0
  %g.next = add i64 %g, 1
  br i1 %g.fired, label %guard.fired, label %guard.cond

guard.fired:                                   ; the full path raises the guard's error or
  call void @release(ptr %results, ptr %decref)   ; grows the loop's cap: the arrays made
  br label %decline                               ; for this run go, nothing else was written

read.start:
  %n.scalars = call i64 @slot.i64(ptr %d, i64 S_n_scalars)
  %scalars.at = call i64 @slot.i64(ptr %d, i64 S_scalars_at)
  %scalar.records = getelementptr inbounds i64, ptr %d, i64 %scalars.at
  br label %read.cond

read.cond:                                     ; the 0-d results, before any allocation
  %r = phi i64 [0, %read.start], [%r.next, %read.body]
  %read.more = icmp ult i64 %r, %n.scalars
  br i1 %read.more, label %read.body, label %read.done

read.body:
  %srec = call ptr @record(ptr %scalar.records, i64 %r, i64 SCALAR_RECORD)
  %sindex = call i64 @slot.i64(ptr %srec, i64 0)
  %scell.addr = call i64 @slot.i64(ptr %srec, i64 1)
  %scell = inttoptr i64 %scell.addr to ptr
  %svalue = load double, ptr %scell
  %svalue.at = getelementptr inbounds double, ptr %values, i64 %sindex
  store double %svalue, ptr %svalue.at
  %r.next = add i64 %r, 1
  br label %read.cond

read.done:
  br i1 %with.out, label %out.write, label %box.start

out.write:
  br i1 %unguarded, label %store.cond, label %copy.cond

copy.cond:                                     ; guarded: each out= entry in order, as
  %c = phi i64 [0, %out.write], [%c.next, %copy.next]   ; runtime.write_out writes them
  %copy.more = icmp ult i64 %c, %n.top
  br i1 %copy.more, label %copy.body, label %copied

copy.body:
  %crec = call ptr @record(ptr %top.records, i64 %c, i64 TOP_RECORD)
  %c.index = call i64 @slot.i64(ptr %crec, i64 0)
  %c.given.at = getelementptr inbounds ptr, ptr %given, i64 %c.index
  %c.given = load ptr, ptr %c.given.at
  %c.to = call ptr @field.ptr(ptr %c.given, i64 ARRAY_DATA)
  %c.kind = call i64 @slot.i64(ptr %crec, i64 5)
  %c.is.array = icmp eq i64 %c.kind, KIND_ARRAY
  br i1 %c.is.array, label %copy.array, label %copy.value

copy.array:                                    ; from the fresh array: never overlapping
  %c.made.at = getelementptr inbounds ptr, ptr %results, i64 %c.index
  %c.made = load ptr, ptr %c.made.at
  %c.from = call ptr @field.ptr(ptr %c.made, i64 ARRAY_DATA)
  %c.bytes = call i64 @slot.i64(ptr %crec, i64 4)
  call void @llvm.memcpy.p0.p0.i64(ptr %c.to, ptr %c.from, i64 %c.bytes, i1 false)
  br label %copy.next

copy.value:
  %c.value.at = getelementptr inbounds double, ptr %values, i64 %c.index
  %c.value = load double, ptr %c.value.at
  store double %c.value, ptr %c.to
  br label %copy.next

copy.next:
  %c.next = add i64 %c, 1
  br label %copy.cond

copied:
  call void @release(ptr %results, ptr %decref)
  br label %return.out

store.cond:                                    ; 0-d results into their out= arrays, in the
  %s = phi i64 [0, %out.write], [%s.next, %store.next]   ; order the full path writes them
  %store.more = icmp ult i64 %s, %n.top
  br i1 %store.more, label %store.body, label %return.out

store.body:
  %strec = call ptr @record(ptr %top.records, i64 %s, i64 TOP_RECORD)
  %st.kind = call i64 @slot.i64(ptr %strec, i64 5)
  %st.is.scalar = icmp eq i64 %st.kind, KIND_FLOAT
  br i1 %st.is.scalar, label %store.value, label %store.next

store.value:
  %st.index = call i64 @slot.i64(ptr %strec, i64 0)
  %st.given.at = getelementptr inbounds ptr, ptr %given, i64 %st.index
  %st.given = load ptr, ptr %st.given.at
  %st.data = call ptr @field.ptr(ptr %st.given, i64 ARRAY_DATA)
  %st.value.at = getelementptr inbounds double, ptr %values, i64 %st.index
  %st.value = load double, ptr %st.value.at
  store double %st.value, ptr %st.data
  br label %store.next

store.next:
  %s.next = add i64 %s, 1
  br label %store.cond

return.out:                                    ; the full path returns out= itself
  %out.result = load ptr, ptr %out.at
  call void %incref(ptr %out.result)
  ret ptr %out.result

box.start:
  %from.double = call ptr @slot.ptr(ptr %d, i64 S_float_from_double)
  br label %box.cond

box.cond:
  %b = phi i64 [0, %box.start], [%b.next, %box.ok]
  %box.more = icmp ult i64 %b, %n.scalars
  br i1 %box.more, label %box.body, label %result

box.body:
  %brec = call ptr @record(ptr %scalar.records, i64 %b, i64 SCALAR_RECORD)
  %bindex = call i64 @slot.i64(ptr %brec, i64 0)
  %bvalue.at = getelementptr inbounds double, ptr %values, i64 %bindex
  %bvalue = load double, ptr %bvalue.at
  %boxed = call ptr %from.double(double %bvalue)
  %box.failed = icmp eq ptr %boxed, null
  br i1 %box.failed, label %fail, label %box.ok

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
  %packed.items = getelementptr inbounds i8, ptr %packed, i64 TUPLE_ITEMS
  br i1 %pack.failed, label %fail, label %pack.cond

pack.cond:                                     ; each result moves into the tuple once
  %p = phi i64 [0, %tuple.new], [%p.next, %pack.body]
  %pack.more = icmp ult i64 %p, %n.pick
  br i1 %pack.more, label %pack.body, label %return.tuple

pack.body:
  %krec = call ptr @record(ptr %top.records, i64 %p, i64 TOP_RECORD)
  %pick = call i64 @slot.i64(ptr %krec, i64 0)
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

fail:                                          ; an allocation failed: its exception is set
  call void @release(ptr %results, ptr %decref)
  ret ptr null
}

; Drop the references %results holds (what the entry made, by result index; null: none).
define internal void @release(ptr %results, ptr %decref) {
entry:
  br label %cond

cond:
  %e = phi i64 [0, %entry], [%e.next, %next]
  %more = icmp ult i64 %e, MAX_RESULTS
  br i1 %more, label %body, label %done

body:
  %held.at = getelementptr inbounds ptr, ptr %results, i64 %e
  %held = load ptr, ptr %held.at
  %held.null = icmp eq ptr %held, null
  br i1 %held.null, label %next, label %drop

drop:
  call void %decref(ptr %held)
  br label %next

next:
  %e.next = add i64 %e, 1
  br label %cond

done:
  ret void
}

declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

; Whether %object is an ndarray (exactly) of this descr (the object itself), nd and dims whose
; flags include %flags: an argument's check and an out= array's.
define internal i1 @array.is(ptr %object, ptr %ndarray, ptr %descr, i64 %nd, ptr %dims,
                             i32 %flags) alwaysinline {
entry:
  %type = call ptr @field.ptr(ptr %object, i64 OB_TYPE)
  %is.ndarray = icmp eq ptr %type, %ndarray
  br i1 %is.ndarray, label %fields, label %no

fields:                                        ; an ndarray's fields are read only once it is one
  %got.descr = call ptr @field.ptr(ptr %object, i64 ARRAY_DESCR)
  %descr.ok = icmp eq ptr %got.descr, %descr
  %nd.at = getelementptr inbounds i8, ptr %object, i64 ARRAY_ND
  %nd32 = load i32, ptr %nd.at
  %got.nd = sext i32 %nd32 to i64
  %nd.ok = icmp eq i64 %got.nd, %nd
  %flags.at = getelementptr inbounds i8, ptr %object, i64 ARRAY_FLAGS
  %got.flags = load i32, ptr %flags.at
  %has.flags = and i32 %got.flags, %flags
  %flags.ok = icmp eq i32 %has.flags, %flags
  %ok.1 = and i1 %descr.ok, %nd.ok
  %ok = and i1 %ok.1, %flags.ok
  br i1 %ok, label %dims.start, label %no

dims.start:
  %got.dims = call ptr @field.ptr(ptr %object, i64 ARRAY_DIMS)
  br label %dims.cond

dims.cond:
  %j = phi i64 [0, %dims.start], [%j.next, %dims.body]
  %dims.more = icmp ult i64 %j, %nd
  br i1 %dims.more, label %dims.body, label %yes

dims.body:
  %dim.at = getelementptr inbounds i64, ptr %got.dims, i64 %j
  %dim = load i64, ptr %dim.at
  %want.dim.at = getelementptr inbounds i64, ptr %dims, i64 %j
  %want.dim = load i64, ptr %want.dim.at
  %j.next = add i64 %j, 1
  %dim.ok = icmp eq i64 %dim, %want.dim
  br i1 %dim.ok, label %dims.cond, label %no

yes:
  ret i1 true

no:
  ret i1 false
}
"""


# The k-th record of `size` slots from `base` (the descriptor's argument, output, ... records).
_RECORD = """
define internal ptr @record(ptr %base, i64 %k, i64 %size) alwaysinline {
  %index = mul i64 %k, %size
  %at = getelementptr inbounds i64, ptr %base, i64 %index
  ret ptr %at
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
    return _CONSTANT.sub(lambda m: str(constants[m.group(0)]), _IR) + _RECORD + _ACCESSORS


_CONSTANT = re.compile(r"\bS_[a-z_]+\b|\b[A-Z][A-Z_]+\b")
