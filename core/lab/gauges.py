"""The bottleneck gauges (each a value against its limit, why, and the knob that relieves it), the
headline metrics and the per-GPU memory split of a simulated deployment."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.layout import PAGED_POLICIES
from ..physics import catalog
from ..serving import engines, experts
from ..serving.metrics import GROWING, served_words
from ..serving.simulate import SimConfig, SimResult, steptime
from ..text import fmt_ms, sentence, share, token_count, usd
from .inputs import LabInputs
from .readings import DEFINITIONS


@dataclass
class Gauge:
    id: str
    name: str
    value: float
    limit: float
    unit: str
    ratio: float  # value / limit
    status: str  # ok, warn, bad
    why: str
    knob: str
    detail: str = ""
    growing: bool = False  # a latency on an overloaded run: it grows with the run's length

    @property
    def reading(self) -> str:
        """The value against its limit, in words with units."""
        return READINGS[self.id](self)


READINGS = {
    "kv": lambda g: f"Peak {share(g.ratio)} of KV blocks in use",
    "weights": lambda g: f"{g.value:.1f} of {g.limit:.0f} GB usable per GPU ({share(g.ratio)})",
    "decode": lambda g: f"{g.value:,.0f} of {g.limit:,.0f} tok/s ({share(g.ratio)})",
    "slots": lambda g: f"{g.value:,.0f} of {g.limit:,.0f} sequence slots at p90 ({share(g.ratio)})",
    "ttft": lambda g: (f"p99 TTFT {fmt_ms(g.value)}{GROWING if g.growing else ''} against a {fmt_ms(g.limit)} target "
                       f"({share(g.ratio)})"),
}


def knob(cfg: SimConfig, kv: bool = False, weights: bool = False, decode: bool = False, ttft: bool = False) -> str:
    """What relieves a gauge on this deployment, naming only what is not already in use."""
    paged = cfg.policy in PAGED_POLICIES
    sharded = cfg.tp > 1 or (cfg.disagg and (cfg.prefill_tp or 1) > 1)
    gpu = catalog.get_gpu(cfg.gpu)
    fp8_ok = gpu.supports_fp8
    size = lambda d: catalog.weight_format(d).bytes_per_weight  # noqa: E731
    smaller = [d for d in ("fp8", "fp4", "int4") if size(d) < size(cfg.dtype) and gpu.runs(catalog.weight_format(d))]
    if kv:
        parts = ["turn on continuous batching with paged attention (it reserves no room for unwritten tokens)"] if not paged else []
        parts.append("turn on tensor-parallel sharding for more cache per replica" if not sharded else
                     f"a tp above {cfg.tp} or more GPUs")
        parts.append("lower max batch")
        if cfg.kv_dtype == "bf16" and fp8_ok:
            parts.append("an fp8 KV cache (twice the blocks)")
        if smaller:
            parts.append(f"{' or '.join(smaller)} weights leave more room for the cache")
    elif weights:
        parts = ["turn on tensor-parallel sharding (each GPU holds weights / tp)" if not sharded else
                 f"a tp above {cfg.tp} (each GPU holds weights / tp)"]
        if smaller:
            parts.append(" or ".join(f"{d} ({size(d) / 2:.0%} of the 16-bit bytes)" for d in smaller) + " weights")
    elif decode:
        parts = ["turn on continuous batching (a bigger batch shares each pass over the weights)"] if not paged else []
        parts.append("more replicas raise the ceiling")
    else:
        parts = ["turn on chunked prefill (long prompts stop blocking the queue)"] if cfg.policy != "sarathi" else []
        parts.append("more replicas")
        if not sharded:
            parts.append("tensor-parallel sharding for long prompts")
        if not cfg.disagg:
            parts.append("a prefill pool")
    text = "; ".join(parts[:-1]) + (", or " if len(parts) > 1 else "") + parts[-1]
    return text[:1].upper() + text[1:] + "."


def _status(ratio: float, warn: float, bad: float) -> str:
    return "bad" if ratio >= bad else ("warn" if ratio >= warn else "ok")


def gauges(cfg: SimConfig, result: SimResult, inputs: LabInputs) -> list[Gauge]:
    s = result.summary
    pool = result.pools[-1]
    plan = pool.plan
    out = []

    total = max(s["kv_blocks_total"], 1)
    peak = s["peak_kv_blocks_used"] / total
    used = result.trace["kv_blocks_used"]
    mean = float(used.mean()) / total if len(used) else 0.0
    held = (f"At peak {peak:.0%} of the {s['kv_blocks_total']:,} KV blocks hold sequences (mean {mean:.0%}); "
            + (f"{s['preemptions']} preemptions recomputed evicted requests." if s["preemptions"] else
               "no request had to be preempted."))
    reserved = s.get("peak_kv_blocks_reserved", 0) / total
    if reserved > peak:  # no-evict admission: the cache fills by what admitted requests will need
        held = (f"At peak {reserved:.0%} of the {s['kv_blocks_total']:,} KV blocks are reserved by the requests "
                f"admitted, each at its whole length (prompt and output: {engines.name(cfg.engine_overhead)} admits "
                f"a request only while the cache holds it whole, so none is preempted); {peak:.0%} hold tokens.")
        peak = reserved
    status = _status(peak, 0.7, 0.95)
    if s["preemptions"]:
        status = "bad"
    out.append(Gauge(
        "kv", "KV cache pressure", peak * 100, 100, "% of blocks", peak, status, held,
        knob(cfg, kv=True),
        detail=f"KV utilisation (tokens held / slots allocated): {s['kv_utilization']:.0%}"))

    usable = plan.usable_bytes
    w = plan.weights_bytes / usable
    out.append(Gauge(
        "weights", "Per-GPU weight footprint", plan.weights_bytes / 1e9, usable / 1e9, "GB", w, _status(w, 0.5, 0.8),
        f"Each GPU holds {plan.weights_bytes / 1e9:.1f} GB of weights at tp={pool.tp}"
        + (f" x pp={pool.pp} (its stage's layers)" if pool.pp > 1 else "") + f", {w:.0%} of the "
        f"{usable / 1e9:.1f} GB ({usable / catalog.GIB:.1f} GiB) its driver leaves usable; the KV cache takes "
        f"what the engine's memory share leaves beside them ({plan.share_words()}).",
        knob(cfg, weights=True),
        detail=f"KV cache per GPU: {plan.kv_pool_bytes / 1e9:.1f} GB" + (
            f", of which {plan.state_bytes / 1e9:.1f} GB hold the linear-attention layers' state of the max batch"
            if plan.state_bytes else "")))

    # measured output tokens/s in the steady state against the roofline capacity (serving/capacity.py,
    # never below what the run served: a deployment that serves more has shown a higher ceiling)
    limit, batch, achieved, u = s["capacity_tok_s"], s["capacity_batch"], s["throughput_tok_s"], s["utilisation"]
    why = (f"{achieved:,.0f} output tokens/s in the steady state against the {limit:,.0f} tok/s this deployment "
           f"could sustain (the cost model's step time at {batch:,} sequences per replica, new prompts' tokens "
           f"included).")
    status = _status(u, 0.7, 0.9)
    if not s["stable"]:  # a growing queue: the deployment already serves all it can on this workload
        status = "bad"
        why += (" The queue grows without bound, so this is all it serves here"
                + (f"; {STATIC_WORDS[cfg.policy]} keeps it from the ceiling." if cfg.policy in STATIC_WORDS and u < 0.8
                   else "."))
    out.append(Gauge(
        "decode", "Decode throughput vs capacity", achieved, limit, "tok/s", u, status,
        why, knob(cfg, decode=True),
        detail=f"Running batch {s['mean_batch']:.1f} sequences per decoding step"))

    slots = experts.replica_slots(cfg)
    running = result.trace["running"] / max(s["replicas"], 1)
    p90 = float(np.percentile(running, 90)) if len(running) else 0.0
    r = p90 / slots
    out.append(Gauge(
        "slots", "Batch slot saturation", p90, slots, "sequences", r, _status(r, 0.7, 0.95),
        f"90% of the time a replica runs at most {p90:,.0f} of its {slots:,} sequence slots.",
        "Raise max batch (if KV blocks allow) or add replicas.",
        # a mean over the sampled steps, prefill-only ones too: the decode gauge's running batch counts
        # only steps that decode, so the two differ a little and each says which it is
        detail=f"Mean running per replica {float(running.mean()) if len(running) else 0:.1f}, over every step "
               f"(prefill-only steps too)"))

    t = s["ttft_ms"]["p99"] / inputs.ttft_p99_ms
    out.append(Gauge(
        "ttft", "Time-to-first-token", s["ttft_ms"]["p99"], inputs.ttft_p99_ms, "ms (p99)", t, _status(t, 0.7, 1.0),
        f"The p99 TTFT is {fmt_ms(s['ttft_ms']['p99'])} against the {fmt_ms(inputs.ttft_p99_ms)} target "
        f"(p50 {fmt_ms(s['ttft_ms']['p50'])}); queueing is {fmt_ms(s['queue_wait_ms']['p99'])} of it at p99."
        + ("" if s["stable"] else f" {sentence(served_words(s))}, so both grow with the number of requests simulated."),
        knob(cfg, ttft=True),
        detail=f"Prefill of a {inputs.prompt_tokens}-token prompt alone: {prefill_ms(cfg, inputs):.0f} ms",
        growing=not s["stable"]))
    return out


STATIC_WORDS = {"serial": "serving one request at a time", "static": "request-level (static) batching"}


def prefill_ms(cfg: SimConfig, inputs: LabInputs) -> float:
    return steptime(cfg, cfg.prefill_tp or cfg.tp, prefill_tokens=inputs.prompt_tokens)["step_ms"]


# ---------------------------------------------------------------- headline numbers

def headline(result: SimResult, inputs: LabInputs) -> list[dict]:
    s = result.summary
    d = DEFINITIONS
    return [
        dict(label="p50 TTFT", value=fmt_ms(s["ttft_ms"]["p50"]), help=d["ttft"] + " Median."),
        dict(label="p99 TTFT", value=fmt_ms(s["ttft_ms"]["p99"]), target=f"target {fmt_ms(inputs.ttft_p99_ms)}",
             ok=s["ttft_ms"]["p99"] <= inputs.ttft_p99_ms, help=d["ttft"] + " 99th percentile."),
        dict(label="p50 TPOT", value=f"{s['tpot_ms']['p50']:.1f} ms", help=d["tpot"] + " Median."),
        dict(label="p99 TPOT", value=f"{s['tpot_ms']['p99']:.1f} ms", target=f"target {inputs.tpot_ms:g} ms",
             ok=s["tpot_ms"]["p99"] <= inputs.tpot_ms, help=d["tpot"] + " 99th percentile."),
        dict(label="Throughput", value=f"{s['throughput_tok_s']:,.0f} tok/s",
             note=f"{s['utilisation']:.0%} of {s['capacity_tok_s']:,.0f} tok/s capacity",
             help=f"{d['throughput']} {s['throughput_req_s']:.2f} req/s finished in it. Capacity: {d['utilisation']}"),
        dict(label="Goodput", value=f"{s['goodput_req_s']:.2f} req/s",
             note=f"{s['slo_attainment']:.0%} within both targets",
             help=f"{d['goodput']} Of all {s['requests']:,} requests, {s['slo_attainment']:.1%} meet both targets."),
        dict(label="GPUs / replicas", value=f"{s['gpus']} / {s['replicas']}",
             help=(f"Each replica shards the model over {s['tp'] * s['pp']} GPUs: {s['pp']} pipeline stages of "
                   f"tp={s['tp']}. " if s.get("pp", 1) > 1 else
                   f"Each replica shards the model over {s['tp']} GPU(s) (tp={s['tp']}). ") + "Running batch: "
                  f"{s['mean_batch']:.1f} sequences. {d['running_batch']}"),
        dict(label="Cost per 1M output tokens", value=usd(s['cost_per_1m_tokens_usd']),
             help=f"At ${s['price_usd_per_gpu_hour']:.2f} per GPU-hour (list price, {s['price_date']})."),
    ] + (prefix_cards(s, result.config) if inputs.shares_prefixes() else []) + offload_cards(s) + speculative_cards(s)


def speculative_cards(s: dict) -> list[dict]:
    """What speculative decoding gained, on a run that speculates."""
    sp = s.get("speculative")
    if not sp:
        return []
    d = DEFINITIONS
    return [
        dict(label="Draft acceptance rate", value=f"{sp['acceptance_rate']:.1%}",
             note=f"of {sp['spec_tokens']} draft tokens a step ({sp['method']})", help=d["spec_acceptance"]),
        dict(label="Tokens per step", value=f"{sp['tokens_per_step']:.2f} tokens",
             note="a decoding sequence gains a step", help=d["spec_tokens_per_step"]),
    ]


def offload_cards(s: dict) -> list[dict]:
    """What the host KV tier kept and moved, on a run that has one."""
    off = s.get("kv_offload")
    if not off:
        return []
    d = DEFINITIONS
    return [
        dict(label="Found in host memory", value=token_count(off['hit_tokens_host']),
             note=f"of {off['hit_tokens_host'] + off['hit_tokens_gpu']:,} found cached",  # short: a card wraps a longer note onto more lines
             help=d["offload_hits"] + f" The tier holds {off['blocks_per_replica']:,} blocks a replica "
                                      f"({off['capacity_gib']:g} GiB); {off['blocks_dropped']:,} were dropped for room."),
        dict(label="Moved over the host link", value=f"{off['gb_stored'] + off['gb_loaded']:,.1f} GB",
             note=f"{off['gb_stored']:,.1f} GB out, {off['gb_loaded']:,.1f} GB back", help=d["offload_moved"]),
    ]


def prefix_cards(s: dict, cfg: SimConfig) -> list[dict]:
    """What prefix caching found, on a workload whose prompts share prefixes."""
    d = DEFINITIONS
    off = ""
    if not cfg.prefix_caching:
        off = " Prefix caching is off (Advanced): every prompt is prefilled whole."
    elif cfg.policy not in PAGED_POLICIES:
        off = " Prefix caching needs paged KV blocks: turn on continuous batching + paged attention."
    return [
        dict(label="Prefix cache hit rate", value=f"{s['prefix_hit_rate']:.1%}", note="of prompt tokens",
             help=d["prefix_hit_rate"] + off + f" Cached blocks evicted to make room: {s['prefix_cache_evictions']:,}."),
        dict(label="Prefill tokens saved", value=token_count(s['prefill_tokens_saved']),
             note=f"{s['prefill_tokens_saved'] / max(s['requests'], 1):,.0f} tokens per request",
             help=d["prefill_saved"]),
    ]


LATENCY_LABELS = ("p50 TTFT", "p99 TTFT")  # the waits; TPOT stays steady under overload (metrics.growing)


def mark_growing(items: list[dict], summary: dict) -> list[dict]:
    """On an overloaded run the TTFT figures are not steady values: they grow with the number of
    requests simulated. Say so on each."""
    if summary["stable"]:
        return items
    return [dict(m, value=m["value"] + GROWING, ok=False,
                 help=sentence(served_words(summary)) + ", so this figure grows with the number of requests "
                      "simulated.")
            if m["label"] in LATENCY_LABELS else m for m in items]


def memory_split(result: SimResult) -> list[dict]:
    """Per-GPU memory of each pool: weights, KV cache, workspace, unused (GB)."""
    rows = []
    for pool in result.pools:
        p = pool.plan
        kv = p.kv_blocks * p.block_size * p.kv_bytes_per_token
        for part, b in (("weights", p.weights_bytes), ("KV cache", kv), ("workspace", p.workspace_bytes),
                        ("unused", p.unused_bytes)):
            rows.append(dict(pool=pool.name, part=part, gb=b / 1e9))
    return rows
