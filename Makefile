# Every target builds .venv first, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp

.PHONY: venv lint format test test-unit test-e2e demo check clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[local,cli,dev]'
	touch $(STAMP)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m json.tool --no-ensure-ascii stepfunctions/*.asl.json > /dev/null

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: venv
	$(BIN)/pytest

test-unit: venv
	$(BIN)/pytest tests/unit

test-e2e: venv
	$(BIN)/pytest tests/e2e

demo: venv
	$(BIN)/dependency-tracker demo

check: lint test

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info src/*.egg-info
