"""Bottlenecks: each gauge's live value on the current workload, and a sweep showing where it bites."""
import streamlit as st

from core.lab import sweeps
from ui import cache, charts, export, state, widgets

st.title("Bottlenecks")
st.markdown("Five limits decide how a deployment serves a workload. Each is measured by simulating the "
            "sidebar's workload (the gauge) and swept across the input that moves it most (the chart).")

inputs = state.inputs()
try:
    view = cache.lab_view(inputs)
    if view["current_error"]:
        raise ValueError(view["current_error"])
except ValueError as e:
    widgets.show_error(e, "This workload")
    st.stop()
widgets.overload(view["result"].summary, "The simulated deployment")
gauges = {g.id: g for g in view["gauges"]}
s = view["result"].summary


def section(gauge_id: str, draw) -> None:
    st.subheader(gauges[gauge_id].name)
    left, right = st.columns([2, 3])
    with left:
        widgets.gauge(gauges[gauge_id])
    with right:
        try:
            draw()
        except ValueError as e:
            widgets.show_error(e, "This sweep")


def fixed_by_trace(kind: str) -> bool:
    """On a replayed trace, a sweep of what the trace fixes is a sentence, not a flat line."""
    note = sweeps.trace_fixes(inputs, kind)
    if note:
        st.info(note, icon=":material/info:")
    return note is not None


def ttft():
    if fixed_by_trace("rate"):
        return
    rows = cache.sweep(inputs, "rate")
    st.altair_chart(charts.line(rows, "rate", "ttft_p99_ms", "request rate (req/s)", "p99 TTFT (ms, log scale)",
                                "p99 TTFT against request rate: the knee", log_y=True, rule_y=inputs.ttft_p99_ms,
                                rule_x=sweeps.current_rate(inputs, s), mark_overload=True), width="stretch")
    st.caption(sweeps.rate_caption(rows, inputs, s))
    export.table(rows, "sweep of the request rate", "sweep-rate", "Rate sweep (CSV)")


def kv():
    if fixed_by_trace("output"):
        return
    rows = cache.sweep(inputs, "output")
    st.altair_chart(charts.line(rows, "output_tokens", "peak_kv", "average output tokens", "peak KV blocks in use",
                                "KV cache pressure against output length", log_x=True, percent_y=True, rule_y=1.0,
                                rule_y_label="every KV block in use", rule_x=inputs.output_tokens), width="stretch")
    st.caption(sweeps.output_caption(rows))
    export.table(rows, "sweep of the output length", "sweep-output", "Output-length sweep (CSV)")


def weights():
    rows = cache.sweep(inputs, "tp")
    usable = rows[0]["usable_gb"] if rows else 0
    st.altair_chart(charts.line(rows, "tp", "weights_gb", "tensor-parallel degree (GPUs per replica)",
                                "weights per GPU (GB)", "Per-GPU weight footprint falls as you shard", log_x=True,
                                x_ticks=[r["tp"] for r in rows], rule_y=usable, rule_y_label=f"{usable:.0f} GB usable per GPU"),
                    width="stretch")
    st.caption(sweeps.tp_caption(rows))
    export.table(rows, "sweep of the tensor-parallel degree", "sweep-tp", "Tensor-parallel sweep (CSV)")


def decode():
    rows = cache.sweep(inputs, "batch")
    st.altair_chart(charts.line(rows, "batch", "tok_s", "decoding sequences per step (batch)",
                                "tok/s of one replica", "Decode throughput against batch", log_x=True,
                                x_ticks=[r["batch"] for r in rows], log_y=True, rule_x=max(s["mean_batch"], 1)),
                    width="stretch")
    st.caption(sweeps.batch_caption(s["mean_batch"]))
    export.table(rows, "sweep of the decode batch", "sweep-batch", "Batch sweep (CSV)")


def slots():
    if fixed_by_trace("rate"):
        return
    rows = cache.sweep(inputs, "rate")
    max_seqs = sweeps.slot_limit(view["config"])
    st.altair_chart(charts.line(rows, "rate", "mean_batch", "request rate (req/s)", "running batch (sequences)",
                                "Batch slots used against request rate", log_x=True, rule_y=max_seqs,
                                rule_y_label=f"{max_seqs:,} slots per replica", rule_x=sweeps.current_rate(inputs, s)),
                    width="stretch")
    st.caption(f"The running batch: the mean sequences in a step, over the steps that decode. The limit is "
               f"{sweeps.slot_words(view['config'])}; dotted: the current rate.")


def interactivity():
    st.subheader("Throughput against interactivity")
    st.markdown("Benchmarks are run at a fixed number of concurrent users (`vllm bench serve --max-concurrency`): "
                "each level below is a closed loop of that many users on this deployment, each sending its next "
                "request when its answer is complete.")
    if fixed_by_trace("rate"):
        return
    try:
        rows = cache.sweep(inputs, "users")
    except ValueError as e:
        widgets.show_error(e, "This sweep")
        return
    st.altair_chart(charts.interactivity(rows, inputs.tpot_ms), width="stretch")
    st.caption(sweeps.users_caption(rows, inputs))
    export.table(rows, "concurrency sweep: output tok/s per GPU against tok/s per user", "sweep-users",
                 "Concurrency sweep (CSV)")
    export.json_rows(rows, "sweep-users", "Concurrency sweep (JSON)", inputs.to_dict())


section("ttft", ttft)
section("kv", kv)
section("weights", weights)
section("decode", decode)
section("slots", slots)
interactivity()

st.subheader("Download")
export.downloads(view["result"], inputs.to_dict(), key="bottlenecks")
