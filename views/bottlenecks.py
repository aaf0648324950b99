"""Bottlenecks: each gauge's live value on the current workload, and a sweep showing where it bites."""
import streamlit as st

from core.lab import sweeps
from core import text
from ui import cache, charts, state, widgets

st.title("Bottlenecks")
st.markdown("Five limits decide how a deployment serves a workload. Each is measured by the simulation of the "
            "sidebar's workload (left) and swept across the input that moves it most (right).")

inputs = state.inputs()
try:
    view = cache.lab_view(inputs)
    if view["current_error"]:
        raise ValueError(view["current_error"])
except ValueError as e:
    widgets.show_error(e, "This workload")
    st.stop()
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


def ttft():
    rows = cache.sweep(inputs, "rate")
    knee = sweeps.knee_rate(rows, inputs.ttft_p99_ms)
    st.altair_chart(charts.line(rows, "rate", "ttft_p99_ms", "request rate (req/s)", "p99 TTFT (ms, log scale)",
                                "p99 TTFT against request rate: the knee", log_y=True, rule_y=inputs.ttft_p99_ms,
                                rule_x=inputs.rate), width="stretch")
    st.caption((f"Within the target up to about {knee:.3g} req/s on this deployment" if knee else
                "No swept rate meets the target on this deployment") +
               f"; dashed: the {text.fmt_ms(inputs.ttft_p99_ms)} target and the current {inputs.rate:g} req/s.")


def kv():
    rows = cache.sweep(inputs, "output")
    st.altair_chart(charts.line(rows, "output_tokens", "peak_kv", "average output tokens", "peak KV blocks in use",
                                "KV cache pressure against output length", log_x=True, percent_y=True, rule_y=1.0,
                                rule_x=inputs.output_tokens), width="stretch")
    worst = max(rows, key=lambda r: r["preemptions"]) if rows else None
    if worst and worst["preemptions"]:
        st.caption(f"At {worst['output_tokens']:,} output tokens the cache runs out: {worst['preemptions']:,} "
                   f"preemptions recompute evicted requests.")
    else:
        st.caption("No preemptions across the sweep: the cache holds every running sequence.")


def weights():
    rows = cache.sweep(inputs, "tp")
    usable = rows[0]["usable_gb"] if rows else 0
    st.altair_chart(charts.line(rows, "tp", "weights_gb", "tensor-parallel degree (GPUs per replica)",
                                "weights per GPU (GB)", "Per-GPU weight footprint falls as you shard", log_x=True,
                                rule_y=usable), width="stretch")
    fits = [r["tp"] for r in rows if r["fits"]]
    st.caption((f"Fits from tp={fits[0]}" if fits else "Does not fit at any swept tp") +
               f"; dashed: {usable:.0f} GB usable per GPU. KV room per GPU at each tp: " +
               ", ".join(f"tp={r['tp']}: {r['kv_gb']:.0f} GB" for r in rows) + ".")


def decode():
    rows = cache.sweep(inputs, "batch")
    st.altair_chart(charts.line(rows, "batch", "tok_s", "decoding sequences per step (batch)",
                                "tok/s of one replica", "Decode throughput against batch", log_x=True,
                                log_y=True, rule_x=max(s["mean_batch"], 1)), width="stretch")
    st.caption(f"Dotted: this run's mean batch of {s['mean_batch']:.1f}. Memory-bound, then compute-bound: a bigger "
               f"batch shares each pass over the weights among more tokens, until the attention reads and the FLOPs "
               f"catch up.")


def slots():
    rows = cache.sweep(inputs, "rate")
    max_seqs = inputs.max_seqs if view["config"].policy != "serial" else 1
    st.altair_chart(charts.line(rows, "rate", "mean_batch", "request rate (req/s)", "mean sequences per step",
                                "Batch slots used against request rate", log_x=True, rule_y=max_seqs,
                                rule_x=inputs.rate), width="stretch")
    st.caption(f"Dashed: the {max_seqs}-sequence limit per replica (Advanced: max batch).")


section("ttft", ttft)
section("kv", kv)
section("weights", weights)
section("decode", decode)
section("slots", slots)
