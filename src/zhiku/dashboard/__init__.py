"""The Streamlit dashboard (`zhiku dashboard`, the ``dashboard`` extra)."""

from __future__ import annotations

from pathlib import Path

APP = Path(__file__).with_name("app.py")
PAGES = Path(__file__).with_name("views")  # not "pages": Streamlit would treat that as its own multipage folder
# (file in views/, URL path, title): the six pages, in the sidebar's order
PAGE_LIST = (
    ("overview.py", "overview", "概览 Overview"),
    ("data_browser.py", "data", "数据浏览 Data browser"),
    ("ingestion.py", "ingestion", "导入管理 Ingestion"),
    ("ingest_traces.py", "ingest_traces", "导入追踪 Ingestion traces"),
    ("query_traces.py", "query_traces", "查询追踪 Query traces"),
    ("evaluation.py", "evaluation", "评测 Evaluation"),
)
