# Every target builds .venv first, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp

.PHONY: venv venv-cirrus constraints lint format test test-unit test-e2e test-cirrus demo demo-cirrus check clean \
	bench bench-smoke bench-timing bench-100k bench-registration chaos build build-host test-artifact

venv: $(STAMP)

# constraints.txt pins the versions the suite was last run with (refresh: make constraints).
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[local,cli,dev]'
	touch $(STAMP)

constraints:
	$(BIN)/python -m pip freeze --exclude-editable > constraints.txt

# The cirrus tier (tests/cirrus) runs cirrus-geo 2.0.0's own process and update_state Lambdas
# in the embedded stack; cirrus-geo needs Python >= 3.12, so the tier has a venv of its own:
# the project as in .venv (constraints.txt), plus cirrus-geo and what its Lambdas import
# (constraints-cirrus.txt, installed --no-deps: see the file). PYTHON_CIRRUS picks the
# interpreter; by default the first that runs and is >= 3.12 of: python3.12 on PATH (a pyenv
# shim may exist and still fail), the newest pyenv 3.12.x, the newest pyenv 3.13.x.
CIRRUS_VENV := .venv-cirrus
CIRRUS_BIN := $(CIRRUS_VENV)/bin
CIRRUS_STAMP := $(CIRRUS_VENV)/.stamp
_PYENV_ROOTS := $(sort /root/.pyenv $(HOME)/.pyenv $(PYENV_ROOT))
PYTHON_CIRRUS ?= $(shell for p in python3.12 \
	$$(ls -d $(foreach r,$(_PYENV_ROOTS),$(r)/versions/3.12*/bin/python3.12) 2>/dev/null | sort -rV) \
	$$(ls -d $(foreach r,$(_PYENV_ROOTS),$(r)/versions/3.13*/bin/python3.13) 2>/dev/null | sort -rV); do \
	"$$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && { echo "$$p"; break; }; \
	done)
# Both handlers must import (cirrus builds boto3 clients at import: it needs a region).
CIRRUS_IMPORT_CHECK := AWS_DEFAULT_REGION=us-east-1 CIRRUS_LOG_LEVEL=WARNING $(CIRRUS_BIN)/python -c \
	'import cirrus.lambda_functions.process, cirrus.lambda_functions.update_state'

venv-cirrus: $(CIRRUS_STAMP)

$(CIRRUS_STAMP): pyproject.toml constraints.txt constraints-cirrus.txt
	@test -x $(CIRRUS_BIN)/python || { \
		py='$(PYTHON_CIRRUS)'; \
		if [ -z "$$py" ] || ! "$$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then \
			echo "make venv-cirrus: cirrus-geo 2.0.0 needs Python >= 3.12 and none was found" \
				"(looked for python3.12 on PATH and pyenv 3.12/3.13 under $(_PYENV_ROOTS))." \
				"Install one, or name it: make venv-cirrus PYTHON_CIRRUS=/path/to/python3.12" >&2; \
			exit 1; \
		fi; \
		echo "$$py -m venv $(CIRRUS_VENV)"; \
		"$$py" -m venv $(CIRRUS_VENV); \
	}
	@# Git ignores the venv from inside (as Python 3.13's venv does): no .gitignore entry needed.
	@echo '*' > $(CIRRUS_VENV)/.gitignore
	$(CIRRUS_BIN)/python -m pip install --quiet --upgrade pip
	$(CIRRUS_BIN)/python -m pip install --quiet -c constraints.txt -e '.[local,cli,dev]'
	$(CIRRUS_BIN)/python -m pip install --quiet --no-deps -r constraints-cirrus.txt
	$(CIRRUS_IMPORT_CHECK)
	$(CIRRUS_BIN)/cirrus --help > /dev/null
	touch $(CIRRUS_STAMP)

# The Lambda artifact (docs/deploy.md#build): src/requirements.txt's exact pins as
# manylinux2014 aarch64 wheels for CPython 3.13, the tracker without local/, cli/ and the demos,
# and a .pyc for every module (scripts/build_lambda.py), in build/lambda. It needs Python 3.13,
# the runtime's version; PYTHON_LAMBDA names one, else python3.13 on PATH (a pyenv shim may
# exist and still fail) or the newest pyenv 3.13.x. No .venv needed: a fresh machine with 3.13
# and make builds it. build-host is the same for this machine's platform: the artifact tests
# import the handlers from it (aarch64 extension modules do not load on x86_64).
PYTHON_LAMBDA ?= $(shell for p in python3.13 \
	$$(ls -d $(foreach r,$(_PYENV_ROOTS),$(r)/versions/3.13*/bin/python3.13) 2>/dev/null | sort -rV); do \
	"$$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' >/dev/null 2>&1 && { echo "$$p"; break; }; \
	done)
LAMBDA_DIR ?= build/lambda
LAMBDA_STAMP ?= build/.lambda.stamp
LAMBDA_HOST_DIR := build/lambda-host
LAMBDA_SOURCES := src/requirements.txt scripts/build_lambda.py $(shell find src/dependency_tracker \
	stepfunctions -type f -not -name '*.pyc' -not -path 'src/dependency_tracker_local/*' \
	-not -path 'src/dependency_tracker_cli/*' 2>/dev/null)
define build_lambda
@py='$(PYTHON_LAMBDA)'; \
	if [ -z "$$py" ]; then \
		echo "make build: the Lambda artifact needs Python 3.13 (the python3.13 runtime's .pyc" \
			"format) and none was found (looked for python3.13 on PATH and pyenv 3.13.x under" \
			"$(_PYENV_ROOTS)). Install one (e.g. pyenv install 3.13), or name it:" \
			"make build PYTHON_LAMBDA=/path/to/python3.13" >&2; \
		exit 1; \
	fi; \
	echo "$$py scripts/build_lambda.py --output $(1) $(2)"; \
	"$$py" scripts/build_lambda.py --output "$(1)" $(2)
endef

build: $(LAMBDA_STAMP)
$(LAMBDA_STAMP): $(LAMBDA_SOURCES)
	$(call build_lambda,$(LAMBDA_DIR))
	touch $@

build-host: build/.lambda-host.stamp
build/.lambda-host.stamp: $(LAMBDA_SOURCES)
	$(call build_lambda,$(LAMBDA_HOST_DIR),--platform manylinux2014_$(shell uname -m))
	touch $@

# sam build: every function has Metadata BuildMethod makefile and WorkingDirectory "."
# (template.yaml), so SAM runs these targets here (src/Makefile includes this file) with
# ARTIFACTS_DIR set: the artifact it deploys is make build's. SAM builds each makefile function
# on its own (in parallel with sam build --parallel), so each target takes turns on a lock,
# runs make build (the first builds the artifact, the others find it current) and copies it
# to its ARTIFACTS_DIR (scripts/sam_build_function.py): one build, five identical folders,
# which sam deploy uploads as one zip (it names uploads by content and skips one already there).
build-ProcessFunction build-UpdateStateFunction build-CallbackFunction build-SweeperFunction \
build-CirrusEventsFunction:
	$(PYTHON) scripts/sam_build_function.py --artifacts-dir "$(ARTIFACTS_DIR)" \
		--lambda-dir $(LAMBDA_DIR) -- $(MAKE) --no-print-directory build

# Deploy (docs/deploy.md, Alarm notifications): sam build, then sam deploy with where the alarms
# go. Without ALARM_EMAIL or ALARM_TOPIC_ARN it refuses (the alarms would notify nobody) unless
# NO_ALARM_NOTIFICATIONS=1 says that is meant. Only the alarm parameters and PARAMETER_OVERRIDES
# (Key=Value ..., e.g. what `dependency-tracker cirrus-params NAME` names) are passed, in one
# --parameter-overrides (SAM keeps the last one given): on a stack that exists, sam deploy keeps
# every other parameter's previous value. DEPLOY_ARGS go to sam deploy as they are (--guided,
# --stack-name NAME, ...; not --parameter-overrides: use PARAMETER_OVERRIDES).
.PHONY: deploy deploy-check
ALARM_EMAIL ?=
ALARM_TOPIC_ARN ?=
NO_ALARM_NOTIFICATIONS ?=
PARAMETER_OVERRIDES ?=
DEPLOY_ARGS ?=
SAM ?= sam
ALARM_OVERRIDES = $(if $(ALARM_EMAIL),AlarmEmail=$(ALARM_EMAIL)) \
	$(if $(ALARM_TOPIC_ARN),AlarmTopicArn=$(ALARM_TOPIC_ARN)) $(PARAMETER_OVERRIDES)
deploy-check:
	@if [ -z '$(strip $(ALARM_EMAIL)$(ALARM_TOPIC_ARN))' ] && [ '$(NO_ALARM_NOTIFICATIONS)' != 1 ]; then \
		echo "make deploy: the stack's alarms would notify nobody. Name where they go:" \
			"make deploy ALARM_EMAIL=you@example.com (a new SNS topic; confirm its e-mail)" \
			"or ALARM_TOPIC_ARN=arn:aws:sns:REGION:ACCOUNT:TOPIC (an existing topic);" \
			"or say that is meant: NO_ALARM_NOTIFICATIONS=1 (docs/deploy.md, Alarm notifications)" >&2; \
		exit 2; \
	fi

deploy: deploy-check
	$(SAM) build
	$(SAM) deploy $(DEPLOY_ARGS) $(if $(strip $(ALARM_OVERRIDES)),--parameter-overrides $(strip $(ALARM_OVERRIDES)))

# The artifact tier (tests/artifact): the packaged versions are the pins, nothing else is
# packaged, every module has its .pyc, and each handler imports in a bare Python 3.13 from the
# artifact alone; writes build/artifact-report.json (size, versions, import times) and prints
# it in the test summary.
ARTIFACT_TIER = DEPTRACK_ARTIFACT_TIER=1 DEPTRACK_LAMBDA_PYTHON='$(PYTHON_LAMBDA)' \
	DEPTRACK_ARTIFACT_DIR=$(LAMBDA_DIR) DEPTRACK_ARTIFACT_HOST_DIR=$(LAMBDA_HOST_DIR) \
	$(BIN)/pytest tests/artifact -p no:cacheprovider -q
test-artifact: venv build build-host
	$(ARTIFACT_TIER)

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

# Three workers on CI's two cores, one test file each at a time (module-scoped stacks stay
# shared within a file): the suite is CPU-bound on moto, but its end-to-end tests also wait on
# timed state machines, and a third worker fills those waits (measured on 2 cores: 386 s with
# two workers, 331 s with three). PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 3
PYTEST_PARALLEL = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)

# The main suite (tests/cirrus is not collected in .venv), then the cirrus tier in .venv-cirrus.
# .venv-cirrus is built while the main suite runs (pip waits on the network, the suite on the
# CPU): on a fresh clone that takes its minute or two off the wall time. Its log is printed
# only if it fails.
# The Lambda artifact and its host-platform twin are built the same way, beside it, then the
# artifact tier runs last. Without a Python 3.13 that tier fails in CI (CI=true) and is
# skipped, loudly, elsewhere.
CIRRUS_VENV_LOG := $${TMPDIR:-/tmp}/deptrack-venv-cirrus.log
ARTIFACT_LOG := $${TMPDIR:-/tmp}/deptrack-build-lambda.log
# --durations=15: every log names the slowest tests (the suite aims at 7 minutes on 2 cores).
test: venv
	@$(MAKE) --no-print-directory venv-cirrus > $(CIRRUS_VENV_LOG) 2>&1 & builder=$$!; \
	if [ -n '$(PYTHON_LAMBDA)' ] || [ "$$CI" = true ]; then \
		$(MAKE) --no-print-directory build build-host > $(ARTIFACT_LOG) 2>&1 & artifact=$$!; \
	else artifact=; fi; \
	$(BIN)/pytest $(PYTEST_PARALLEL) --durations=15; suite=$$?; \
	if ! wait $$builder; then cat $(CIRRUS_VENV_LOG) >&2; exit 1; fi; \
	if [ -n "$$artifact" ] && ! wait $$artifact; then cat $(ARTIFACT_LOG) >&2; exit 1; fi; \
	test $$suite -eq 0 || exit $$suite; \
	echo "DEPTRACK_CIRRUS_TIER=1 $(CIRRUS_BIN)/pytest $(PYTEST_PARALLEL) tests/cirrus"; \
	DEPTRACK_CIRRUS_TIER=1 $(CIRRUS_BIN)/pytest $(PYTEST_PARALLEL) tests/cirrus || exit $$?; \
	if [ -z "$$artifact" ]; then \
		echo "make test: SKIPPED the artifact tier (tests/artifact): no Python 3.13 found;" \
			"make build needs one (PYTHON_LAMBDA=...)" >&2; exit 0; \
	fi; \
	echo "$(ARTIFACT_TIER)"; \
	$(ARTIFACT_TIER)

test-unit: venv
	$(BIN)/pytest $(PYTEST_PARALLEL) tests/unit

test-e2e: venv
	$(BIN)/pytest $(PYTEST_PARALLEL) tests/e2e

# cirrus-geo 2.0.0's own Lambdas in the embedded stack (DEPTRACK_CIRRUS_TIER=1: a cirrus that
# does not import is an error here, never a skip).
test-cirrus: venv-cirrus
	DEPTRACK_CIRRUS_TIER=1 $(CIRRUS_BIN)/pytest $(PYTEST_PARALLEL) tests/cirrus

demo: venv
	$(BIN)/dependency-tracker demo $(DEMO_ARGS)

# The demo beside cirrus-geo: its own process and update_state Lambdas run every payload
# (cirrus-geo 2.0.0 needs Python >= 3.12: .venv-cirrus).
demo-cirrus: venv-cirrus
	$(CIRRUS_BIN)/dependency-tracker demo --cirrus $(DEMO_ARGS)

check: lint test

clean:
	rm -rf $(VENV) $(CIRRUS_VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info src/*.egg-info

# Benchmarks and cost model (docs/performance.md): under an hour on 2 cores. Every figure goes
# to build/bench/results.json (git-ignored); the counts per member and the cost model, what
# carries over to AWS, to the committed bench/summary.json. Joins at scale run at 100, 1,000,
# 2,000 and 10,000 members with the platform model on (the 10,000-member join alone takes 25 to
# 40 minutes); BENCH_ARGS=--join-sizes=100,1000,2000 leaves it out. BENCH_ARGS="--only joins
# --merge" reruns one section into the existing results (python -m bench --help). The call
# budgets (bench/budgets.json) are checked by make test (tests/bench/test_budgets.py).
BENCH_ARGS ?=
bench: venv
	$(BIN)/python -m bench --output build/bench/results.json --summary bench/summary.json $(BENCH_ARGS)

# Optional: one 100,000-member join by manifest, end to end on the embedded stack with the
# platform model on (goal: 45 minutes on 2 cores); its own results file, build/bench/join-100k.json.
bench-100k: venv
	$(BIN)/python -m bench --output build/bench/join-100k.json --only joins --join-sizes=100000

# A join registered against Step Functions' StartExecution bucket (rates divided by 100),
# paced and unpaced, as a ratio to the bucket's floor (about 6 minutes on 2 cores);
# build/bench/registration.json. REGISTRATION_ARGS="--members 500" and so on
# (python -m bench.registration --help).
bench-registration: venv
	$(BIN)/python -m bench.registration --output build/bench/registration.json $(REGISTRATION_ARGS)

# The same, tiny and in one process (well under a minute); the CI runs it as tests/bench.
bench-smoke: venv
	$(BIN)/python -m bench --smoke --output $${TMPDIR:-/tmp}/deptrack-bench-smoke.json

# Optional, this machine's wall-clock figures (not run by make test or make bench): throughput
# of the local pipeline, the engine bound calibrated call by call through the tracker's own
# stores, per-thread CPU, joins of 100 and 1,000 members against their bound; writes
# build/bench/timing.json. TIMING_ARGS=--smoke: a tiny run, about 40 s (python -m bench.timing --help).
TIMING_ARGS ?=
bench-timing: venv
	$(BIN)/python -m bench.timing --output build/bench/timing.json $(TIMING_ARGS)

# Fault injection (tests/chaos): >= 200 parents, faults at random sites; prints the seed, the
# faults injected by kind and the invariant results. CHAOS_SEED / CHAOS_PARENTS to vary it.
# Then a join's own faults (tests/chaos/test_join_faults.py): two all-of joins of
# JOIN_FAULT_MEMBERS members in the default chunks of 100, one whose join_id another parent
# reuses, one whose manifest is overwritten after its first chunk; prints the chaos report.
# Then the hot partition (tests/chaos/test_hot.py, about 70 s): HOT_PARENTS real parents on one
# payload; prints the register / resolve / callbacks / total times, update-state's Query pages
# and the most UpdateItem calls it had in flight. Its own process: after the chaos run, about
# 260,000 more objects live in the process and moto's StartExecution is ~3x slower.
# Then the Map parent at scale (tests/chaos/test_map_scale.py): MAP_DEPENDENCIES dependencies
# by {"url"} with 100-character ids (about 5 minutes at 1,000), and its state limit reached by
# ~130 dependencies with 2,000-character ids; prints wall time, peak state and history events.
CHAOS_SEED ?= 2026
CHAOS_PARENTS ?= 200
JOIN_FAULT_MEMBERS ?= 150
HOT_PARENTS ?= 1000
MAP_DEPENDENCIES ?= 1000
# Last, the all-of join at scale (tests/chaos/test_join_scale.py): JOIN_MEMBERS members named by
# a JSON Lines manifest (a quarter of them by {"url"}) through wait-for-join's dependencies_url,
# registered in chunks of 100 with the platform model on (a chained registration would be
# stopped by Lambda's recursive-loop detection at its 17th chunk); each member runs exactly once
# (counted from the member state machine's executions). Prints wall time, members/s, the
# parent's output, the join row's size and the records loop detection stopped (none).
JOIN_MEMBERS ?= 3000
JOIN_ID_LENGTH ?= 61
chaos: venv
	DEPTRACK_CHAOS=1 DEPTRACK_CHAOS_SEED=$(CHAOS_SEED) DEPTRACK_CHAOS_PARENTS=$(CHAOS_PARENTS) \
		$(BIN)/pytest tests/chaos/test_chaos.py::test_big_chaos_run -q -p no:cacheprovider
	DEPTRACK_CHAOS=1 DEPTRACK_JOIN_FAULT_MEMBERS=$(JOIN_FAULT_MEMBERS) \
		$(BIN)/pytest tests/chaos/test_join_faults.py::test_join_faults_at_scale -q -p no:cacheprovider
	DEPTRACK_CHAOS=1 DEPTRACK_HOT_PARENTS=$(HOT_PARENTS) \
		$(BIN)/pytest tests/chaos/test_hot.py::test_big_hot_run -q -p no:cacheprovider
	DEPTRACK_CHAOS=1 DEPTRACK_MAP_DEPENDENCIES=$(MAP_DEPENDENCIES) \
		$(BIN)/pytest tests/chaos/test_map_scale.py -q -p no:cacheprovider
	DEPTRACK_CHAOS=1 DEPTRACK_JOIN_MEMBERS=$(JOIN_MEMBERS) DEPTRACK_JOIN_ID_LENGTH=$(JOIN_ID_LENGTH) \
		$(BIN)/pytest tests/chaos/test_join_scale.py -q -p no:cacheprovider
