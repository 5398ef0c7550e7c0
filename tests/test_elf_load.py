"""codegen.elf_load, jit's own loader of x86-64 ELF objects, and the disk-hit path it opens:

* programs of every kind (W1/W2/W3, ADBench GMM, the matmul library, float32 maths, the
  far-argument sin/cos library, loops, while, the inv/solve guards, vmap, hessian) give the
  same bits loaded by it (compiled, and from the disk) as linked by LLVM's MCJIT engine, and
  a fresh process with the machine code on disk imports no llvmlite.binding and makes no
  engine (LLVM's view of the host CPU comes from the disk too, and is LLVM's own);
* what it declines (an unknown relocation, a truncated or foreign object, writable data, an
  address out of a field's range) raises Declined, and jit links such an object with the
  engine; symbols resolve across the two both ways;
* the small code model's relocations (PC32, PLT32 through a stub to libm, GOTPCRELX), and
  two threads loading at once.
"""
import ctypes
import json
import math
import os
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

from symgrad.codegen import elf_load, jit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
x86_64_linux = pytest.mark.skipif(not (sys.platform.startswith("linux")
                                       and os.uname().machine == "x86_64"),
                                  reason="the loader handles x86-64 Linux objects only")
pytestmark = x86_64_linux


def programs(mode: str, env: dict) -> dict:
    out = subprocess.run([sys.executable, os.path.join(HERE, "elf_load_programs.py"), mode],
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def environment(cache, **extra) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, SYMGRAD_CACHE_DIR=str(cache),
               XDG_CONFIG_HOME=str(cache) + "-config")
    env.pop("SYMGRAD_NO_CACHE", None)
    env.update(extra)
    return env


def test_every_kind_of_program_gives_the_engines_bits_and_a_disk_hit_needs_no_llvm(tmp_path):
    cache = tmp_path / "cache"
    compiled = programs("elf", environment(cache))
    from_disk = programs("elf", environment(cache))
    engine = programs("mcjit", environment(cache, SYMGRAD_NO_CACHE="1"))
    assert compiled["results"] == engine["results"] == from_disk["results"]
    assert compiled["stats"]["compiles"] > 0 and compiled["stats"]["loader_declines"] == 0
    assert not compiled["engine"] and engine["engine"]
    assert from_disk["stats"]["compiles"] == 0 and from_disk["stats"]["disk_hits"] > 0
    assert not from_disk["binding"] and not from_disk["engine"]
    for name, (_, total) in engine["results"].items():
        assert math.isfinite(total), name


HOST = r'''
import json, sys
from symgrad.codegen import jit
st = jit.target()
cached = [st["triple"], st["cpu"], st["features"], "llvmlite.binding" in sys.modules]
import llvmlite.binding as llvm
print(json.dumps([cached, [llvm.get_process_triple(), llvm.get_host_cpu_name(),
                           llvm.get_host_cpu_features().flatten()], jit.STATS]))
'''


def host_view(env):
    out = subprocess.run([sys.executable, "-c", HOST], env=env, capture_output=True, text=True,
                         timeout=300, check=True)
    return json.loads(out.stdout)


def host_entries(cache):
    return [os.path.join(r, f) for r, _, fs in os.walk(cache) for f in fs if f.endswith(".host")]


def test_the_host_cpu_from_the_disk_is_llvms_own_and_a_bad_entry_is_asked_again(tmp_path):
    env = environment(tmp_path / "cache")
    first, llvm_view, _ = host_view(env)
    assert first[3] and first[:3] == llvm_view      # no entry yet: asked of LLVM
    (entry,) = host_entries(tmp_path / "cache")
    cached, llvm_view, _ = host_view(env)
    assert not cached[3] and cached[:3] == llvm_view
    with open(entry, "r+b") as f:                   # an entry this user's secret did not sign
        data = bytearray(f.read())
        data[-3] ^= 1
        f.seek(0)
        f.write(data)
    again, llvm_view, stats = host_view(env)
    assert again[3] and again[:3] == llvm_view and stats["disk_rejects"] == 1


def test_the_cpu_identity_is_read_and_stable():
    from symgrad.codegen import host_cpu
    words = host_cpu._read()
    assert words is not None and words == host_cpu._read() == host_cpu.identity()
    assert words.startswith("00000000" "00000000")     # leaf 0, subleaf 0 first


# ----------------------------------------------------------------------------------------------
# Objects the loader declines, and the engine links instead

CONSTANT = '''
define double @"sg_scaled"(double %x) {
  %y = fmul double %x, 0x400921FB54442D18
  %z = fadd double %y, 0x3FF6A09E667F3BCD
  ret double %z
}
'''


def an_object() -> bytes:
    (obj,) = jit.compile_objects(CONSTANT)
    return obj


def relocation_entries(obj: bytes):
    parsed = elf_load._Object(obj)
    return [(parsed.sections[r][4] + 24 * k, info & 0xffffffff) for r in parsed.relocations
            for k, (_, info, _) in enumerate(elf_load._entries(parsed, r))]


def test_a_loaded_object_runs():
    defined = elf_load.load([an_object()], lambda name: None)
    fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(defined["sg_scaled"])
    assert fn(2.0) == 2.0 * math.pi + math.sqrt(2)


def test_an_unknown_relocation_type_declines():
    obj = bytearray(an_object())
    entries = relocation_entries(bytes(obj))
    assert entries and {kind for _, kind in entries} <= set(elf_load._RELOCATIONS)
    at, _ = entries[0]
    struct.pack_into("<I", obj, at + 8, 37)        # R_X86_64_TLSDESC: not ours to apply
    with pytest.raises(elf_load.Declined, match="relocation type 37"):
        elf_load.load([bytes(obj)], lambda name: None)


def test_truncated_and_foreign_objects_decline():
    obj = an_object()
    for n in range(0, len(obj), 7):
        with pytest.raises(elf_load.Declined):
            elf_load.load([obj[:n]], lambda name: None)
    for offset, value in ((4, 1), (5, 2), (16, 2), (18, 3)):    # ELF32, big-endian, ET_EXEC, i386
        foreign = bytearray(obj)
        foreign[offset] = value
        with pytest.raises(elf_load.Declined):
            elf_load.load([bytes(foreign)], lambda name: None)


def test_corrupted_headers_symbols_and_relocations_load_or_decline():
    """Whatever the bytes outside the code say, the loader either loads (nothing is called
    here) or declines: never another exception, never a write outside its image."""
    obj = an_object()
    parsed = elf_load._Object(obj)
    shoff = struct.unpack_from("<Q", obj, 40)[0]
    regions = [(0, 64), (shoff, len(obj) - shoff)] + [
        (parsed.sections[k][4], parsed.sections[k][5])
        for k in [parsed.symtab] + parsed.relocations]
    rng = np.random.default_rng(7)
    loaded = 0
    for _ in range(400):
        bad = bytearray(obj)
        start, size = regions[rng.integers(len(regions))]
        for _ in range(rng.integers(1, 4)):
            bad[start + rng.integers(size)] = rng.integers(256)
        try:
            elf_load.load([bytes(bad)], lambda name: None)
            loaded += 1
        except elf_load.Declined:
            pass
    assert loaded < 400          # (most corruptions decline; some change nothing that matters)


def test_an_unresolved_symbol_declines():
    text = 'declare double @"sgtest_nowhere"(double)\n' + CONSTANT.replace(
        "ret double %z", '%w = call double @"sgtest_nowhere"(double %z)\n  ret double %w')
    (obj,) = jit.compile_objects(text)
    with pytest.raises(elf_load.Declined, match="sgtest_nowhere"):
        elf_load.load([obj], lambda name: None)


COUNTER = '''
@count = internal global i64 0
define i64 @"sg_bump"(i64 %by) {
  %old = load i64, ptr @count
  %new = add i64 %old, %by
  store i64 %new, ptr @count
  ret i64 %new
}
'''


def int_function(address):
    return ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(address)


def test_writable_data_declines_and_the_engine_links_it():
    (obj,) = jit.compile_objects(COUNTER)
    with pytest.raises(elf_load.Declined, match="flags"):
        elf_load.load([obj], lambda name: None)
    declines = jit.STATS["loader_declines"]
    _, addrs = jit.load(COUNTER.replace("sg_bump", "sg_bump_test"), ["sg_bump_test"])
    bump = int_function(addrs["sg_bump_test"])
    assert jit.STATS["loader_declines"] == declines + 1
    assert (bump(2), bump(3)) == (2, 5)


def test_symbols_resolve_from_the_loader_to_the_engine_and_back():
    # A: writable data, so the engine links it; B (loaded by elf_load) calls A's function.
    a = COUNTER.replace('@"sg_bump"', '@"sgtest_elf_counter"') + '''
define i64 @"sg_a"(i64 %x) {
  %r = call i64 @"sgtest_elf_counter"(i64 %x)
  ret i64 %r
}
'''
    b = '''
declare i64 @"sgtest_elf_counter"(i64)
define i64 @"sg_b"(i64 %x) {
  %r = call i64 @"sgtest_elf_counter"(i64 %x)
  %s = mul i64 %r, 10
  ret i64 %s
}
'''
    # C: loaded by elf_load; D (writable data: the engine) calls C's function.
    c = '''
define i64 @"sgtest_elf_triple"(i64 %x) {
  %r = mul i64 %x, 3
  ret i64 %r
}
define i64 @"sg_c"(i64 %x) {
  %r = call i64 @"sgtest_elf_triple"(i64 %x)
  ret i64 %r
}
'''
    d = '''
@"sgtest_elf_last" = global i64 0
declare i64 @"sgtest_elf_triple"(i64)
define i64 @"sg_d"(i64 %x) {
  %r = call i64 @"sgtest_elf_triple"(i64 %x)
  store i64 %r, ptr @"sgtest_elf_last"
  %s = add i64 %r, 1
  ret i64 %s
}
'''
    declines = jit.STATS["loader_declines"]
    fa = int_function(jit.load(a, ["sg_a"])[1]["sg_a"])
    fb = int_function(jit.load(b, ["sg_b"])[1]["sg_b"])
    fc = int_function(jit.load(c, ["sg_c"])[1]["sg_c"])
    fd = int_function(jit.load(d, ["sg_d"])[1]["sg_d"])
    assert jit.STATS["loader_declines"] == declines + 2      # A and D
    assert (fa(1), fb(2), fa(0)) == (1, 30, 3)               # one counter, shared
    assert (fc(4), fd(5)) == (12, 16)


# ----------------------------------------------------------------------------------------------
# The small code model: PC-relative constants, calls through a stub, GOT slots

EXTERNAL = '''
declare double @"sgtest_ext_exp"(double)
@"sgtest_ext_data" = external global double
define double @"f"(double %x) {
  %e = call double @"sgtest_ext_exp"(double %x)
  %d = load double, ptr @"sgtest_ext_data"
  %s = fadd double %e, %d
  %t = fmul double %s, 0x3FF3C083126E978D
  ret double %t
}
'''


def small_model_object(reloc: str, text: str = EXTERNAL) -> bytes:
    llvm = jit._binding()
    st = jit._init()
    tm = llvm.Target.from_triple(st["triple"]).create_target_machine(
        cpu=st["cpu"], features=st["features"], opt=2, reloc=reloc, codemodel="small")
    mod = llvm.parse_assembly(text)
    mod.triple = st["triple"]
    return tm.emit_object(mod)


def test_the_small_code_models_relocations_stubs_and_got_slots():
    data = ctypes.c_double(0.5)
    libm_exp = ctypes.cast(ctypes.CDLL("libm.so.6").exp, ctypes.c_void_p).value
    names = {"sgtest_ext_exp": libm_exp, "sgtest_ext_data": ctypes.addressof(data)}
    obj = small_model_object("pic")
    kinds = {elf_load._RELOCATIONS[kind][0] for _, kind in relocation_entries(obj)}
    assert {"L+A-P", "G+A-P"} <= kinds          # a call to libm, the data through the GOT
    fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(
        elf_load.load([obj], names.get)["f"])
    for x in (0.3, -2.0, 10.0):
        assert fn(x) == (math.exp(x) + 0.5) * 1.2345
    data.value = -1.0
    assert fn(0.3) == (math.exp(0.3) - 1.0) * 1.2345


def test_an_address_out_of_a_fields_range_declines():
    # dso_local data, small code model: addressed rip-relative, as if within 2 GiB of the
    # code; this address is not
    obj = small_model_object("static", EXTERNAL.replace("external global",
                                                        "external dso_local global"))
    assert "S+A-P" in {elf_load._RELOCATIONS[kind][0] for _, kind in relocation_entries(obj)}
    names = {"sgtest_ext_exp": 1 << 40, "sgtest_ext_data": 1 << 45}
    with pytest.raises(elf_load.Declined, match="out of range"):
        elf_load.load([obj], names.get)


# ----------------------------------------------------------------------------------------------
# Threads

def test_two_threads_loading_at_once():
    obj = an_object()
    texts = [CONSTANT.replace("sg_scaled", f"sg_thread{k}").replace(
        "0x3FF6A09E667F3BCD", f"{float(k):e}") for k in range(2)]
    failures, results = [], {}

    def work(k):
        try:
            for _ in range(20):
                defined = elf_load.load([obj], lambda name: None)
                fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(defined["sg_scaled"])
                assert fn(1.0) == math.pi + math.sqrt(2)
            _, addrs = jit.load(texts[k], [f"sg_thread{k}"])
            results[k] = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(
                addrs[f"sg_thread{k}"])(1.0)
        except BaseException as e:     # re-raised on the test's thread below
            failures.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    assert results == {0: math.pi, 1: math.pi + 1.0}
