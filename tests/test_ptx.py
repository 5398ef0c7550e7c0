"""PTX for every op (value and gradient, float32 and float64) and for the examples assembles with
``ptxas`` for sm_80 and sm_90.

LLVM's NVPTX back end aborts the process on some inputs, so all PTX is generated in one child
process (``python tests/test_ptx.py --emit DIR``); a crash there fails the tests with its
stderr instead of killing pytest. The tests then run ``ptxas`` on each file.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHS = ("sm_80", "sm_90")


# ----------------------------------------------------------------------------------------------
# The case table: name -> (argument specs, builder). A spec is (shape, kind) with kind "f" (the
# case's float dtype), "i" (int64 data), "b" (bool data). The builder maps argument nodes to the
# output nodes; every case also gets its value-and-gradient graph with respect to its float args.

def _cases():
    from symgrad import numpy_linalg as la
    from symgrad import ops as o

    def un(name, fn, shape=(5, 3)):
        return name, ([(shape, "f")], lambda x: [fn(x)])

    def bi(name, fn, a=(5, 3), b=(3,)):
        return name, ([(a, "f"), (b, "f")], lambda x, y: [fn(x, y)])

    F = "f"
    table = dict([
        un("exp", o.exp), un("log", o.log), un("log1p", o.log1p), un("expm1", o.expm1),
        un("sqrt", o.sqrt), un("sin", o.sin), un("cos", o.cos), un("tan", o.tan),
        un("arcsin", o.arcsin), un("arccos", o.arccos), un("arctan", o.arctan),
        un("sinh", o.sinh), un("cosh", o.cosh), un("tanh", o.tanh), un("abs", o.abs_),
        un("sign", o.sign), un("neg", o.neg), un("stop_gradient", lambda x: o.stop_gradient(x) * x),
        bi("add", o.add), bi("sub", o.sub), bi("mul", o.mul), bi("div", o.div),
        bi("pow", o.pow_), bi("arctan2", o.arctan2), bi("maximum", o.maximum),
        bi("minimum", o.minimum),
        # symgrad.ops_extra: libm/libdevice functions and rounding instructions
        un("arcsinh", o.arcsinh), un("arccosh", lambda x: o.arccosh(1.5 + x * x)),
        un("arctanh", lambda x: o.arctanh(0.5 * o.tanh(x))), un("exp2", o.exp2),
        un("log2", o.log2), un("log10", o.log10), un("cbrt", o.cbrt), un("erf", o.erf),
        un("erfc", o.erfc), un("lgamma", lambda x: o.lgamma(x) + o.lgamma(-x - 2.0)),
        un("gamma", lambda x: o.gamma(x * 3.0) + o.gamma(-x - 1.0)),
        un("digamma", lambda x: o.digamma(x) + o.digamma(x * 20.0) + o.digamma(-x - 2.0)),
        un("floor", lambda x: o.floor(x) * x), un("ceil", lambda x: o.ceil(x) * x),
        un("rint", lambda x: o.rint(x) * x), un("trunc", lambda x: o.trunc(x) * x),
        bi("hypot", o.hypot), bi("fmod", o.fmod),
        bi("compare", lambda x, y: o.where(o.logical_or(o.logical_and(o.lt(x, y), o.le(x, y)),
                                                         o.logical_not(o.ne(x, y))), x,
                                           o.where(o.logical_or(o.gt(x, y), o.ge(x, y)), y,
                                                   o.cast(o.eq(x, y), x.dtype)))),
        ("pow_const", ([((6,), F)], lambda x: [x ** 2, x ** 3, x ** 0.5, x ** -1, x ** 1.5])),
        ("cast", ([((4,), F), ((4,), "i")], lambda x, k: [
            o.cast(x, "int32") + o.cast(k, "int32"), o.cast(x, "float64" if x.dtype == "float32" else "float32"),
            o.cast(k, x.dtype) * x, o.cast(o.cast(x, "bool"), "uint8")])),
        ("bool_data", ([((4,), F), ((4,), "b")], lambda x, m: [o.where(m, x, -x), o.logical_not(m)])),
        ("int_ops", ([((6,), "i")], lambda k: [k * k - k, o.abs_(k), o.sign(k), o.maximum(k, 2),
                                               k ** 3, o.reduce("sum", k), o.reduce("max", k)])),
        ("int_bool_long", ([((3000,), "i"), ((3000,), "b"), ((3000,), F)], lambda k, m, x: [
            o.reduce("sum", k), o.reduce("max", k), o.reduce("min", o.cast(k, "int32")),
            o.reduce("max", m), o.reduce("min", m), o.reduce("sum", o.where(m, x, 0.0))])),
        ("sum_all", ([((7, 5), F)], lambda x: [o.reduce("sum", x)])),
        ("sum_axes", ([((3, 4, 50), F)], lambda x: [o.reduce("sum", x, 0), o.reduce("sum", x, 2, True),
                                                   o.reduce("sum", x, (0, 2))])),
        ("sum_long", ([((3, 5000), F)], lambda x: [o.reduce("sum", x, 1)])),
        ("sum_split", ([((100000,), F)], lambda x: [o.reduce("sum", x)])),
        ("prod", ([((4, 6), F)], lambda x: [o.reduce("prod", x, 1), o.reduce("prod", x)])),
        ("max_min", ([((40, 300), F)], lambda x: [o.reduce("max", x, 1), o.reduce("min", x, 0),
                                                  o.reduce("max", x)])),
        ("matmul", ([((4, 3), F), ((3, 5), F)], lambda a, b: [o.matmul(a, b)])),
        ("matmul_long", ([((8, 300), F), ((300, 2), F)], lambda a, b: [o.matmul(a, b)])),
        ("matmul_batch", ([((2, 4, 64), F), ((64, 3), F)], lambda a, b: [o.matmul(o.sin(a), b)])),
        ("matvec", ([((5, 40), F), ((40,), F)], lambda a, v: [o.matmul(a, v), o.dot(v, v)])),
        ("transpose", ([((2, 3, 4), F)], lambda x: [o.transpose(x, (2, 0, 1)) * o.arange(3.0)])),
        ("reshape", ([((2, 6), F)], lambda x: [o.reshape(x, (3, 4)), o.reshape(o.exp(x), (12,))])),
        ("broadcast_to", ([((3, 1), F)], lambda x: [o.broadcast_to(x, (2, 3, 4))])),
        ("getitem", ([((6, 5), F)], lambda x: [o.getitem(x, (slice(1, None, 2), 3)),
                                               o.getitem(x, (slice(None, None, -1), None, slice(0, 2))),
                                               o.getitem(x, 2)])),
        ("setitem", ([((6, 5), F), ((2, 5), F)], lambda x, v: [o.setitem(x, v, (slice(1, 5, 2),)),
                                                               o.setitem(x, 0.5, (slice(None), -1))])),
        ("index_add", ([((6,), F), ((3,), F)], lambda x, v: [o.index_add(x, v, (slice(4, None, -2),))])),
        ("concatenate", ([((2, 3), F), ((4, 3), F)], lambda a, b: [o.concatenate([a, b, a], 0),
                                                                   o.concatenate([o.transpose(a), o.transpose(b)], 1)])),
        ("stack", ([((2, 3), F), ((2, 3), F)], lambda a, b: [o.stack([a, b, a * b], 1)])),
        ("take", ([((5, 4), F), ((3,), "i")], lambda x, k: [o.take(x, np.array([4, 0, -1]), 0),
                                                             o.take(x, k, 1)])),
        # writes through index arrays (symgrad.index_writes): y[k] = v (the last of a repeated
        # index wins), np.add.at, a constant index, one traced position
        ("index_writes", ([((6, 3), F), ((5,), "i"), ((5, 3), F)], _index_writes_case)),
        ("constants", ([((3,), F)], lambda x: [x * o.array_const(np.array([1.0, 2.0, 3.0], x.dtype))
                                                + o.full((3,), 2.0, x.dtype) + o.arange(0, 3, 1, x.dtype),
                                                o.full((2,), 1.5, x.dtype)])),
        ("identity", ([((3,), F), ((), F)], lambda x, s: [x, s, x * s])),
        ("scalar", ([((), F), ((), F)], lambda x, y: [x * o.sin(y) + o.exp(-x * x)])),
        ("loop", ([((6, 3), F), ((3,), F)], _scan_case)),   # + its reverse loop (the gradient)
        # branches: guarded kernels per side, in and around loops (codegen.ptx_regions.CondStep)
        ("branch", ([((5,), F), ((5,), F)], _branch_case)),
        ("branch_in_loop", ([((6, 3), F), ((3,), F)], _branch_in_loop_case)),
        ("loop_in_branch", ([((6, 3), F), ((3,), F)], _loop_in_branch_case)),
        # np.linalg's factorisations: loops over the pivot index (symgrad.numpy_linalg)
        ("linalg_lu", ([((2, 5, 5), F)], lambda a: [la.slogdet(a).logabsdet, la.det(a)])),
        ("linalg_gauss_jordan", ([((4, 4), F), ((4, 2), F)], lambda a, b: [la.inv(a), la.solve(a, b)])),
        ("linalg_cholesky", ([((4, 4), F)], lambda a: [la.cholesky(o.matmul(a, o.transpose(a, (1, 0))))])),
    ])
    return table


def _index_writes_case(y, k, v):
    from symgrad import index_writes as iw, ops as o
    return [iw.assign(y, k, v * v), iw.accumulate(y, k, v),
            iw.assign(y, np.array([1, -1, 1]), o.getitem(v, slice(0, 3))),
            iw.assign(y, o.getitem(k, 0), o.getitem(v, 0))]


def _scan_case(xs, x0):
    """A loop over the rows of xs with a reduction in its body (several kernels per iteration)
    and a stacked output."""
    from symgrad import ops as o, regions
    i = regions.placeholder("int64")
    c = regions.placeholder(x0.dtype, x0.shape)
    row = regions.placeholder(xs.dtype, xs.shape[1:])
    new = o.tanh(c * row) + o.reduce("sum", c) * 0.1 + o.cast(i, x0.dtype) * 0.01
    finals, stacks = regions.scan(6, i, [c], [x0], [row], [xs], [new], [o.exp(c)])
    return [finals[0], stacks[0]]


def _branch_case(x, w):
    """The safe sqrt of s = sum(x) - 2.5 (either side on the test data), a reduction in one
    side, a result repeated, an operand returned as is: sqrt(-s) is NaN on the side not taken."""
    from symgrad import ops as o, regions
    s = o.reduce("sum", x) - 2.5
    then = [o.sqrt(s) * o.reduce("sum", o.log(x) * w), o.exp(x) * w, w, o.exp(x) * w]
    other = [o.sqrt(-s) * 2.0, x * w, x, o.sin(x)]
    return regions.cond(o.ge(s, 0.0), then, other, outer=frozenset([s]))


def _branch_in_loop_case(xs, x0):
    """A loop whose body branches on its carry, with a branch nested in a side."""
    from symgrad import ops as o, regions
    i = regions.placeholder("int64")
    c = regions.placeholder(x0.dtype, x0.shape)
    row = regions.placeholder(xs.dtype, xs.shape[1:])
    (inner,) = regions.cond(o.gt(o.reduce("sum", row), 1.5), [c + o.sin(row)], [c - row * 0.5])
    (new,) = regions.cond(o.gt(o.reduce("sum", c), 1.0), [c * 0.5], [inner])
    finals, stacks = regions.scan(6, i, [c], [x0], [row], [xs], [new], [o.exp(c)])
    return [finals[0], stacks[0]]


def _loop_in_branch_case(xs, x0):
    """A branch whose side is a loop (its result written by the launcher's carry copies)."""
    from symgrad import ops as o, regions
    finals, stacks = _scan_case(xs, x0)
    return regions.cond(o.gt(o.reduce("sum", x0), 1.5), [finals, stacks], [x0 * 2.0, o.exp(xs)])


def _graph(name, spec, build, dtype):
    from symgrad import ops  # noqa: F401 - registers the op table
    from symgrad.ir import Graph, make
    kinds = {"f": dtype, "i": "int64", "b": "bool"}
    args = [make("arg", (), (i, f"a{i}", kinds[k], tuple(shape))) for i, (shape, k) in enumerate(spec)]
    outs = tuple(build(*args))
    g = Graph(f"{name}_{dtype}", tuple(f"a{i}" for i in range(len(spec))), tuple(args), outs,
              0 if len(outs) == 1 else tuple(range(len(outs))))
    return g


def _graphs(dtype):
    """(case name, graph) for every case: one graph computing its outputs and the gradient of
    their sum with respect to its float arguments (one module per case keeps the test fast)."""
    from symgrad import ops
    from symgrad.autodiff import grad_graph
    from symgrad.simplify import simplify
    out = []
    for name, (spec, build) in _cases().items():
        g = simplify(_graph(name, spec, build, dtype))
        wrt = tuple(i for i, (_, k) in enumerate(spec) if k == "f")
        floats = [o for o in g.outputs if o.dtype == dtype]
        if wrt and floats:
            loss = sum((ops.reduce("sum", o) for o in floats[1:]), ops.reduce("sum", floats[0]))
            grads = grad_graph(g.derive(g.name, (loss,), 0), wrt, False, False)
            outs = tuple(g.outputs) + tuple(grads.outputs)
            g = simplify(g.derive(g.name, outs, tuple(range(len(outs)))))
        out.append((f"{name}-{dtype}", g))
    return out


class _Entry:
    """What codegen.ptx needs of a symgrad.api.Compiled entry."""

    def __init__(self, graph):
        self.graph = graph


def _examples():
    """(name, entry) for the examples: quickstart (W1), softmax variants, Rosenbrock."""
    sys.path.insert(0, ROOT)
    import symgrad as sg
    from examples import stable_softmax
    from examples.per_example_clipping import dp_sgd_step, per_example_gradients
    from examples.quickstart_defs import f as w1

    def rosen(x):
        return sg.reduce_sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    out = []
    for dt in ("float32", "float64"):
        x, y = np.linspace(0.1, 1, 8).astype(dt), np.linspace(0.2, 2, 8).astype(dt)
        out.append((f"w1-{dt}", w1._compiled([x, y])))
        out.append((f"w1-grad-{dt}", w1.grad._compiled([x, y])))
        out.append((f"w1-value_and_grad-{dt}", w1.value_and_grad._compiled([x, y])))
        for fn in stable_softmax.VARIANTS:
            f = sg.value_and_grad(fn)
            out.append((f"softmax-{fn.__name__}-{dt}", f._compiled([x, y])))
        r = sg.value_and_grad(rosen)
        out.append((f"rosenbrock-{dt}", r._compiled([np.linspace(-1, 1, 1000).astype(dt)])))
        out.append((f"rosenbrock-hvp-{dt}", sg.hvp(rosen)._compiled(
            [np.linspace(-1, 1, 100).astype(dt), np.ones(100, dt)])))
        w, X, Y = np.ones(4, dt), np.ones((8, 4), dt), np.ones(8, dt)   # vmap: batched kernels
        out.append((f"per-example-grad-{dt}", per_example_gradients._compiled([w, X, Y])))
        out.append((f"dp-sgd-step-{dt}", dp_sgd_step._compiled([w, X, Y, w, 0.1, 1.0, 1.0])))
        out.append((f"rosenbrock-jvp-of-grad-{dt}", sg.jvp(sg.grad(rosen))._compiled(
            [np.linspace(-1, 1, 100).astype(dt), np.ones(100, dt)])))
        out.append((f"w1-jvp-{dt}", sg.jvp(w1, wrt=(0, 1))._compiled([x, y, y, x])))
        for mode in ("fwd", "rev"):   # Jacobians: the basis (arange ==) and batched passes
            out.append((f"w1-jacobian-{mode}-{dt}",
                        sg.jacobian(w1, wrt=(0, 1), mode=mode)._compiled([x, y])))
        out.append((f"rosenbrock-hessian-{dt}", sg.hessian(rosen)._compiled(
            [np.linspace(-1, 1, 50).astype(dt)])))
    return out


def emit(directory, arch=None):
    """Write ``<case>.<arch>.ptx`` for every case and example, and ``errors.json``: op cases
    for sm_80 and examples for every arch of ARCHS, or everything for ``arch``."""
    from symgrad.codegen import ptx
    errors = {}
    jobs = [(n, _Entry(g), (arch or "sm_80",)) for dt in ("float32", "float64") for n, g in _graphs(dt)]
    jobs += [(n, e, (arch,) if arch else ARCHS) for n, e in _examples()]
    for name, entry, archs in jobs:
        for arch in archs:
            try:
                text = ptx.ptx(entry, arch=arch)
            except Exception as e:   # noqa: BLE001 - recorded and reported by the test
                errors[f"{name}.{arch}"] = f"{type(e).__name__}: {e}"
                continue
            with open(os.path.join(directory, f"{name}.{arch}.ptx"), "w") as f:
                f.write(text)
    with open(os.path.join(directory, "errors.json"), "w") as f:
        json.dump(errors, f, indent=1)


# ----------------------------------------------------------------------------------------------
# Tests


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    d = tmp_path_factory.mktemp("ptx")
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--emit", str(d)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"PTX generation crashed (rc={r.returncode}):\n{r.stderr[-4000:]}"
    with open(d / "errors.json") as f:
        errors = json.load(f)
    return d, errors


def test_every_case_compiles(emitted):
    d, errors = emitted
    assert not errors, "\n".join(f"{k}: {v}" for k, v in errors.items())
    names = {p.split(".")[0] for p in os.listdir(d) if p.endswith(".ptx")}
    for dt in ("float32", "float64"):
        for case in _cases():
            assert f"{case}-{dt}" in names


def test_ptxas_assembles_every_kernel(emitted):
    ptxas = shutil.which("ptxas") or next((p for p in ("/usr/local/cuda/bin/ptxas",)
                                           if os.path.exists(p)), None)
    if ptxas is None:
        pytest.skip("ptxas not found")
    d, _ = emitted
    files = sorted(p for p in os.listdir(d) if p.endswith(".ptx"))
    work = []
    for p in files:
        made_for = p.rsplit(".", 2)[1]
        for arch in ARCHS:
            if arch >= made_for:     # PTX for sm_80 also assembles for sm_90; not the reverse
                work.append((p, arch))

    def run(job):
        p, arch = job
        r = subprocess.run([ptxas, f"-arch={arch}", str(d / p), "-o", os.devnull],
                           capture_output=True, text=True)
        return p, arch, r.returncode, r.stderr

    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        failures = [f"{p} ({arch}): {err[-600:]}" for p, arch, rc, err in pool.map(run, work) if rc]
    assert len(work) >= 2 * len(files) - 30
    assert not failures, "\n".join(failures)


def test_kernels_use_libdevice_not_intrinsics(emitted):
    d, _ = emitted
    text = (d / "w1-grad-float64.sm_90.ptx").read_text()
    assert ".target sm_90" in text and ".entry" in text
    # libdevice is linked and inlined: no call to an unresolved math function survives
    assert "__nv_" not in text or ".func" in text
    text = (d / "w1-grad-float32.sm_80.ptx").read_text()
    assert ".target sm_80" in text


def test_gathers_through_data_report_to_the_error_word(emitted):
    """A gather or scatter-add through an index from data notes an out-of-range index with an
    atomic max into the call's error word (codegen.cuda raises IndexError from it); the
    kernels of a case without one have no such parameter or atomic (ptxas assembles both in
    test_ptxas_assembles_every_kernel)."""
    d, _ = emitted
    for case in ("take", "index_writes"):
        text = (d / f"{case}-float64.sm_80.ptx").read_text()
        assert "atom.global.max.u32" in text or "red.global.max.u32" in text, case
    text = (d / "exp-float64.sm_80.ptx").read_text()
    assert ".max.u32" not in text


def test_every_op_is_lowered_or_listed():
    from symgrad.codegen import ptx
    from symgrad.codegen.ptx_regions import region_bodies
    from symgrad.ir import OPS, toposort
    unhandled = [op for op in OPS if ptx.lowering(op) is None and op not in ptx.UNSUPPORTED]
    assert not unhandled
    # every op appears in some emitted case, so "lowered" is checked by ptxas, not assumed
    seen = set()
    for dt in ("float32", "float64"):
        for _, g in _graphs(dt):
            pending = [g.outputs]   # and the nodes of loop bodies and branch sides
            while pending:
                for n in toposort(pending.pop()):
                    seen.add(n.op)
                    pending.extend(body.results for body in region_bodies(n))
    assert set(OPS) - set(ptx.UNSUPPORTED) <= seen, sorted(set(OPS) - seen)


def test_intrinsic_guard_refuses_instead_of_aborting():
    from symgrad.codegen import libdevice
    with pytest.raises(NotImplementedError, match="llvm.exp.f64"):
        libdevice.check_intrinsics("declare double @llvm.exp.f64(double)\n")
    with pytest.raises(NotImplementedError, match="llvm.pow.f32"):
        libdevice.check_intrinsics("declare float @llvm.pow.f32(float, float)\n", strict=False)
    libdevice.check_intrinsics("declare double @__nv_exp(double)\ndeclare double @llvm.fabs.f64(double)\n")


def test_libdevice_table_and_lookup():
    from symgrad.codegen import libdevice
    assert libdevice.LIBDEVICE["exp"] == ("__nv_exp", "__nv_expf")
    assert libdevice.LIBDEVICE["arctan2"] == ("__nv_atan2", "__nv_atan2f")
    assert libdevice.LibdeviceMath().symbol("log1p", "float32") == "__nv_log1pf"
    assert os.path.basename(libdevice.find_libdevice()).startswith("libdevice")


def test_missing_libdevice_is_a_clear_error(tmp_path):
    code = ("import os, sys; sys.path.insert(0, %r)\n"
            "from symgrad.codegen import libdevice\n"
            "libdevice._candidates = lambda: []\n"
            "try:\n    libdevice.find_libdevice()\n"
            "except libdevice.LibdeviceNotFound as e:\n    print('OK', e)\n") % ROOT
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.startswith("OK") and "CUDA_HOME" in r.stdout


def test_libdevice_found_through_cuda_home(tmp_path):
    lib = tmp_path / "nvvm" / "libdevice"
    lib.mkdir(parents=True)
    (lib / "libdevice.10.bc").write_bytes(b"BC")
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from symgrad.codegen import libdevice\nprint(libdevice.find_libdevice())\n") % ROOT
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "CUDA_HOME": str(tmp_path)})
    assert r.stdout.strip() == str(lib / "libdevice.10.bc"), r.stderr


def test_libdevice_found_in_nvidia_wheels(tmp_path):
    from symgrad.codegen import libdevice
    for wheel in ("cu13", "cuda_nvcc"):   # nvidia-nvvm (CUDA 13), nvidia-cuda-nvcc-cu12
        lib = tmp_path / wheel / "nvidia" / wheel / "nvvm" / "libdevice"
        lib.mkdir(parents=True)
        (lib / "libdevice.10.bc").write_bytes(b"BC")
        assert libdevice._candidates(roots=[], search_path=[str(tmp_path / wheel)]) == \
            [str(lib / "libdevice.10.bc")]


def _child(code: str) -> str:
    """Run ``code`` in a fresh interpreter (LLVM aborts must not take pytest down)."""
    r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {ROOT!r})\n" + code],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"child failed (rc={r.returncode}):\n{r.stderr[-3000:]}"
    return r.stdout


def test_function_ptx_api():
    out = _child(
        "import numpy as np\n"
        "from examples.quickstart_defs import f\n"
        "x = np.linspace(0.1, 1, 5)\n"
        "t = f.grad.ptx(x, x, arch='sm_90')\n"
        "print('explicit', '.target sm_90' in t and '.visible .entry' in t)\n"
        "print('default', f.grad.ptx(x, x).split('.target ')[1].split()[0])\n"
        "try:\n    f.grad.ptx(x, x, arch='volta')\n"
        "except ValueError as e:\n    print('bad arch', 'sm_80' in str(e))\n")
    assert "explicit True" in out and "bad arch True" in out
    from symgrad.codegen.cuda import device_arch
    assert f"default {device_arch() or 'sm_80'}" in out   # the present GPU, else sm_80


def test_kernel_structure(emitted):
    """Elementwise outputs of one shape share one grid-stride kernel; long reductions use
    warp shuffles and a block barrier."""
    from symgrad.codegen import ptx
    import symgrad as sg
    sys.path.insert(0, ROOT)
    from examples.quickstart_defs import f
    x = np.linspace(0.1, 1, 1000)
    p = ptx.plan(f.value_and_grad._compiled([x, x]).graph)
    assert [k.kind for k in p.kernels] == ["map"] and len(p.kernels[0].jobs) == 3
    assert set(p.sincos) and len(p.sincos) == 2        # sin(y), cos(y): one __nv_sincos
    g = sg.grad(_exp_sum_times)
    p = ptx.plan(g._compiled([np.ones(100000)]).graph)
    assert "block" in [k.kind for k in p.kernels]
    d, _ = emitted
    text = (d / "sum_split-float64.sm_80.ptx").read_text()
    assert "shfl.sync.down" in text and "bar.sync" in text


def _exp_sum_times(v):
    return np.sum(np.exp(v)) * v


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "--emit":
        sys.path.insert(0, ROOT)
        emit(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)
    else:
        sys.exit("usage: test_ptx.py --emit DIR [ARCH]")
