# vcloud — `make run` serves the site, `make test` runs the suite. Both bootstrap .venv.
SHELL := /bin/bash
PY := .venv/bin/python
HOST ?= 127.0.0.1
PORT ?= 5757
STAMP := .venv/.vcloud-stamp
export TIKTOKEN_CACHE_DIR ?= $(CURDIR)/.venv/tiktoken
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: help venv run demo migrate test test-pg test-browser lint fmt typecheck bench bench-proxy bench-memory bench-longmemeval bench-cache bench-dashboard worker browser-deps wrk clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml scripts/bootstrap.sh
	@scripts/bootstrap.sh 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

venv: $(STAMP) ## create or refresh .venv (torch CPU first, then the rest)

migrate: venv ## apply migrations
	$(PY) manage.py migrate --noinput -v0

run: migrate ## serve http://$(HOST):$(PORT) with the embedded defaults
	$(PY) -m uvicorn vcloud.asgi:application --host $(HOST) --port $(PORT) \
		--loop uvloop --http httptools --lifespan on --no-access-log

demo: migrate ## replay a demo chat through `make run` (running in another terminal)
	$(PY) manage.py vc demo --url http://$(HOST):$(PORT)

worker: venv ## a Celery worker (scaled mode: needs REDIS_URL)
	$(PY) -m celery -A vcloud worker --loglevel=info --concurrency=2

test: venv ## the whole suite (SQLite, in-process tasks unless DATABASE_URL/REDIS_URL are set)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-pg: venv ## the suite against the local PostgreSQL and Redis
	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/0 \
		$(PY) -m pytest -q $(PYTEST_ARGS)

browser-deps:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }

test-browser: venv browser-deps ## browser tests (Playwright + Debian's Chromium), in their own process
	DJANGO_ALLOW_ASYNC_UNSAFE=true $(PY) -m pytest -q tests/browser -o addopts="-ra -p no:cacheprovider" -p no:asyncio

lint: venv ## ruff format check + ruff check
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .

fmt: venv ## format and autofix
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

typecheck: venv ## mypy (strict on the engine and the format adapters)
	$(PY) -m mypy proxy_app/formats memory_app/engine

wrk:
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }

bench: bench-proxy bench-memory ## all benchmarks

bench-proxy: migrate wrk ## proxy throughput and added latency against a fake upstream
	$(PY) manage.py vc_bench proxy

bench-memory: migrate ## ingestion of a 500-turn history, the inbound tagger's latency, planning one request
	$(PY) manage.py vc_bench ingest
	$(PY) manage.py vc_bench inbound
	$(PY) manage.py vc_bench plan

bench-longmemeval: migrate ## LongMemEval evidence recall at 4k/8k/16k/32k (dev split)
	$(PY) manage.py vc_bench longmemeval --ceiling 4000,8000,16000,32000

bench-cache: migrate ## prompt-cache billing: a 288-turn replay, stable vs rewrite layout
	$(PY) manage.py vc_bench cache --layout both --embedder hashing

bench-dashboard: venv ## dashboard render time with 1M request-log rows (throwaway SQLite)
	$(PY) manage.py vc_bench dashboard

clean: ## remove the venv and local data
	rm -rf .venv var
