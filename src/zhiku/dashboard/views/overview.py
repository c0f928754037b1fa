"""Overview: settings, models, collection statistics, recent health."""

import time
from dataclasses import asdict

import streamlit as st

from zhiku.dashboard.ui import data

st.title("概览 Overview")
ov = data().overview()
for problem in ov.problems:
    st.warning(problem)
h = ov.health
cols = st.columns(6)
cols[0].metric("文档 documents", ov.documents)
cols[1].metric("段落 chunks", ov.chunks)
cols[2].metric("集合 collections", len(ov.collections))
errors = f"{h.errors} errors" if h.errors else None
cols[3].metric("近期查询 recent queries", h.queries, delta=errors, delta_color="inverse")
cols[4].metric("p50 latency (ms)", f"{h.p50_ms:.1f}")
cols[5].metric("p95 latency (ms)", f"{h.p95_ms:.1f}")

st.subheader("集合 Collections")
if ov.collections:
    st.dataframe([asdict(c) for c in ov.collections], hide_index=True)
else:
    st.info("no collections yet")

left, right = st.columns(2)
with left:
    st.subheader("模型与索引 Models and index")
    st.table(
        [{"key": k, "value": str(v)} for k, v in sorted(ov.meta.items())] or [{"key": "index", "value": str(ov.index)}]
    )
with right:
    st.subheader("近期健康 Recent health")
    last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h.last_at)) if h.last_at else "–"
    run = f"{ov.last_ingestion.status} {ov.last_ingestion.path}" if ov.last_ingestion else "–"
    health: dict[str, object] = {
        "query traces (last 200 traces)": h.queries,
        "failed queries": h.errors,
        "ingestion runs": h.ingests,
    }
    health |= {"last trace": last, "evaluation runs": ov.eval_runs, "last ingestion": run}
    st.table([{"what": what, "value": str(value)} for what, value in health.items()])
with st.expander("有效设置 Effective settings"):
    st.json(ov.settings)
