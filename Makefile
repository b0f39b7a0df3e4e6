# Self-contained entry points: `make run` (the embedded default study), `make test` (the fast tests) and
# `make test-services` (the tests that run real services: DVC pipelines, an MLflow server, Slurm, a browser).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
JOBS ?= 2

.PHONY: setup run study plots test test-services test-slow bench gpu-check docs docs-build clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,offline-data,docs]'
	touch $@

setup: $(VENV)/.installed

run: setup
	@start=$$(date +%s); \
	roar pipeline --jobs $(JOBS) --remake-missing && \
	echo "[roar] make run: $$(( $$(date +%s) - start )) s" && \
	echo "[roar] report: reports/racu.csv, reports/curves.csv, reports/points.csv" && \
	if [ -n "$$MLFLOW_TRACKING_URI" ]; then echo "[roar] MLflow: $$MLFLOW_TRACKING_URI"; \
	else echo "[roar] MLflow UI: $(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db --host 127.0.0.1"; fi && \
	echo "[roar] the study's runs: $$(roar mlflow-url)"

# Another study side by side: `make study STUDY=rotten-tomatoes` (folders under studies/, `roar study list`).
study: setup
	@test -n "$(STUDY)" || { echo "usage: make study STUDY=<name>; studies: $$(roar study list | cut -d' ' -f1 | xargs)"; exit 2; }
	roar pipeline --study $(STUDY) --jobs $(JOBS)

# The ROAR curves of every study with `dvc plots show`, vega inlined so that the page renders offline.
plots: setup
	test -f .dvc/plots/offline.html || roar plots-offline
	dvc plots show

test: setup
	$(BIN)/python -m pytest -q --durations=12 -m "not slow and not services"

# tests/pipeline/ (marked `services` by tests/conftest.py); .ci/run starts Slurm and installs chromium first
test-services: setup
	$(BIN)/python -m pytest -q --durations=12 -m "services and not slow"

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

bench: setup
	$(BIN)/python bench/bench_integrated_gradients.py

gpu-check: setup
	$(BIN)/python bench/gpu_check.py

# The docs site (mkdocs.yml, docs/): served on 127.0.0.1 while you edit, or built as CI builds it
# (--strict: a broken link or docstring cross-reference fails the build).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve -a 127.0.0.1:8000

docs-build: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf data/prepared data/masked models/* results reports/*.csv mlflow.db mlartifacts .dvc/tmp site
