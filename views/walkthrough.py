"""Guided walkthrough: the five stages, one at a time, each simulated on the current workload."""
import streamlit as st

from core.lab import content, gauges, report, stages
from core.lab.inputs import STAGES
from ui import cache, charts, export, state, widgets

st.title("Guided walkthrough")
st.markdown("Reason about it one step at a time: each stage below is simulated on the workload in the sidebar, "
            "and shows what improved on the stage before it, what limits it now, and the rule that motivates the "
            "next step.")

inputs = state.valid_inputs()
try:
    outcomes = cache.stages(inputs)  # a spinner, or a progress bar with Stop when long (ui/jobs.py)
except ValueError as e:  # more work than a page may take: the message names the knob
    widgets.show_error(e, "This workload")
    st.stop()
rec = stages.simplest_stage(outcomes, inputs)
notes, rules = content.stage_notes(), content.rules()

def _step(by: int) -> None:
    st.session_state["walk_stage"] = min(5, max(1, st.session_state.get("walk_stage", 1) + by))


k = st.session_state.setdefault("walk_stage", 1)
back, mid, nxt = st.columns([1, 4, 1])
back.button("Back", icon=":material/arrow_back:", disabled=k == 1, width="stretch", on_click=_step, args=(-1,))
nxt.button("Next", icon=":material/arrow_forward:", disabled=k == 5, width="stretch", on_click=_step, args=(1,))
mid.progress(k / 5, text=f"Stage {k} of 5: {STAGES[k]}" + (" (the stage this workload needs)" if rec.met and k == rec.stage else ""))

o, prev, note = outcomes[k - 1], outcomes[k - 2] if k > 1 else None, notes[k]
st.header(f"Stage {k}: {o.name}")
st.markdown(f"**What it adds.** {note['adds']}")
if o.error:
    st.warning(f"This stage cannot run here: {o.error}.", icon=":material/block:")
else:
    s = o.summary
    st.caption(f"Simulated: {report.describe_config(o.config)}.")
    for col, m in zip(st.columns(4), stages.stage_metrics(o, prev)):
        value, _ = widgets.split_growing(m["value"])  # a card cuts '52.4 min and growing' off: the delta says it
        col.metric(m["label"], value, delta=m["delta"], delta_color=m["color"], delta_arrow=m["arrow"],
                   delta_description=m["description"], border=True)
    if o.misses:
        st.error("Misses the targets: " + "; ".join(o.misses) + ".", icon=":material/error:")
    else:
        st.success("Meets the targets (p99 TTFT and TPOT, with a stable queue).", icon=":material/check_circle:")
    worst = max(gauges.gauges(o.config, o.result, inputs), key=lambda g: g.ratio)
    st.markdown(f"**What limits it now.** {note['limit']}")
    st.markdown(f"Measured: **{worst.name}** is the tightest gauge. {worst.why}")  # why carries the numbers
st.markdown(f"**Next step.** {note['next']}")
for rid in note["next_rules"]:
    r = rules.get(rid)
    if r:
        st.markdown(f"- *{r['title']}* ([{r['citation']['label']}]({r['citation']['link']}), {content.cite(r)}): "
                    f"{r['claim']}")

st.subheader("All five stages on this workload")
rows = stages.stage_rows(outcomes)
a, b = st.columns(2)
a.altair_chart(charts.stage_bars(rows, "ttft", "p99 TTFT", "s, log scale", inputs.ttft_p99_ms / 1e3, log=True),
               width="stretch")
b.altair_chart(charts.stage_bars(rows, "tok", "Throughput", "output tok/s"), width="stretch")
st.caption(f"Recommended: stage {rec.stage}, {rec.name}. {rec.reason}" if rec.met else rec.reason)

st.subheader("Download")
export.table([{"stage": r["stage"], "name": r["name"], "ttft_p99_s": r["ttft"], "throughput_tok_s": r["tok"],
               "targets": r["meets"]} for r in rows], "the five stages on this workload", "stages", "All five stages (CSV)")
if not o.error:
    export.downloads(o.result, inputs.to_dict(), key=f"stage{k}")
