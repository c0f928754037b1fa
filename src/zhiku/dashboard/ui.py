"""What the pages share: this dashboard's ``DashboardData`` (``ZHIKU_DASHBOARD_CONFIG`` names its settings file)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import streamlit as st

from zhiku.dashboard.data import DashboardData
from zhiku.errors import ZhikuError
from zhiku.settings import load_settings


@st.cache_resource(show_spinner=False)
def _data(config: str, index: str, cache_dir: str) -> DashboardData:
    return DashboardData(load_settings(Path(config) if config else None))


def data() -> DashboardData:
    """This dashboard's data access; stops the page with the error when the settings are invalid."""
    try:
        d = _data(
            os.environ.get("ZHIKU_DASHBOARD_CONFIG", ""),
            os.environ.get("ZHIKU_INDEX", ""),
            os.environ.get("ZHIKU_CACHE_DIR", ""),
        )
    except ZhikuError as e:
        st.error(str(e))
        st.stop()
    st.sidebar.caption(f"索引 index: `{d.index}`")
    return d


def stages_chart(rows: list[dict[str, Any]], *extra: str) -> None:
    """A trace's stages as a waterfall, then as a table."""
    import altair as alt

    tooltip = ["stage:N", "elapsed_ms:Q", *extra, "counts:N", "note:N"]
    x = alt.X("start_ms:Q", title="ms")
    bars = alt.Chart(alt.Data(values=rows)).mark_bar()
    chart = bars.encode(x=x, x2="end_ms:Q", y=alt.Y("stage:N", sort=None), color="status:N", tooltip=tooltip)
    st.altair_chart(chart, width="stretch")
    st.dataframe(rows, hide_index=True)


def show_error(e: ZhikuError) -> None:
    st.error(f"{type(e).__name__}: {e}")
