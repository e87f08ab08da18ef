# The two commands: `make run` (the service on the embedded store) and `make test` (everything CI runs).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= dev,fast,postgres,mcp,client,bench

.PHONY: run test lint typecheck pytest bench profile profiles clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "syncd needs Python 3.11+"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/syncd serve

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check syncd tests perf
	$(VENV)/bin/ruff format --check syncd tests perf
	$(VENV)/bin/lint-imports

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

pytest: $(VENV)/.installed
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

test: $(VENV)/.installed
	bash scripts/check-prerequisites.sh
	bash scripts/ensure-browser.sh
	$(MAKE) --no-print-directory lint typecheck pytest
	npm test --prefix clients/js

bench: $(VENV)/.installed
	$(PY) -m perf

profile: $(VENV)/.installed
	$(PY) -m perf.profile $(BENCH) $(if $(filter raw,$(FORMAT)),--raw,)

profiles: $(VENV)/.installed
	$(PY) -m perf.profile --missed

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
