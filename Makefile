# One command each: make install | proto | shapes | operations | lint | typecheck | test | test-fast
# | bench | up
PY ?= python3

install:
	$(PY) -m pip install -e '.[dev]'
	if command -v npm >/dev/null 2>&1; then cd tests/js && npm ci --no-audit --no-fund; fi

proto:
	$(PY) -m rpc.generate

shapes:
	$(PY) -m router.generate_shapes

operations:
	$(PY) -m router.operations_table

lint:
	ruff check . && ruff format --check .

typecheck:
	mypy

test:
	$(PY) -m pytest -q

# A first check in under three minutes: the pure cores and the simulated clusters, no processes,
# without the few tests marked slow (fuzzing, the longest simulations), which `make test` runs.
# Both run on one pytest-xdist worker per core (addopts in pyproject.toml); `-n 0` runs in one.
test-fast:
	$(PY) -m pytest -q -m "not slow" tests/unit tests/sim

bench:
	$(PY) bench/expressions.py

up:
	dynalab up

.PHONY: install proto shapes operations lint typecheck test test-fast bench up
