"""Libraries held pending (codegen.mathlib.CPUMath.add_library_module: the far-argument maths,
our own out-of-line functions, the strided copy loop, the matmul kernels) are compiled in the
jit.load of the first kernel that declares them, in the same pool of threads as that kernel
(no library compiles on its own before the kernel, as the far and out-of-line maths once
did), each linked after the libraries it calls; the pool takes its texts costliest first and
returns the objects in their own order."""
import re

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import jit, module_split
from symgrad.codegen.mathlib import CPUMath


def _module_id(text: str) -> str:
    return re.search(r'^; ModuleID = "([^"]*)"', text, re.M).group(1)


@pytest.fixture
def compiles(monkeypatch):
    """Every batch of texts jit compiles together (one pool each), with the far and
    out-of-line libraries made pending again and no disk cache, so that they compile here."""
    monkeypatch.setenv("SYMGRAD_NO_CACHE", "1")
    math = jit.target()["math"]
    math._far_loaded.clear()
    math._own_loaded.clear()
    batches: list[list[str]] = []
    real = jit.compile_many

    def record(texts):
        batches.append([_module_id(t) for t in texts])
        return real(texts)
    monkeypatch.setattr(jit, "compile_many", record)
    return batches


def _kernels(batch):
    return [m for m in batch if not m.startswith("symgrad_")]


def test_the_far_library_compiles_with_the_first_kernel_that_calls_it(compiles):
    def f(x):
        return np.sum(np.sin(x) * 1.375 + x * 0.625)
    x = np.concatenate([np.linspace(-3.0, 3.0, 201), [1e10, -3e15, 7e22]])   # far lanes too
    got = sg.grad(f)(x)
    with_far = [b for b in compiles if "symgrad_far_core" in b]
    assert len(with_far) == 1, compiles
    batch = with_far[0]
    assert _kernels(batch), "compiled beside the kernel, not on its own before it"
    # the checks of the functions the gradient calls (cos; sin's own check is not called),
    # each after the shared code they call; no tan
    assert "symgrad_cos_far" in batch and "symgrad_tan_far" not in batch
    assert batch.index("symgrad_far_core") < batch.index("symgrad_cos_far")
    want = sg.grad(f, target="python")(x)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


def test_an_out_of_line_function_links_after_the_far_library_it_calls(compiles):
    def many(x):     # more sin calls than OUTLINE_MATH_CALLS: the loop calls sin out of line
        return np.sum(sum(np.sin(x * c) for c in (0.5, 0.25, 2.0, 3.0, -1.5, 0.75, 1.25, 1.5,
                                                  -2.5, 0.125)))
    x = np.concatenate([np.linspace(-2.0, 2.0, 97), [4e9, -1e12]])
    got = sg.grad(many)(x)
    batch = [b for b in compiles if "symgrad_cos_own" in b]     # the gradient's cos
    assert len(batch) == 1, compiles
    assert "symgrad_cos_far" in batch[0] and _kernels(batch[0])
    # (a batch's texts are linked in its order: the far library before the function calling it)
    assert batch[0].index("symgrad_cos_far") < batch[0].index("symgrad_cos_own")
    math = jit.target()["math"]
    assert math.pending_in(f'declare double @"{math.own_library("cos")}"(double)\n') == []
    want = sg.grad(many, target="python")(x)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def _library(name: str, defines: str, calls: list[str] = ()) -> str:
    decls = "".join(f'declare double @"{c}"(double)\n' for c in calls)
    return (f'; ModuleID = "{name}"\n{decls}define double @"sg_{defines}"(double %x)\n'
            '{\nentry:\n  ret double %x\n}\n')


def test_pending_libraries_come_after_the_libraries_they_call():
    math = CPUMath()
    c = _library("c", "symgrad_c")
    b = _library("b", "symgrad_b", ["symgrad_c"])
    a = _library("a", "symgrad_a", ["symgrad_b", "symgrad_c"])
    for text, name in ((a, "symgrad_a"), (b, "symgrad_b"), (c, "symgrad_c")):
        math.add_library(name, text, "sg_" + name)
    kernel = 'declare double @"symgrad_a"(double)\ndeclare double @"symgrad_c"(double)\n'
    assert [_module_id(lib.text) for lib in math.pending_in(kernel)] == ["c", "b", "a"]
    # a library of several functions is one text, walked once, whichever name reaches it
    math.add_library_module(_library("two", "symgrad_d") + _library("", "symgrad_e"),
                            {"symgrad_d": "sg_symgrad_d", "symgrad_e": "sg_symgrad_e"})
    both = 'declare double @"symgrad_d"(double)\ndeclare <4 x double> @"symgrad_e"(<4 x double>)\n'
    assert [_module_id(lib.text) for lib in math.pending_in(both)] == ["two"]
    # bound names are not pending again, unless a library replaces them
    math.addresses["symgrad_x"] = 1
    math.add_library("symgrad_x", _library("x", "symgrad_x"), "sg_symgrad_x")
    assert not math.pending_in('declare double @"symgrad_x"(double)\n')
    math.add_library_module(_library("x2", "symgrad_x"), {"symgrad_x": "sg_symgrad_x"},
                            replace=True)
    assert [_module_id(lib.text) for lib in math.pending_in(
        'declare double @"symgrad_x"(double)\n')] == ["x2"]


def test_the_pool_takes_the_costliest_text_first_and_keeps_their_order(monkeypatch):
    texts = [_library(f"m{k}", f"symgrad_m{k}") for k in range(3)]
    # the middle one the costliest: a longer body
    body = "".join(f"  %v{k} = fadd double %x, 1.0\n" for k in range(40))
    texts[1] = texts[1].replace("entry:\n", "entry:\n" + body)
    assert module_split.cost(texts[1]) > module_split.cost(texts[0])
    taken = []
    real = jit._compile_private

    def record(text):
        taken.append(_module_id(text))
        return real(text)
    monkeypatch.setattr(jit, "_compile_private", record)
    objects = jit._compile_parts(texts, 1)
    assert taken[0] == "m1"
    assert objects == [jit._compile_private(t) for t in texts]


def test_the_shared_far_code_compiles_light_and_the_checks_with_the_pipeline():
    """The Payne-Hanek code only far lanes reach is a library of optnone functions (the -O0
    code generator, codegen.jit.is_light); the checks every call runs are optimised."""
    from symgrad.codegen.f64math import _far_libraries
    math = jit.target()["math"]
    libraries = _far_libraries(math)
    names = [_module_id(text) for text, _ in libraries]
    assert names == ["symgrad_far_core", "symgrad_sin_far", "symgrad_cos_far", "symgrad_tan_far"]
    core, checks = libraries[0], libraries[1:]
    assert jit.is_light(core[0]) and jit.machine_for(core[0]) is jit.target()["tm_light"]
    for text, public in checks:
        assert not jit.is_light(text)
        for name in core[1]:       # the checks call the shared code by its public names
            if f'@"{name}"(' in text:
                assert re.search(rf'^declare [^\n]*@"{name}"\(', text, re.M)
        assert len(public) == 1 + len(math.isas)


def test_a_reused_target_machine_compiles_what_a_new_one_does(monkeypatch):
    """The pool's threads reuse target machines (jit._take_machine): a text compiled by a
    machine that compiled others before gives the object a new machine gives."""
    x = np.linspace(-1.0, 1.0, 300)
    g = sg.grad(lambda v: np.sum(np.exp(v) * np.tanh(v * 0.5)))
    g(x)
    text = g._inspect_entry(x).prepared["cpu"].program.text
    monkeypatch.setattr(jit, "_machines", {})
    fresh = jit._compile_private(text)
    assert len(jit._machines[3]) == 1
    other = _library("m", "symgrad_m")
    jit._compile_private(other)
    assert len(jit._machines[3]) == 1, "the machine was reused, not a second one made"
    assert jit._compile_private(text) == fresh


def test_the_ptx_emulation_links_the_pending_far_maths_it_calls():
    """codegen.ptx_emulate links its machine code itself (not through jit.load): the far
    libraries its kernels declare are linked before them (CPUMath.link_pending); unlinked,
    the far check's call went to address 0."""
    from symgrad import ops
    from symgrad.codegen import ptx_emulate
    from symgrad.emit_python import compile_python
    from symgrad.ir import Graph, make
    from symgrad.runtime import finish
    math = ptx_emulate._init()["math"]
    math._far_loaded.clear()           # its far libraries pending again, as in a new process
    x = make("arg", (), (0, "x", "float64", (7,)))
    g = Graph("far", ("x",), (x,), (ops.add(ops.sin(x), ops.cos(x)),), 0)
    values = [np.array([0.5, -2.0, 1e10, -3e15, 7e22, 3.0, 1e300])]
    got = ptx_emulate.run(g, values)
    assert not math.pending_in('declare double @"symgrad_sin_far"(double)\n'
                               'declare double @"symgrad_sin_far_fma"(double)\n')
    fn, _ = compile_python(g)
    want = finish(fn(*values), g, values)
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_far_values_are_the_same_whichever_code_generator_compiles_the_shared_code(
        compiles, monkeypatch):
    """The shared far code is optnone: the -O0 code generator (light, as it is compiled) and
    the -O3 one select the same instructions for it, so every far value is bit for bit the
    same (sin, cos, tan, their gradients; inf and NaN too)."""
    from symgrad.codegen.f64math import _far_libraries

    def f(v):
        return np.sin(v) * np.cos(v * 0.5) + np.tan(v * 0.25)
    x = np.concatenate([[1e10, -3e15, 7e22, 1e300, -5e305, np.inf, np.nan, 0.5],
                        np.geomspace(1e6, 1e200, 37)])
    with np.errstate(all="ignore"):
        light = [sg.differentiate(f)(x), sg.grad(lambda v: np.sum(f(v)))(x)]
        math = jit.target()["math"]
        libraries = _far_libraries(math)
        core_text, core_public = libraries[0]
        heavy = core_text + 'define void @"sg_not_light"() {\nentry:\n  ret void\n}\n'
        assert jit.is_light(core_text) and not jit.is_light(heavy)
        math.add_library_module(heavy, core_public, replace=True)
        for text, public in libraries[1:]:
            math.add_library_module(text, public, replace=True)
        monkeypatch.setitem(jit.target(), "kernels", {})     # compile the kernels again
        del compiles[:]
        heavy_results = [sg.differentiate(f)(x), sg.grad(lambda v: np.sum(f(v)))(x)]
    assert any("symgrad_far_core" in batch for batch in compiles)
    for a, b in zip(light, heavy_results):
        assert a.tobytes() == b.tobytes()



def test_the_matmul_library_skips_the_ir_pipeline_and_nothing_else_does(compiles):
    """The matmul kernels' IR is written as their machine code should be (codegen.jit.
    is_tile_kernel): the pipeline is skipped for their library texts only, -O3's code generator
    kept; a kernel module that calls them, or a text defining anything beside them, is
    optimised as before."""
    from llvmlite import ir
    from symgrad.codegen.dtypes import memory_type
    from symgrad.codegen.matmul_kernel import _declare, _TileKernel
    for unit_b in (True, False):
        library = ir.Module(name="symgrad_mm_float64_4")
        fn = _declare(library, "sg_symgrad_mm_float64_4", "float64", unit_b)
        _TileKernel(fn, memory_type("float64"), 4, unit_b).emit()
        text = str(library)
        assert jit.is_tile_kernel(text) and jit.machine_for(text) is jit.target()["tm"]
        kept = jit._optimize(text, jit.target()["tm"])
        assert str(kept).count("\n  %") == str(jit._binding().parse_assembly(text)).count("\n  %")
        assert not jit.is_tile_kernel(text + 'define void @"k1_stage0"() nounwind\n{\nret void\n}\n')
    assert not jit.is_tile_kernel('declare void @"symgrad_mm_float64_8"(ptr)\n')

    seen = []
    real = jit._optimize

    def optimize(text, tm, context=None):
        seen.append((_module_id(text), jit.is_tile_kernel(text)))
        return real(text, tm, context)
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(37, 19)), rng.normal(size=(23, 19))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jit, "_optimize", optimize)
        value = sg.differentiate(lambda a, b: np.sum(np.tanh(a @ b.T)))(a, b)
    np.testing.assert_allclose(value, np.sum(np.tanh(a @ b.T)), rtol=1e-12)
    modules = [tile for m, tile in seen if not m.startswith("symgrad_")]
    assert modules and not any(modules)
