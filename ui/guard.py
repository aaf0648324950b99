"""The last resort: an exception no view expected becomes a short message with an id on the page;
its trace goes to the server's log under that id, never to the page (it would show server paths)."""
from __future__ import annotations

import sys
import traceback
import uuid
from datetime import datetime, timezone

import streamlit as st


def report(e: Exception) -> str:
    """Log `e` with a new id and tell the reader, in one short message; returns the id."""
    ref = uuid.uuid4().hex[:8]
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} LLM Serving Design Lab: unexpected error {ref} on this page run:", file=sys.stderr)
    traceback.print_exception(e, file=sys.stderr)
    st.error(f"This page stopped on an unexpected error (id {ref}; the server's log has the details). Change an "
             f"input or open another page: the rest of the Lab keeps working.", icon=":material/error:")
    return ref
