"""Cached calls into core. Keys are small frozen inputs plus the core version, never arrays.

Results are shared by every session, not copied: pages only read them, and copying a simulation's
arrays on every rerun would cost more than drawing them. ui/jobs.py runs them: long ones off the
page's thread with a progress bar and a Stop button, all in a cache bounded by memory."""
from __future__ import annotations

import json
import threading

import streamlit as st

from core import CORE_VERSION, jitcache
from core.lab import compare, content, report, sweeps, tradeoffs
from core.lab.inputs import LabInputs
from core.lab.stages import evaluate_stages
from core.planner import executors
from core.serving import warmup
from ui import jobs, startup


class EngineLoad:
    """Loading (or compiling) the engine in a thread of its own, started when the first page of a
    server process imports this module, so that it overlaps the rest of that page's imports and
    its sidebar; every page waits for it once, in warm_up()."""

    def __init__(self):
        self.done = threading.Event()
        self.problem: str | None = None  # what to do, when it failed
        self.status = jitcache.status()  # what the first start does: a load or a compile, and why
        threading.Thread(target=self._load, name="lab-engine-load", daemon=True).start()

    def _load(self) -> None:
        try:
            warmup.compile_all()
        except Exception as e:  # noqa: BLE001 (any compile failure becomes advice on the page)
            self.problem = startup.compile_failed_message(e, jitcache.status())
        finally:
            self.done.set()


engine = EngineLoad()


def warm_up() -> None:
    """Wait for the engine once per page (at once after the first start), saying what happens and
    for how long; a failed compile stops the page with what to do, never a traceback."""
    if not engine.done.is_set():
        with st.spinner(startup.first_start_message(engine.status), show_time=True):
            engine.done.wait()
    if engine.problem:
        st.error(engine.problem, icon=":material/error:")
        st.stop()


def _requests(inputs: LabInputs) -> int:
    """Requests in one of the inputs' runs: the sidebar's count, or the replayed trace's rows."""
    return inputs.trace_csv.count("\n") if inputs.trace_csv else inputs.requests


def _what(inputs: LabInputs, doing: str) -> str:
    return f"{doing} ({_requests(inputs):,} requests per run)"


def _lab_view_key(inputs: LabInputs) -> tuple:
    return "lab_view", inputs, CORE_VERSION


# runs per call, roughly: the Lab's view simulates the toggles' deployment and the recommendation's
def lab_view(inputs: LabInputs) -> dict:
    return jobs.compute(_lab_view_key(inputs), _what(inputs, "Simulating the deployment"),
                        report.lab_view, inputs, is_heavy=jobs.heavy(_requests(inputs), 5))


def prefill_lab_view(inputs: LabInputs) -> dict:
    """The Lab's view of `inputs`, computed outside any page (a server's start: ui.prewarm) into the
    cache every session reads."""
    return jobs.prefill(_lab_view_key(inputs), report.lab_view, inputs)


def stages(inputs: LabInputs) -> list:
    return jobs.compute(("stages", inputs, CORE_VERSION), _what(inputs, "Simulating the five stages"),
                        evaluate_stages, inputs, is_heavy=jobs.heavy(_requests(inputs), 6))


TRADEOFF_TITLES = {t["id"]: t["title"] for t in content.tradeoffs()}


def tradeoff(inputs: LabInputs, tradeoff_id: str):
    return jobs.compute(("tradeoff", inputs, tradeoff_id, CORE_VERSION),
                        _what(inputs, f"Simulating {TRADEOFF_TITLES[tradeoff_id].lower()} off and on"),
                        tradeoffs.ab, inputs, tradeoff_id, is_heavy=jobs.heavy(_requests(inputs), 2))


def side_by_side(pinned: list[dict], inputs: LabInputs) -> list[dict]:
    """Compare: each pinned deployment simulated on the sidebar's workload."""
    key = ("compare", json.dumps(pinned, sort_keys=True, default=str), inputs, CORE_VERSION)
    return jobs.compute(key, _what(inputs, f"Simulating {len(pinned)} pinned deployment{'s' if len(pinned) > 1 else ''}"),
                        compare.side_by_side, pinned, inputs, is_heavy=jobs.heavy(_requests(inputs), len(pinned)))


SWEEP_RUNS = {"rate": 11, "output": 9, "tp": 0, "batch": 0, "users": 11}  # tp and batch: cost model and memory planner only


def sweep(inputs: LabInputs, kind: str) -> list[dict]:
    return jobs.compute(("sweep", inputs, kind, CORE_VERSION), _what(inputs, f"Sweeping the {SWEEP_NAMES[kind]}"),
                        sweeps.SWEEPS[kind], inputs, is_heavy=jobs.heavy(_requests(inputs), SWEEP_RUNS[kind]))


SWEEP_NAMES = {"rate": "request rate", "output": "output length", "tp": "tensor-parallel degree",
               "batch": "decode batch", "users": "concurrent users"}


@st.cache_resource(show_spinner=False)
def planner_workers() -> bool:
    """The planner's process pool, started once per server process."""
    executors.prestart()
    return True
