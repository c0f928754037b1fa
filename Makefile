# The two set-up commands of the README: `make demo` and `make test`. Each creates .venv and installs
# what it needs on a fresh machine, then runs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
ZHIKU  := $(VENV)/bin/zhiku
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
DEMO_INDEX ?= demo-index
# The official MCP Inspector CLI (an independent MCP client for tests/test_inspector.py), with its own node 22.
INSPECTOR := .cache/inspector/node_modules/.bin/mcp-inspector

# The dev sets for `make bench-quality` (the product never reads them by itself).
EVAL_DATA ?= ../shared/eval

.PHONY: install inspector demo test test-slow quality-gate bench-latency bench-quality clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

demo: $(STAMP)
	$(ZHIKU) ingest examples/laws --collection laws --index $(DEMO_INDEX)
	$(ZHIKU) query "试用期最长不得超过几个月？" --collection laws --index $(DEMO_INDEX) -k 3
	$(ZHIKU) query "女职工产假有多少天" --collection laws --index $(DEMO_INDEX) -k 3

$(INSPECTOR):
	@if command -v npm >/dev/null; then bash scripts/install-inspector.sh; \
	else echo "npm not found: the MCP Inspector tests will be skipped"; fi

inspector: $(INSPECTOR)

test: $(STAMP) inspector
	ZHIKU_INSPECTOR=$(if $(wildcard $(INSPECTOR)),$(abspath $(INSPECTOR)),) $(PY) -m pytest

test-slow: $(STAMP)
	$(PY) -m pytest -m slow

# The retrieval quality gate on real Chinese sets (tests/data; also part of `make test`).
quality-gate: $(STAMP)
	$(PY) -m pytest -m quality_gate

bench-latency: $(STAMP)
	test -d $(DEMO_INDEX) || $(MAKE) demo
	$(ZHIKU) bench latency --transport stdio --calls 100 --index $(DEMO_INDEX)
	$(ZHIKU) bench latency --transport http --calls 100 --index $(DEMO_INDEX)

# bm25/dense/hybrid on the four dev sets (all questions); rewrites the quality table in bench/RESULTS.md.
# Vectors come from the persistent embedding cache: the first run embeds ~11k passages (about an hour on 2 cores).
bench-quality: $(STAMP)
	nice -n 10 $(PY) bench/quality.py --data $(EVAL_DATA)

clean:
	rm -rf $(DEMO_INDEX) .pytest_cache
