"""Planner: the cheapest deployment that meets the sidebar's targets at its traffic, found by
simulating deployments, with the frontier of cost against p99 TTFT and TPOT."""
import json

import pandas as pd
import streamlit as st

from core.lab.recommend import lab_inputs_for, planner_workload
from core.physics import catalog, speculative
from core.planner.plan import highest_load, plan
from core.planner.space import HEADROOM, DEFAULT_DTYPES, DEFAULT_KV_DTYPES, DTYPES, KV_DTYPES, Budget, Deployment
from core.serving import engines, serve_command
from core.text import count, fmt_ms, sentence, usd
from ui import cache, charts, compare, export, state, widgets, yourgpu

st.title("Planner")
st.markdown("What is the cheapest deployment that meets your latency targets at your traffic? The planner takes "
            "the sidebar's workload and targets, lists every deployment within the budget below (GPU type and "
            "count, tensor parallelism, a mixture of experts' expert parallelism, replicas, weight dtype, "
            "scheduling, prefill/decode split), rules out what the memory planner and the roofline forbid, and "
            "simulates the rest.")

inputs = state.valid_inputs()
st.caption(engines.planned_on(inputs.engine))
gpu_ids = yourgpu.options()  # the catalog's and this session's own GPUs
chosen = inputs.gpu.split("@")[0]  # the sidebar's GPU; its price (if set) is the table's below


def price(g: str) -> float:
    return catalog.get_gpu(inputs.gpu if g == chosen else g).price_usd_per_gpu_hour


cache.planner_workers()  # started while the budget is set, so that a search does not wait for them

with st.form("budget"):
    a, b, c = st.columns(3)
    max_gpus = a.select_slider("Most GPUs", [1, 2, 4, 8, 16, 32, 64], 16 if inputs.gpus <= 16 else 64)
    gpu_types = b.multiselect("GPU types", gpu_ids, [chosen], format_func=state.gpu_label)
    # the defaults, the sidebar's formats (a user serving int4 or an fp8 cache searches them too) and the
    # format a model released only quantised comes in (searched whatever is chosen: Budget.released)
    released = serve_command.released_formats(inputs.model)
    dtypes = c.multiselect("Weight dtypes", DTYPES, [d for d in DTYPES if d in DEFAULT_DTYPES or d == inputs.dtype
                                                     or d in released],
                           help="fp8 halves the weight bytes; int4 (AWQ/GPTQ, group 128) takes about a quarter, at "
                                "some accuracy cost. GPUs without FP8 support run fp8 weight-only (FP8 Marlin). A "
                                "model released only quantised (gpt-oss's MXFP4 experts, DeepSeek's fp8) is searched "
                                "in its release whatever is chosen.")
    kv_dtypes = c.multiselect("KV cache dtypes", KV_DTYPES,
                              [k for k in KV_DTYPES if k in DEFAULT_KV_DTYPES or k == inputs.kv_dtype],
                              help="An fp8 cache holds twice the tokens in the same memory (GPUs with FP8 support).")
    a, b, c = st.columns(3)
    attainment = a.select_slider("Requests within both targets", [0.9, 0.95, 0.99, 0.999], 0.99,
                                 format_func=lambda v: f"{v:.1%}")
    disagg = b.toggle("Prefill/decode splits", True, help="Also search deployments split into a prefill and a "
                                                          "decode pool, each with its own tensor parallelism.")
    requests = c.select_slider("Requests per simulation", [500, 1000, 2000, 5000], 2000)
    a, b, c = st.columns(3)
    headroom = a.number_input("Headroom (% of the offered load)", min_value=0, max_value=1000,
                              value=round(HEADROOM * 100), step=5,
                              help="A deployment meets the targets when it still meets them at the sidebar's load "
                                   "plus this share, with every engine step at the trust band's slower edge: an "
                                   "answer on the edge of the targets is not one to deploy. 0 allowed.")
    spare = b.number_input("Spare replicas (N+1)", min_value=0, max_value=64, value=0, step=1,
                           help="Replicas beyond what meets the targets (of each pool, in a prefill/decode split), "
                                "so that it still meets them with this many lost.")
    spec = c.multiselect("Speculative decoding", speculative.METHODS,
                         [inputs.spec_method] if inputs.spec_method != "off" else [],
                         format_func=state.SPEC_LABELS.get,
                         help="Proposers to search beside plain decoding, each at its published acceptance rate (or "
                              "the sidebar's, under Advanced). A proposer the model has none of (MTP) is skipped.")
    with st.expander("Prices ($ per GPU-hour): the catalog's sourced list prices, or the sidebar's; edit a cell to use yours"):
        prices = st.data_editor(pd.DataFrame({"GPU": gpu_ids, "$ per GPU-hour": [price(g) for g in gpu_ids]}),
                                disabled=["GPU"], hide_index=True, key="prices",
                                column_config={"$ per GPU-hour": st.column_config.NumberColumn(min_value=0.01,
                                                                                             format="$%.2f")})
    go = st.form_submit_button("Search deployments", type="primary", icon=":material/search:")

catalog_prices = {g: catalog.get_gpu(g).price_usd_per_gpu_hour for g in gpu_ids}
overrides = tuple((g, float(p)) for g, p in zip(prices["GPU"], prices["$ per GPU-hour"])
                  if g in gpu_types and float(p) != catalog_prices[g])
budget = Budget(gpu_types=tuple(gpu_types), max_gpus=max_gpus, prices=overrides, dtypes=tuple(dtypes),
                kv_dtypes=tuple(kv_dtypes), disaggregation=disagg, spare_replicas=int(spare), speculative=tuple(spec))
workload = planner_workload(inputs, requests=requests, attainment=attainment, headroom=headroom / 100)
key = (workload, budget)

if go:
    bar = st.progress(0.0, text="Starting the search...")
    try:
        result = plan(workload, budget, progress=lambda done, total: bar.progress(
            done / total, text=f"Searched {done} of {count(total, 'deployment shape')}..."))
    except ValueError as e:
        bar.empty()
        widgets.show_error(e, "This search")
        st.stop()
    try:
        curves = result.interactivity(on_point=lambda done, total: bar.progress(
            done / total, text=f"Sweeping concurrency on the best deployments: level {done} of {total}..."))
    except ValueError as e:
        curves = str(e)
    bar.empty()
    st.session_state["plan"] = (key, result, curves)

held = st.session_state.get("plan")
if held is None:
    st.info("Set the budget and press **Search deployments**. The default search (one GPU type, up to 16 GPUs) "
            "takes a few seconds.", icon=":material/info:")
    st.stop()
if held[0] != key:
    st.warning("The sidebar or the budget changed since this search: press **Search deployments** to search again.",
               icon=":material/update:")
p, curves = held[1], held[2]
c = p.counts
st.caption(f"{c['deployments']:,} deployments in {count(c['shapes'], 'shape')}: {c['pruned_memory']:,} refused by the "
           f"memory planner, {c['pruned_roofline']:,} ruled out by the roofline, {c['not_needed']:,} larger than a "
           f"size that already passes; {count(c['simulated'], 'simulation')} at {inputs.load_label()} and "
           f"{c['rate_search_runs']:,} more for the highest rates, in {c['wall_s']:.1f} s "
           f"({c['simulations_per_s']:.0f} simulations/s).")

rows = p.rows()
best = p.cheapest
if best is None:
    margin = f" with {headroom:g}% headroom" if headroom else ""
    st.error(f"No deployment within this budget meets the targets at {inputs.load_label()}{margin}. Raise the GPU "
             f"budget, add a GPU type or fp8, {'lower the headroom, ' if headroom else ''}or relax the targets in "
             "the sidebar.", icon=":material/block:")
else:
    r = p.row(best)
    st.subheader(f"Cheapest: {r['deployment']}")
    widgets.headline([
        dict(label="Cost", value=f"${r['usd_per_hour']:,.2f} / h", help="GPUs x price per GPU-hour"),
        dict(label="Per 1M output tokens", value=usd(r['usd_per_1m_output_tokens']),
             help=f"at {inputs.load_label()}"),
        dict(label="p99 TTFT", value=fmt_ms(r["ttft_p99_ms"]), target=f"target {fmt_ms(inputs.ttft_p99_ms)}"),
        dict(label="p99 TPOT", value=f"{r['tpot_p99_ms']:.1f} ms", target=f"target {inputs.tpot_ms:g} ms"),
        dict(label="Most users within targets",
             value=("≥ " if r["max_rate_is_lower_bound"] else "") + f"{r['max_users']:,} users",
             help=f"{highest_load(r)}: found by doubling, then bisection, on the closed loop's users")
        if r.get("max_users") is not None else
        dict(label="Highest rate within targets", value=highest_load(r),
             help="found by bisection on the request rate, same requests scaled in time"),
        dict(label="Stage", value=str(r["stage"]), help="the architecture stage the deployment amounts to"),
    ], columns=3)
    st.caption(f"Checked {r['checked']}; the p99s above are that check's. Headroom: the highest load within the "
               f"targets over the offered one, less 1.")
    export.serve_commands(r["serve"], r["kubernetes"], "plan_serve", inputs.engine)
    recipe = p.recipe_json()
    if recipe is not None:
        conv = recipe["row"]
        if recipe["is_cheapest"] or conv is None or not conv["meets"]:
            st.info(recipe["why"], icon=":material/menu_book:")
        else:
            st.info(f"**Vendor recipe:** {conv['deployment']}, ${conv['usd_per_hour']:,.2f} / h, within the targets "
                    f"up to {highest_load(conv)}. {recipe['why']}", icon=":material/menu_book:")

left, right = st.columns(2)
left.altair_chart(charts.frontier(rows, "ttft_p99_ms", "p99 TTFT", inputs.ttft_p99_ms), width="stretch")
right.altair_chart(charts.frontier(rows, "tpot_p99_ms", "p99 TPOT", inputs.tpot_ms), width="stretch")
st.caption("Each point is a deployment shape at its cheapest size that meets the targets (a cross: its nearest "
           "miss within the budget). Diamonds are the frontier: no other deployment is cheaper, faster to the first "
           "token and faster per token at once.")

st.subheader("Throughput against interactivity")
if isinstance(curves, str):
    widgets.show_error(ValueError(curves), "This concurrency sweep")
elif curves:
    st.altair_chart(charts.interactivity(curves, inputs.tpot_ms, "The best deployments as concurrency grows"),
                    width="stretch")
    st.caption("The cheapest deployment and the next ones of the cost frontier, each swept over concurrent users "
               "(a closed loop at each level, as `vllm bench serve --max-concurrency` runs): output tokens/s per GPU "
               "against tokens/s per user; ringed, each one's knee, past which more users buy little throughput; "
               "dashed, the TPOT target. Hover for TTFT.")
    dl1, dl2 = st.columns(2)
    with dl1:
        export.table(curves, "concurrency sweep of the best deployments", "plan-sweep", "Concurrency sweep (CSV)")
    with dl2:
        export.json_rows(curves, "plan-sweep", "Concurrency sweep (JSON)", inputs.to_dict())

st.subheader("Every deployment searched")
table = pd.DataFrame([{
    "deployment": r["deployment"], "GPUs": r["gpus"], "meets": r["meets"],
    "highest load within targets": highest_load(r),
    "headroom": r["headroom"] * 100 if r["headroom"] is not None else None, "p99 TTFT (ms)": r["ttft_p99_ms"], "p99 TPOT (ms)": r["tpot_p99_ms"],
    "$ per hour": r["usd_per_hour"], "$ per 1M output tokens": r["usd_per_1m_output_tokens"],
    "requests per $": r["requests_per_usd"], "frontier": r["frontier"],
    "why it misses": sentence(r["misses"]) if r["misses"] else ""} for r in rows])
picked = st.dataframe(table, hide_index=True, on_select="rerun", selection_mode="single-row", key="plan_table",
                      column_config={"headroom": st.column_config.NumberColumn(
                                         format="%.0f%%", help="highest load within the targets over the offered "
                                                               "one, less 1 (spares lost, steps at the slower edge)"),
                                     "p99 TTFT (ms)": st.column_config.NumberColumn(format="%.0f"),
                                     "p99 TPOT (ms)": st.column_config.NumberColumn(format="%.1f"),
                                     "$ per hour": st.column_config.NumberColumn(format="$%.2f"),
                                     "$ per 1M output tokens": st.column_config.NumberColumn(format="$%.3f"),
                                     "requests per $": st.column_config.NumberColumn(
                                         format="%.0f", help="at the highest rate within the targets")})
chosen = picked.selection.rows[0] if picked.selection.rows else None


def open_in_lab(row: dict) -> None:
    d = Deployment(row["gpu"], row["tp"], row["replicas"], row["dtype"], row["policy"], row["chunk"],
                   row["prefill_tp"], row["prefill_replicas"], row.get("pp", 1), row.get("kv_dtype", "bf16"),
                   ep=row.get("ep", 1), dp_attention=row.get("dp_attention", False), eplb=row.get("eplb", False))
    state.apply(lab_inputs_for(d))  # the deployment; the sidebar keeps its model, workload and engine


a, pin, b, c = st.columns(4)
if a.button("Open in the Lab", icon=":material/science:", disabled=chosen is None,
            on_click=open_in_lab, args=(rows[chosen] if chosen is not None else None,)):
    st.switch_page("views/lab.py", query_params={})
with pin:
    compare.pin_button(rows[chosen] if chosen is not None else None, "planner")  # short: a quarter-width button
b.download_button("Download CSV", table.to_csv(index=False), "plan.csv", "text/csv", icon=":material/download:")
c.download_button("Download JSON", json.dumps(p.to_json(), indent=1, default=float), "plan.json", "application/json",
                  icon=":material/download:")
if chosen is not None:
    export.serve_commands(rows[chosen]["serve"], rows[chosen]["kubernetes"], "row_serve", inputs.engine,
                          f"Run {rows[chosen]['deployment']} with {engines.name(inputs.engine)}")
st.caption("Select a row, then open it in the Lab (the sidebar takes its GPUs, dtype and schedule) or pin it for "
           "Compare. A prefill/decode split has no sidebar toggle, so the Lab shows its GPUs and its own "
           "recommendation finds the split.")
if p.pruned():
    with st.expander(f"Ruled out before simulating ({len(p.pruned())} shapes)"):
        st.dataframe(pd.DataFrame(p.pruned()), hide_index=True)
