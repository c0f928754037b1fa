"""Ingestion traces: each run's stages (load, split, transform, tokenise, embed, upsert) and its documents."""

import altair as alt
import streamlit as st

from zhiku.dashboard.data import latest_busy, trace_label, waterfall
from zhiku.dashboard.ui import data

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
st.altair_chart(
    alt.Chart(alt.Data(values=rows))
    .mark_bar()
    .encode(
        x=alt.X("start_ms:Q", title="ms"),
        x2="end_ms:Q",
        y=alt.Y("stage:N", sort=None),
        color="status:N",
        tooltip=["stage:N", "elapsed_ms:Q", "calls:Q", "counts:N", "note:N"],
    ),
    width="stretch",
)
st.dataframe(rows, hide_index=True)
st.subheader("文档 Documents")
st.dataframe(t.data.get("documents", []), hide_index=True)
