"""Cached calls into core. Keys are small frozen inputs plus the core version, never arrays.

Results are shared, not copied (cache_resource): pages only read them, and copying a simulation's
arrays on every rerun would cost more than drawing them."""
from __future__ import annotations

import streamlit as st

from core import CORE_VERSION
from core.lab import gauges, report, sweeps, tradeoffs
from core.lab.inputs import LabInputs
from core.lab.stages import evaluate_stages
from core.planner import executors
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec


@st.cache_resource(show_spinner="Compiling the simulator (first start only; a minute or so)...")
def warm_up() -> bool:
    """Compile the jitted engine and cost model once per process (from disk cache when warm)."""
    simulate(SimConfig(workload=WorkloadSpec(n_requests=4, rate=10, prompt_mean=16, output_mean=4)))
    gauges.prefill_ms(SimConfig(), LabInputs(prompt_tokens=16))
    return True


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
