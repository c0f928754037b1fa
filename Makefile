# The two set-up commands of the README: `make demo` and `make test`. Each creates .venv and installs
# what it needs on a fresh machine, then runs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
ZHIKU  := $(VENV)/bin/zhiku
# Two stamps, each named after pyproject.toml's checksum: the demo needs only the base package, the tests the
# dev extras (torch, streamlit, milvus-lite, OCR, ruff, mypy …).
SUM    := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
STAMP  := $(VENV)/.installed-base-$(SUM)
DEV_STAMP := $(VENV)/.installed-dev-$(SUM)
DEMO_INDEX ?= demo-index
# The official MCP Inspector CLI (an independent MCP client for tests/test_inspector.py), with its own node 22.
INSPECTOR := .cache/inspector/node_modules/.bin/mcp-inspector

# The dev sets for `make bench-quality` (the product never reads them by itself).
EVAL_DATA ?= ../shared/eval

.PHONY: install install-dev inspector demo lint test test-slow reliability quality-gate bench-latency bench-quality bench-peers clean

install: $(STAMP)
install-dev: $(DEV_STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	rm -f $(VENV)/.installed-base-*
	touch $@

# The dev install includes the base one, so it leaves both stamps.
$(DEV_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@ $(STAMP)

demo: $(STAMP)
	$(ZHIKU) ingest examples/laws --collection laws --index $(DEMO_INDEX)
	$(ZHIKU) query "试用期最长不得超过几个月？" --collection laws --index $(DEMO_INDEX) -k 3
	$(ZHIKU) query "女职工产假有多少天" --collection laws --index $(DEMO_INDEX) -k 3

$(INSPECTOR):
	@if command -v npm >/dev/null; then bash scripts/install-inspector.sh; \
	else echo "npm not found: the MCP Inspector tests will be skipped (and fail in strict mode: ZHIKU_STRICT_SKIPS=1, CI)"; fi

inspector: $(INSPECTOR)

# Lint, format check and type check (config in pyproject.toml), before the tests.
lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy

test: lint inspector
	ZHIKU_INSPECTOR=$(if $(wildcard $(INSPECTOR)),$(abspath $(INSPECTOR)),) $(PY) -m pytest

test-slow: $(DEV_STAMP) inspector  # CI runs these too (.ci/run): a deselected test must not rot unseen
	ZHIKU_INSPECTOR=$(if $(wildcard $(INSPECTOR)),$(abspath $(INSPECTOR)),) $(PY) -m pytest -m slow

# The long reliability suite (issue 12): kill -9 runs, ≥300 hostile files, bad arguments, JSON-RPC abuse, 50
# concurrent clients with a writer. Each part prints a `RELIABILITY <part> {figures}` line (`make test` runs the
# short versions).
reliability: $(DEV_STAMP)
	$(PY) -m pytest -m reliability -s tests/reliability

# The retrieval quality gate on real Chinese sets (tests/data; also part of `make test`).
quality-gate: $(DEV_STAMP)
	$(PY) -m pytest -m quality_gate

bench-latency: $(DEV_STAMP)  # the MCP server (the mcp extra) and its client
	test -d $(DEMO_INDEX) || $(MAKE) demo
	$(ZHIKU) bench latency --transport stdio --calls 100 --index $(DEMO_INDEX)
	$(ZHIKU) bench latency --transport http --calls 100 --index $(DEMO_INDEX)

# bm25/dense/hybrid on the four dev sets (all questions); rewrites the quality table in bench/RESULTS.md.
# Vectors come from the persistent embedding cache: the first run embeds ~11k passages (about an hour on 2 cores).
bench-quality: $(STAMP)
	nice -n 10 $(PY) bench/quality.py --data $(EVAL_DATA)

# zhiku beside Chroma + rank_bm25, LanceDB, Milvus Lite and bm25s on the same chunks, vectors and tokens (issue 13).
# The peers go into their own venv (never into .venv or `make test`), with zhiku installed editable beside them.
# PEERS_ARGS: e.g. --from-index DIR --cache DIR (reuse indexes and query vectors; see bench/peers.py).
# zhiku is installed with its scale extra (numkong: store.dense_search auto screens by int8 codes from 100k chunks).
PEERS_VENV := .venv-peers
PEERS_PKGS := chromadb==1.5.9 rank_bm25==0.2.2 lancedb==0.40.0 pymilvus==3.0.2 milvus-lite==3.2.2 bm25s==0.3.16 \
              jieba==0.42.1
PEERS_STAMP := $(PEERS_VENV)/.installed-peers-$(SUM)
PEERS_ARGS ?=

$(PEERS_STAMP): pyproject.toml
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install -q -e '.[scale]' $(PEERS_PKGS)
	rm -f $(PEERS_VENV)/.installed-peers-*
	touch $@

bench-peers: $(PEERS_STAMP)
	nice -n 10 $(PEERS_VENV)/bin/python bench/peers.py --data $(EVAL_DATA) $(PEERS_ARGS)

clean:
	rm -rf $(DEMO_INDEX) .pytest_cache
