# The two commands: `make run` (the service on the embedded store) and `make test` (everything CI runs).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# What each command installs: running needs the service and its fast parser;
# the tests (which also run the benchmarks' plumbing) and the benchmarks bring
# every extra.
EXTRAS_run := fast
EXTRAS_test := dev,fast,postgres,mcp,client,bench
EXTRAS_bench := $(EXTRAS_test)
PIP := $(PY) -m pip --quiet --quiet --disable-pip-version-check --no-input

.PHONY: run test lint typecheck pytest bench profile profiles clean

$(VENV)/.created:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "syncd needs Python 3.11+"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@touch $@

# One stamp per extras set: switching between commands installs what is missing.
# uv (from PyPI, into the venv) resolves and installs the same versions as pip
# in seconds where pip takes a minute (the test extras: 4 s against 63 s, warm
# caches), and every clean checkout, CI's included, pays it; pip does it
# where uv cannot be had.
$(VENV)/.installed-%: pyproject.toml $(VENV)/.created
	@echo "installing syncd[$(EXTRAS_$*)] into $(VENV) ..."
	@{ $(PIP) install uv >/dev/null 2>&1 && \
		$(VENV)/bin/uv pip install --quiet --python $(PY) -e '.[$(EXTRAS_$*)]' 2>/dev/null; } || \
		$(PIP) install -e '.[$(EXTRAS_$*)]'
	@touch $@

run: $(VENV)/.installed-run
	$(VENV)/bin/syncd serve

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check syncd tests perf
	$(VENV)/bin/ruff format --check syncd tests perf
	$(VENV)/bin/lint-imports

typecheck: $(VENV)/.installed-test
	$(VENV)/bin/mypy

# The suite runs in PYTEST_WORKERS processes (pytest-xdist), one test file to
# a worker at a time (--dist loadfile: a file's servers and fixtures stay in
# one process); its tests mostly wait on sockets and child processes (two
# workers kept a 2-core machine's cores about half busy), so three workers
# take its 4,700 tests from 8:05 with two to 6:16 (same clean clone, a quiet
# machine, one run each).
# schemathesis' generated cases do not run under xdist (they pass without
# running), so SERIAL_TESTS run on their own afterwards.
PYTEST_WORKERS ?= 3
SERIAL_TESTS := tests/http/test_schemathesis.py

pytest: $(VENV)/.installed-test
	$(PY) -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile \
		$(addprefix --ignore=,$(SERIAL_TESTS)) $(PYTEST_ARGS)
	$(PY) -m pytest -q -p no:cacheprovider $(SERIAL_TESTS)

test: $(VENV)/.installed-test
	bash scripts/check-prerequisites.sh
	bash scripts/ensure-browser.sh
	bash scripts/ensure-nginx.sh
	$(MAKE) --no-print-directory lint typecheck pytest
	npm test --prefix clients/js

bench: $(VENV)/.installed-bench
	$(PY) -m perf

profile: $(VENV)/.installed-bench
	$(PY) -m perf.tools.profile $(BENCH) $(if $(filter raw,$(FORMAT)),--raw,)

profiles: $(VENV)/.installed-bench
	$(PY) -m perf.tools.profile --missed

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
