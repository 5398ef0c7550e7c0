"""ADBench's LSTM objective (Srajer, Habib, Fitzgibbon 2018; ``src/python/modules/*/
lstm_objective.py``) as plain Python loops for symgrad, beside ``jax.jit`` + ``lax.scan``.

l layers of b = 14 hidden units read c characters (one-hot rows of ``sequence``, b wide);
``main_params`` is (2l, 4b) (weight and bias of each layer), ``extra_params`` (3, b) (input
scale, output scale and output bias), ``state`` (2l, b) (hidden and cell of each layer). The
objective is ADBench's, line for line, including its normaliser ``log(sum(exp(ypred), 2))``
(Python's ``sum`` with start value 2, i.e. ``log(sum(exp(ypred)) + 2)``), except that the
state is carried from one step to the next instead of kept in a list of all states (which
only the step after reads).

Measured per (l, c), each in a fresh process with symgrad's disk cache off:
first gradient (trace + compile + first call), gradient per call and objective per call
(medians of ``--repeats`` runs after a warm-up), for symgrad target="cpu", symgrad
target="python" (the NumPy reference back end, which runs loop regions as Python loops) and
JAX (when importable; it is never needed by ``make test``). A configuration that runs past
``--timeout`` seconds is recorded as such.

    python benchmarks/adbench_lstm.py [--configs 2x1024,4x1024,2x4096,4x4096] [--timeout 300]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

# (tests load this file by its path: its folder is put on the path for the shared helper)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import median_time  # noqa: E402

HIDDEN = 14


# ---------------------------------------------------------------------------------------------
# ADBench's definition, in NumPy (symgrad differentiates exactly this source)

def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_model(weight, bias, hidden, cell, _input):
    # NOTE this line came from: gates = hcat(input,hidden) * weight .+ bias   (ADBench)
    gates = np.concatenate((_input, hidden, _input, hidden)) * weight + bias
    hsize = hidden.shape[0]
    forget = sigmoid(gates[0:hsize])
    ingate = sigmoid(gates[hsize:2 * hsize])
    outgate = sigmoid(gates[2 * hsize:3 * hsize])
    change = np.tanh(gates[3 * hsize:])
    cell = cell * forget + ingate * change
    hidden = outgate * np.tanh(cell)
    return hidden, cell


def predict(w, w2, s, x):
    # ADBench writes the new state into s2 = copy(s) (s2[i], s2[i + 1] = lstm(...); x = s2[i]);
    # symgrad's alias analysis refuses writing into s2 while x views a row of it (it tracks
    # whole arrays), so the layers' states are stacked instead: the same values.
    x = x * w2[0]
    layers = []
    for i in range(0, len(s), 2):
        hidden, cell = lstm_model(w[i], w[i + 1], s[i], s[i + 1], x)
        layers += [hidden, cell]
        x = hidden
    return x * w2[1] + w2[2], np.stack(layers)


def objective(main_params, extra_params, state, sequence):
    total = 0.0
    count = 0
    _input = sequence[0]
    for t in range(len(sequence) - 1):
        ypred, state = predict(main_params, extra_params, state, _input)
        ynorm = ypred - np.log(np.sum(np.exp(ypred)) + 2)
        ygold = sequence[t + 1]
        total += np.sum(ygold * ynorm)
        count += ygold.shape[0]
        _input = ygold
    return -total / count


def make_inputs(layers: int, chars: int, seed: int = 0):
    """ADBench-shaped inputs: random parameters and state, a random one-hot text."""
    rng = np.random.default_rng(seed)
    main_params = rng.uniform(-1.0, 1.0, (2 * layers, 4 * HIDDEN))
    extra_params = rng.uniform(-1.0, 1.0, (3, HIDDEN))
    state = rng.uniform(-1.0, 1.0, (2 * layers, HIDDEN))
    sequence = np.zeros((chars, HIDDEN))
    sequence[np.arange(chars), rng.integers(0, HIDDEN, chars)] = 1.0
    return main_params, extra_params, state, sequence


# ---------------------------------------------------------------------------------------------
# JAX: the same model with lax.scan over the characters (how JAX users write it)

def jax_objective():
    import jax
    import jax.numpy as jnp
    from jax import lax

    def jlstm(weight, bias, hidden, cell, _input):
        gates = jnp.concatenate((_input, hidden, _input, hidden)) * weight + bias
        hsize = hidden.shape[0]
        forget = jax.nn.sigmoid(gates[0:hsize])
        ingate = jax.nn.sigmoid(gates[hsize:2 * hsize])
        outgate = jax.nn.sigmoid(gates[2 * hsize:3 * hsize])
        change = jnp.tanh(gates[3 * hsize:])
        cell = cell * forget + ingate * change
        return outgate * jnp.tanh(cell), cell

    def jpredict(w, w2, s, x):
        x = x * w2[0]
        layers = []
        for i in range(0, s.shape[0], 2):
            hidden, cell = jlstm(w[i], w[i + 1], s[i], s[i + 1], x)
            layers += [hidden, cell]
            x = hidden
        return x * w2[1] + w2[2], jnp.stack(layers)

    def loss(main_params, extra_params, state, sequence):
        def step(carry, ygold):
            state, _input, total = carry
            ypred, state = jpredict(main_params, extra_params, state, _input)
            ynorm = ypred - jnp.log(jnp.sum(jnp.exp(ypred)) + 2)
            return (state, ygold, total + jnp.sum(ygold * ynorm)), None
        (_, _, total), _ = lax.scan(step, (state, sequence[0], 0.0), sequence[1:])
        return -total / ((sequence.shape[0] - 1) * sequence.shape[1])

    return jax, loss


# ---------------------------------------------------------------------------------------------
# Measurement (one configuration per process)

def measure(system: str, layers: int, chars: int, repeats: int) -> dict:
    args = make_inputs(layers, chars)
    if system == "jax":
        jax, loss = jax_objective()
        jax.config.update("jax_enable_x64", True)
        jargs = [jax.numpy.asarray(a) for a in args]
        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        value = jax.jit(loss)
        t = time.perf_counter()
        g = [a.block_until_ready() for a in grad(*jargs)]
        first = time.perf_counter() - t
        out = {"first_gradient_s": first,
               "gradient_s": median_time(lambda: [a.block_until_ready() for a in grad(*jargs)], repeats),
               "objective_s": median_time(lambda: value(*jargs).block_until_ready(), repeats),
               "value": float(value(*jargs))}
        g = [np.asarray(a) for a in g]
    else:
        import symgrad as sg
        target = system.split(":")[1]
        f = sg.differentiate(objective, wrt=(0, 1), target=target)
        t = time.perf_counter()
        g = f.grad(*args)
        first = time.perf_counter() - t
        out = {"first_gradient_s": first,
               "gradient_s": median_time(lambda: f.grad(*args), repeats),
               "objective_s": median_time(lambda: f(*args), repeats),
               "value": float(f(*args)),
               "loop_region": "= loop(" in f.ir_for(*args),
               "source_lines": len(f.grad.source_for(*args).splitlines())}
    out["value_error"] = abs(out["value"] - float(objective(*args)))
    out["gradient_checksum"] = float(sum(np.sum(np.abs(a)) for a in g))
    return out


def run_one(system, layers, chars, repeats, timeout) -> dict:
    """``measure`` in a fresh process (disk cache off), or how it failed."""
    env = dict(os.environ, SYMGRAD_NO_CACHE="1")
    cmd = [sys.executable, __file__, "--one", system, str(layers), str(chars), "--repeats", str(repeats)]
    t = time.perf_counter()
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"failed": f"did not finish in {timeout:.0f} s"}
    if run.returncode != 0:
        tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["?"]
        return {"failed": f"exit {run.returncode}: {tail[0][:160]}",
                "wall_s": time.perf_counter() - t}
    return json.loads(run.stdout.strip().splitlines()[-1])


def _ms(x):
    return f"{1e3 * x:9.2f}" if x is not None else "        -"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="2x1024,4x1024,2x4096,4x4096",
                        help="comma-separated LAYERSxCHARS")
    parser.add_argument("--systems", default="symgrad:cpu,symgrad:python,jax")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per configuration")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--one", nargs=3, metavar=("SYSTEM", "LAYERS", "CHARS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        system, layers, chars = args.one
        print(json.dumps(measure(system, int(layers), int(chars), args.repeats)))
        return None
    systems = args.systems.split(",")
    if "jax" in systems:
        try:
            import jax  # noqa: F401
        except ImportError:
            systems.remove("jax")
            print("JAX is not importable here: its column is skipped")
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"ADBench LSTM, b = {HIDDEN}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, load average {load[0]:.1f} at start" if load else "")
    print(f"{'l':>2} {'c':>5}  {'system':15} {'first grad s':>12} {'grad ms':>9} {'obj ms':>9} "
          f"{'grad/obj':>8}  notes")
    results = []
    for config in args.configs.split(","):
        layers, chars = (int(v) for v in config.lower().split("x"))
        for system in systems:
            r = run_one(system, layers, chars, args.repeats, args.timeout)
            r.update(system=system, layers=layers, chars=chars)
            results.append(r)
            if "failed" in r:
                print(f"{layers:>2} {chars:>5}  {system:15} {'-':>12} {'-':>9} {'-':>9} {'-':>8}  "
                      f"{r['failed']}")
                continue
            notes = []
            if "loop_region" in r:
                notes.append("loop region" if r["loop_region"] else "unrolled")
                notes.append(f"{r['source_lines']}-line gradient source")
            notes.append(f"|value error| {r['value_error']:.1e}")
            first_ok = next(x for x in results if "failed" not in x and x["chars"] == chars
                            and x["layers"] == layers)
            if first_ok is not r:   # the same gradient as the first system that finished
                notes.append(f"gradient checksum rel. diff. "
                             f"{abs(r['gradient_checksum'] / first_ok['gradient_checksum'] - 1):.0e}")
            print(f"{layers:>2} {chars:>5}  {system:15} {r['first_gradient_s']:12.2f} "
                  f"{_ms(r['gradient_s'])} {_ms(r['objective_s'])} "
                  f"{r['gradient_s'] / r['objective_s']:8.2f}  {', '.join(notes)}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
