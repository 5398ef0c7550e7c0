"""Random programs of views, aliases and in-place writes, run by NumPy and by symgrad: each
program either runs to NumPy's numbers (and leaves the caller's array alone) or is refused
with UnsupportedSyntaxError. Never a different number."""
import importlib.util
import random
import sys

import numpy as np
import pytest

import symgrad as sg

NAMES = ("a", "b", "c")
N = 6

HELPERS = '''
def ident(v):
    return v


def reversed_view(v):
    return v[::-1]


def doubled(v):
    return v * 2.0
'''


def _statement(rng: random.Random) -> str:
    n, m, p = rng.choice(NAMES), rng.choice(NAMES), rng.choice(NAMES)
    i, j = sorted(rng.sample(range(N + 1), 2))
    k = rng.randrange(N)
    forms = [
        f"{n} = x * {rng.choice([0.5, 1.5, -2.0])}",
        f"{n} = {m}",
        f"{n} = {m}[::-1]",
        f"{n} = {m}.reshape(2, 3).reshape(-1)",
        f"{n} = np.asarray({m})",
        f"{n} = {m}.T",
        f"{n} = {m}.copy()",
        f"{n} = {m} + {p}",
        f"{n} = np.zeros({N})",
        f"{n} = np.ones({N}) * 0.5",
        f"{n} = ident({m})",
        f"{n} = reversed_view({m})",
        f"{n} = doubled({m})",
        f"{n}[{k}] = x[{rng.randrange(N)}] * 3.0",
        f"{n}[{k}] = {rng.choice([1.25, -4.0])}",
        f"{n}[{i}:{j}] += 1.5",
        f"{n}[{i}:{j}] = {m}[{i}:{j}] * 0.5",
        f"{n} += {m}",
        f"{n} *= 0.75",
        f"{n} -= x",
        f"{n} = {m} if x[0] > {rng.choice([-1.0, 1.0])} else {p}",
        f"for row in {m}.reshape(2, 3):\n        row += 1.0",
    ]
    return rng.choice(forms)


def _program(seed: int) -> str:
    rng = random.Random(seed)
    start = [f"{n} = x * {i + 1}.0" if rng.random() < 0.8 else f"{n} = x" for i, n in enumerate(NAMES)]
    body = start + [_statement(rng) for _ in range(rng.randrange(2, 7))]
    lines = "\n".join("    " + s for s in body)
    return f"def program(x):\n{lines}\n    return np.sum(a * 1.0 + b * 2.0 + c * 3.0)\n"


def _load(tmp_path, seeds):
    source = "import numpy as np\n" + HELPERS + "\n\n".join(
        _program(s).replace("def program", f"def program_{s}") for s in seeds)
    path = tmp_path / "random_alias_programs.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("random_alias_programs", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _run_all(module, seeds, target):
    outcomes = {"same": 0, "refused": 0}
    x = np.linspace(-1.0, 1.5, N)
    for s in seeds:
        fn = getattr(module, f"program_{s}")
        mine = x.copy()
        try:
            expected = fn(mine)
        except (ValueError, IndexError):
            continue                           # not a valid NumPy program
        caller_changed = not np.array_equal(mine, x)
        arg = x.copy()
        try:
            got = sg.differentiate(fn, target=target)(arg)
        except sg.UnsupportedSyntaxError:
            outcomes["refused"] += 1
            continue
        assert not caller_changed, f"accepted a program that writes into its argument:\n{_program(s)}"
        np.testing.assert_array_equal(arg, x)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12, err_msg=_program(s))
        outcomes["same"] += 1
    return outcomes


@pytest.mark.parametrize("target, count", [("python", 400), ("cpu", 40)])
def test_random_alias_programs_match_numpy_or_are_refused(tmp_path, target, count):
    seeds = list(range(count))
    outcomes = _run_all(_load(tmp_path, seeds), seeds, target)
    assert outcomes["same"] > count // 10 and outcomes["refused"] > 0, outcomes
