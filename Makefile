# One set of entry points for humans and CI.
#   make demo   run the word-count example on the embedded broker and print its output
#   make test   install everything into .venv, then lint, type-check and run every test
#   make bench  the benchmarks (ratios measured side by side in one run)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint check bench clean

$(STAMP): setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m samzamp.cli.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check samzamp tests bench
	$(VENV)/bin/mypy samzamp

test: lint
	$(VENV)/bin/pytest -q

bench: $(STAMP)
	$(PY) bench/noop.py

clean:
	rm -rf $(VENV) build *.egg-info
