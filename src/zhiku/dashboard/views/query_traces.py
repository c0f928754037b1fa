"""Query traces: stage waterfall, BM25 vs dense side by side, the fusion rank-change table, the hits."""

import streamlit as st

from zhiku.dashboard.data import channel_rows, rank_rows, trace_label, waterfall
from zhiku.dashboard.ui import data, show_error, stages_chart
from zhiku.errors import ZhikuError

st.title("查询追踪 Query traces")
d = data()
with st.form("try"):
    text = st.text_input("试一个查询 Try a query", placeholder="试用期最长多久？")
    mode = st.selectbox("mode", ["hybrid", "bm25", "dense"])
    run = st.form_submit_button("查询 Search")
trace = None
if run and text.strip():
    try:
        trace = d.query(text, mode=mode)
    except ZhikuError as e:
        show_error(e)
traces = d.traces("query", limit=100)
if trace is None:
    if not traces:
        st.info("no query traces yet: run a query above, with `zhiku query`, or through the MCP server")
        st.stop()
    pick = st.selectbox("查询 Query", range(len(traces)), format_func=lambda i: trace_label(traces[i]))
    trace = traces[pick or 0]  # a selectbox over non-empty options always has a pick

a = trace.attrs
st.caption(
    f"trace {trace.trace_id} · {trace.elapsed_ms:.1f} ms · mode {a.get('mode')} · top_k {a.get('top_k')}"
    + (f" · error: {trace.error}" if trace.error else "")
)
st.markdown(f"**{a.get('query', '')}**")
rows = waterfall(trace)
st.subheader("阶段 Stages")
stages_chart(rows)

st.subheader("BM25 vs dense")
for col, (stage, title) in zip(st.columns(2), (("bm25", "BM25"), ("dense", "Dense 向量 (cosine)")), strict=True):
    col.markdown(f"**{title}**")
    col.dataframe(channel_rows(trace, stage), hide_index=True)

st.subheader("排名变化 Rank changes (fusion)")
changes = rank_rows(trace)
fusion = trace.stage("fusion")
if changes and fusion is not None:
    summary = fusion.data.get("summary", {})
    cols = st.columns(len(summary))
    for col, (k, v) in zip(cols, summary.items(), strict=False):
        col.metric(k, v)
    st.dataframe(changes, hide_index=True)
else:
    st.info("single-channel query: nothing was fused")
rerank = trace.stage("rerank")
if rerank is not None and rerank.status != "ok":
    st.caption(f"rerank: {rerank.status} — {rerank.data.get('reason', '')}")
st.subheader("结果 Hits")
st.dataframe(trace.data.get("hits", []), hide_index=True)
