# Weave: one command to run the demo, one to run the tests. Both set up .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | cksum | cut -d' ' -f1)

.PHONY: run test matrix test-deps reference bench bench-stale bench-ox-venv bench-history chaos hosts lint docs dist mutate venv clean

venv: $(STAMP)

$(STAMP): requirements.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

## make run: the demo site, qcluster and fake services on SQLite (Ctrl-C stops all of it)
run: $(STAMP)
	PY=$(PY) bash scripts/run.sh

## make test: sets up what the tests need (scripts/test-deps.sh: Debian packages, axe-core, Redis; root or
## sudo), then the whole suite on SQLite and on PostgreSQL with CI=true: a test that misses a tool fails, none
## is skipped (see docs/contributing.md). CI=false keeps the old local behaviour (skips, SQLite-only fallback).
test: $(STAMP) test-deps
	CI=$${CI:-true} PY=$(PY) bash scripts/test.sh $(ARGS)

## make test-deps: only the set-up part of make test
test-deps:
	bash scripts/test-deps.sh

## make bench: the benchmarks on the local PostgreSQL (database weave_bench); ARGS="--quick" for a smoke run
bench: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	$(PY) bench/run.py $(ARGS)

## make bench-stale: bench/stale_writes.py (stale writes and 10,000 trivial tasks: Weave, django-tasks-db,
## django-ox) on the local PostgreSQL; django-ox runs in its own Python 3.12 venv, bench/.venv-ox
bench-stale: $(STAMP) $(OX_VENV)/.installed
	$(PY) -m pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	BENCH_DATABASE_URL=$${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/weave_bench} \
		$(PY) bench/stale_writes.py $(ARGS)

## make bench-ox-venv: the django-ox anchor's venv (bench/requirements-ox.txt) on PYTHON312, outside the product
OX_VENV := bench/.venv-ox
# A python3.12 on PATH that runs (a pyenv shim may not), else the newest pyenv 3.12.
PYTHON312 ?= $(or $(shell python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null),$(lastword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12)))
bench-ox-venv: $(OX_VENV)/.installed

$(OX_VENV)/.installed: bench/requirements-ox.txt
	@test -x $(OX_VENV)/bin/python || $(PYTHON312) -m venv $(OX_VENV)
	$(OX_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r bench/requirements-ox.txt
	@touch $@

## make bench-history: a drain, a /metrics scrape and the dashboard on empty tables, then on 5 million finished
## notifications and as many attempts (database weave_bench_history; several minutes)
bench-history: $(STAMP)
	$(PY) bench/history.py $(ARGS)

## make chaos: the full chaos audit on PostgreSQL (N=10,000, M=200, 4 clusters, 60 devices, 6 provider-edge
## fault windows; a few minutes)
CHAOS_ARGS ?= -n 10000 -m 200 -k 4 --kills 3 --stops 4 --restarts 2 --devices 60 --edge-faults 6
chaos: $(STAMP)
	PY=$(PY) bash scripts/chaos.sh $(CHAOS_ARGS) $(ARGS)

## make hosts: three simulated hosts (network namespaces, clocks 5 min apart) against one PostgreSQL (root)
hosts: $(STAMP)
	WEAVE_HOSTS_TEST=1 DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/weave_hosts} \
		$(PY) -m pytest -m hosts tests/e2e/test_many_hosts.py -s $(ARGS)

## make lint: ruff (rules and format), mypy (strict on the shipped packages), import-linter (the layers),
## every relative link and anchor in README.md and docs/, the generated reference pages up to date, and the
## documentation site built with warnings as errors
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DEBUG=$${DEBUG:-true} $(VENV)/bin/mypy  # the django-stubs plugin loads demo.settings: development mode
	$(VENV)/bin/lint-imports
	$(PY) -m tools.check_links
	$(PY) -m tools.docs_reference --check
	$(PY) -m mkdocs build --strict --quiet --site-dir .run/site-check

## make docs: the documentation site in site/ (offline); `make reference` rewrites the pages generated from the code
docs: $(STAMP)
	$(PY) -m mkdocs build --strict

reference: $(STAMP)
	$(PY) -m tools.docs_reference --write

## make dist: the sdist and the wheel in dist/, built offline from a clean tree, checked with twine
dist: $(STAMP)
	rm -rf dist build *.egg-info
	$(PY) -m build --no-isolation --outdir dist .
	rm -rf build *.egg-info
	$(VENV)/bin/twine check --strict dist/*

## make matrix: every other supported Django and Python combination (noxfile.py): the unit suite and a task on qcluster
matrix: $(STAMP)
	PY=$(PY) bash scripts/matrix.sh $(ARGS)

## make mutate: break each promise in tools/mutations.toml in turn; fails if a test suite misses one (before a release)
mutate: $(STAMP)
	$(PY) -m tools.mutate $(ARGS)

clean:
	rm -rf $(VENV) db.sqlite3* test_db.sqlite3* .run site dist .mutate
