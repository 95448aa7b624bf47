# Two entry points for a fresh machine (see README): `make serve` and `make test`.
# Both create .venv on first use and install the project into it (editable, with test extras).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (docs/testing.md, "Time"): the QEMU boots on one, the rest beside them
TEST_WORKERS ?= 2

.PHONY: serve test lint venv clean bench bench-deps screenshots playground

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

serve: $(STAMP)
	$(BIN)/bootserver serve $(ARGS)

test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# Static checks, before the tests: ruff's rule set ([tool.ruff] in pyproject.toml), the import
# contracts (lint-imports: [tool.importlinter], the layers of docs/design.md), the type check of
# bootserver/ (mypy: [tool.mypy]) and its dead code (vulture: [tool.vulture]).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/vulture

# The live page's screenshots in docs/screenshots/ (README, "Watching a fleet"): a real serve with a
# seeded timeline, photographed by Debian's chromium (.ci/apt-packages.txt) through Playwright.
screenshots: $(STAMP)
	$(BIN)/python benchmarks/screenshots.py docs/screenshots

# The playground (README, "Quick start"): installs what it needs as .ci/run does (.ci/install-packages:
# apt, as root or through sudo), then takes three QEMU machines through their whole life (install, reboot,
# boot-once, check-in) with a stand-in CoreOS built from Debian's parts, through a local server on loopback.
# PLAYGROUND_ARGS goes to benchmarks/playground.py (e.g. --minutes 5, --screenshot PNG).
PLAYGROUND_ARGS ?=
playground: $(STAMP)
	bash .ci/install-packages
	$(BIN)/python benchmarks/playground.py $(PLAYGROUND_ARGS)

# Benchmarks (docs/benchmarks.md): all four issue-8 runs, one after the other, on 127.0.0.1.
# BENCH_ARGS goes to artifacts.py, scripts.py and boot_storm.py (e.g. BENCH_ARGS='--workers 2').
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python benchmarks/artifacts.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/scripts.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/cold_cache.py
	$(BIN)/python benchmarks/boot_storm.py $(BENCH_ARGS)

# Debian packages the benchmarks run (nginx for the comparison, wrk, curl, /usr/bin/time; needs root)
# and the `bench` extra (py-spy, for scripts.py --profile; uvloop, for event_loops.py).
bench-deps: $(STAMP)
	apt-get install -y --no-install-recommends $$(cat benchmarks/apt-packages.txt)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache .import_linter_cache .grimp_cache
