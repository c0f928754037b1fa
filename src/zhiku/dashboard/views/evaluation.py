"""Evaluation: run a dataset (YAML set against this index, or a BEIR folder) and the history trend."""

from pathlib import Path

import altair as alt
import streamlit as st

from zhiku.dashboard.data import history_rows
from zhiku.dashboard.ui import data, show_error
from zhiku.errors import ZhikuError

st.title("评测 Evaluation")
d = data()
with st.form("run"):
    dataset = st.text_input("数据集 Dataset (YAML file or BEIR folder)", placeholder="evals/劳动法.yaml")
    left, right = st.columns(2)
    mode = left.selectbox("mode", ["hybrid", "bm25", "dense"])
    k = right.number_input("k", min_value=1, max_value=100, value=10)
    run = st.form_submit_button("运行 Run")
if run and dataset.strip():
    try:
        with st.spinner("evaluating…"):
            result = d.run_eval(Path(dataset.strip()), mode=mode, k=int(k))
    except ZhikuError as e:
        show_error(e)
    else:
        st.success(f"{result.dataset}: {result.queries} queries · p50 {result.latency_ms['p50']:.1f} ms")
        for line in result.unmatched:  # expected entries no chunk satisfies: the set is wrong, not the ranking
            st.warning(line)
        st.dataframe([{"metric": n, "value": round(v, 4)} for n, v in result.metrics.items()], hide_index=True)
        if len(result.categories) > 1:
            st.dataframe(
                [{"category": c, **{n: round(v, 4) for n, v in m.items()}} for c, m in result.categories.items()],
                hide_index=True,
            )

st.subheader("历史趋势 History")
history = d.eval_history()
if not history:
    st.info("no evaluation runs recorded for this index yet (`zhiku eval --index …` records them)")
    st.stop()
rows = history_rows(history)
metric = st.selectbox("metric", sorted({r["metric"] for r in rows}), index=None, placeholder="all metrics")
shown = [r for r in rows if metric is None or r["metric"] == metric]
lines = alt.Chart(alt.Data(values=shown)).mark_line(point=True)
tooltip = ["run:N", "dataset:N", "variant:N", "metric:N", "value:Q"]
y = alt.Y("value:Q", scale=alt.Scale(domain=[0, 1]))
chart = lines.encode(x=alt.X("run:N", title="run"), y=y, color="metric:N", strokeDash="dataset:N", tooltip=tooltip)
st.altair_chart(chart, width="stretch")
st.dataframe(shown, hide_index=True)
