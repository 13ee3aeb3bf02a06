# Every target builds .venv first, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp

.PHONY: venv constraints lint format test test-unit test-e2e demo check clean bench bench-smoke chaos

venv: $(STAMP)

# constraints.txt pins the versions the suite was last run with (refresh: make constraints).
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[local,cli,dev]'
	touch $(STAMP)

constraints:
	$(BIN)/python -m pip freeze --exclude-editable > constraints.txt

# cfn-lint runs twice: on template.yaml, and on the template as CloudFormation receives it
# after the SAM transform (cfn-lint 1.x does not run the transform itself), which holds the
# functions, event source mappings, permissions and roles SAM generates.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/cfn-lint template.yaml
	$(BIN)/python scripts/sam_transform.py --output $${TMPDIR:-/tmp}/deptrack-transformed.json
	$(BIN)/cfn-lint $${TMPDIR:-/tmp}/deptrack-transformed.json
	$(BIN)/python -c 'import json, pathlib, sys; [json.loads(p.read_text()) for p in pathlib.Path("stepfunctions").glob("*.asl.json")]'

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Two workers, one test file each at a time (module-scoped stacks stay shared within a file):
# the suite is CPU-bound on moto and CI has two cores. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)

test: venv
	$(BIN)/pytest $(PYTEST_PARALLEL)

test-unit: venv
	$(BIN)/pytest $(PYTEST_PARALLEL) tests/unit

test-e2e: venv
	$(BIN)/pytest $(PYTEST_PARALLEL) tests/e2e

demo: venv
	$(BIN)/dependency-tracker demo $(DEMO_ARGS)

check: lint test

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info src/*.egg-info

# Benchmarks and cost model (docs/performance.md): about 30 minutes, writes bench/results.json.
# Joins at scale run at 100, 1,000 and 2,000 members; BENCH_ARGS=--join-sizes=100,1000,2000,5000
# adds 5,000 (about half an hour more on 2 cores). BENCH_ARGS="--only joins --merge" reruns one
# section into the existing results.json (python -m bench --help).
BENCH_ARGS ?=
bench: venv
	$(BIN)/python -m bench --output bench/results.json $(BENCH_ARGS)

# The same, tiny and in one process (well under a minute); the CI runs it as tests/bench.
bench-smoke: venv
	$(BIN)/python -m bench --smoke --output $${TMPDIR:-/tmp}/deptrack-bench-smoke.json

# Fault injection (tests/chaos): >= 200 parents, faults at random sites; prints the seed, the
# faults injected by kind and the invariant results. CHAOS_SEED / CHAOS_PARENTS to vary it.
# Then the hot partition (tests/chaos/test_hot.py, about 70 s): HOT_PARENTS real parents on one
# payload; prints the register / resolve / callbacks / total times, update-state's Query pages
# and the most UpdateItem calls it had in flight. Its own process: after the chaos run, about
# 260,000 more objects live in the process and moto's StartExecution is ~3x slower.
# Then the Map parent at scale (tests/chaos/test_map_scale.py): MAP_DEPENDENCIES dependencies
# by {"url"} with 100-character ids (about 5 minutes at 1,000), and its state limit reached by
# ~130 dependencies with 2,000-character ids; prints wall time, peak state and history events.
CHAOS_SEED ?= 2026
CHAOS_PARENTS ?= 200
HOT_PARENTS ?= 1000
MAP_DEPENDENCIES ?= 1000
# Last, issue 14's all-of join (tests/chaos/test_join_scale.py): JOIN_MEMBERS members named by
# a JSON Lines manifest (a quarter of them by {"url"}) through wait-for-join's dependencies_url,
# registered in chunks of 100; each member runs exactly once (counted from the member state
# machine's executions). Prints wall time, members/s, the parent's output and the join row's
# size (about 0.15-0.2 s a member on 2 cores: some 6 minutes at 2,000).
JOIN_MEMBERS ?= 2000
JOIN_ID_LENGTH ?= 61
chaos: venv
	DEPTRACK_CHAOS=1 DEPTRACK_CHAOS_SEED=$(CHAOS_SEED) DEPTRACK_CHAOS_PARENTS=$(CHAOS_PARENTS) \
		$(BIN)/pytest tests/chaos/test_chaos.py::test_big_chaos_run -q -p no:cacheprovider
	DEPTRACK_CHAOS=1 DEPTRACK_HOT_PARENTS=$(HOT_PARENTS) \
		$(BIN)/pytest tests/chaos/test_hot.py::test_big_hot_run -q -p no:cacheprovider
	DEPTRACK_CHAOS=1 DEPTRACK_MAP_DEPENDENCIES=$(MAP_DEPENDENCIES) \
		$(BIN)/pytest tests/chaos/test_map_scale.py -q -p no:cacheprovider
	DEPTRACK_CHAOS=1 DEPTRACK_JOIN_MEMBERS=$(JOIN_MEMBERS) DEPTRACK_JOIN_ID_LENGTH=$(JOIN_ID_LENGTH) \
		$(BIN)/pytest tests/chaos/test_join_scale.py -q -p no:cacheprovider
