# Two entry points for a fresh machine; both install what they need first.
#   make dashboard  - install moeproxy and open the dashboard on the bundled demo runs
#   make test       - install moeproxy with its test extras and run the whole suite
PYTHON ?= python3
# The CPU build of torch: a plain `pip install torch` on Linux may pull a multi-GB CUDA build.
TORCH_CPU ?= torch==2.13.0

.PHONY: install install-dev chromium dashboard test

install:
	$(PYTHON) -m pip install --quiet $(TORCH_CPU)
	$(PYTHON) -m pip install --quiet -e .

install-dev:
	$(PYTHON) -m pip install --quiet $(TORCH_CPU)
	$(PYTHON) -m pip install --quiet -e ".[dev]"

# Debian's chromium drives the browser tests (no browser download).
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

dashboard: install
	moeproxy dashboard

test: install-dev chromium
	$(PYTHON) -m pytest -q
