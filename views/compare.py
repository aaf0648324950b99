"""Compare: up to four pinned deployments side by side on the sidebar's workload and targets."""
import streamlit as st

from core import bounds
from core.lab import compare as C
from core.physics import catalog
from core.text import fmt_ms
from ui import cache, compare, state, widgets, yourgpu
from ui import export as dl

st.title("Compare")
st.markdown("Pin up to four deployments (the Lab's, a row of the Planner, your benchmark's, or one you set below) and "
            "see them serve the same workload, the sidebar's: headline figures, the TTFT and TPOT distributions, cost, "
            "and the gauge that limits each.")
inputs = state.valid_inputs()

a, b = st.columns([1, 2])
if a.button("Pin the Lab's deployment", icon=":material/push_pin:", key="pin_lab"):
    try:
        st.toast(compare.pin(C.from_lab(inputs)))
    except ValueError as e:
        widgets.show_error(e, "The Lab's deployment")
with b.expander("Set a deployment by hand"):
    with st.form("compare_edit", border=False):
        c1, c2, c3 = st.columns(3)
        gpus_list = yourgpu.options()
        gpu = c1.selectbox("GPU", gpus_list, gpus_list.index(inputs.gpu.split("@")[0])
                           if inputs.gpu.split("@")[0] in gpus_list else 0, format_func=lambda g: catalog.get_gpu(g).name)
        n = c2.select_slider("GPUs", bounds.sidebar_options("gpus"), inputs.gpus)  # the sidebar's counts, every one
        tp = c3.select_slider("tp", [1, 2, 4, 8, 16], 1)
        dtype = c1.selectbox("Weights", catalog.WEIGHT_DTYPES, format_func=state.weights_label)
        kv_dtype = c3.selectbox("KV cache", catalog.KV_DTYPES, format_func=state.kv_label)
        policy = c2.selectbox("Scheduling", C.POLICIES, format_func=C.POLICY_WORDS.get)
        budget = c3.select_slider("Token budget per step", bounds.sidebar_options("budget"), 2048)
        pre = c1.select_slider("Prefill GPUs (0: no split)", [0, 1, 2, 4, 8, 16], 0)
        pp = c2.select_slider("Pipeline stages (pp)", [1, 2, 4, 8], 1,
                              help="Stages of tp GPUs each per replica; a replica takes tp x pp GPUs (no split)")
        if st.form_submit_button("Pin", icon=":material/push_pin:"):
            price = inputs.gpu.partition("@")[2]
            st.toast(compare.pin(dict(gpu=f"{gpu}@{price}" if price else gpu, gpus=n, tp=tp, pp=pp, dtype=dtype,
                                      kv_dtype=kv_dtype,
                                      policy=policy, max_batched_tokens=budget, prefill_gpus=pre,
                                      prefill_tp=tp if pre else None)))

pinned = compare.pinned()
if not pinned:
    st.info("Nothing pinned yet: pin the Lab's deployment above, or use **Pin for Compare** on the Planner or "
            "Your benchmark.", icon=":material/info:")
    st.stop()

for i, d in enumerate(pinned):
    c1, c2 = st.columns([6, 1])
    c1.markdown(f"**{i + 1}.** {d['label']}" + (f"  \n{C.describe(d)}" if d['label'] != C.describe(d) else ""))
    c2.button("Unpin", key=f"unpin-{i}", on_click=compare.unpin, args=(i,), icon=":material/close:")

entries = cache.side_by_side(pinned, inputs)
for e in entries:
    if e["error"]:
        widgets.show_error(ValueError(e["error"]), e["label"])
ok = [e for e in entries if not e["error"]]
if not ok:
    st.stop()
for i, e in enumerate(ok):
    widgets.overload(e["result"].summary, f"Deployment {i + 1} ({e['label']})")  # '1.' would start a list

st.subheader("Side by side")
st.caption(f"{inputs.load_label()}, prompts of {inputs.prompt_tokens} and outputs of {inputs.output_tokens} tokens "
           f"({inputs.length_dist}), {inputs.requests:,} requests; targets p99 TTFT {fmt_ms(inputs.ttft_p99_ms)} and "
           f"p99 TPOT {fmt_ms(inputs.tpot_ms)}.")  # as every other view writes them: '1.00 s', not '1000 ms'
rows = C.table(entries, inputs)
st.dataframe(rows, hide_index=True, width="stretch", height="content")  # every row: a scrolled table hid some
st.subheader("TTFT and TPOT distributions")
dist = C.distributions(entries)
for col, metric in zip(st.columns(2), ("TTFT", "TPOT")):
    col.altair_chart(compare.distributions_chart(dist, metric), width="stretch")
st.subheader("What limits each")
cols = st.columns(len(ok))
for col, (i, e) in zip(cols, enumerate(ok)):
    with col:
        st.markdown(f"**{i + 1}.** {e['label']}")
        widgets.gauge(e["limiting"])

dl.table(rows, "deployments compared", "compare", "Comparison (CSV)")
dl.runs({f"{i + 1}. {e['label']}": e["result"] for i, e in enumerate(ok)}, inputs.to_dict(), "compare",
        "All runs (JSON)")
