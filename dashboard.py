"""LLM Serving Design Lab: `streamlit run dashboard.py`.

The server: every session runs navigation.py; what a server does once, as it starts (load the
compiled simulator, simulate the Lab's default workload, import the pages' libraries), ui.prewarm
does before the first page is served, so that the person who opens a link after a start or a
restart is not the one who waits for it.
"""
import streamlit as st

from ui import prewarm

app = st.App("navigation.py", lifespan=prewarm.lifespan)
