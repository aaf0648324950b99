"""Tutorial: the full write-up behind "Read the full tutorial", from autoregression and the KV cache
to disaggregation, with its numbers computed live for the sidebar's workload."""
import re

import streamlit as st

from core.lab import tutorial
from ui import cache, charts, state, widgets

st.title("Tutorial: from one token to a serving fleet")
st.info("Every number on this page follows the sidebar: change the model, GPU, prompt and output lengths, "
        "request rate or GPU count, and the text recomputes for your workload.", icon=":material/tune:")

inputs = state.inputs()
try:
    with st.spinner(f"Computing the write-up's numbers for your workload (simulating {inputs.requests:,} requests)...",
                    show_time=True):
        text = tutorial.render(inputs, with_note=False)
        warning = tutorial.note(inputs)
        facts = tutorial.facts(inputs)
except ValueError as e:
    widgets.show_error(e, "The tutorial")
    st.stop()
if warning:
    st.warning(warning, icon=":material/warning:")


def batch_chart():
    """Decode tokens/s against batch: the Lab's cost model under the weights-only roofline."""
    if facts["shown"] is None:
        return None
    rows = cache.sweep(facts["shown"], "batch")
    # the roofline at the datasheet ridge too, so that its knee is drawn where the line marks it
    knee = [round(facts["ridge_batch"])] if rows and facts["ridge_batch"] < rows[-1]["batch"] else []
    roof = tutorial.roofline(facts["shown"], sorted({r["batch"] for r in rows} | set(knee)))
    return charts.decode_roofline(rows, roof,
                                  {"datasheet ridge": facts["ridge_batch"], "measured ridge": facts["ridge_eff_batch"]})


# the write-up, section by section, with a chart after the sections it illustrates
for part in re.split(r"(?m)^(?=## )", text):
    st.markdown(part)
    if part.startswith("## 1."):
        chart = batch_chart()
        if chart is not None:
            st.altair_chart(chart, width="stretch")
            st.caption("Grey: the textbook roofline, counting only the weights, on the datasheet's FLOP/s and "
                       "bandwidth; its knee is the datasheet ridge. Red dotted lines: the ridge on the datasheet and "
                       "with the kernels' measured efficiencies (the batch at each, in sequences). Left of a ridge a "
                       "step is limited by streaming the weights, so tokens/s grow with the batch almost for free; "
                       "right of it, by arithmetic. Purple: the Lab's cost model, which also reads every sequence's KV cache "
                       "each step; those reads grow with the batch and no batch shares them, so the longer the "
                       "context, the earlier the curve bends below the roofline.")
    elif part.startswith("## 6."):
        st.altair_chart(charts.tp_memory(cache.sweep(inputs, "tp")), width="stretch")
        st.caption("Each GPU holds the weights ÷ tp, and the cache gets what the weights and the activation "
                   "workspace leave of 90% of the usable memory (the gap below the red line). A bar without purple "
                   "is a degree at which the model does not fit.")
