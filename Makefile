# Two entry points for a fresh machine; both install what they need first, into a virtual
# environment of the checkout (.venv), so they work on a system Python that refuses pip (PEP 668).
#   make dashboard  - install moeproxy and open the dashboard on the bundled demo runs
#   make test       - install moeproxy with its test extras and run the whole suite
# On a GPU/NPU host with its own torch: python3 -m venv --system-site-packages .venv, then make ...
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch: a plain `pip install torch` on Linux may pull a multi-GB CUDA build.
TORCH_CPU ?= torch==2.13.0

.PHONY: install install-dev chromium dashboard test

$(PY):
	$(PYTHON) -m venv $(VENV)

install: $(PY)
	$(PY) -m pip install --quiet $(TORCH_CPU)
	$(PY) -m pip install --quiet -e .

install-dev: $(PY)
	$(PY) -m pip install --quiet $(TORCH_CPU)
	$(PY) -m pip install --quiet -e ".[dev]"

# Debian's chromium drives the browser tests (no browser download).
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

dashboard: install
	$(VENV)/bin/moeproxy dashboard

test: install-dev chromium
	$(PY) -m pytest -q
