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
st.dataframe(
    [
        {
            "source": x.source,
            "type": x.doc_type,
            "title": x.title,
            "chunks": x.chunk_count,
            "pages": x.pages,
            "bytes": x.size,
            "ingested": time.strftime("%Y-%m-%d %H:%M", time.localtime(x.ingested_at)),
            "doc_id": x.doc_id,
        }
        for x in docs
    ],
    hide_index=True,
)
doc = st.selectbox("文档 Document", docs, format_func=lambda x: f"{x.source} ({x.chunk_count} chunks)")
if doc is not None:
    chunks = d.chunks(doc.doc_id)
    st.subheader(f"段落 Chunks of {doc.source}")
    st.dataframe(
        [
            {"#": c.ordinal, "section": c.section, "page": c.page, "chars": len(c.text), "chunk_id": c.chunk_id}
            for c in chunks
        ],
        hide_index=True,
    )
    chunk = st.selectbox("段落 Chunk", chunks, format_func=lambda c: f"#{c.ordinal} {c.section or '(no section)'}")
    if chunk is not None:
        st.text_area("文本 Text", chunk.text, height=200, disabled=True)
        with st.expander("元数据 Metadata", expanded=True):
            st.json({k: v for k, v in asdict(chunk).items() if k != "text"})
