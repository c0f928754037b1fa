"""What the MCP server tells assistants: instructions, tool descriptions in parts and the prompt text."""

from __future__ import annotations

from dataclasses import dataclass

INSTRUCTIONS = """\
知库 zhiku：中文优先的知识库检索服务。回答关于已入库文档（法律法规、制度、手册等）的问题时，先调用
query_knowledge_hub 检索，再只依据返回的段落作答，并用 [n] 标注出处。
zhiku is a Chinese-first knowledge base. To answer questions about the ingested documents, call
query_knowledge_hub first, answer only from the returned passages, and cite them with their [n] markers.
Use list_collections to see what is indexed and get_document_summary for one document's outline."""


@dataclass(frozen=True)
class ToolText:
    title: str
    description: str
    when_to_use: str
    examples: tuple[str, ...]
    errors: str = ""


QUERY = ToolText(
    title="知识库检索 / Search the knowledge hub",
    description="""\
在知识库中检索与问题最相关的段落，返回带 [n] 引用标记的 Markdown 答案素材与结构化引用（来源文件、页码、章节、分数、原文）。
回答时只依据返回的段落，并保留 [n] 标记；low_confidence 为 true 时说明资料可能不足。

Search the knowledge base and return the passages that best answer the question: Markdown with [n] markers
and a sources list; the structured result carries each citation's ids and score (the passages are in the
text block). Answer only from the returned passages and keep their [n] markers. When `low_confidence` is
true, say the documents may not cover the question. Long passages are cut to fit `max_chars`; read a full one
at zhiku://chunk/{chunk_id}. Figures of cited PDF/Word passages are listed in `images` and the first few
come back as image content.""",
    when_to_use="""\
当用户的问题可能由已入库文档回答时使用（例如法律条文、公司制度、产品手册）；用自然语言提问即可，中文或英文均可，繁体会自动转为简体。
Whenever the answer may be in the ingested documents (laws, policies, manuals); ask in natural language,
Chinese or English.""",
    examples=('{"query": "试用期最长不得超过几个月？", "top_k": 3, "filters": {"source": "劳动合同法*"}}',),
    errors="""\
INVALID_INPUT (empty or too long query, top_k outside 1–20, malformed filters), NOT_FOUND
(unknown collection), INDEX_MISMATCH (the index needs a rebuild), BUSY (other clients' questions hold the
model; retry).""",
)

LIST_COLLECTIONS = ToolText(
    title="列出集合 / List collections",
    description="""\
列出知识库中的集合（collection）及其文档数、分块数和字符数。

List the collections in the knowledge base with their document, chunk and character counts.""",
    when_to_use="""\
在检索前想了解有哪些资料、或为 query_knowledge_hub 选择 collection 时使用。
To see what is indexed before searching, or to pick a `collection` for query_knowledge_hub.""",
    examples=('{"include_stats": true}',),
)

DOCUMENT_SUMMARY = ToolText(
    title="文档概况 / Document summary",
    description="""\
查看一篇文档的概况：标题、来源、类型、页数、状态（needs_ocr 表示有扫描页尚不可检索）、章节目录、分块数、入库时间，以及摘要与关键词（未配置 LLM 时为抽取式，summary_kind=extractive）。

Describe one document: title, source, type, pages, status (`needs_ocr`: scanned pages, listed in
`needs_ocr_pages`, are not searchable yet), outline of its sections, chunk count and ingestion time
and a summary with keywords (`summary_kind`: `llm` from the metadata transform, else `extractive`: top
sentences and TextRank keywords, no LLM needed). `doc_id` comes from a citation (its source path as
ingested works too).
Its full text is the resource zhiku://doc/{doc_id}.""",
    when_to_use="""\
当引用结果中的某篇文档需要进一步了解其结构，或要确认文档是否已入库时使用。
To understand the structure of a document that came up in citations, or to check that a document is
indexed.""",
    examples=('{"doc_id": "8a601916a370add6"}',),
    errors="NOT_FOUND (no such document), INVALID_INPUT (a path matching several documents).",
)

INGEST = ToolText(
    title="导入文档 / Ingest documents",
    description="""\
将文件或文件夹（.md .txt .pdf .docx .html 等）加入知识库；未改动的文件会跳过，改动的文件会替换旧版本。只能读取服务器配置的 ingest_roots 之内的路径。会发送进度通知。

Add files or folders (.md .markdown .txt .text .pdf .docx .html .htm, and formats added by plugins) to the
knowledge base: unchanged files are skipped, changed ones replace their older version, and one bad file
never stops the batch. Only paths under the server's configured ingest roots are accepted (symlinks are
resolved first; a file in a folder that links outside them is skipped, listed in `failed`); relative paths are
taken from the first root. Sends progress notifications while it works.""",
    when_to_use="当用户要求把新资料加入知识库时使用。When the user asks to add new documents to the knowledge base.",
    examples=('{"paths": ["/data/docs/劳动合同法.md"], "collection": "laws"}',),
    errors="PATH_NOT_ALLOWED (outside the ingest roots), INVALID_INPUT, INDEX_MISMATCH, INDEX_LOCKED (retryable).",
)

DELETE = ToolText(
    title="删除文档 / Delete a document",
    description="""\
从知识库中删除一篇文档（及其全部分块），之后它不会再出现在检索结果中。

Delete one document and all its chunks from every index; it never comes back in results. `doc_id` comes
from citations, resources/list or get_document_summary.""",
    when_to_use="仅在用户明确要求删除时使用。Only when the user explicitly asks to remove a document.",
    examples=('{"doc_id": "8a601916a370add6"}',),
    errors="NOT_FOUND (no such document), INDEX_LOCKED (retryable).",
)

DOCUMENT_RESOURCE = "A document's text as Markdown, rebuilt from its chunks. 文档全文。"
CHUNK_RESOURCE = (
    "One indexed passage with its citation (source, page, section); `?context=article` adds the rest of its"
    " article(s) or its neighbours, `?context=section` its section (chapter), within the answer budget."
    " 段落及出处；context=article|section 返回所在条文或章节。"
)
IMAGE_RESOURCE = "An image extracted from a document. 文档中的图片。"
PROMPT_DESCRIPTION = "Answer a question from the knowledge base, citing passages as [n]. 依据知识库作答并标注引用。"
PROMPT = """\
请使用 query_knowledge_hub 工具在知识库中检索下面的问题，然后只依据检索到的段落用中文作答：
- 每个论断后用 [n] 标注所依据的段落编号，与工具返回的编号一致；
- 若 low_confidence 为 true 或没有相关段落，请明确说明资料中没有找到答案，不要编造；
- 最后列出引用的来源：文件、页码（PDF）与章节，与工具返回的来源列表一致。

Use the query_knowledge_hub tool to search the knowledge base for the question below, then answer only
from the passages it returns, citing each claim with its [n] marker; if nothing relevant is found, say so.
End with the sources cited: file, page (PDFs) and section, as the tool lists them.

问题 / Question: {question}"""
