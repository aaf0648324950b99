"""Cached calls into core. Keys are small frozen inputs plus the core version, never arrays.

Results are shared, not copied (cache_resource): pages only read them, and copying a simulation's
arrays on every rerun would cost more than drawing them."""
from __future__ import annotations

import streamlit as st

from core import CORE_VERSION, advisor
from core.lab import LabInputs
from core.simulate import SimConfig, simulate
from core.workload import WorkloadSpec


@st.cache_resource(show_spinner="Compiling the simulator (first start only; a minute or so)...")
def warm_up() -> bool:
    """Compile the jitted engine and cost model once per process (from disk cache when warm)."""
    simulate(SimConfig(workload=WorkloadSpec(n_requests=4, rate=10, prompt_mean=16, output_mean=4)))
    advisor.prefill_ms(SimConfig(), LabInputs(prompt_tokens=16))
    return True


@st.cache_resource(max_entries=48, show_spinner=False)
def lab_view(inputs: LabInputs, version: str = CORE_VERSION) -> dict:
    return advisor.lab_view(inputs)


@st.cache_resource(max_entries=24, show_spinner=False)
def stages(inputs: LabInputs, version: str = CORE_VERSION) -> list:
    return advisor.evaluate_stages(inputs)


@st.cache_resource(max_entries=48, show_spinner=False)
def tradeoff(inputs: LabInputs, tradeoff_id: str, version: str = CORE_VERSION):
    return advisor.ab(inputs, tradeoff_id)


@st.cache_resource(max_entries=24, show_spinner=False)
def sweep(inputs: LabInputs, kind: str, version: str = CORE_VERSION) -> list[dict]:
    return {"rate": advisor.sweep_rate, "output": advisor.sweep_output, "tp": advisor.sweep_tp,
            "batch": advisor.sweep_batch}[kind](inputs)
