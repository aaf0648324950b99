"""Cached calls into core. Keys are small frozen inputs plus the core version, never arrays.

Results are shared, not copied (cache_resource): pages only read them, and copying a simulation's
arrays on every rerun would cost more than drawing them."""
from __future__ import annotations

import threading

import streamlit as st

from core import CORE_VERSION, jitcache
from core.lab import report, sweeps, tradeoffs
from core.lab.inputs import LabInputs
from core.lab.stages import evaluate_stages
from core.planner import executors
from core.serving import warmup
from ui import startup


def warm_up() -> None:
    """Load the compiled engine once per server process (compiling it where no compiled copy
    fits this machine), saying what happens and for how long; a failed compile stops the page with
    what to do, never a traceback."""
    if _loaded.is_set():
        return
    with st.spinner(startup.first_start_message(jitcache.status()), show_time=True):
        problem = _load_engine()
    if problem:
        st.error(problem, icon=":material/error:")
        st.stop()
    _loaded.set()


_loaded = threading.Event()


@st.cache_resource(show_spinner=False)
def _load_engine() -> str | None:
    """One load per process, however many sessions wait on it; the failure's text, or None."""
    try:
        warmup.compile_all()
    except Exception as e:  # noqa: BLE001 (any compile failure becomes advice on the page)
        return startup.compile_failed_message(e, jitcache.status())
    return None


@st.cache_resource(max_entries=48, show_spinner=False)
def lab_view(inputs: LabInputs, version: str = CORE_VERSION) -> dict:
    return report.lab_view(inputs)


@st.cache_resource(max_entries=24, show_spinner=False)
def stages(inputs: LabInputs, version: str = CORE_VERSION) -> list:
    return evaluate_stages(inputs)


@st.cache_resource(max_entries=48, show_spinner=False)
def tradeoff(inputs: LabInputs, tradeoff_id: str, version: str = CORE_VERSION):
    return tradeoffs.ab(inputs, tradeoff_id)


@st.cache_resource(max_entries=24, show_spinner=False)
def sweep(inputs: LabInputs, kind: str, version: str = CORE_VERSION) -> list[dict]:
    return sweeps.SWEEPS[kind](inputs)


@st.cache_resource(show_spinner=False)
def planner_workers() -> bool:
    """The planner's process pool, started once per server process."""
    executors.prestart()
    return True
