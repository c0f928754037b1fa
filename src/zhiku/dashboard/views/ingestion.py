"""Ingestion manager: upload files into a collection (with progress), delete a document from every index."""

import streamlit as st

from zhiku.dashboard.ui import data, show_error
from zhiku.errors import ZhikuError

st.title("导入管理 Ingestion")
d = data()
existing = [c.name for c in d.collections()]
st.subheader("上传 Upload")
choice = st.selectbox(
    "集合 Collection",
    existing + ["➕ new collection"],
    index=0 if existing else None,
    placeholder="choose or create a collection",
)
named = "新集合名 New collection name"
collection = choice if choice and not choice.startswith("➕") else st.text_input(named, value=d.settings.collection)
files = st.file_uploader("文件 Files (.md .txt .pdf .docx .html …)", accept_multiple_files=True)
if st.button("导入 Ingest", type="primary", disabled=not files):
    bar = st.progress(0.0, text="starting")

    def progress(done: int, total: int, name: str) -> None:
        bar.progress(done / total if total else 1.0, text=f"{done}/{total} {name}")

    try:
        paths = d.save_uploads([(f.name, f.getvalue()) for f in files or []], collection)
        report = d.ingest(paths, collection, on_progress=progress)
    except ZhikuError as e:
        show_error(e)
    else:
        bar.progress(1.0, text="done")
        st.success(", ".join(f"{n} {k}" for k, n in report.counts().items()) + f" · {report.chunks_written} chunks")
        for f in report.failed:
            st.error(f"{f.path}: {f.reason}")

st.subheader("删除文档 Delete a document")
if "deleted" in st.session_state:  # set below, shown after the rerun that drops the document from the list
    st.success(st.session_state.pop("deleted"))
docs = d.documents()
if not docs:
    st.info("no documents to delete")
else:
    doc = st.selectbox("文档 Document", docs, format_func=lambda x: f"{x.collection}/{x.source} ({x.doc_id})")
    if doc is not None and st.button("从所有索引删除 Delete from every index"):
        try:
            gone = d.delete(doc.doc_id)
        except ZhikuError as e:
            show_error(e)
        else:
            st.session_state["deleted"] = (
                f"deleted {gone.collection}/{gone.source} ({gone.chunk_count} chunks) from the BM25 and vector indexes"
            )
            st.rerun()

st.subheader("导入历史 Ingestion history")
if d.exists:
    with d.kb() as kb:
        history = kb.history(50)
    shown = (("status", "status"), ("collection", "collection"), ("path", "path"), ("chunks", "chunk_count"))
    rows = [{**{k: getattr(r, a) for k, a in shown}, "error": r.error or ""} for r in history]
    st.dataframe(rows, hide_index=True)
