"""Cut the CI quality-gate subsets out of the shared BEIR sets (deterministic: ordered by SHA-1 of ids).

      .venv/bin/python scripts/make_test_subsets.py ../shared/eval [--seed-cache ~/.cache/zhiku]

- cmrc_subset: 150 passages of cmrc2018_dev (the first 150 by sha1(id)) and 2 questions on each (300);
- meddialog_subset: 100 questions of meddialog_im_dev (by sha1(id)), the answers judged for them, and
  distractor answers (by sha1(id)) up to 300 documents.
- stard_subset: 150 questions of stard_dev (by sha1(id)), the statute articles cited for them, and distractor
  articles (by sha1(id)) up to 400 articles.

With ``--seed-cache`` it also writes ``cmrc_subset/embeddings.npz`` and ``stard_subset/embeddings.npz``: the subset's passage vectors as the
bundled embedder computed them, read from that embedding cache. The CI gate on cmrc runs in BM25 mode, where
vectors are never read, but indexing embeds every passage (~1 passage/s for these 500-character texts on 2
busy cores); the test seeds the session's embedding cache with these vectors so indexing skips that work.
The vectors are keyed by the embedder's name: another model finds none and embeds for real.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "tests" / "data"  # where the subsets live
CMRC_PASSAGES, CMRC_PER_PASSAGE = 150, 2
MED_QUERIES, MED_DOCS = 100, 300
STARD_QUERIES, STARD_DOCS = 150, 400
SUBSETS = {"cmrc_subset": "cmrc2018_dev", "meddialog_subset": "meddialog_im_dev", "stard_subset": "stard_dev"}


def sha(s: str) -> str:
    return hashlib.sha1(s.encode("utf-8")).hexdigest()


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        q, d, s = line.split("\t")
        if n == 0 and q == "query-id":
            continue
        if int(s) > 0:
            out.setdefault(q, {})[d] = int(s)
    return out


def write(folder: Path, corpus: list[dict], queries: list[dict], qrels: dict[str, dict[str, int]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in corpus), encoding="utf-8"
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries), encoding="utf-8"
    )
    lines = ["query-id\tcorpus-id\tscore"] + [
        f"{q['_id']}\t{d}\t{s}" for q in queries for d, s in qrels[q["_id"]].items()
    ]
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def cmrc(src: Path, dst: Path) -> None:
    corpus = read_jsonl(src / "corpus.jsonl")
    keep = sorted(corpus, key=lambda d: sha(d["_id"]))[:CMRC_PASSAGES]
    keep_ids = {d["_id"] for d in keep}
    qrels = read_qrels(src / "qrels.tsv")
    per_doc: dict[str, list[dict]] = {}
    for q in sorted(read_jsonl(src / "queries.jsonl"), key=lambda q: sha(q["_id"])):
        rel = qrels.get(q["_id"], {})
        if len(rel) == 1 and next(iter(rel)) in keep_ids:
            per_doc.setdefault(next(iter(rel)), []).append(q)
    queries = [q for d in keep for q in per_doc.get(d["_id"], [])[:CMRC_PER_PASSAGE]]
    write(dst, [d for d in corpus if d["_id"] in keep_ids], queries, qrels)


def questions_with_distractors(src: Path, dst: Path, n_queries: int, n_docs: int) -> None:
    """The first ``n_queries`` judged questions by sha1(id), their judged documents, distractors up to ``n_docs``."""
    corpus = read_jsonl(src / "corpus.jsonl")
    qrels = read_qrels(src / "qrels.tsv")
    queries = sorted((q for q in read_jsonl(src / "queries.jsonl") if q["_id"] in qrels), key=lambda q: sha(q["_id"]))
    queries = queries[:n_queries]
    keep_ids = {d for q in queries for d in qrels[q["_id"]]}
    for d in sorted(corpus, key=lambda d: sha(d["_id"])):
        if len(keep_ids) >= n_docs:
            break
        keep_ids.add(d["_id"])
    write(dst, [d for d in corpus if d["_id"] in keep_ids], queries, qrels)


def seed(dataset: Path, cache_dir: Path) -> None:
    """Write ``embeddings.npz`` (keys = SHA-256 of the indexed texts, vectors) from an embedding cache."""
    import numpy as np

    from zhiku.api import KnowledgeBase
    from zhiku.embedding import BundledE5Embedder, EmbeddingCache
    from zhiku.embedding.cache import text_key
    from zhiku.evaluation.beir import load_beir
    from zhiku.evaluation.runner import index_dataset
    from zhiku.ingest.context import index_text
    from zhiku.settings import load_settings, merge

    data = load_beir(dataset)
    with tempfile.TemporaryDirectory() as tmp:
        settings = merge(
            load_settings(index=Path(tmp)), embedding={"cache_dir": str(cache_dir)}, tracing={"enabled": False}
        )
        with KnowledgeBase(settings) as kb:
            index_dataset(kb, data, collection=data.name)
            texts = [
                index_text(d.title, c.section, c.text)
                for d in kb.documents()
                for c in kb.store.document_chunks(d.doc_id)
            ]
    model = BundledE5Embedder().name
    keys = [text_key(t) for t in texts]
    cache = EmbeddingCache(cache_dir / "embeddings.sqlite")
    found = cache.get_many(model, keys, 384)
    missing = [k for k in keys if k not in found]
    if missing:
        raise SystemExit(f"{len(missing)} vectors are not in {cache_dir}: index the dataset with that cache first")
    np.savez_compressed(
        dataset / "embeddings.npz",
        model=np.array(model),
        keys=np.array(keys),
        vectors=np.stack([found[k] for k in keys]).astype(np.float32),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shared_eval", type=Path)
    ap.add_argument("--seed-cache", type=Path)
    ap.add_argument("--sets", default=",".join(SUBSETS), help="which subsets to cut (default: all)")
    args = ap.parse_args()
    chosen = args.sets.split(",")
    ev = args.shared_eval
    if "cmrc_subset" in chosen:
        cmrc(ev / "cmrc2018_dev", HERE / "cmrc_subset")
    if "meddialog_subset" in chosen:
        questions_with_distractors(ev / "meddialog_im_dev", HERE / "meddialog_subset", MED_QUERIES, MED_DOCS)
    if "stard_subset" in chosen:
        questions_with_distractors(ev / "stard_dev", HERE / "stard_subset", STARD_QUERIES, STARD_DOCS)
    for name in chosen:
        shutil.copy(ev / SUBSETS[name] / "SOURCE.md", HERE / name / "UPSTREAM.md")
    if args.seed_cache:
        for name in ("cmrc_subset", "stard_subset"):
            if name in chosen:
                seed(HERE / name, args.seed_cache.expanduser())


if __name__ == "__main__":
    main()
