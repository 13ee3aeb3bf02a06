# Every target builds .venv first, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp

.PHONY: venv constraints lint format test test-unit test-e2e demo check clean

venv: $(STAMP)

# constraints.txt pins the versions the suite was last run with (refresh: make constraints).
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[local,cli,dev]'
	touch $(STAMP)

constraints:
	$(BIN)/python -m pip freeze --exclude-editable > constraints.txt

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/cfn-lint template.yaml
	$(BIN)/python -c 'import json, pathlib, sys; [json.loads(p.read_text()) for p in pathlib.Path("stepfunctions").glob("*.asl.json")]'

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
	$(BIN)/dependency-tracker demo $(DEMO_ARGS)

check: lint test

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info src/*.egg-info
