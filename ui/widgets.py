"""Shared page elements: the architecture diagram, gauges, headline metrics, error messages."""
from __future__ import annotations

import textwrap

import streamlit as st

from core.lab.gauges import Gauge
from core.serving import metrics

STATUS_ICON = {"ok": ":material/check_circle:", "warn": ":material/warning:", "bad": ":material/error:"}
STATUS_WORD = {"ok": "fine", "warn": "getting close", "bad": "limiting"}
STATUS_COLOR = {"ok": "green", "warn": "orange", "bad": "red"}


def diagram_dot(path: list[dict]) -> str:
    """The component path as Graphviz DOT, in two rows (request side, GPU side), rendered in the
    browser (no graphviz binary needed)."""
    lines = ["digraph G {", 'rankdir=TB; bgcolor="transparent"; nodesep=0.35; ranksep=0.5; newrank=true;',
             'node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=15, margin="0.2,0.1", width=2.6];',
             'edge [color="#64748b", arrowsize=0.8];']
    for c in path:
        role = "\\n".join(textwrap.wrap(c["role"], 34))
        if c["on"]:
            lines.append(f'{c["id"]} [label="{c["name"]}\\n{role}", fillcolor="#ede9fe", color="#7c3aed", '
                         f'fontcolor="#1e1b4b", penwidth=2];')
        else:
            lines.append(f'{c["id"]} [label="{c["name"]}\\n(not needed yet)", fillcolor="#f8fafc", color="#cbd5e1", '
                         f'fontcolor="#94a3b8", style="rounded,filled,dashed"];')
    ids = [c["id"] for c in path]
    on = {c["id"]: c["on"] for c in path}
    half = (len(ids) + 1) // 2
    lines.append("{rank=same; " + "; ".join(ids[:half]) + "}")
    lines.append("{rank=same; " + "; ".join(ids[half:]) + "}")

    def edge(a: str, b: str, live: bool) -> None:
        style = [] if live else ["style=dashed", 'color="#cbd5e1"']
        if ids.index(a) < half <= ids.index(b):  # from the first row to the second: no rank constraint
            style.append("constraint=false")
        lines.append(f"{a} -> {b} [{', '.join(style)}];")

    for a, b in zip(ids, ids[1:]):  # the full path, greyed where a part is not needed
        if not (on[a] and on[b]):
            edge(a, b, False)
    needed = [i for i in ids if on[i]]
    for a, b in zip(needed, needed[1:]):  # the path a request takes: past the parts not needed yet
        edge(a, b, True)
    for a, b in zip(ids[:half], ids[half:]):  # keep the rows' columns aligned
        lines.append(f"{a} -> {b} [style=invis];")
    lines.append("}")
    return "\n".join(lines)


def gauge(g: Gauge) -> None:
    """A gauge in two elements (a labelled bar, then why and the knob): every element costs the
    browser time on each slider move."""
    with st.container(border=True):
        st.progress(min(max(g.ratio, 0.0), 1.0),
                    text=f"**{g.name}** :{STATUS_COLOR[g.status]}-badge[{STATUS_ICON[g.status]} "
                         f"{STATUS_WORD[g.status]}]  \n{g.reading}")
        st.caption(f"{g.why}  \n:material/tune: **Knob:** {g.knob}" + (f"  \n{g.detail}" if g.detail else ""))


def headline(items: list[dict], columns: int = 4) -> None:
    cols = st.columns(columns)
    for i, m in enumerate(items):
        with cols[i % columns]:
            delta = m.get("target")
            color = "normal" if m.get("ok", True) else "inverse"
            st.metric(m["label"], m["value"], delta=delta, delta_color=color if delta else "off",
                      delta_arrow="off", help=m.get("help"), border=True)


def show_error(e: Exception, what: str = "This view") -> None:
    """Bad input is an answer, not a crash: say what to change."""
    st.error(f"{what} cannot be simulated as set: {e}", icon=":material/block:")


def overload(summary: dict, what: str = "This run") -> None:
    """A run whose queue grows without bound says so, with what was served against what was offered."""
    note = metrics.overload(summary)
    if note:
        st.warning(f"{what}: {note}.", icon=":material/trending_up:")
