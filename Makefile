# Two entry points: `make run` (whole campaign on the embedded default) and `make test` (the full suite, as CI runs it);
# `make check` is the fast tier to run on every edit.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := true
export DVC_NO_ANALYTICS := 1
export TOKENIZERS_PARALLELISM := false
export PREFECT_HOME := $(CURDIR)/.prefect
# DVC's state and index inside the checkout, by environment: a path in .dvc/config.local would follow a copied
# or moved checkout and point at the original's folder
export DVC_SITE_CACHE_DIR := $(CURDIR)/.dvc/site-cache
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: install run test check serve ui screenshots figures push pull bench bench-sage bench-compound summary clean-outputs help

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

install: $(STAMP)  ## create .venv and install (idempotent)

run: install  ## run the campaign of params.yaml (the embedded default: 2 cycles) through the Prefect flow
	$(BIN)/python -m flows.campaign

test: install  ## the full test suite (what CI runs), a test file per core (module fixtures are built once)
	$(BIN)/python -m pytest -q -rs -n auto --dist loadfile

check: install  ## fast tier for every edit: the tests not marked slow, in parallel (a few minutes on 2 cores)
	$(BIN)/python -m pytest -q -rs -m "not slow" -n auto

serve: install  ## start a Prefect server + cpu worker (+ deployments) and an MLflow server on 127.0.0.1
	$(BIN)/selfevolve stack

ui: install  ## MLflow UI on http://127.0.0.1:5000 over the local store; prints where the cycles are compared
	$(BIN)/selfevolve ui

screenshots: install  ## screenshots of the campaign in the MLflow and Prefect UIs (headless Chromium) into docs/figures
	$(BIN)/selfevolve screenshots --out docs/figures

figures: install  ## the README's figures from this checkout's campaign (after make run): report plots and UI screenshots
	$(BIN)/selfevolve report --out reports
	cp reports/*.png docs/figures/
	$(BIN)/selfevolve screenshots --out docs/figures

push: install  ## outputs and DVC's run-cache to the default DVC remote (../selfevolve-dvc-remote unless configured)
	$(BIN)/dvc push --run-cache

pull: install  ## outputs and run-cache from the DVC remote (then `dvc status` is clean where dvc.lock matches)
	$(BIN)/dvc pull --run-cache

summary: install  ## per-cycle summary table of the campaign
	$(BIN)/selfevolve summary

bench: install  ## performance benchmarks (print ratios)
	for b in bench_sandbox bench_math_grading bench_generation_throughput bench_training_throughput; do echo "== $$b"; $(BIN)/python benchmarks/$$b.py || exit 1; done
	$(BIN)/python benchmarks/bench_mass.py $$(test -f models/base/config.json && echo --model models/base || echo --tiny)

bench-sage: install  ## SAGE vs ablations over 3 cycles on 1,200 held-out questions (~30 min; needs models/base from `make run`)
	$(BIN)/python benchmarks/bench_sage.py

bench-compound: install  ## compounding: 6 cycles from a warm start per seed (0, 1), SAGE+MASS vs no MASS vs control, held-out ladder to 10+10 (hours on 2 cores)
	$(BIN)/python benchmarks/bench_compound.py --set 'seeds.arith.reach_levels=[5, 6, 7, 8, 9, 10]'
