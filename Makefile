# Every target sets itself up on a fresh machine: a .venv in the repo root, created if missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The CPU build of torch: installed from the local wheel when present so that pip never resolves
# a CUDA build from the registry.
TORCH_WHEEL := $(firstword $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl))
TORCH_SPEC := $(if $(TORCH_WHEEL),$(TORCH_WHEEL),torch==2.13.0)
TRITON_SPEC := triton==3.6.0
STAMP := $(VENV)/.installed
TRITON_STAMP := $(VENV)/triton/.installed

.PHONY: install test test-fast coverage demo bench fuzz lint clean

# pip compiles each installed file on one core (about half of the install); compileall uses
# all of them. Some packages ship files for other Pythons: their errors are pip's to ignore too.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --no-compile "$(TORCH_SPEC)"
	$(PIP) install -q --no-compile -e ".[torch,tensorflow,dev,trainers]"
	$(PY) -m compileall -q -j 0 "$$($(PY) -c "import sysconfig; print(sysconfig.get_path('purelib'))")" >/dev/null 2>&1 || true
	@if $(PIP) list 2>/dev/null | grep -qi '^nvidia-'; then \
		echo "error: a CUDA build of torch was installed; install the CPU wheel" >&2; exit 1; fi
	touch $(STAMP)

# triton apart, for its interpreter (tests/unit/test_fused_sum.py): never beside CPU torch.
# It publishes Linux wheels only.
$(TRITON_STAMP): $(STAMP)
	if [ "$$(uname -s)" = Linux ]; then \
		$(PIP) install -q --no-deps --upgrade --target $(VENV)/triton "$(TRITON_SPEC)"; fi
	mkdir -p $(VENV)/triton && touch $(TRITON_STAMP)

install: $(STAMP) $(TRITON_STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check divergence tests bench
	$(VENV)/bin/ruff format --check divergence tests bench
	$(VENV)/bin/mypy

# Everything, two workers; recordings are shared between them (tests/harness/recordings.py).
# The output ends with the 25 slowest tests and the total time, so that growth shows.
WORKERS ?= 2
PYTEST_PARALLEL := -n $(WORKERS) --dist worksteal
# The package compiled first: where PYTHONDONTWRITEBYTECODE is set, each recording would
# compile the recorder's modules anew. mypy (single-threaded, ~40 s on a fresh clone) runs
# beside the tests; its output and status come after theirs.
test: $(STAMP) $(TRITON_STAMP)
	@start=$$(date +%s); mkdir -p .cache; \
	$(VENV)/bin/ruff check divergence tests bench && \
	$(VENV)/bin/ruff format --check divergence tests bench && \
	$(PY) -m compileall -q divergence tests sample_runs >/dev/null; status=$$?; \
	if [ $$status -eq 0 ]; then \
		$(VENV)/bin/mypy >.cache/mypy.log 2>&1 & mypy=$$!; \
		$(VENV)/bin/pytest -q $(PYTEST_PARALLEL) --durations=25; status=$$?; \
		wait $$mypy; typed=$$?; cat .cache/mypy.log; \
		[ $$status -ne 0 ] || status=$$typed; \
	fi; \
	echo "make test: $$(( $$(date +%s) - start )) s in all (lint and tests)"; exit $$status

# The edit-test loop: unit, golden and doctests, in process only (no recording, no fit).
test-fast: $(STAMP) $(TRITON_STAMP)
	$(VENV)/bin/pytest -q -m "not slow" --in-process-only -n $(WORKERS) --durations=10

# Line coverage of divergence/, the processes the tests start included; recordings are made
# afresh (a cached one runs no code) by real processes, not forked from the tests' zygotes.
coverage: $(STAMP) $(TRITON_STAMP)
	rm -rf .cache/coverage && mkdir -p .cache/coverage
	@export COVERAGE_FILE=$(CURDIR)/.cache/coverage/data DIVERGE_TEST_CACHE=$(CURDIR)/.cache/coverage/runs DIVERGE_TEST_ZYGOTE=0; \
	$(VENV)/bin/coverage run -m pytest -q $(PYTEST_PARALLEL); status=$$?; \
	$(VENV)/bin/coverage combine -q && \
	$(VENV)/bin/coverage report --sort=cover | tail -n 25 && \
	echo "line coverage of divergence/: $$($(VENV)/bin/coverage report --format=total)%"; \
	exit $$status

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash sample_runs/demo.sh

bench: $(STAMP)
	$(PY) bench/run.py

# Seeded mutants (bit flips, zeroed ranges, truncations, appended bytes, renamed names, special
# files) of a run recorded now and of the format-1 fixture, each read by `diverge info` and
# `diverge compare` under a time limit (tests/fuzz): the counts of each outcome; exit 1 on a
# traceback, hang, internal error, or a format-2 mutant read as a divergence or as identical.
FUZZ_MUTANTS ?= 1000
FUZZ_SEED ?= 1
fuzz: $(STAMP)
	$(PY) -m tests.fuzz --mutants $(FUZZ_MUTANTS) --seed $(FUZZ_SEED) --jobs $(WORKERS)

clean:
	rm -rf $(VENV) .cache demo_runs bench/results
