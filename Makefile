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

.PHONY: install test demo bench lint clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[torch,tensorflow,dev]"
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

test: $(STAMP) $(TRITON_STAMP)
	$(MAKE) --no-print-directory lint
	$(VENV)/bin/pytest -q -p no:cacheprovider

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash sample_runs/demo.sh

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) demo_runs bench/results
