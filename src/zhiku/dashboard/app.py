"""Entry point of the dashboard: `streamlit run app.py` (started by `zhiku dashboard`)."""

import streamlit as st

from zhiku.dashboard import PAGE_LIST, PAGES

st.set_page_config(page_title="知库 zhiku", page_icon="📚", layout="wide")
pages = [
    st.Page(str(PAGES / file), title=title, url_path=url, default=n == 0)
    for n, (file, url, title) in enumerate(PAGE_LIST)
]
st.navigation(pages).run()
