"""Ingestion traces: each run's stages (load, split, transform, tokenise, embed, upsert) and its documents."""

import streamlit as st

from zhiku.dashboard.data import latest_busy, trace_label, waterfall
from zhiku.dashboard.ui import data, stages_chart

st.title("导入追踪 Ingestion traces")
traces = data().traces("ingest", limit=100)
if not traces:
    st.info("no ingestion traces yet (tracing.enabled writes one per run to traces.jsonl)")
    st.stop()
pick = st.selectbox(
    "运行 Run", range(len(traces)), index=latest_busy(traces), format_func=lambda i: trace_label(traces[i])
)
t = traces[pick or 0]  # a selectbox over non-empty options always has a pick
st.caption(f"trace {t.trace_id} · {t.elapsed_ms:.0f} ms · " + " · ".join(f"{k}: {v}" for k, v in t.attrs.items()))
counts = t.data.get("counts", {})
cols = st.columns(5)
for col, key in zip(cols, ("added", "updated", "skipped", "removed", "failed"), strict=False):
    col.metric(key, counts.get(key, 0))
rows = waterfall(t)
stages_chart(rows, "calls:Q")
st.subheader("文档 Documents")
st.dataframe(t.data.get("documents", []), hide_index=True)
