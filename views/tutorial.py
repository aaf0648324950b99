"""Tutorial: the full write-up behind "Read the full tutorial", from autoregression and the KV cache
to disaggregation, with its numbers computed live for the sidebar's workload."""
import re

import altair as alt
import pandas as pd
import streamlit as st

from core.lab import tutorial
from ui import cache, charts, state, widgets

st.title("Tutorial: from one token to a serving fleet")
st.info("Every number on this page follows the sidebar: change the model, GPU, prompt and output lengths, "
        "request rate or GPU count, and the text recomputes for your workload.", icon=":material/tune:")

inputs = state.inputs()
try:
    text = tutorial.render(inputs, with_note=False)
    warning = tutorial.note(inputs)
    facts = tutorial.facts(inputs)
except ValueError as e:
    widgets.show_error(e, "The tutorial")
    st.stop()
if warning:
    st.warning(warning, icon=":material/warning:")


def batch_chart() -> alt.Chart | None:
    """Decode tokens/s against batch: the Lab's cost model under the weights-only roofline."""
    if facts["shown"] is None:
        return None
    rows = cache.sweep(facts["shown"], "batch")
    roof = tutorial.roofline(facts["shown"], [r["batch"] for r in rows])
    df = pd.DataFrame([dict(batch=r["batch"], tok_s=r["tok_s"], curve="Lab cost model") for r in rows]
                      + [dict(batch=r["batch"], tok_s=r["tok_s"], curve="roofline, weights only") for r in roof])
    lines = alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("batch:Q", title="decode batch (sequences, log scale)", scale=alt.Scale(type="log")),
        y=alt.Y("tok_s:Q", title="tokens/s (log scale)", scale=alt.Scale(type="log")),
        color=alt.Color("curve:N", scale=alt.Scale(domain=["Lab cost model", "roofline, weights only"],
                                                   range=[charts.COLORS["accent"], charts.COLORS["muted"]]),
                        legend=alt.Legend(orient="top", title=None, symbolType="stroke", symbolStrokeWidth=3)),
        strokeDash=alt.StrokeDash("curve:N", legend=None, scale=alt.Scale(range=[[1, 0], [6, 4]])),
        tooltip=[alt.Tooltip("batch:Q", title="batch (sequences)"), "curve:N",
                 alt.Tooltip("tok_s:Q", title="tokens/s", format=",.0f")])
    ridge = pd.DataFrame({"batch": [facts["ridge_batch"]], "text": ["ridge point"]})
    rule = alt.Chart(ridge).mark_rule(color=charts.COLORS["bad"], strokeDash=[2, 2]).encode(x="batch:Q")
    label = alt.Chart(ridge).mark_text(align="right", baseline="top", dx=-4, color=charts.COLORS["bad"]).encode(
        x="batch:Q", y=alt.value(4), text="text:N")
    return charts.framed(lines + rule + label, 260, "Decode throughput of one replica against batch size")


def tp_chart() -> alt.Chart:
    """Per-GPU memory against the tensor-parallel degree: weights shrink, the KV cache gets the rest."""
    rows = cache.sweep(inputs, "tp")
    df = pd.DataFrame([dict(tp=str(r["tp"]), part=p, gb=r[k]) for r in rows
                       for p, k in (("weights", "weights_gb"), ("KV cache", "kv_gb"))])
    bars = alt.Chart(df).mark_bar().encode(
        x=alt.X("tp:O", title="tensor-parallel degree (GPUs per replica)", sort=None, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("gb:Q", title="memory per GPU (GB)", stack="zero"),
        color=alt.Color("part:N", scale=alt.Scale(domain=["weights", "KV cache"],
                                                  range=["#475569", charts.COLORS["accent"]]),
                        legend=alt.Legend(orient="top", title=None)),
        order=alt.Order("part:N", sort="descending"),
        tooltip=["tp:O", "part:N", alt.Tooltip("gb:Q", title="GB per GPU", format=",.1f")])
    usable = pd.DataFrame({"gb": [rows[0]["usable_gb"]], "text": [f"usable {rows[0]['usable_gb']:.0f} GB per GPU"]})
    rule = alt.Chart(usable).mark_rule(color=charts.COLORS["bad"], strokeDash=[6, 4]).encode(y="gb:Q")
    label = alt.Chart(usable).mark_text(align="right", dy=-6, color=charts.COLORS["bad"]).encode(
        x=alt.value("width"), y="gb:Q", text="text:N")
    return charts.framed(bars + rule + label, 230, "What one GPU holds as the model is sharded")


# the write-up, section by section, with a chart after the sections it illustrates
for part in re.split(r"(?m)^(?=## )", text):
    st.markdown(part)
    if part.startswith("## 1."):
        chart = batch_chart()
        if chart is not None:
            st.altair_chart(chart, width="stretch")
            st.caption("Grey: the textbook roofline, counting only the weights. Left of the dotted line a step is "
                       "limited by streaming the weights, so tokens/s grow with the batch almost for free; right of "
                       "it, by arithmetic. Purple: the Lab's cost model, which also reads every sequence's KV cache "
                       "each step; those reads grow with the batch and no batch shares them, so the longer the "
                       "context, the earlier the curve bends below the roofline.")
    elif part.startswith("## 6."):
        st.altair_chart(tp_chart(), width="stretch")
        st.caption("Each GPU holds the weights ÷ tp, and the cache gets what the weights and the activation "
                   "workspace leave of 90% of the usable memory (the gap below the red line). A bar without purple "
                   "is a degree at which the model does not fit.")
