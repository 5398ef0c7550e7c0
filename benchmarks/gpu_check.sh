#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU (a few minutes):
#   1. the GPU tests (pytest -m gpu) against target="python";
#   2. W1 (the elementwise gradient) at 10^8 points, float32 and float64, against the
#      device-to-device copy bandwidth and CuPy / JAX / PyTorch when installed;
# and appends the results to benchmarks/RESULTS.md.
# Needs the project's venv with cuda-bindings (pip install -e '.[test,cuda]'); the GPU machine
# may have no network, so nothing is installed here.
#   usage: benchmarks/gpu_check.sh [N]        (N points, default 100000000)
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
N="${1:-100000000}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # JAX must not take the memory the others need

echo "== device"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$PY" -c "
from symgrad.codegen.cuda import Device
d = Device.get()
print(d.name, d.arch, d.sms, 'SMs; compiling for', d.ptx_arch)
" || { echo "no usable GPU (see the error above): nothing to check"; exit 2; }

echo "== GPU tests"
TESTLOG="$(mktemp)"
"$PY" -m pytest -q -p no:cacheprovider -m gpu -rs tests/test_cuda.py 2>&1 | tee "$TESTLOG"
TEST_RC=${PIPESTATUS[0]}
SUMMARY="$(tail -n 1 "$TESTLOG" | tr -d '=' | sed 's/^ *//;s/ *$//')"
rm -f "$TESTLOG"

echo "== W1 benchmark (N=$N)"
"$PY" benchmarks/gpu_bench.py --n "$N" --tests "${SUMMARY} (exit ${TEST_RC})"
BENCH_RC=$?

echo "== done: tests exit $TEST_RC, benchmark exit $BENCH_RC; results appended to benchmarks/RESULTS.md"
[ "$TEST_RC" -eq 0 ] && [ "$BENCH_RC" -eq 0 ]
