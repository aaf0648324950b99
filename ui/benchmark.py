"""Cached core calls and tables of the Benchmark view: parse a result file, replay a run,
calibrate, keep the profile."""
from __future__ import annotations

import math

import altair as alt
import pandas as pd
import streamlit as st

from core import CORE_VERSION
from core.serving import benchfile, calibrate, replay
from core.serving.simulate import SimConfig
from core.text import against


@st.cache_resource(max_entries=8, show_spinner=False)
def parse(data: bytes, name: str, version: str = CORE_VERSION) -> list:
    return benchfile.parse(data, name)


@st.cache_resource(max_entries=16, show_spinner="Simulating the run...")
def compare(data: bytes, name: str, line: int, base: SimConfig, version: str = CORE_VERSION):
    run = next(r for r in parse(data, name) if r.line == line)
    return replay.compare(run, base)


@st.cache_resource(max_entries=8, show_spinner="Calibrating: simulating the run a few dozen times...")
def fit(data: bytes, name: str, line: int, base: SimConfig, version: str = CORE_VERSION):
    run = next(r for r in parse(data, name) if r.line == line)
    return calibrate.fit(run, base)


BAND_PX = 34  # a metric's two bars and the gap between metrics
COLUMNS = {c: st.column_config.NumberColumn(format="%.2f") for c in ("measured", "simulated", "calibrated")}


def rows_frame(rows: list[dict], after: list[dict] | None = None) -> pd.DataFrame:
    """Measured against simulated (and calibrated), with the relative error of each."""
    df = pd.DataFrame({"metric": [f"{r['metric']} ({r['unit']})" for r in rows],
                       "measured": [r["measured"] for r in rows], "simulated": [r["simulated"] for r in rows],
                       "simulated against measured": [against(r["error"]) for r in rows]})
    if after:
        df["calibrated"] = [r["simulated"] for r in after]
        df["calibrated against measured"] = [against(r["error"]) for r in after]
    return df


def errors_chart(rows: list[dict], after: list[dict] | None = None) -> alt.Chart:
    """Relative error of each metric, before and after calibration (0 is a perfect match)."""
    data = [dict(metric=r["metric"], error=r["error"] * 100, when="fitted constants") for r in rows
            if math.isfinite(r["error"])]
    if after:
        data += [dict(metric=r["metric"], error=r["error"] * 100, when="calibrated") for r in after
                 if math.isfinite(r["error"])]
    df = pd.DataFrame(data)
    # a band per metric tall enough for its bars and its label: at a fixed 360 px the axis dropped every
    # other label of 14 metrics
    metrics = df["metric"].nunique() if len(df) else 1
    return alt.Chart(df).mark_bar().encode(
        y=alt.Y("metric:N", sort=None, title=None, axis=alt.Axis(labelOverlap=False, labelLimit=220)),
        x=alt.X("error:Q", title="simulated against measured (%)"),
        color=alt.Color("when:N", title=None, legend=alt.Legend(orient="bottom")),
        yOffset="when:N", tooltip=["metric", "when", alt.Tooltip("error:Q", format="+.1f")]
    ).properties(height=BAND_PX * metrics)
