"""Pinned deployments, kept in the session for the Compare view. Any view pins with one call:

    from ui import compare
    compare.pin(deployment_dict)     # a Planner row, the Lab's deployment, or one edited by hand
"""
from __future__ import annotations

import streamlit as st

from core.lab import compare as core_compare

KEY = "pinned_deployments"


def pinned() -> list[dict]:
    return list(st.session_state.get(KEY, []))


def pin(deployment: dict) -> str:
    """Pin a deployment (up to four; the oldest gives way). Returns a sentence saying what happened,
    for a toast or caption; a deployment that cannot run is refused with the reason."""
    from ui import state  # the sidebar's inputs fill what the deployment leaves out
    try:
        d = core_compare.normalise(deployment, state.inputs())
    except ValueError as e:
        return f"Not pinned: {e}"
    held = [p for p in pinned() if {k: v for k, v in p.items() if k != "label"}
            != {k: v for k, v in d.items() if k != "label"}]
    dropped = held[:-(core_compare.MAX_PINNED - 1)] if len(held) >= core_compare.MAX_PINNED else []
    held = held[len(dropped):] + [d]
    st.session_state[KEY] = held
    return f"Pinned {d['label']} for Compare" + (f" (unpinned the oldest, {dropped[0]['label']})" if dropped else "")


def unpin(index: int) -> None:
    held = pinned()
    if 0 <= index < len(held):
        held.pop(index)
    st.session_state[KEY] = held


def pin_button(deployment: dict | None, key: str, label: str = "Pin for Compare") -> None:
    """A small button that pins `deployment` and says so (disabled while there is none)."""
    if st.button(label, key=f"pin-{key}", icon=":material/push_pin:", disabled=deployment is None):
        st.toast(pin(deployment))


def distributions_chart(rows: list[dict], metric: str):
    """One metric's (TTFT or TPOT) distribution for every deployment, as cumulative shares, as wide as
    its column (two fixed 330-px facets ran off a phone's screen)."""
    import altair as alt
    import pandas as pd

    from ui import charts
    df = pd.DataFrame([r for r in rows if r["metric"] == metric])
    scale, axis = charts.log_scale(df["ms"])  # spans the data: Vega's own log domain put 7-8 ms TPOTs in 1-10 ms
    chart = alt.Chart(df).mark_line().encode(
        x=alt.X("ms:Q", title=f"{metric} (ms, log scale)", scale=scale, axis=alt.Axis(**axis)),
        y=alt.Y("share:Q", title="share of requests", axis=alt.Axis(format="%")),
        # a label cut at 240 px stays on a phone's screen, its leading number still naming the deployment
        color=alt.Color("deployment:N", title=None, legend=alt.Legend(orient="bottom", columns=1, labelLimit=240)),
        tooltip=["deployment", alt.Tooltip("ms:Q", format=",.1f"), alt.Tooltip("share:Q", format=".0%")],
    )
    return charts.framed(chart, 220, metric)  # fit to the column's width only: its height stays the plot's
