# Two commands do all the set-up: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit clean vendor browser

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

# The browser tests (Pheby Web) drive Debian's Chromium; install it where it is missing (as root).
browser:
	@command -v chromium >/dev/null 2>&1 || test -x /usr/bin/chromium || \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }

# The real-Hermes harness and the browser suite each run in their own pytest worker group, so they
# overlap the rest; the 15 slowest tests are listed at the end, so growth shows.
test: lint typecheck browser
	$(VENV)/bin/pytest -n 2 --dist loadgroup --durations=15

# Refresh web/vendor/ (Preact, htm, marked, DOMPurify at the pinned versions) from npm. Only this
# target needs npm; the vendored files are committed.
vendor:
	sh scripts/vendor-web.sh

clean:
	rm -rf $(VENV) .venv-hermes .venv-hermes-next .pytest_cache .mypy_cache .ruff_cache test-artifacts
