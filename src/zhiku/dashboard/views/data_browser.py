"""Data browser: documents → chunks → metadata."""

import time
from dataclasses import asdict

import streamlit as st

from zhiku.dashboard.ui import data

st.title("数据浏览 Data browser")
d = data()
names = [c.name for c in d.collections()]
if not names:
    st.info(f"no documents in {d.index} yet: ingest some on the ingestion page")
    st.stop()
collection = st.selectbox("集合 Collection", names)
docs = d.documents(collection)
when = {x.doc_id: time.strftime("%Y-%m-%d %H:%M", time.localtime(x.ingested_at)) for x in docs}
shown = (("source", "source"), ("type", "doc_type"), ("title", "title"), ("chunks", "chunk_count"), ("pages", "pages"))
rows = [
    {**{k: getattr(x, a) for k, a in shown}, "bytes": x.size, "ingested": when[x.doc_id], "doc_id": x.doc_id}
    for x in docs
]
st.dataframe(rows, hide_index=True)
doc = st.selectbox("文档 Document", docs, format_func=lambda x: f"{x.source} ({x.chunk_count} chunks)")
if doc is not None:
    chunks = d.chunks(doc.doc_id)
    st.subheader(f"段落 Chunks of {doc.source}")
    rows = [
        {"#": c.ordinal, "section": c.section, "page": c.page, "chars": len(c.text), "chunk_id": c.chunk_id}
        for c in chunks
    ]
    st.dataframe(rows, hide_index=True)
    chunk = st.selectbox("段落 Chunk", chunks, format_func=lambda c: f"#{c.ordinal} {c.section or '(no section)'}")
    if chunk is not None:
        st.text_area("文本 Text", chunk.text, height=200, disabled=True)
        with st.expander("元数据 Metadata", expanded=True):
            st.json({k: v for k, v in asdict(chunk).items() if k != "text"})
