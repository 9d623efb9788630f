# Two commands do all the set-up: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test checks lint typecheck unit clean vendor browser services hermes-venvs bytecode

# The suite starts some 150 Python processes (pytest workers, servers, demo gateways): they share the
# compiled bytecode instead of each compiling the sources again, whatever the environment says.
unexport PYTHONDONTWRITEBYTECODE

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

# The engine tests start PostgreSQL 15 and Redis servers of their own (throwaway, on loopback); install Debian's
# where they are missing (as root), leaving the packages' own services stopped.
services:
	@sh scripts/install-services.sh

# The real gateways' virtualenvs (hermes-agent 0.19.0 and the 0.22-era fork) are built while lint and mypy
# run, so no test waits for pip.
hermes-venvs: $(STAMP)
	$(VENV)/bin/python -m tests.real_hermes

# Compiled once before the workers start: the sources, and the tests as pytest rewrites their asserts.
bytecode: $(STAMP)
	$(VENV)/bin/pytest --collect-only -q -p no:cacheprovider >/dev/null

checks: lint typecheck hermes-venvs bytecode

# Each real gateway, each browser module and the OpenAPI fuzzing run in pytest worker groups of their own,
# so they overlap each other and the rest; four workers, as most tests wait on servers rather than compute.
# The 15 slowest tests are listed at the end, so growth shows.
test: browser services
	$(MAKE) --no-print-directory -j 3 checks
	$(VENV)/bin/pytest -n 4 --dist loadgroup --durations=15

# Refresh web/vendor/ (Preact, htm, marked, DOMPurify at the pinned versions) from npm. Only this
# target needs npm; the vendored files are committed.
vendor:
	sh scripts/vendor-web.sh

clean:
	rm -rf $(VENV) .venv-hermes .venv-hermes-next .pytest_cache .mypy_cache .ruff_cache test-artifacts
