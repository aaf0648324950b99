"""How a run's summary figures read on a page, each with its unit: one table that every side-by-side
comparison (the trade-offs' A/B, Compare) picks its rows from."""
from __future__ import annotations

from ..text import fmt_ms

READ = {
    "ttft_p50": lambda s: fmt_ms(s["ttft_ms"]["p50"]),
    "ttft_p99": lambda s: fmt_ms(s["ttft_ms"]["p99"]),
    "tpot_p50": lambda s: f"{s['tpot_ms']['p50']:.1f} ms",
    "tpot_p99": lambda s: f"{s['tpot_ms']['p99']:.1f} ms",
    "e2e_p50": lambda s: f"{s['e2e_s']['p50']:.2f} s",
    "e2e_mean": lambda s: f"{s['e2e_s']['mean']:.2f} s",
    "throughput": lambda s: f"{s['throughput_tok_s']:,.0f} tok/s",
    "goodput": lambda s: f"{s['goodput_req_s']:.2f} req/s",
    "goodput_share": lambda s: f"{s['goodput_req_s']:.2f} req/s ({s['slo_attainment']:.0%} within targets)",
    "mean_batch": lambda s: f"{s['mean_batch']:.1f} sequences",
    "kv_utilization": lambda s: f"{s['kv_utilization']:.0%}",
    "preemptions": lambda s: f"{s['preemptions']:,}",
    "gpu_hours": lambda s: f"{s['gpu_hours']:.3f} h",
    "queue": lambda s: "stable" if s["stable"] else "grows without bound",
    "gpus_replicas": lambda s: f"{s['gpus']} / {s['replicas']}",
    "cost_per_hour": lambda s: f"${s['gpus'] * s['price_usd_per_gpu_hour']:.2f}",
    "cost_per_1m": lambda s: f"${s['cost_per_1m_tokens_usd']:.2f}",
    "cost_per_1m_fine": lambda s: f"${s['cost_per_1m_tokens_usd']:.3f}",
}


def rows(chosen: tuple[tuple[str, str], ...]) -> tuple[tuple[str, object], ...]:
    """(label, reader) pairs for (label, key) pairs."""
    return tuple((label, READ[key]) for label, key in chosen)
