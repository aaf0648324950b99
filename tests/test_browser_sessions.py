"""Several people on one server at once (the load benchmark, bench/load.py, at 5 sessions): each
opens the Lab at its own request rate and moves the slider; no page errs, and every state a
session shows (URL, slider, Throughput card) is its own, as core computes it for that session's
inputs."""
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import load  # noqa: E402
from live_app import streamlit_process  # noqa: E402


def test_five_sessions_at_once_each_see_only_their_own_inputs_and_results():
    with streamlit_process() as (url, _proc):
        results = asyncio.run(load.sessions_level(url, 5, changes=1, timeout_ms=240_000))
    assert [r["errors"] for r in results] == [[]] * 5
    assert all(len(r["seen"]) == 2 for r in results)  # the first page and one slider move each
    assert len({r["seen"][-1]["slider"] for r in results}) == 5
    assert load.check(results) == []
