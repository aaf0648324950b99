"""The script every session of the Lab runs, on every rerun (dashboard.py serves it).

Navigation and the shared sidebar live here, so the inputs stay put on every page; each page in
views/ reads them with ui.state.inputs(). (Not a folder named pages/: Streamlit would also
register that as a legacy multipage app, and a direct link to one of its pages would then open
it without this sidebar.) A link's parameters are checked before any widget reads them
(ui.links), and an exception no view expected becomes a short message with an id (ui.guard).
"""
import streamlit as st

from ui import cache, guard, jobs, links, state, widgets

st.set_page_config(page_title="LLM Serving Design Lab", page_icon="ui/favicon.png", layout="wide")

PAGES = [
    st.Page("views/lab.py", title="Lab", icon=":material/science:", default=True),  # served at /
    st.Page("views/planner.py", title="Planner", icon=":material/travel_explore:", url_path="planner"),
    st.Page("views/walkthrough.py", title="Guided walkthrough", icon=":material/route:", url_path="walkthrough"),
    st.Page("views/scenarios.py", title="Scenarios", icon=":material/view_carousel:", url_path="scenarios"),
    st.Page("views/bottlenecks.py", title="Bottlenecks", icon=":material/speed:", url_path="bottlenecks"),
    st.Page("views/tradeoffs.py", title="Trade-offs", icon=":material/balance:", url_path="tradeoffs"),
    st.Page("views/rules.py", title="Rules & sources", icon=":material/menu_book:", url_path="rules"),
    st.Page("views/tutorial.py", title="Tutorial", icon=":material/school:", url_path="tutorial"),
    st.Page("views/compare.py", title="Compare", icon=":material/compare:", url_path="compare"),
    st.Page("views/benchmark.py", title="Your benchmark", icon=":material/upload_file:", url_path="benchmark"),
]

page = st.navigation(PAGES)
widgets.page_style()
jobs.script_started()
try:
    links.read()  # before any widget: a bad value in a link is a notice, not a traceback
    state.sidebar()
    links.write(page.url_path)
    links.show_notices()
    cache.warm_up()
    page.run()
except Exception as e:  # st.stop and st.rerun are not Exceptions: they pass
    guard.report(e)
