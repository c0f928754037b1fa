"""One small adapter per retrieval stack for bench/peers.py: ``build(corpus)`` then ``search(query, k)``.

Every stack gets the same chunks, the same unit passage vectors, the same index tokens (zhiku's segmentation,
stored in the source index) and, per query, the same vector and query tokens: a peer's ``search`` segments the
question with zhiku's ``TextProcessor.query_tokens`` (jieba, 繁→简, stopwords: the tokens ``Query.tokens`` holds),
inside the timed call as zhiku's own search does; only the query's embedding is left out of every timing.
``search`` returns chunk ids, best first. Peers are imported lazily: only ``make bench-peers`` installs them
(into .venv-peers).
"""

from __future__ import annotations

import functools
import hashlib
import pickle
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from zhiku.types import Chunk, DocRecord

DEPTH = 100  # candidates per channel, as zhiku's retrieval.per_source_k
RRF_K = 60


@dataclass(frozen=True)
class Corpus:
    chunks: list[Chunk]
    tokens: list[list[str]]  # index tokens per chunk (zhiku's, title + section context included)
    vectors: np.ndarray  # (chunks, dim) float32, unit rows
    docs: list[DocRecord]
    meta: dict[str, str] = field(default_factory=dict)  # the source index's identity (embedder, tokenizer, ...)


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    tokens: list[str]  # zhiku's query tokens
    vector: np.ndarray  # (dim,) float32


class Stack(Protocol):
    name: str

    def build(self, corpus: Corpus, where: Path) -> None: ...

    def search(self, q: Query, k: int) -> list[str]: ...


def rrf(*rankings: list[str], k: int = RRF_K) -> list[str]:
    """Reciprocal rank fusion (Cormack et al. 2009): score = Σ 1/(k + rank)."""
    score: dict[str, float] = defaultdict(float)
    for ranking in rankings:
        for rank, cid in enumerate(ranking, 1):
            score[cid] += 1.0 / (k + rank)
    return sorted(score, key=lambda c: -score[c])


@functools.cache
def _text_processor() -> Any:
    from zhiku.settings import load_settings
    from zhiku.text import TextProcessor

    return TextProcessor(**load_settings().text.model_dump())


def query_tokens(q: Query) -> list[str]:
    """The question segmented as zhiku segments it (what ``q.tokens`` holds), timed with the peer's search."""
    tokens: list[str] = _text_processor().query_tokens(q.text)
    return tokens


def top(scores: np.ndarray, ids: list[str], k: int) -> list[str]:
    k = min(k, len(ids))
    part = np.argpartition(-scores, k - 1)[:k]
    return [ids[i] for i in part[np.argsort(-scores[part], kind="stable")]]


class LookupEmbedder:
    """Query vectors computed beforehand (query embedding is excluded from zhiku's timings)."""

    def __init__(self, name: str, vectors: dict[str, np.ndarray]) -> None:
        self.name, self._vectors = name, vectors
        self.dim = len(next(iter(vectors.values())))

    def embed_query(self, text: str) -> np.ndarray:
        """The question's vector; any other text (a long question's clause, for zhiku's clause channel) a random
        unit vector fixed by the text, so its cost is timed without a model."""
        if text not in self._vectors:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dim)
            self._vectors[text] = (v / np.linalg.norm(v)).astype(np.float32)
        return self._vectors[text]

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        raise RuntimeError("the peers benchmark never embeds passages here")


class Zhiku:
    """The embedded SQLite store through ``KnowledgeBase.retrieve`` (default hybrid: z-score fusion)."""

    def __init__(self, tracing: bool, queries: list[Query], mode: str = "hybrid") -> None:
        self.name = ("zhiku (tracing on)" if tracing else "zhiku") + ("" if mode == "hybrid" else f" {mode} only")
        self.tracing, self.mode = tracing, mode
        self.queries = queries
        self.kb: Any = None

    def build(self, corpus: Corpus, where: Path) -> None:
        from zhiku.api import KnowledgeBase
        from zhiku.settings import load_settings, merge

        by_doc: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(corpus.chunks):
            by_doc[c.doc_id].append(i)
        # every stack gets one vector per question: zhiku's clause channel (which embeds a long question's
        # clauses as well) is off here
        settings = merge(load_settings(index=where), tracing={"enabled": self.tracing}, retrieval={"clause_weight": 0})
        embedder = LookupEmbedder(corpus.meta["embedder"], {q.text: q.vector for q in self.queries})
        self.kb = KnowledgeBase(settings, embedder=embedder)  # type: ignore[arg-type]
        for doc in corpus.docs:
            rows = by_doc[doc.doc_id]
            self.kb.store.write_document(
                doc, [corpus.chunks[i] for i in rows], [corpus.tokens[i] for i in rows], corpus.vectors[rows]
            )
        keys = ("embedder", "dim", "tokenizer", "chunking")
        self.kb.store.set_meta({key: corpus.meta[key] for key in keys if key in corpus.meta})

    def search(self, q: Query, k: int) -> list[str]:
        r = self.kb.retrieve(q.text, top_k=k, mode=self.mode, per_source_k=DEPTH)
        return [h.chunk.chunk_id for h in r.hits]


class ChromaRankBM25:
    """Chroma (HNSW, cosine) + rank_bm25 BM25Okapi pickled beside it + RRF k=60: the course design's stack."""

    name = "Chroma + rank_bm25 + RRF"

    def build(self, corpus: Corpus, where: Path) -> None:
        import chromadb
        from rank_bm25 import BM25Okapi

        self.ids = [c.chunk_id for c in corpus.chunks]
        client = chromadb.PersistentClient(path=str(where / "chroma"))
        self.col = client.create_collection("chunks", metadata={"hnsw:space": "cosine"})
        step = client.get_max_batch_size()
        for s in range(0, len(self.ids), step):
            self.col.add(
                ids=self.ids[s : s + step],
                embeddings=corpus.vectors[s : s + step],
                documents=[c.text for c in corpus.chunks[s : s + step]],
            )
        self.bm25 = BM25Okapi(corpus.tokens)
        (where / "bm25.pkl").write_bytes(pickle.dumps(self.bm25))

    def search(self, q: Query, k: int) -> list[str]:
        dense = self.col.query(query_embeddings=[q.vector], n_results=DEPTH, include=[])["ids"][0]
        sparse = top(self.bm25.get_scores(query_tokens(q)), self.ids, DEPTH)
        return rrf(sparse, dense)[:k]


class LanceHybrid:
    """LanceDB: native FTS over the whitespace-joined tokens + flat vector search, hybrid with RRFReranker."""

    name = "LanceDB hybrid + RRF"

    def build(self, corpus: Corpus, where: Path) -> None:
        import lancedb
        import pyarrow as pa

        dim = corpus.vectors.shape[1]
        flat = pa.array(corpus.vectors.reshape(-1), type=pa.float32())
        data = pa.table(
            {
                "id": [c.chunk_id for c in corpus.chunks],
                "text": [c.text for c in corpus.chunks],
                "tokens": [" ".join(t) for t in corpus.tokens],
                "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
            }
        )
        self.table = lancedb.connect(str(where / "lance")).create_table("chunks", data=data)
        self.table.create_fts_index(
            "tokens",
            use_tantivy=False,
            base_tokenizer="whitespace",
            lower_case=False,
            stem=False,
            remove_stop_words=False,
            ascii_folding=False,
            with_position=False,
        )

    def search(self, q: Query, k: int) -> list[str]:
        from lancedb.rerankers import RRFReranker

        r = (
            self.table.search(query_type="hybrid", fts_columns="tokens")
            .vector(q.vector)
            .text(" ".join(query_tokens(q)))
            .distance_type("cosine")
            .rerank(RRFReranker(K=RRF_K))
            .select(["id"])
            .limit(max(k, DEPTH))
            .to_list()
        )
        return [row["id"] for row in r][:k]


class MilvusLite:
    """Milvus Lite: BM25 function (standard analyzer over the space-joined tokens) + FLAT dense, RRFRanker(60)."""

    name = "Milvus Lite hybrid + RRF"

    def build(self, corpus: Corpus, where: Path) -> None:
        from pymilvus import DataType, Function, FunctionType, MilvusClient

        self.client = MilvusClient(str(where / "milvus.db"))
        schema = self.client.create_schema(auto_id=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field(
            "tokens",
            DataType.VARCHAR,
            max_length=65535,
            enable_analyzer=True,
            analyzer_params={"tokenizer": "standard"},
        )
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=corpus.vectors.shape[1])
        schema.add_function(
            Function("bm25", FunctionType.BM25, input_field_names=["tokens"], output_field_names=["sparse"])
        )
        index = self.client.prepare_index_params()
        index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        index.add_index("dense", index_type="FLAT", metric_type="IP")
        self.client.create_collection("chunks", schema=schema, index_params=index)
        rows = [
            {"id": c.chunk_id, "tokens": " ".join(t), "dense": v.tolist()}
            for c, t, v in zip(corpus.chunks, corpus.tokens, corpus.vectors, strict=True)
        ]
        for s in range(0, len(rows), 2000):
            self.client.insert("chunks", rows[s : s + 2000])
        self.client.flush("chunks")
        self.client.load_collection("chunks")

    def search(self, q: Query, k: int) -> list[str]:
        from pymilvus import AnnSearchRequest, RRFRanker

        requests = [
            AnnSearchRequest(data=[" ".join(query_tokens(q))], anns_field="sparse", param={}, limit=DEPTH),
            AnnSearchRequest(data=[q.vector.tolist()], anns_field="dense", param={}, limit=DEPTH),
        ]
        r = self.client.hybrid_search("chunks", requests, ranker=RRFRanker(RRF_K), limit=max(k, DEPTH))
        return [hit["id"] for hit in r[0]][:k]


class Bm25sNumpy:
    """bm25s (Lucene BM25, k1 1.5, b 0.75) + an exact numpy dot product + RRF k=60: the minimal reference."""

    def __init__(self, mode: str = "hybrid") -> None:
        self.mode = mode
        self.name = {"hybrid": "bm25s + numpy + RRF", "bm25": "bm25s only", "dense": "numpy only"}[mode]

    def build(self, corpus: Corpus, where: Path) -> None:
        import bm25s

        self.ids = [c.chunk_id for c in corpus.chunks]
        self.bm25 = bm25s.BM25()
        self.bm25.index(corpus.tokens, show_progress=False)
        self.vocab: set[str] = set(self.bm25.vocab_dict)
        self.vectors = np.ascontiguousarray(corpus.vectors, dtype=np.float32)
        self.bm25.save(str(where / "bm25s"))
        np.save(where / "vectors.npy", self.vectors)

    def search(self, q: Query, k: int) -> list[str]:
        terms = [t for t in query_tokens(q) if t in self.vocab] if self.mode != "dense" else []  # (bm25s has no
        # entry for unseen terms)
        sparse = top(self.bm25.get_scores(terms), self.ids, DEPTH) if terms and self.mode != "dense" else []
        dense = top(self.vectors @ q.vector, self.ids, DEPTH) if self.mode != "bm25" else []
        return rrf(sparse, dense)[:k]


STACKS = ("zhiku", "zhiku-traced", "chroma", "lancedb", "milvus", "bm25s")
CHANNELS = ("zhiku-bm25", "zhiku-dense", "bm25s-bm25", "bm25s-dense")  # one channel alone: where a gap comes from


def make_stack(key: str, queries: list[Query]) -> Stack:
    match key:
        case "zhiku" | "zhiku-traced":
            return Zhiku(key == "zhiku-traced", queries)
        case "zhiku-bm25" | "zhiku-dense":
            return Zhiku(False, queries, key.split("-")[1])
        case "bm25s-bm25" | "bm25s-dense":
            return Bm25sNumpy(key.split("-")[1])
        case "chroma":
            return ChromaRankBM25()
        case "lancedb":
            return LanceHybrid()
        case "milvus":
            return MilvusLite()
        case "bm25s":
            return Bm25sNumpy()
    raise SystemExit(f"unknown stack {key!r}: one of {', '.join(STACKS + CHANNELS)}")


def disk_bytes(where: Path) -> int:
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file())


def fresh(where: Path) -> Path:
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    return where
