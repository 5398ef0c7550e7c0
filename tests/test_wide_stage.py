"""Large elementwise stages are emitted as SIMD code directly (codegen.wide_stage) and compiled
without LLVM's IR pipeline (jit.is_prevectorised; module_split keeps them apart from code that
needs the pipeline). Results: those of the loop-vectorised kernel the stage would otherwise be,
and of the reference back end; every length (a multiple of the SIMD width or not),
2-d loops with broadcast operands, and ranges split across threads (a stage of at most
kernel.LIGHT_MAX_ITERATIONS is compiled light instead)."""
import re
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import jit, llvm, module_split, schedule, wide_growth, wide_stage
from symgrad.codegen.mathlib import MATH_NAMES

STATEMENTS = 60
OPS = ("np.sin({a}) * 0.9 + {b} * 0.1", "{a} * {b} * 0.5 + 0.25",
       "np.tanh({a}) - {b} * 0.3", "{a} + np.exp(-{b} * {b}) * 0.2",
       "np.maximum({a}, {b}) * 0.7 + np.sqrt({b} * {b} + 1.0) * 0.1",
       "np.where({a} > {b}, {a} * 0.5, {b} * 0.25) + np.log1p({a} * {a})",
       "np.abs({a}) * 0.6 - {b} ** 2 * 0.05 + 1.0 / (2.0 + {b} * {b})")

pytestmark = pytest.mark.skipif(wide_stage.lanes(jit.target()["math"]) < 2,
                                reason="the host has no SIMD math variants")


def _source(n: int, broadcast: bool) -> str:
    """n statements of the benchmark's shape (each reads the previous value and an earlier
    one); with ``broadcast``, every statement also adds ``y`` seen along the rows."""
    head = "def line(x, y):" if broadcast else "def line(x):"
    lines = ["import numpy as np", "", "", head, "    v0 = x"]
    state = 12345
    for i in range(1, n + 1):
        state = (state * 1103515245 + 12345) % 2 ** 31
        j = state % i
        expr = OPS[i % len(OPS)].format(a=f"v{i - 1}", b=f"v{j}")
        lines.append(f"    v{i} = " + expr + (" + y[:, None] * 0.01" if broadcast else ""))
    lines.append(f"    return np.sum(v{n})")
    return "\n".join(lines) + "\n"


def _function(tmp_path, broadcast=False, statements=STATEMENTS):
    path = tmp_path / f"wide_line_{int(broadcast)}_{statements}.py"
    path.write_text(_source(statements, broadcast))
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["line"]


def _wide_bodies(text: str) -> list[str]:
    return re.findall(r'^define [^\n]*\.wide"\(.*?^}', text, re.S | re.M)


def _results(fn, args, **kwargs):
    f = sg.differentiate(fn, wrt=0, **kwargs)
    return f(*args), f.grad(*args), f


@pytest.mark.parametrize("size", [17, 24, 37, 1000])   # (up to 16: light stages)
def test_long_vector_code_is_wide_and_right(tmp_path, monkeypatch, size):
    fn = _function(tmp_path)
    x = np.random.default_rng(1).uniform(-1, 1, size)
    value, grad, f = _results(fn, (x,))
    bodies = _wide_bodies(f.grad.llvm_ir(x))
    assert bodies, "the gradient's long stages should be emitted wide"
    for body in bodies:   # vector values, masked memory, no scalar remainder loop
        assert "x double>" in body and "llvm.masked.load" in body and "llvm.masked.store" in body
        assert body.count(" = phi ") == 1
    monkeypatch.setattr(wide_stage, "WIDE_MIN_OPS", 10 ** 9)   # the loop vectoriser's kernel
    ref_value, ref_grad, g = _results(fn, (x,))
    assert not _wide_bodies(g.grad.llvm_ir(x))
    eps = np.finfo(np.float64).eps   # a SIMD math function may differ from its scalar self
    np.testing.assert_allclose(value, ref_value, rtol=64 * eps)
    np.testing.assert_allclose(grad, ref_grad, rtol=64 * eps, atol=64 * eps)
    py_value, py_grad, _ = _results(fn, (x,), target="python")
    np.testing.assert_allclose(value, py_value, rtol=1e-11)
    np.testing.assert_allclose(grad, py_grad, rtol=1e-11, atol=1e-11)


def test_broadcast_operands_and_outer_loops(tmp_path):
    """A (5, 13) loop reading y along its rows (a stride-0 inner axis: one load, splat)."""
    fn = _function(tmp_path, broadcast=True)
    rng = np.random.default_rng(2)
    x, y = rng.uniform(-1, 1, (5, 13)), rng.uniform(-1, 1, 5)
    value, grad, f = _results(fn, (x, y))
    assert _wide_bodies(f.grad.llvm_ir(x, y))
    py_value, py_grad, _ = _results(fn, (x, y), target="python")
    np.testing.assert_allclose(value, py_value, rtol=1e-11)
    np.testing.assert_allclose(grad, py_grad, rtol=1e-11, atol=1e-11)


def test_ranges_split_across_threads(tmp_path, monkeypatch):
    """Each thread's range of the outer axis ends in its own masked step."""
    monkeypatch.setattr(llvm, "PARALLEL_MIN", 16)
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", "3")
    fn = _function(tmp_path)
    x = np.random.default_rng(4).uniform(-1, 1, 1001)
    value, grad, _ = _results(fn, (x,))
    py_value, py_grad, _ = _results(fn, (x,), target="python")
    np.testing.assert_allclose(value, py_value, rtol=1e-11)
    np.testing.assert_allclose(grad, py_grad, rtol=1e-11, atol=1e-11)


def test_short_stages_and_scalar_code_are_not_wide(tmp_path):
    """Below WIDE_MIN_OPS (every stage of W1-W3) the loop vectoriser stays; scalar code stays
    light (jit.is_light)."""
    def small(x):
        return np.sum(np.sin(x) * np.exp(-x * x))
    x = np.random.default_rng(5).uniform(-1, 1, 100)
    f = sg.differentiate(small)
    assert not _wide_bodies(f.grad.llvm_ir(x))
    assert not _wide_bodies(sg.differentiate(_function(tmp_path)).grad.llvm_ir(0.3))


def test_is_prevectorised_reads_the_text():
    wide = 'define internal void @"s0.wide"(ptr %"p") nounwind\n{\nret void\n}\n'
    wrapper = 'define void @"s0"(ptr %"p") noinline nounwind\n{\nret void\n}\n'
    light = 'define internal void @"s1.body"(ptr %"p") noinline nounwind optnone\n{\nret void\n}\n'
    cooked = 'define internal void @"s2.body"(ptr %"p") nounwind\n{\nret void\n}\n'
    assert jit.is_prevectorised(wide + wrapper + light)
    assert not jit.is_prevectorised(wrapper + light)
    assert not jit.is_prevectorised(wide + cooked)
    # a body several stages share is exported (codegen.kernel._shared_body): still cooked
    shared = 'define void @"s3.body"(ptr %"p") noinline nounwind\n{\nret void\n}\n'
    assert not jit.is_prevectorised(wide + wrapper + shared)
    (_, functions) = module_split._parse(wide + wrapper + shared + light)
    assert [f.cooked for f in functions] == [False, False, True, False]


def test_split_keeps_wide_and_cooked_stages_apart(tmp_path, monkeypatch):
    """The value's module has wide stages and a loop-vectorised one (the sum): no part mixes
    the two, so every part with a wide stage skips the pipeline; the parts compile to the
    reference's results."""
    monkeypatch.setattr(module_split, "PART_COST", 4000)
    fn = _function(tmp_path)
    x = np.random.default_rng(6).uniform(-1, 1, 50)
    parts = module_split.split(sg.differentiate(fn).llvm_ir(x))
    wide = [p for p in parts if '.wide"(' in p]
    assert wide and len(wide) < len(parts)
    assert all(jit.is_prevectorised(p) for p in wide)
    assert not any(jit.is_prevectorised(p) for p in parts if p not in wide)
    monkeypatch.setattr(jit, "COMPILE_THREADS", 2)
    value, grad, _ = _results(fn, (x,))
    py_value, py_grad, _ = _results(fn, (x,), target="python")
    np.testing.assert_allclose(value, py_value, rtol=1e-11)
    np.testing.assert_allclose(grad, py_grad, rtol=1e-11, atol=1e-11)


def test_wide_loops_grow_and_others_stay_bounded(tmp_path):
    """A wide loop takes up to wide_stage.WIDE_STAGE_OPS ops; a sink it cannot emit (the
    value's sum) reads the value in a loop of its own instead of turning a grown loop into
    one for the loop vectoriser."""
    fn = _function(tmp_path, statements=200)
    x = np.random.default_rng(7).uniform(-1, 1, 1000)
    f = sg.differentiate(fn)
    text = f.llvm_ir(x)
    wide = _wide_bodies(text)
    others = re.findall(r'^define [^\n]*\.body"\(.*?^}', text, re.S | re.M)
    op = r'= (?:f(?:add|sub|mul|div|neg|cmp) |select |call <\d+ x double> @"(?!llvm\.masked))'
    ops = [len(re.findall(op, w)) for w in wide]
    assert max(ops) > schedule.STAGE_OPS
    assert others and all(len(b.split("\n")) < 8 * schedule.STAGE_OPS for b in others)
    py_value = sg.differentiate(fn, target="python")(x)
    np.testing.assert_allclose(f(x), py_value, rtol=1e-11)


def _recomputes(monkeypatch, fn, x):
    """The gradient's schedule, and per recomputation (Schedule._recompute): the loop, whether
    it was long then (STAGE_OPS ops or grown), its size, and the plan's operands the loop
    neither computes nor read before (new memory reads)."""
    seen = []
    recompute = schedule.Schedule._recompute

    def recording(s, plan, k):
        st, planned = s.stages[k], set(plan)
        new = {y for c in plan for y in c.inputs if y.op not in schedule.LEAF_INLINE
               and y not in planned and not s._in_stage(y, k) and y not in s._operands_of(k)}
        long = k in s.growth.grown or len(st.ssa) >= schedule.STAGE_OPS
        seen.append((k, long, st.size, new))
        return recompute(s, plan, k)

    monkeypatch.setattr(schedule.Schedule, "_recompute", recording)
    sched = schedule.Schedule(sg.differentiate(fn).grad._inspect_entry(x).graph)
    monkeypatch.setattr(schedule.Schedule, "_recompute", recompute)
    return sched, seen


def test_long_small_loops_recompute_only_from_what_they_read(tmp_path, monkeypatch):
    """A long loop under fusion.COSTLY_MIN elements recomputes a value only from values it
    already has: a recomputed chain that needs loads of its own costs more instructions than
    loading its value (an L1 hit), and in straight-line code such chains grew with the square
    of the program. Fewer recomputed nodes and math calls than without the rule
    (COSTLY_MIN 0 in wide_growth), the same bits (the elementwise loops are wide: one SIMD
    width), the reference back end's values."""
    monkeypatch.setattr(wide_stage, "WIDE_STAGE_OPS", 512)   # (several loops of 300 statements)
    fn = _function(tmp_path, statements=300)
    x = np.random.default_rng(9).uniform(-1, 1, 1000)
    sched, seen = _recomputes(monkeypatch, fn, x)
    long_small = [new for k, long, size, new in seen if long and size < wide_growth.COSTLY_MIN]
    assert long_small and not any(long_small)
    assert any(new for k, long, size, new in seen if not long)   # (short loops: as before)
    value, grad, f = _results(fn, (x,))
    assert len(_wide_bodies(f.grad.llvm_ir(x))) > 2

    monkeypatch.setattr(wide_growth, "COSTLY_MIN", 0)
    before, _ = _recomputes(monkeypatch, fn, x)
    old_value, old_grad, old = _results(fn, (x,))

    def count(s):   # recomputed nodes, math calls
        ssa = [n for st in s.stages for n in st.ssa]
        return sum(map(len, s.clones.values())), sum(n.op in MATH_NAMES for n in ssa)
    (clones, calls), (old_clones, old_calls) = count(sched), count(before)
    assert clones < old_clones and calls < old_calls
    assert np.asarray(value).tobytes() == np.asarray(old_value).tobytes()
    assert np.asarray(grad).tobytes() == np.asarray(old_grad).tobytes()
    py_value, py_grad, _ = _results(fn, (x,), target="python")
    np.testing.assert_allclose(value, py_value, rtol=1e-11)
    np.testing.assert_allclose(grad, py_grad, rtol=1e-11, atol=1e-11)


def test_bool_loads_and_stores(tmp_path):
    """A bool argument read and a bool result written by a wide loop (one byte each)."""
    lines = ["import numpy as np", "", "", "def masked(x, m):", "    v0 = x"]
    for i in range(1, 40):
        a = f"v{i - 1}"
        lines.append(f"    v{i} = np.where(m, {a} * 0.9 + 0.1, np.sin({a}) * 0.5) - v0 * 0.01")
    lines.append("    return v39, v39 > v0")
    path = tmp_path / "masked.py"
    path.write_text("\n".join(lines) + "\n")
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    fn = namespace["masked"]
    rng = np.random.default_rng(8)
    x, m = rng.uniform(-1, 1, 203), rng.uniform(0, 1, 203) < 0.5
    f = sg.differentiate(fn)
    text = f.llvm_ir(x, m)
    assert _wide_bodies(text) and re.search(r"llvm\.masked\.load\.v\d+i8", text) \
        and re.search(r"llvm\.masked\.store\.v\d+i8", text)
    values, above = f(x, m)
    ref_values, ref_above = sg.differentiate(fn, target="python")(x, m)
    assert above.dtype == np.bool_
    np.testing.assert_allclose(values, ref_values, rtol=1e-12)
    np.testing.assert_array_equal(above, ref_above)


_LOCAL = re.compile(r'%"[^"]*"|%[-a-zA-Z$._0-9]+')


def _normalised(body: str) -> str:
    """A function's text with its local names numbered in order of appearance, spaces
    collapsed (llvmlite and codegen.text_builder name values differently)."""
    names: dict = {}
    body = _LOCAL.sub(lambda m: names.setdefault(m.group(0), f"%v{len(names)}"), body)
    return re.sub(r" +", " ", body)


ALL_OPS = OPS + ("np.minimum({a}, {b}) * 0.5 + np.sign({b}) * 0.1 - np.cos({a}) * 0.2",
                 "np.where(({a} < {b}) & ({b} != 0.5) | ({a} >= 0.9), {a}, -{b}) * 0.8"
                 " + {a} ** 3 * 0.01 + 1.0 / {b} * 1e-3")


def test_text_body_is_the_llvmlite_body(tmp_path, monkeypatch):
    """codegen.text_builder writes a wide loop's body as llvmlite's IRBuilder would (the
    lowering rules run on it unchanged): the same instructions, types and order, names
    aside, for every op the statements use (arithmetic, comparisons, logical ops, where,
    maximum/minimum, sign, abs, pow spellings, SIMD maths), 1-d and 2-d with broadcast rows,
    the value's module and the gradient's; the 1-d unit-stride loads and stores written
    directly (wide_stage._UnitText) included."""
    monkeypatch.setattr(sys.modules[__name__], "OPS", ALL_OPS)
    unit = {"load": 0, "store": 0}   # (1-d unit-stride accesses: wide_stage._UnitText's lines)
    for what in unit:
        original = getattr(wide_stage._UnitText, what)
        monkeypatch.setattr(wide_stage._UnitText, what, lambda self, *a, _f=original, _w=what:
                            unit.__setitem__(_w, unit[_w] + 1) or _f(self, *a))
    cases = [(_function(tmp_path, statements=80), (np.linspace(-1, 1, 300),)),
             (_function(tmp_path, broadcast=True), (np.ones((5, 13)), np.ones(5)))]
    seen = ""
    for fn, args in cases:
        bodies = {}
        for text_body in (True, False):
            monkeypatch.setattr(wide_stage, "TEXT_BODY", text_body)
            f = sg.differentiate(fn, wrt=0)
            bodies[text_body] = [w for ir_text in (f.llvm_ir(*args), f.grad.llvm_ir(*args))
                                 for w in _wide_bodies(ir_text)]
        assert bodies[True] and "%_" in bodies[True][0] and "%_" not in bodies[False][0]
        assert [_normalised(w) for w in bodies[True]] == [_normalised(w) for w in bodies[False]]
        seen += "".join(bodies[True])
    for instruction in ("fadd", "fsub", "fmul", "fdiv", "fneg", "fcmp olt", "fcmp une",
                        "fcmp oge", "select", "and <", "or <", "@\"llvm.maximum", "@\"llvm.minimum",
                        "@\"llvm.fabs", "@\"llvm.sqrt", "@\"_ZGV", "shufflevector",
                        "llvm.masked.load", "llvm.masked.store"):
        assert instruction in seen, instruction
    assert unit["load"] and unit["store"]


def test_every_store_follows_its_value(tmp_path):
    """A wide step stores each value right after computing it (no SIMD maths call between
    the two), so the values a stage writes are not live across the calls after them."""
    fn = _function(tmp_path, statements=200)
    x = np.random.default_rng(9).uniform(-1, 1, 500)
    text = sg.differentiate(fn).grad.llvm_ir(x)
    bodies = _wide_bodies(text)
    assert bodies
    checked = 0
    for body in bodies:
        lines = body.split("\n")
        defined = {m.group(1): i for i, line in enumerate(lines)
                   if (m := re.match(r'\s*(%\S+) = ', line))}
        for i, line in enumerate(lines):
            m = re.search(r'@"llvm\.masked\.store[^(]*\(<\d+ x double> (%[^,]+),', line)
            if m is None or m.group(1) not in defined:
                continue
            start = defined[m.group(1)]
            assert start < i and not any('@"_ZGV' in between for between in lines[start + 1:i])
            checked += 1
    assert checked > 10


def test_code_generator_level_changes_no_bits(tmp_path, monkeypatch):
    """A prevectorised module is compiled by the -O1 code generator (jit.codegen_level): the
    IR fixes every operation and its order, so the results are -O3's to the bit."""
    fn = _function(tmp_path, statements=120)
    x = np.random.default_rng(10).uniform(-1, 1, 203)
    text = sg.differentiate(fn).grad.llvm_ir(x)
    parts = module_split.split(text)
    assert any(jit.is_prevectorised(p) and jit.codegen_level(p) == 1 for p in parts)
    assert jit.machine_for(next(p for p in parts if jit.is_prevectorised(p))) \
        is jit.target()["tm_wide"]
    value, grad, _ = _results(fn, (x,))
    key_of = jit.key_of
    monkeypatch.setattr(jit, "codegen_level", lambda t: 0 if jit.is_light(t) else 3)
    monkeypatch.setattr(jit, "key_of", lambda t: key_of(t + "\n; -O3\n"))   # compiled anew
    ref_value, ref_grad, _ = _results(fn, (x,))
    assert np.float64(value).tobytes() == np.float64(ref_value).tobytes()
    assert grad.tobytes() == ref_grad.tobytes()


def test_codegen_level_reads_the_text():
    wide = 'define internal void @"s0.wide"(ptr %"p") nounwind\n{\nret void\n}\n'
    light = 'define internal void @"s1.body"(ptr %"p") noinline nounwind optnone\n{\nret void\n}\n'
    cooked = 'define internal void @"s2.body"(ptr %"p") nounwind\n{\nret void\n}\n'
    assert jit.codegen_level(wide + light) == 1
    assert jit.codegen_level(light) == 0
    assert jit.codegen_level(wide + cooked) == 3


def test_addresses_are_read_where_used(tmp_path):
    """A wide step reads each buffer's address from the stage's table right before the load
    or store that uses it, not once in the function's entry (hundreds of values live across
    the loop made register allocation superlinear in the stage's streams)."""
    fn = _function(tmp_path, broadcast=True)
    rng = np.random.default_rng(12)
    x, y = rng.uniform(-1, 1, (5, 13)), rng.uniform(-1, 1, 5)
    for body in _wide_bodies(sg.differentiate(fn).grad.llvm_ir(x, y)):
        entry = body.split("\nentry:\n", 1)[1].split("\nloop0.head:\n", 1)[0]
        assert "= load ptr" not in entry
        step = body.split("\nloop1.body:\n", 1)[1]
        masked = re.findall(r'@"llvm\.masked\.(?:load|store)[^(]*\((?:<[^>]+> %\S+, )?ptr (%[^,]+)',
                            step)
        assert masked
        for base in masked:
            assert re.search(rf"^\s*{re.escape(base)} = getelementptr", step, re.M)
        assert step.count("= load ptr") >= len(set(masked))


def test_loop_search_skips_only_loops_that_take_nothing(tmp_path, monkeypatch):
    """Schedule.loop_stage asks only the loops Growth.loops lists (a loop leaves the list
    when it can take no more work): it finds the loop a scan of every later stage finds, and
    asks far fewer of them in long code."""
    original = schedule.Schedule.loop_stage
    asked = {"listed": 0, "all": 0}

    def checked(self, shape, lo, joining=None):
        scan = next((st.index for st in self.stages[lo:] if st.kind == "loop"
                     and st.shape == shape and self.growth.takes(st.index, joining)), None)
        asked["listed"] += len(list(self.growth.loops(shape, lo)))
        asked["all"] += len(self.stages) - lo
        k = original(self, shape, lo, joining)
        assert k == (len(self.stages) - 1 if scan is None else scan)
        return k

    monkeypatch.setattr(schedule.Schedule, "loop_stage", checked)
    fn = _function(tmp_path, statements=400)
    x = np.random.default_rng(13).uniform(-1, 1, 300)
    f = sg.differentiate(fn)
    assert _wide_bodies(f.grad.llvm_ir(x))
    assert asked["listed"] < asked["all"] / 2


def _buffers_by_line(body: str) -> tuple[list, list]:
    """(line, buffer) of each masked load and store of a wide body: the buffer whose address
    the step read from the stage's table (``getelementptr ptr, ptr %ptrs, i64 <buffer>``)."""
    lines = body.split("\n")
    buf_of: dict = {}
    loads, stores = [], []
    for i, line in enumerate(lines):
        m = re.match(r'\s*(%\S+) = getelementptr ptr, ptr %"ptrs", i64 (\d+)$', line)
        if m:
            buf_of[m.group(1)] = int(m.group(2))
            continue
        m = re.match(r'\s*(%\S+) = (?:load ptr, ptr|getelementptr \w+, ptr) (%[^,\s]+)', line)
        if m and m.group(2) in buf_of:
            buf_of[m.group(1)] = buf_of[m.group(2)]
            continue
        m = re.search(r'@"llvm\.masked\.(load|store)[^(]*\((?:<[^>]+> %\S+, )?ptr (%[^,]+)', line)
        if m:
            (loads if m.group(1) == "load" else stores).append((i, buf_of[m.group(2)]))
    return loads, stores


def test_values_updated_in_place_are_wide(tmp_path, monkeypatch):
    """A stage that stores a value over the very view it reads another from (the gradient's
    schedule reuses a buffer in place) is emitted wide: every lane reads the old element
    before the step's first store to that buffer, as the scalar loop does."""
    monkeypatch.setattr(wide_stage, "WIDE_STAGE_OPS", 1024)   # (two loops, the second updates)
    fn = _function(tmp_path, statements=100)
    x = np.random.default_rng(14).uniform(-1, 1, 300)
    f = sg.differentiate(fn, wrt=0)
    text = f.grad.llvm_ir(x)
    assert not re.search(r'^define [^\n]*\.body"\(', text, re.M)   # no stage left to LLVM's
    updated = 0                                                    # loop vectoriser
    for body in _wide_bodies(text):
        loads, stores = _buffers_by_line(body)
        first_store = {}
        for i, buf in stores:
            first_store.setdefault(buf, i)
        for i, buf in loads:
            if buf in first_store:
                assert i < first_store[buf]
                updated += 1
    assert updated
    value, grad = f(x), f.grad(x)
    monkeypatch.setattr(wide_stage, "WIDE_MIN_OPS", 10 ** 9)   # the loop vectoriser's kernel
    ref_value, ref_grad, _ = _results(fn, (x,))
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(value, ref_value, rtol=64 * eps)
    np.testing.assert_allclose(grad, ref_grad, rtol=64 * eps, atol=64 * eps)
    py_value, py_grad, _ = _results(fn, (x,), target="python")
    np.testing.assert_allclose(grad, py_grad, rtol=1e-11, atol=1e-11)
