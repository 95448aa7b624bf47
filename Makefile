# Two entry points for a fresh machine (see README): `make serve` and `make test`.
# Both create .venv on first use and install the project into it (editable, with test extras).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
ARGS ?=
PYTEST_ARGS ?=

.PHONY: serve test venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

serve: $(STAMP)
	$(BIN)/bootserver serve $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build dist .pytest_cache
