# Every target creates .venv (and installs the project with its test extra) when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench fuzz clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	# Byte-compile ahead: machines that set PYTHONDONTWRITEBYTECODE would otherwise recompile
	# every module in every process (part of W4's decorator-to-first-result time).
	$(PY) -m compileall -q symgrad codegen
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/quickstart.py

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests

# Long random-program runs: make fuzz N=100000 [JOBS=2] [START=1000000] [FUZZ_OUT=fuzz-out].
# Rerunning with the same FUZZ_OUT resumes; failing programs land in $(FUZZ_OUT)/<outcome>/.
N ?= 100000
JOBS ?= 2
START ?= 1000000
FUZZ_OUT ?= fuzz-out
fuzz: $(STAMP)
	$(PY) benchmarks/fuzz.py --n $(N) --start $(START) --jobs $(JOBS) --out $(FUZZ_OUT)

bench: $(STAMP)
	# the peers (JAX, Numba, autograd) and matplotlib for the charts; each part is optional
	$(PY) -m pip install --quiet -e '.[bench]' || echo "bench extra not installed: peers/charts are skipped"
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info fuzz-out
