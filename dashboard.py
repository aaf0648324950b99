"""LLM Serving Design Lab: `streamlit run dashboard.py`.

Navigation and the shared sidebar live here, so the inputs stay put on every page; each page in
pages/ reads them with ui.state.inputs().
"""
import streamlit as st

from ui import cache, state

st.set_page_config(page_title="LLM Serving Design Lab", page_icon=":material/memory:", layout="wide")

PAGES = [
    st.Page("pages/lab.py", title="Lab", icon=":material/science:", default=True, url_path="lab"),
    st.Page("pages/walkthrough.py", title="Guided walkthrough", icon=":material/route:", url_path="walkthrough"),
    st.Page("pages/scenarios.py", title="Scenarios", icon=":material/view_carousel:", url_path="scenarios"),
    st.Page("pages/bottlenecks.py", title="Bottlenecks", icon=":material/speed:", url_path="bottlenecks"),
    st.Page("pages/tradeoffs.py", title="Trade-offs", icon=":material/balance:", url_path="tradeoffs"),
    st.Page("pages/rules.py", title="Rules & sources", icon=":material/menu_book:", url_path="rules"),
    st.Page("pages/tutorial.py", title="Tutorial", icon=":material/school:", url_path="tutorial"),
]

page = st.navigation(PAGES)
state.sidebar()
cache.warm_up()
page.run()
