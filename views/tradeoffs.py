"""Decision trade-offs: what each design choice gains and costs, with a live A/B on the workload."""
import pandas as pd
import streamlit as st

from core.lab import content, tradeoffs
from core.text import sentence
from ui import cache, export, state, widgets

st.title("Decision trade-offs")
st.markdown(f"Why this changes: {len(content.tradeoffs())} choices the design makes as the workload grows. Each is simulated off and on, "
            "on the sidebar's workload.")

inputs = state.valid_inputs()
rules = content.rules()
try:
    tradeoffs.check_work(inputs)
except ValueError as e:
    widgets.show_error(e, "This workload")
    st.stop()

for t in content.tradeoffs():
    st.subheader(t["title"])
    ab = cache.tradeoff(inputs, t["id"])  # a spinner, or a progress bar with Stop when long (ui/jobs.py)
    if ab.note:  # which GPUs, and why, as the section's first sentence (a phone stacks the columns below)
        st.markdown(f":material/memory: {ab.note}")
    left, right = st.columns([2, 3])
    with left:
        st.markdown(f":green-badge[Gains] {t['gains']}")
        st.markdown(f":red-badge[Costs] {t['costs']}")
        st.markdown(f":blue-badge[Choose it when] {t['choose_when']}")
        links = [f"[{rules[r]['citation']['label']}]({rules[r]['citation']['link']}) ({content.cite(rules[r])})"
                 for r in t["rules"] if r in rules]
        if links:
            st.caption("Sources: " + "; ".join(links))
    with right:
        if ab.error:
            st.info(sentence(ab.error), icon=":material/info:")
            continue
        st.markdown(f"**On this workload:** {tradeoffs.verdict(ab)}")
        widgets.overload(ab.off.summary, f"Off ({ab.off_label})")
        if ab.id != "streaming":
            widgets.overload(ab.on.summary, f"On ({ab.on_label})")
            st.caption(f"**Off:** {ab.off_label}.  \n**On:** {ab.on_label}.")
        rows = tradeoffs.comparison(ab)
        table = pd.DataFrame(rows)
        st.table(table.set_index(table.columns[0]))
        a, b = st.columns(2)
        with a:
            export.table(rows, f"trade-off: {t['title']}", f"tradeoff-{t['id']}", "Comparison (CSV)")
        with b:
            export.runs({f"off: {ab.off_label}": ab.off, f"on: {ab.on_label}": ab.on}, inputs.to_dict(),
                        f"tradeoff-{t['id']}", "Both runs (JSON)")
