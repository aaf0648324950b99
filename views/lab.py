"""The Lab: the recommended shape, the bottlenecks and the live charts for the current workload."""
import streamlit as st

from core.lab.report import describe_config
from ui import cache, charts, compare, export, state, widgets

st.title("LLM Serving Design Lab")
st.markdown(
    "LLM inference is autoregressive: each request's KV cache grows by one token per step and fills GPU memory, "
    "so batching and memory layout decide throughput. Move the sliders in the sidebar: every change re-simulates "
    "the requests step by step, over paged KV blocks on sharded GPUs.")

inputs = state.inputs()
try:
    view = cache.lab_view(inputs)
except ValueError as e:
    widgets.show_error(e, "This workload")
    st.info("The other pages and the sidebar keep working: change an input to continue.", icon=":material/info:")
    st.stop()

rec = view["recommendation"]
st.subheader(rec.heading)
if rec.met:
    st.markdown(rec.reason)
else:
    st.warning(rec.reason, icon=":material/warning:")
if rec.met and rec.serve:
    export.serve_commands(rec.serve, rec.manifest, "rec_serve", inputs.engine)
st.html(widgets.diagram_html(view["path"]))
st.caption(rec.path_caption)
if view["adopt"]:
    st.button(view["adopt"]["action"], icon=":material/input:", key="adopt", on_click=state.apply,
              args=(view["adopt"]["settings"],),
              help="Sets the sidebar (GPUs, weights, sharding, scheduling) to this deployment, so that the "
                   "figures below are its own.")
with st.expander("What each component does"):
    st.markdown("\n".join(f"- **{c['name']}**{'' if c['on'] else ' (not needed yet)'}: {c['role']}"
                           for c in view["path"]))

st.subheader("Current architecture")
if view["current_error"]:
    widgets.show_error(ValueError(view["current_error"]), "The architecture the toggles describe")
    if view["current_fix"]:
        st.button(view["current_fix"]["action"], icon=":material/build:", key="current_fix", on_click=state.apply,
                  args=(view["current_fix"]["settings"],), type="primary")
    st.stop()
res, cfg = view["result"], view["config"]
s = res.summary
st.caption(f"Simulated: {describe_config(cfg)}; {s['requests']:,} requests, {s['steps']:,} engine steps in "
           f"{s['sim_wall_s'] * 1e3:.0f} ms.")
export.command(cfg)
widgets.clients(s, "The load")
if view["sharding"]:
    st.info(view["sharding"], icon=":material/splitscreen:")
if view["current_path"]:
    st.html(widgets.diagram_html(view["current_path"]))
    st.caption(f"The component path of the deployment simulated here: {describe_config(cfg)}.")
elif view["current_path_note"]:
    st.caption(f"The deployment simulated here: {describe_config(cfg)}. {view['current_path_note']}")
if view["placement"]:
    st.info(view["placement"], icon=":material/lan:")
if view["differs"]:
    st.info(view["differs"], icon=":material/compare_arrows:")
if view["current_misses"]:
    st.warning("The toggles' architecture misses the targets: " + "; ".join(view["current_misses"]) + ".",
               icon=":material/warning:")
widgets.headline(view["headline"])
st.caption("How far to trust these figures: p99 TTFT and TPOT with every engine step as much faster or slower as "
           "the cost model errs on steps it was not fitted to, and the simulator's error on the real serving run "
           "nearest this setting (hover for the run, its engine and its source).")
widgets.headline(view["trust"], columns=3)

st.subheader("Bottlenecks")
widgets.gauges(view["gauges"])

st.subheader("Live charts")
# one chart at a time: only the open tab's chart is built and sent, which keeps a slider move fast
CHARTS = {
    "Queue and batch": lambda: charts.queue_and_batch(res),
    "KV blocks": lambda: charts.kv_blocks(res),
    "TTFT distribution": lambda: charts.ttft_cdf(res, inputs.ttft_p99_ms),
    "Memory split": lambda: charts.memory_split(view["memory"]),
    "Token timeline": lambda: charts.token_timeline(res),
}
for tab, draw in zip(st.tabs(list(CHARTS), key="chart", bind="query-params"), CHARTS.values()):
    if tab.open:
        tab.altair_chart(draw(), width="stretch")

export.downloads(res, inputs.to_dict(), key="lab")
compare.pin_button(cfg.__dict__, "lab")
