# nnhal — two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PROTOS := $(wildcard protos/nnhal/proto/*.proto)
ADDR   ?= 127.0.0.1:50051
# Python caches the modules it compiles (__pycache__, git-ignored; pip installs with --no-compile,
# so they compile on first use). The suite starts hundreds of Python processes (servers, CLI
# runs, clients): with PYTHONDONTWRITEBYTECODE set in the environment nothing is cached and each
# of them compiled every module it imports again, half of a server's start-up CPU time.
unexport PYTHONDONTWRITEBYTECODE
# pytest-xdist workers for the suite (the tests use port 0 and private temporary folders);
# WORKERS=0 runs it in one process. One more worker than the two cores we test on: a test often
# waits (for a server to start or drain, a keepalive, a deadline) and another one runs meanwhile.
# The 20 slowest tests are listed after each run (keep it quick).
WORKERS ?= 3
PYTEST := $(PY) -m pytest -q -n $(WORKERS) --dist worksteal --durations=20

.PHONY: setup js-setup run test docs test-fast soak chaos proto proto-check lint format bench conformance fuzz clean

setup: $(STAMP)

# --no-compile: most installed modules are never imported; those that are compile on first use.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[dev,docs]'
	touch $(STAMP)

# The JavaScript client's npm packages (clients/js, the suite's client in another language).
# Without npm the step is skipped and so is that test, except in CI (CI=true): there it fails.
JS       := clients/js
JS_STAMP := $(JS)/node_modules/.installed

js-setup: $(JS_STAMP)

$(JS_STAMP): $(JS)/package.json $(JS)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd $(JS) && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	elif [ "$$CI" = true ]; then \
		echo "npm not found: CI needs Node.js and npm for the JavaScript client test (clients/js)" >&2; exit 1; \
	else \
		echo "npm not found: the JavaScript client test (clients/js) will be skipped" >&2; \
	fi

# A server with the default CPU device, and the demo client through it.
run: setup
	$(PY) -m nnhal run --start

# Everything CI runs: generated code is fresh, lint + types clean, the site builds, the whole suite.
test: setup js-setup proto-check lint docs
	$(PYTEST)

test-fast: setup js-setup
	$(PYTEST) -m "not slow"

# The suite with the stress loops at their full counts (the figures issue notes quote) and the
# whole public conformance set end to end (NNHAL_SOAK=1; `make test` runs smaller counts).
soak: setup
	NNHAL_SOAK=1 $(PYTEST)

# The documentation site (mkdocs.yml, docs/) into site/, strict: a broken link or anchor, or an API
# reference that does not resolve, fails the build. `$(VENV)/bin/mkdocs serve` previews it.
docs: setup
	$(VENV)/bin/mkdocs build --strict

# The adversarial suite (tests/adversarial: clients that never read, zero-window HTTP/2,
# mass sessions, oversized messages) with its attacks held longer (NNHAL_CHAOS=1; `make test`
# runs each for a few seconds).
chaos: setup
	NNHAL_CHAOS=1 $(PYTEST) tests/adversarial

proto: setup
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=. --pyi_out=. --grpc_python_out=. $(PROTOS)

proto-check: setup
	$(PY) -m nnhal.tools.protocheck

lint: setup
	$(VENV)/bin/ruff check nnhal tests
	$(VENV)/bin/ruff format --check nnhal tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

format: setup
	$(VENV)/bin/ruff format nnhal tests
	$(VENV)/bin/ruff check --fix nnhal tests

bench: setup
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) -m nnhal bench

conformance: setup
	$(PY) -m nnhal conformance conformance/vectors --start

# The fuzz campaign through a real server process over gRPC (tests/fuzz/server.py): NNHAL_FUZZ_SEED
# (default random, printed), NNHAL_FUZZ_EXAMPLES (20000 models, each with a request). The in-process
# campaign of the executor alone is `$(PY) -m tests.fuzz.campaign`.
fuzz: setup
	$(PY) -m tests.fuzz.server

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache $(JS)/node_modules
