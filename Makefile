# Two commands do all the set-up: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit clean

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/python local_dev.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy .

# The real-Hermes harness runs in its own pytest worker so the gateway start overlaps the rest.
test: lint typecheck
	$(VENV)/bin/pytest -n 2 --dist loadgroup

clean:
	rm -rf $(VENV) .venv-hermes .venv-hermes-next .pytest_cache .mypy_cache .ruff_cache
