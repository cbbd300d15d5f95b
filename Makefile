# Everything a fresh machine needs, from the project's own files.
#   make demo   - set up, then run `ringleader demo` (coordinator + local workers + one sweep)
#   make test   - set up, check the generated stubs, run the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build on CI and dev machines; an unpinned torch would pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: setup demo test protos
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

demo: setup
	$(VENV)/bin/ringleader demo

test: setup
	$(PY) scripts/genproto.py --check
	$(PY) -m pytest

protos: setup
	$(PY) scripts/genproto.py
