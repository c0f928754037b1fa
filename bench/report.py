"""The results page: bench/RESULTS.md, generated from the JSON files the maintained benchmarks write.

    make bench-report                      # python bench/report.py
    make bench-all                         # every benchmark, then the page

Every benchmark ends with ``save(name, figures)``: ``bench/results/<name>.json`` holds the figures with the
machine, the commit, the date and the command that measured them. A benchmark without a file is shown as not
measured, one whose commit's src/ code differs from this checkout's says so (comments and docstrings aside).
``bench/results/<name>.before.json``, when present, is shown beside it (figures of an earlier checkout, e.g. saved
with ``--stamp``). History lives in git.

    python bench/report.py --stamp FILE NAME COMMAND [COMMIT]   # save figures another tool wrote as NAME
    python bench/report.py --reliability FILE                   # save the RELIABILITY lines of a run
"""

from __future__ import annotations

import ast
import functools
import json
import os
import platform
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PAGE = HERE / "RESULTS.md"


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=HERE.parent, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def commit() -> str:
    """The checkout's short commit, marked when its source differs from that commit."""
    head = _git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" + uncommitted changes" if _git("status", "--porcelain", "--", "src") else "")


def compare_arg(src: Path | None) -> str:
    """`` COMPARE=<a checkout of COMMIT>/src`` for a command run with ``COMPARE=src`` (no machine path), else ""."""
    if src is None:
        return ""
    at = _git("-C", str(src), "rev-parse", "--short", "HEAD")
    return f" COMPARE=<a checkout of {at}>/src" if at else " COMPARE=<another checkout>/src"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo") if x.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, {platform.system()}, Python {platform.python_version()}"


def save(name: str, figures: Any, command: str | None = None, measured_at: str | None = None) -> Path:
    """Write one benchmark's figures with where, when and how (and at which commit, default this one) measured."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    record = {
        "bench": name,
        "command": command or "python bench/" + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "commit": measured_at or commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "figures": figures,
    }
    path.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------ the page
def table(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    columns = [c for c in columns if any(c in r for r in rows)]  # e.g. no `checkout` without --compare
    out = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    return out + ["| " + " | ".join(str(r.get(c, "")) for c in columns) + " |" for r in rows]


def quality(f: Any) -> list[str]:
    cols = ["set", "queries", "chunks", "mode", "ndcg@10", "hit@1", "hit@5", "mrr@10", "recall@100", "p50_ms"]
    cols += ["answerable_flagged", "offtopic_flagged"]  # (the English questions' low_confidence, hybrid rows)
    rows = [
        {**r, "set": r["dataset"], "p50_ms": f"{r['p50_ms']:.1f}", **{k: f"{v:.4f}" for k, v in r["metrics"].items()}}
        for r in f
    ]
    return table(rows, cols)


def scale(f: Any) -> list[str]:
    cols = [
        "checkout",
        "chunks",
        "hybrid_p95_ms",
        "bm25_p95_ms",
        "dense_p95_ms",
        "open_to_first_answer_s",
        "peak_rss_mb",
    ]
    return table(f, [*cols, "replace_doc_ms", "build_s", "index_mb"])


def concurrency(f: Any) -> list[str]:
    cols = ["checkout", "chunks", "questions", "clients", "queries_per_s", "p50_ms", "p95_ms", "cpu_ms_per_query"]
    return table(f, cols)


def ingest(f: Any) -> list[str]:
    return table(f, ["run", "files", "chunks", "seconds", "chunks_per_s", "chunks_per_cpu_s"])


def formats(f: Any) -> list[str]:
    cols = ["file", "rows", "slides", "pages", "seconds", "rows_per_s", "slides_per_s", "pages_per_s", "chunks"]
    return table(f, [*cols, "peak_rss_mb"])


def tracing(f: Any) -> list[str]:
    rows = f if isinstance(f, list) else [f]
    return table(rows, list(rows[0])) if rows else []


def latency(f: Any) -> list[str]:
    rows = [
        {"transport": t, "cold_start_ms": r["cold_start_ms"], **{f"{k}_p50_ms": r[k]["p50_ms"] for k in PHASES}}
        | {f"{k}_p95_ms": r[k]["p95_ms"] for k in PHASES}
        for t, r in f.items()
    ]
    return table(rows, list(rows[0])) if rows else []


PHASES = ("query", "trivial", "cache_hit")


def tune_table(f: Any) -> list[str]:
    def pair(m: dict[str, Any]) -> str:
        lo, hi = m["ci99"]
        return f"{m['default']:.4f} → {m['tuned']:.4f} [{lo:+.4f}, {hi:+.4f}]"

    def refusal(r: dict[str, Any]) -> str:
        return f"{r['offtopic_flagged']:.1%} / {r['answerable_flagged']:.1%}"

    rows = [
        {"set": r["set"], "A / B": f"{r['questions_a']} / {r['questions_b']}", "fusion": r["fusion"],
         "min_score": r["min_score"], "nDCG@10 on B": pair(r["ndcg@10"]), "hit@5 on B": pair(r["hit@5"]),
         "flagged off-topic / answerable, default": refusal(r["refusal_default"]),
         "… tuned": refusal(r["refusal_tuned"]), "holds": "yes" if r["holds"] else "**no**"}
        for r in f
    ]  # fmt: skip
    return table(rows, list(rows[0])) if rows else []


def reliability(f: Any) -> list[str]:
    rows = [{"part": r["part"], "figures": ", ".join(f"{k} {v}" for k, v in r["figures"].items())} for r in f]
    return table(rows, ["part", "figures"])


SECTIONS: list[tuple[str, str, str, Callable[[Any], list[str]]]] = [
    (
        "quality",
        "Retrieval quality: `make bench-quality`",
        "bm25, dense and hybrid (the default) on the four dev sets, every question, the bundled embedder and "
        "default settings. nDCG@10 counts a relevant passage or article once.",
        quality,
    ),
    (
        "english",
        "Across languages: `make bench-english`",
        "The English twins of cmrc2018_dev and stard_dev questions (bench/datasets/english: the same ids and "
        "judgements) beside the same questions in Chinese, on one index per set; A and B: the halves by crc32 of the "
        "id (the cross-lingual fusion weights and confidence threshold were chosen on A). Flagged: the share of "
        "the answerable questions and of the off-topic ones (src/zhiku/data/offtopic_zh.txt for Chinese, "
        "offtopic_en.txt for English questions) whose answer is low_confidence. httpx_docs: the reverse, 45 Chinese "
        "questions over the English httpx documentation (bench/datasets/httpx_docs) beside the same questions in English.",
        quality,
    ),
    (
        "tune",
        "Per-corpus tuning held out: `make bench-tune`",
        "`zhiku tune` on half A of each dev set (crc32 of the question id even), its choice (what it writes; the "
        "defaults where it writes nothing) against the defaults on half B through the whole pipeline: nDCG@10 and "
        "hit@5 with the 99 % bootstrap interval of the paired difference; refusal on half B's answerable questions "
        "and on tests/data/offtopic (not the list tune calibrates on). Holds: nDCG@10 not below the defaults, "
        "≥ 90 % off-topic and ≤ 5 % answerable flagged.",
        tune_table,
    ),
    (
        "scale",
        "Latency and memory by index size: `make bench-scale SIZES=10000,100000,1000000`",
        "Real Chinese sentences recombined into ~400-character chunks with random unit vectors (latency, not "
        "quality); one core; query embedding excluded; 200 questions per mode, top 10, tracing off. "
        "`replace_doc_ms`: replacing one 100-chunk document. Targets: 100k hybrid p95 ≤ 40 ms and BM25 ≤ 20 ms; "
        "1M hybrid ≤ 150 ms, peak RSS ≤ 2.5 GB, open to first answer ≤ 3 s.",
        scale,
    ),
    (
        "concurrency",
        "Concurrent questions: `make bench-concurrency`",
        "Hybrid questions from many threads on one 10k-chunk index through `KnowledgeBase.retrieve` (tracing off). "
        "`random vectors`: query embedding excluded; `embedded`: end to end, each question embedded by the bundled "
        "model on the same two cores, as a server embeds it.",
        concurrency,
    ),
    (
        "ingest",
        "Ingest throughput: `make bench-ingest`",
        "`cached`: 50 copies of the sample laws into a fresh index, every vector from the embedding cache (what "
        "ingesting costs besides embedding); `bundled`: one copy with an empty cache, every chunk embedded by the "
        "bundled CPU model.",
        ingest,
    ),
    (
        "formats",
        "Spreadsheet, slide and image throughput: `make bench-formats`",
        "From file to chunks (loading and chunking; embedding is the ingest section's): a 100,000-row x 6-column "
        ".xlsx written by openpyxl, the same rows as .csv, a 2,000-slide .pptx written by python-pptx, a 5-page "
        "TIFF scan (A4 at 150 dpi, 30 lines each) read by OCR; each file in a fresh process.",
        formats,
    ),
    (
        "tracing",
        "What tracing costs: `make bench-tracing`",
        "`KnowledgeBase.query` end to end, embedding the question with the bundled model, on examples/laws: each "
        "question asked once with tracing on (the default) and once off, alternating. Target: ≤ 10 % of a "
        "question's time.",
        tracing,
    ),
    (
        "latency",
        "MCP round trips: `make bench-latency`",
        "Round trips through a real MCP client to a `zhiku serve` subprocess on the demo index: cold start (process "
        "start to first answer), `query_knowledge_hub` (a handful of questions in turn, result cache off), "
        "`list_collections` (`trivial`: the protocol's own share) and a result-cache hit.",
        latency,
    ),
    (
        "answers",
        "What structured citations cost: `make bench-answers`",
        "(text + structuredContent) / text characters of `query_knowledge_hub` answers, top_k 5, the compact "
        "structured form (the default): the first 200 questions of each dev set and the sample laws' five; `bytes_`: "
        "the same in UTF-8 bytes.",
        tracing,
    ),
    (
        "reliability",
        "Hostile runs: `make reliability`",
        "The attacks of tests/reliability, each part's `RELIABILITY <part> {figures}` line: damaged files, "
        "abandoned sessions, slow connections, long questions beside short ones, kill -9, hostile files, bad "
        "arguments, scope escapes and forged tokens. `PARTS=` runs some (a pytest -k expression).",
        reliability,
    ),
]

HEAD = """# Results

Generated by `make bench-report` from `bench/results/*.json`; each section names the command, commit, date and
machine of its figures; a section whose src/ code has changed since (comments and docstrings aside) says so. Rerun a
benchmark, then `make bench-report`. Earlier figures are in this file's git history.
"""


# What must hold (issue targets): hybrid nDCG@10 within 0.003 of these or better, and the scale bars.
NDCG_BEFORE = {"cmrc2018_dev": 0.9938, "meddialog_im_dev": 0.3306, "stard_dev": 0.5913, "stard_longdoc": 0.5861}
SCALE_BARS = [
    (100_000, "hybrid_p95_ms", 40),
    (100_000, "bm25_p95_ms", 20),
    (1_000_000, "hybrid_p95_ms", 150),
    (1_000_000, "peak_rss_mb", 2500),
    (1_000_000, "open_to_first_answer_s", 3),
]


RELIABILITY_BARS: list[tuple[str, str, str, Callable[[dict[str, Any]], Any], Callable[[Any], bool]]] = [
    ("fairness", "a 2,000-character question, seconds", "≤ 3", lambda f: f["long_question_s"], lambda g: g <= 3),
    ("fairness", "short questions beside two long-question loops, p95 ms", "≤ 1000", lambda f: f["short_p95_ms"],
     lambda g: g <= 1000),
    ("fairness", "16 questions from 4 clients ÷ the same 16 in sequence", "≤ 0.75", lambda f: f["ratio"],
     lambda g: g <= 0.75),
    ("limits_sessions", "2,000 abandoned sessions: server RSS growth, MB", "≤ 150", lambda f: f["rss_growth_mb_at_2000"],
     lambda g: g <= 150),
    ("limits_slow_connections", "slowest close of a connection sending at 1 byte/s, s", "≤ 30",
     lambda f: max(v["max_close_s"] for v in f.values() if isinstance(v, dict)), lambda g: g <= 30),
    ("integrity vectors", "damaged vector files: answers as undamaged / attacks", "all",
     lambda f: f"{f['same']}/{f['attacks']}", lambda g: g.split("/")[0] == g.split("/")[1]),
    ("formats", "a 1 GiB .xlsx bomb, 1,000,000 CSV rows, 2,000 slides in one batch: peak RSS, MB", "≤ 1024",
     lambda f: f["peak_rss_mb"], lambda g: g <= 1024),
    ("watch", "`serve --watch`: a deleted checkout (1,000 files) gone from the answers, s", "≤ 10",
     lambda f: f["removed_s"], lambda g: g <= 10),
    ("web", "a redirect loop, a 5 GB page, a 1 byte/s server in one batch: peak RSS, MB", "≤ 1024",
     lambda f: f["peak_rss_mb"], lambda g: g <= 1024),
    ("integrity sqlite", "damaged SQLite pages found by `zhiku doctor`", "all",
     lambda f: f"{f['found']}/{f['pages']}", lambda g: g.split("/")[0] == g.split("/")[1]),
    ("scopes escapes", "a scoped token's reads of another collection, every tool, resource and prompt: leaks", "0",
     lambda f: f["leaks"], lambda g: g == 0),
    ("scopes tokens", "guessed tokens accepted", "0", lambda f: f["accepted"], lambda g: g == 0),
    ("scopes tokens", "forged, expired or foreign JWTs refused", "all", lambda f: f["forged_jwts_refused"],
     lambda g: g.split("/")[0] == g.split("/")[1]),
    ("scopes tokens", "JWKS fetches under 50 made-up key ids", "≤ 6", lambda f: f["jwks_fetches_during_flood"],
     lambda g: g <= 6),
]  # fmt: skip


def checks(results: Path) -> list[dict[str, Any]]:
    """One row per bar: what, the bar, the figure measured (or none), and whether it holds."""

    stale: set[str] = set()

    def figures(name: str) -> Any:
        p = results / f"{name}.json"
        if not p.exists():
            return None
        r = json.loads(p.read_text(encoding="utf-8"))
        if src_changed_since(r["commit"]):
            stale.add(name)
        return r["figures"]

    def row(what: str, bar: str, got: Any, ok: bool | None, bench: str) -> dict[str, Any]:
        held = "not measured at this commit" if got is None else "" if ok is None else ("yes" if ok else "**no**")
        if got is not None and bench in stale:
            held += " (src/ changed since)"
        return {"what": what, "bar": bar, "measured": "" if got is None else got, "holds": held.strip()}

    out = []
    hybrid = {r["dataset"]: r["metrics"]["ndcg@10"] for r in figures("quality") or [] if r["mode"] == "hybrid"}
    for name, before in NDCG_BEFORE.items():
        got = hybrid.get(name)
        ok = None if got is None else got >= before - 0.003
        out.append(row(f"hybrid nDCG@10, {name}", f"≥ {before - 0.003:.4f}", got and f"{got:.4f}", ok, "quality"))
    hit5 = {(r["dataset"], r["mode"]): r["metrics"]["hit@5"] for r in figures("english") or []}
    for name in ("cmrc2018_dev", "stard_dev"):
        zh, en = hit5.get((f"{name} zh", "hybrid")), hit5.get((f"{name} en", "hybrid"))
        got = round(en / zh, 3) if zh and en is not None else None
        ok = None if got is None else got >= 0.85
        out.append(row(f"English ÷ Chinese twins, hybrid hit@5, {name}", "≥ 0.85", got, ok, "english"))
    mine = [r for r in figures("scale") or [] if r.get("checkout", "this") == "this"]
    for chunks, key, bar in SCALE_BARS:
        got = next((r[key] for r in mine if r["chunks"] == chunks), None)
        out.append(row(f"{key}, {chunks:,} chunks", f"≤ {bar}", got, None if got is None else got <= bar, "scale"))
    conc = {(r.get("checkout", "this"), r["clients"], r["questions"]): r for r in figures("concurrency") or []}
    now, then = conc.get(("this", 50, "random vectors")), conc.get(("compared", 50, "random vectors"))
    for key, better in (("queries_per_s", 1), ("p95_ms", -1)):
        ok = None if not (now and then) else (now[key] - then[key]) * better >= 0
        bar = f"{'≥' if better > 0 else '≤'} main's, same run" + (f" ({then[key]})" if then else " (COMPARE=)")
        out.append(row(f"50 clients, 10k chunks: {key}", bar, now and now[key], ok, "concurrency"))
    # end to end, each question embedded: what a user waits for (the bar excludes embedding)
    now, then = conc.get(("this", 50, "embedded")), conc.get(("compared", 50, "embedded"))
    for key in ("queries_per_s", "p95_ms"):
        bar = f"(not a bar) main's, same run: {then[key] if then else '?'}"
        what = f"50 clients, 10k chunks, each question embedded (end to end): {key}"
        out.append(row(what, bar, now and now[key], None, "concurrency"))
    parts = {r["part"]: r["figures"] for r in figures("reliability") or []}
    for part, what, bar, got_of, holds in RELIABILITY_BARS:
        got = got_of(parts[part]) if part in parts else None
        out.append(row(what, bar, got, None if got is None else holds(got), "reliability"))
    for r in figures("tune") or []:
        flags = r["refusal_tuned"]
        got = f"{r['ndcg@10']['tuned']:.4f} vs {r['ndcg@10']['default']:.4f}; {flags['offtopic_flagged']:.1%} / "
        got += f"{flags['answerable_flagged']:.1%}"
        out.append(row(f"zhiku tune, half B of {r['set']}", "nDCG@10 ≥ defaults; ≥ 90 % / ≤ 5 % flagged", got,
                       r["holds"], "tune"))  # fmt: skip
    for r in figures("answers") or []:
        what = f"(text + structured) ÷ text, top_k 5, p90, {r['set']}"
        out.append(row(what, "≤ 1.3", r["ratio_p90"], r["ratio_p90"] <= 1.3, "answers"))
    tr = figures("tracing")
    got = tr.get("cost_median_pct") if isinstance(tr, dict) else None
    ok = None if got is None else got <= 10
    out.append(row("tracing on: share of a question's time (median)", "≤ 10 %", got, ok, "tracing"))
    return out


@functools.cache  # (asked for each section and each bar, mostly of one commit)
def src_changed_since(measured: str) -> bool:
    """Whether src/'s code differs now from the commit a figure was measured at (or that commit is unknown here).
    A change to comments and docstrings alone changes no figure: a Python file whose code (``code_of``) is the same
    counts as unchanged; any other file under src/ counts as changed."""
    rev = measured.split()[0]
    if " + " in measured or not _git("rev-parse", "--verify", "-q", rev):
        return True
    for path in _git("diff", "--name-only", rev, "--", "src").splitlines():
        now = HERE.parent / path
        if not path.endswith(".py") or not now.exists():
            return True
        old = _git("show", f"{rev}:{path}")
        if not old or code_of(old) != code_of(now.read_text(encoding="utf-8")):
            return True
    return False


def code_of(source: str) -> str:
    """A Python module's code without its comments and docstrings (its syntax tree, docstrings taken out)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, _DOCUMENTED) and ast.get_docstring(node, clean=False) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree)


_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)  # what may have a docstring


def render(results: Path = RESULTS) -> str:
    out = [HEAD, "## What must hold", "", *table(checks(results), ["what", "bar", "measured", "holds"]), ""]
    for name, title, what, rows in SECTIONS:
        out += [f"## {title}", "", textwrap.fill(what, 116), ""]
        path = results / f"{name}.json"
        if not path.exists():
            out += ["Not measured at this commit.", ""]
        for which, p in (("", path), ("Before: ", results / f"{name}.before.json")):
            if p.exists():
                r = json.loads(p.read_text(encoding="utf-8"))
                when = f"{which}`{r['command']}` · {r['date']} · commit {r['commit']} · {r['machine']}"
                when += f" · load {r['load_avg_1m']}"
                if not which and src_changed_since(r["commit"]):
                    when += " · **src/ has changed since: not measured at this commit**"
                out += [when, "", *rows(r["figures"]), ""]
    return "\n".join(out)


def main() -> None:
    if sys.argv[1:2] == ["--stamp"] and len(sys.argv) in (5, 6):  # figures another tool wrote
        path, name, command, *measured_at = sys.argv[2:]
        save(name, json.loads(Path(path).read_text(encoding="utf-8")), command, *measured_at)
        return
    if sys.argv[1:2] == ["--reliability"] and len(sys.argv) == 3:  # the RELIABILITY lines of `make reliability`
        lines = Path(sys.argv[2]).read_text(encoding="utf-8").splitlines()
        parts = [(x[len("RELIABILITY ") :].split(" {", 1)) for x in lines if x.startswith("RELIABILITY ")]
        rows = [{"part": part, "figures": json.loads("{" + rest)} for part, rest in parts]
        save(
            "reliability",
            rows,
            "make reliability" + (f" PARTS='{os.environ['PARTS']}'" if os.environ.get("PARTS") else ""),
        )
        return
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(Path.cwd()) if PAGE.is_relative_to(Path.cwd()) else PAGE}")


if __name__ == "__main__":
    main()
