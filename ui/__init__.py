"""Shared Streamlit pieces of the Lab: the sidebar, cached core calls, charts, the diagram."""
