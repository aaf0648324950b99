"""How a run's summary figures read on a page, each with its unit: one table that every side-by-side
comparison (the trade-offs' A/B, Compare) picks its rows from."""
from __future__ import annotations

from ..serving.metrics import growing, served_words
from ..text import fmt_ms, sentence, usd

# What each figure means, as the README states it and a page shows it on hover.
DEFINITIONS = {
    "ttft": "Time to first token: from a request's arrival to its first output token (queueing plus prefill).",
    "tpot": "Time per output token after the first, per request: (finish - first token) / (output tokens - 1).",
    "throughput": ("Output tokens per second in the steady state: the second half of the arrival window, from the "
                   "middle request's arrival to the last one's. The warm-up before it (the system starts empty) and "
                   "the drain after it (nothing new arrives, so the batch only empties) would dilute it."),
    "goodput": ("Requests per second finished in the same window that met both the TTFT and the TPOT target: never "
                "above the requests per second finished in it."),
    "running_batch": ("The mean number of sequences in a step, over the steps that decode (a step that only "
                      "prefills a prompt is left out)."),
    "utilisation": ("Throughput against the roofline capacity: output tokens/s that the cost model's step time "
                    "gives every replica at the largest batch its sequence slots, KV cache and token budget allow, "
                    "at the workload's mean lengths, new prompts' tokens included. Under continuous batching a "
                    "loaded GPU is never idle, so the share of time it is busy says nothing about the room left."),
    "prefix_hit_rate": ("Prompt tokens found in the prefix cache when requests were admitted, as a share of the "
                        "prompt tokens looked up (vLLM's prefix cache hit rate): full KV blocks of a shared "
                        "system prompt or an earlier turn that no eviction has reclaimed."),
    "prefill_saved": ("Prompt tokens whose prefill the prefix cache skipped: their KV blocks were taken from the cache "
                      "instead of computed again."),
    "offload_hits": ("KV offload: prompt tokens found in the host-memory tier (blocks the GPU had evicted) and "
                     "loaded back over the host link instead of computed again."),
    "offload_moved": ("KV offload: bytes copied to the host tier (blocks the GPU evicted) and back (blocks a later "
                      "prompt found there)."),
    "spec_acceptance": ("Speculative decoding: draft tokens the model accepted, as a share of those proposed "
                        "(vLLM's draft acceptance rate). A draft is kept only if every draft before it was."),
    "spec_tokens_per_step": ("Speculative decoding: tokens a decoding sequence gains in a step, 1 (the model's own) "
                             "plus the drafts accepted: the fewer steps a response takes, the lower its time per "
                             "output token, if the wider steps and the proposer cost less than they save."),
}


def _latency(read):
    """A reader of a wait (TTFT, end-to-end) that says so when the run's queue grows without bound:
    its percentiles then grow with the run's length."""
    return lambda s: growing(read(s), s)


def _queue(s: dict) -> str:
    return "Stable" if s["stable"] else sentence(served_words(s))


READ = {
    "ttft_p50": _latency(lambda s: fmt_ms(s["ttft_ms"]["p50"])),
    "ttft_p99": _latency(lambda s: fmt_ms(s["ttft_ms"]["p99"])),
    "tpot_p50": lambda s: f"{s['tpot_ms']['p50']:.1f} ms",  # steady under overload: a full batch's pace
    "tpot_p99": lambda s: f"{s['tpot_ms']['p99']:.1f} ms",
    "e2e_p50": _latency(lambda s: f"{s['e2e_s']['p50']:.2f} s"),
    "e2e_mean": _latency(lambda s: f"{s['e2e_s']['mean']:.2f} s"),
    "throughput": lambda s: f"{s['throughput_tok_s']:,.0f} tok/s",
    "goodput": lambda s: f"{s['goodput_req_s']:.2f} req/s",
    "goodput_share": lambda s: f"{s['goodput_req_s']:.2f} req/s ({s['slo_attainment']:.0%} within targets)",
    "mean_batch": lambda s: f"{s['mean_batch']:.1f} sequences",
    "utilisation": lambda s: f"{s['utilisation']:.0%} of {s['capacity_tok_s']:,.0f} tok/s",
    "kv_utilization": lambda s: f"{s['kv_utilization']:.0%}",
    "preemptions": lambda s: f"{s['preemptions']:,}",
    "prefix_hit_rate": lambda s: f"{s['prefix_hit_rate']:.0%} of prompt tokens",
    "prefill_saved": lambda s: f"{s['prefill_tokens_saved']:,} tokens",
    "spec_acceptance": lambda s: f"{s['speculative']['acceptance_rate']:.0%} of drafts" if s["speculative"] else "off",
    "spec_tokens_per_step": lambda s: f"{s['speculative']['tokens_per_step']:.2f} tokens" if s["speculative"] else "1",
    "offload_hits": lambda s: f"{s['kv_offload']['hit_tokens_host']:,} tokens" if s["kv_offload"] else "no tier",
    "offload_moved": lambda s: (f"{s['kv_offload']['gb_stored']:,.1f} GB out, {s['kv_offload']['gb_loaded']:,.1f} GB back"
                                if s["kv_offload"] else "no tier"),
    "gpu_hours": lambda s: f"{s['gpu_hours']:.3f} h",
    "queue": _queue,
    "gpus_replicas": lambda s: f"{s['gpus']} / {s['replicas']}",
    "cost_per_hour": lambda s: f"${s['gpus'] * s['price_usd_per_gpu_hour']:.2f}",
    "cost_per_1m": lambda s: usd(s['cost_per_1m_tokens_usd']),
    "cost_per_1m_fine": lambda s: f"${s['cost_per_1m_tokens_usd']:.3f}",
}


def rows(chosen: tuple[tuple[str, str], ...]) -> tuple[tuple[str, object], ...]:
    """(label, reader) pairs for (label, key) pairs."""
    return tuple((label, READ[key]) for label, key in chosen)
