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
# The official MCP Inspector CLI (an independent MCP client for tests/test_inspector.py) and the MCP conformance
# suite (tests/test_conformance.py, slow), with their own node 22.
INSPECTOR := .cache/inspector/node_modules/.bin/mcp-inspector
# Named after the install script's checksum: a new pinned version installs itself on the next `make test`.
INSPECTOR_STAMP := .cache/inspector/.installed-$(shell cksum < scripts/install-inspector.sh | cut -d' ' -f1)

.PHONY: install install-dev inspector demo lint test test-slow reliability quality-gate clean \
	bench-quality bench-english bench-tune bench-scale bench-concurrency bench-ingest bench-formats bench-tracing \
	bench-latency bench-answers bench-report bench-all

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

$(INSPECTOR_STAMP):
	@if command -v npm >/dev/null; then bash scripts/install-inspector.sh && touch $@; \
	else echo "npm not found: the MCP Inspector tests will be skipped (and fail in strict mode: ZHIKU_STRICT_SKIPS=1, CI)"; fi

inspector: $(INSPECTOR_STAMP)

# Lint, format check and type check (config in pyproject.toml), before the tests.
lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy

test: lint inspector
	ZHIKU_INSPECTOR=$(if $(wildcard $(INSPECTOR)),$(abspath $(INSPECTOR)),) $(PY) -m pytest

test-slow: $(DEV_STAMP) inspector  # CI runs these too (.ci/run): a deselected test must not rot unseen
	ZHIKU_INSPECTOR=$(if $(wildcard $(INSPECTOR)),$(abspath $(INSPECTOR)),) $(PY) -m pytest -m slow

# The long reliability suite: kill -9 runs, ≥300 hostile files, bad arguments, JSON-RPC abuse, 50
# concurrent clients with a writer, fair question cost. Each part prints a `RELIABILITY <part> {figures}` line
# (`make test` runs the short versions), saved as bench/results/reliability.json for the results page; PARTS=EXPR runs some.
reliability: $(DEV_STAMP)
	rm -f .reliability.txt
	ZHIKU_RELIABILITY_OUT=$(abspath .reliability.txt) $(PY) -m pytest -m reliability -s tests/reliability $(if $(PARTS),-k "$(PARTS)")
	PARTS="$(PARTS)" $(PY) bench/report.py --reliability .reliability.txt

# The retrieval quality gate on real Chinese sets (tests/data; also part of `make test`).
quality-gate: $(DEV_STAMP)
	$(PY) -m pytest -m quality_gate

# --- Benchmarks. Each saves bench/results/<name>.json (figures, machine, commit, date, command);
# `make bench-report` makes bench/RESULTS.md from them. The dev sets and a Chinese corpus come from outside the
# repository (the product never reads them by itself).
EVAL_DATA ?= ../shared/eval
CORPUS    ?= ../shared/corpus/laws
SIZES     ?= 10000,100000
BENCH     := nice -n 10 $(PY)
# The scale and concurrency indexes: real Chinese sentences recombined into chunks; the questions of cmrc2018_dev.
SCALE_DATA := --corpus $(CORPUS) --corpus $(EVAL_DATA)/cmrc2018_dev --queries $(EVAL_DATA)/cmrc2018_dev/queries.jsonl

# bm25/dense/hybrid on the four dev sets, every question. Vectors come from the persistent embedding cache: the
# first run embeds ~11k passages (about an hour on 2 cores).
bench-quality: $(STAMP)
	$(BENCH) bench/quality.py --data $(EVAL_DATA) --json

# English questions over Chinese text beside their Chinese twins (bench/datasets/english), then Chinese questions
# over English documents beside their English twins (bench/datasets/httpx_docs); hybrid refusal of both.
bench-english: $(STAMP)
	$(BENCH) bench/quality.py --data $(EVAL_DATA) --english bench/datasets/english --json

# `zhiku tune` on half A of each dev set, measured on half B against the defaults (after bench-quality: the same
# cached vectors).
bench-tune: $(STAMP)
	$(BENCH) bench/tune.py --data $(EVAL_DATA) --json

# One JSON line per size (SIZES=10000,100000,1000000): p95 per mode, open to first answer, peak RSS, replacing a
# document; one core, query embedding excluded. COMPARE=OTHER/src measures another checkout in the same run.
bench-scale: $(STAMP)
	$(BENCH) bench/scale.py $(SCALE_DATA) --sizes $(SIZES) --json $(if $(COMPARE),--compare $(COMPARE))

# 1 and 50 clients on 10k chunks. COMPARE=OTHER/src measures another checkout in the same run.
bench-concurrency: $(STAMP)
	$(BENCH) bench/concurrent_search.py $(SCALE_DATA) --size 10000 --clients 1 50 --embedded-clients 50 --json $(if $(COMPARE),--compare $(COMPARE))

# Chunks per second with cached vectors and with the bundled embedder, on copies of the sample laws.
bench-ingest: $(STAMP)
	$(BENCH) bench/ingest.py --json

# Rows/s of a 100k-row .xlsx and .csv and slides/s of a 2,000-slide deck, from file to chunks.
bench-formats: $(DEV_STAMP)
	$(BENCH) bench/formats.py --json

# What tracing on by default costs a question end to end, embedding it included.
bench-tracing: $(STAMP)
	$(BENCH) bench/tracing_cost.py --json

# MCP round trips through a real client, stdio and Streamable HTTP.
bench-latency: $(DEV_STAMP)
	test -d $(DEMO_INDEX) || $(MAKE) demo
	$(BENCH) bench/mcp_latency.py --index $(DEMO_INDEX) --json

# (text + structuredContent) / text of query_knowledge_hub answers, top_k 5, on the dev sets and the sample laws.
bench-answers: $(STAMP)
	$(BENCH) bench/answer_size.py --data $(EVAL_DATA) --json

bench-report:
	$(PY) bench/report.py

# Every section of the results page, one after another (timings are not taken side by side), then the page: 46 min
# on 2 cores with COMPARE=OTHER/src, which the concurrency and scale benchmarks measure beside this checkout.
bench-all:
	$(MAKE) bench-quality
	$(MAKE) bench-english
	$(MAKE) bench-tune
	$(MAKE) bench-answers
	$(MAKE) bench-ingest
	$(MAKE) bench-formats
	$(MAKE) bench-tracing
	$(MAKE) bench-latency
	$(MAKE) bench-concurrency
	$(MAKE) bench-scale SIZES=100000,1000000
	$(MAKE) reliability
	$(MAKE) bench-report

clean:
	rm -rf $(DEMO_INDEX) .pytest_cache
