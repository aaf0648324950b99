"""What the Lab concludes from a simulation: the stage a workload needs, the architecture path,
the bottleneck gauges, the trade-offs' verdicts, and the sweeps behind the bottleneck charts.

Everything here is a pure function of the Lab's inputs and of simulation results; the
simulations themselves are memoised by configuration (`run`), so that pages asking the same
question share one answer.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import catalog
from .lab import STAGES, LabInputs, auto_tp, current_config, disagg_splits, min_tp, stage_config
from .memory import MEM_UTIL, plan_memory, usable_bytes, weight_bytes_per_gpu
from .simulate import SimConfig, SimResult, simulate, steptime
from .workload import diurnal_schedule

DATA = Path(__file__).parent / "data"


@lru_cache(maxsize=96)
def run(cfg: SimConfig) -> SimResult:
    """A simulation, memoised by its (frozen, hashable) configuration."""
    return simulate(cfg)


# ---------------------------------------------------------------- meeting the targets

def misses(summary: dict, inputs: LabInputs) -> list[str]:
    """What a simulated deployment misses, in words; empty when it meets every target."""
    out = []
    if not summary["stable"]:
        out.append(f"the queue grows without bound ({summary['throughput_req_s']:.2f} of "
                   f"{summary['arrival_rate_req_s']:.2f} req/s served)")
    if summary["ttft_ms"]["p99"] > inputs.ttft_p99_ms:
        out.append(f"p99 TTFT {fmt_ms(summary['ttft_ms']['p99'])} is above the {fmt_ms(inputs.ttft_p99_ms)} target")
    if summary["tpot_ms"]["p99"] > inputs.tpot_ms:
        out.append(f"p99 TPOT {summary['tpot_ms']['p99']:.1f} ms is above the {inputs.tpot_ms:g} ms target")
    return out


@dataclass
class StageOutcome:
    stage: int
    name: str
    config: SimConfig | None = None
    result: SimResult | None = None
    error: str | None = None
    misses: list = field(default_factory=list)

    @property
    def meets(self) -> bool:
        return self.result is not None and not self.misses

    @property
    def summary(self) -> dict | None:
        return self.result.summary if self.result else None


def run_stage(inputs: LabInputs, stage: int) -> StageOutcome:
    """One stage on the inputs' workload. Stages 4 and 5 have a free choice (the tensor-parallel
    degree; the prefill pool's size): they try a few and keep the first that meets the targets,
    else the one with the best goodput."""
    out = StageOutcome(stage, STAGES[stage])
    try:
        if stage == 4:
            candidates = [stage_config(replace(inputs, tp=tp), 4) for tp in tp_choices(inputs)]
        elif stage == 5:
            candidates = [stage_config(inputs, 5, split) for split in disagg_splits(inputs)]
        else:
            candidates = [stage_config(inputs, stage)]
        best = None
        for cfg in candidates:
            res = run(cfg)
            miss = misses(res.summary, inputs)
            key = (not miss, res.summary["goodput_req_s"], -res.summary["ttft_ms"]["p99"])
            if best is None or key > best[0]:
                best = (key, cfg, res, miss)
            if not miss:
                break
        _, out.config, out.result, out.misses = best
    except ValueError as e:
        out.error = str(e)
    return out


def tp_choices(inputs: LabInputs) -> list[int]:
    """Tensor-parallel degrees worth trying: from the smallest that fits (at least 2), doubling,
    each dividing the GPU count and the model's heads."""
    first = auto_tp(replace(inputs, tp=0))
    heads = catalog.get_model(inputs.model).heads
    out, tp = [], first
    while tp <= inputs.gpus:
        if inputs.gpus % tp == 0 and heads % tp == 0:
            out.append(tp)
        tp *= 2
    return out


def evaluate_stages(inputs: LabInputs, stop_when_met: bool = False) -> list[StageOutcome]:
    """Every stage simulated on the workload; with stop_when_met, only up to the first that meets
    the targets, and stage 1 settled by the utilisation law when it is plainly overloaded."""
    outcomes = []
    for stage in STAGES:
        o = serial_overload(inputs) if stage == 1 and stop_when_met else None
        o = o or run_stage(inputs, stage)
        outcomes.append(o)
        if stop_when_met and o.meets:
            break
    return outcomes


def serial_overload(inputs: LabInputs) -> StageOutcome | None:
    """Stage 1 without simulating it, when one request at a time cannot keep up on average: each
    request holds a GPU for its prefill and its decode steps, and utilisation = rate x that time /
    GPUs at or above 1 means the queue grows without bound. None when it is not that clear."""
    if inputs.trace_csv is not None:
        return None
    try:
        cfg = stage_config(inputs, 1)
    except ValueError:
        return None
    prefill = steptime(cfg, 1, prefill_tokens=inputs.prompt_tokens)["step_ms"]
    ctx = int(inputs.prompt_tokens + inputs.output_tokens / 2)
    decode = steptime(cfg, 1, decode_batch=1, context=ctx)["step_ms"]
    service_s = (prefill + (inputs.output_tokens - 1) * decode) / 1e3
    rho = inputs.rate * service_s / inputs.gpus
    if rho < 1:
        return None
    return StageOutcome(1, STAGES[1], config=cfg, misses=[
        f"each request holds a GPU for {service_s:.2f} s, so {inputs.rate:g} req/s would keep "
        f"{inputs.gpus} GPU(s) busy {rho:.0%} of the time: the queue grows without bound"])


@dataclass
class Recommendation:
    stage: int
    name: str
    reason: str
    met: bool


def recommend(outcomes: list[StageOutcome], inputs: LabInputs) -> Recommendation:
    """The simplest stage that meets the targets, and one sentence of why."""
    for i, o in enumerate(outcomes):
        if o.meets:
            if i == 0:
                s = o.summary
                reason = (f"at {inputs.rate:g} req/s one request at a time keeps up: p99 TTFT "
                          f"{fmt_ms(s['ttft_ms']['p99'])} within the {fmt_ms(inputs.ttft_p99_ms)} target, so nothing "
                          f"more is needed yet.")
            else:
                prev = outcomes[i - 1]
                why_not = prev.error or "; ".join(prev.misses)
                reason = (f"{prev.name} falls short ({why_not}); {in_sentence(o.name)} meets the targets "
                          f"(p99 TTFT {fmt_ms(o.summary['ttft_ms']['p99'])}, p99 TPOT {o.summary['tpot_ms']['p99']:.1f} ms).")
            return Recommendation(o.stage, o.name, reason[0].upper() + reason[1:], True)
    last = outcomes[-1]
    why = last.error or "; ".join(last.misses)
    return Recommendation(5, STAGES[5], f"No stage meets the targets on {inputs.gpus} GPU(s) ({why}): add GPUs, "
                                        f"relax the targets or lower the load.", False)


def in_sentence(name: str) -> str:
    """A stage's name inside a sentence: lower case, but not its acronyms ("KV cache ...")."""
    return name if name[1:2].isupper() else name[:1].lower() + name[1:]


def fmt_ms(ms: float) -> str:
    """A duration for people: ms below a second, then s, min, h."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    s = ms / 1e3
    if s < 60:
        return f"{s:.2f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def cite(rule: dict) -> str:
    """'Kwon et al., SOSP 2023': a rule's citation, short."""
    c = rule["citation"]
    authors = c["authors"]
    if len(authors) == 1:
        who = authors[0]
    elif len(authors) == 2:
        who = " and ".join(a.split()[-1] for a in authors)
    else:
        who = f"{authors[0].split()[-1]} et al."
    return f"{who}, {c['venue']} {c['year']}"


# ---------------------------------------------------------------- teaching data

def _data(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def stage_notes() -> dict[int, dict]:
    return {s["stage"]: s for s in _data("stages.json")["stages"]}


def scenarios() -> list[dict]:
    return _data("scenarios.json")["scenarios"]


def rules() -> dict[str, dict]:
    return {r["id"]: r for r in _data("rules.json")["rules"]}


def scenario_inputs(scenario: dict, base: LabInputs | None = None) -> LabInputs:
    """A scenario card's inputs over the Lab's defaults (or over `base`)."""
    return replace(base or LabInputs(), **scenario["inputs"])


# ---------------------------------------------------------------- the architecture path

COMPONENTS = _data("components.json")["components"]


def architecture_path(stage: int, inputs: LabInputs) -> list[dict]:
    """The seed's component path with the parts this stage needs switched on."""
    replicas_or_scale = inputs.gpus > 1 or stage >= 3
    needed = {
        "clients": True, "gateway": True, "scheduler": stage >= 2, "prefill_pool": stage >= 5,
        "gpu_workers": True, "paged_kv": stage >= 3, "model_shards": stage >= 4, "metrics": replicas_or_scale,
    }
    return [dict(c, on=needed[c["id"]]) for c in COMPONENTS]


# ---------------------------------------------------------------- bottleneck gauges

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

    @property
    def reading(self) -> str:
        """The value against its limit, in words with units."""
        return READINGS[self.id](self)


def share(ratio: float) -> str:
    """A value against its limit: a percentage, or a multiple once it is far past the limit."""
    return f"{ratio:.0%}" if ratio < 10 else f"{ratio:,.0f}x"


READINGS = {
    "kv": lambda g: f"peak {share(g.ratio)} of KV blocks in use",
    "weights": lambda g: f"{g.value:.1f} of {g.limit:.0f} GB usable per GPU ({share(g.ratio)})",
    "decode": lambda g: f"{g.value:,.0f} of {g.limit:,.0f} tok/s ({share(g.ratio)})",
    "slots": lambda g: f"{g.value:.0f} of {g.limit:.0f} sequence slots at p90 ({share(g.ratio)})",
    "ttft": lambda g: f"p99 TTFT {fmt_ms(g.value)} against a {fmt_ms(g.limit)} target ({share(g.ratio)})",
}


def _status(ratio: float, warn: float, bad: float) -> str:
    return "bad" if ratio >= bad else ("warn" if ratio >= warn else "ok")


def decode_capacity(cfg: SimConfig, result: SimResult) -> tuple[float, int]:
    """The most output tokens/s this deployment could sustain: every replica at the largest batch
    its slots and KV blocks hold, at the workload's mean context, with each request's prefill
    taking its share of the GPU time (unless a prefill pool does it)."""
    pool = result.pools[-1]  # the decode side
    wl = result.workload
    prompt, out = float(wl.prompt_tokens.mean()), float(wl.output_tokens.mean())
    ctx = prompt + out / 2
    kv_seqs = int(pool.plan.kv_tokens // max(ctx, 1))
    batch = max(1, min(cfg.max_seqs if cfg.policy != "serial" else 1, kv_seqs))
    step_s = steptime(cfg, pool.tp, decode_batch=batch, context=int(ctx))["step_ms"] / 1e3
    prefill_s = 0.0 if cfg.disagg else steptime(cfg, pool.tp, prefill_tokens=max(1, int(prompt)))["step_ms"] / 1e3
    req_s = 1.0 / (prefill_s + out * step_s / batch)
    return req_s * out * pool.replicas, batch


def gauges(cfg: SimConfig, result: SimResult, inputs: LabInputs) -> list[Gauge]:
    s = result.summary
    pool = result.pools[-1]
    plan = pool.plan
    out = []

    peak = s["peak_kv_blocks_used"] / max(s["kv_blocks_total"], 1)
    used = result.trace["kv_blocks_used"]
    mean = float(used.mean()) / max(s["kv_blocks_total"], 1) if len(used) else 0.0
    status = _status(peak, 0.7, 0.95)
    if s["preemptions"]:
        status = "bad"
    out.append(Gauge(
        "kv", "KV cache pressure", peak * 100, 100, "% of blocks", peak, status,
        (f"At peak {peak:.0%} of the {s['kv_blocks_total']:,} KV blocks hold sequences (mean {mean:.0%}); "
         + (f"{s['preemptions']} preemptions recomputed evicted requests." if s["preemptions"] else
            "no request had to be preempted.")),
        "Shard with tensor parallelism or add GPUs for more cache; lower max batch; paged attention wastes less.",
        detail=f"KV utilisation (tokens held / slots allocated): {s['kv_utilization']:.0%}"))

    usable = plan.usable_bytes
    w = plan.weights_bytes / usable
    out.append(Gauge(
        "weights", "Per-GPU weight footprint", plan.weights_bytes / 1e9, usable / 1e9, "GB", w, _status(w, 0.5, 0.8),
        f"Each GPU holds {plan.weights_bytes / 1e9:.1f} GB of weights at tp={pool.tp}, {w:.0%} of the "
        f"{usable / 1e9:.1f} GB ({usable / catalog.GIB:.1f} GiB) its driver leaves usable; what is left "
        f"(after the workspace) is KV cache.",
        "Turn on tensor-parallel sharding (weights / tp per GPU) or use fp8 weights.",
        detail=f"KV cache per GPU: {plan.kv_pool_bytes / 1e9:.1f} GB"))

    cap, batch = decode_capacity(cfg, result)
    achieved = s["throughput_tok_s"]
    u = achieved / cap if cap > 0 else 1.0
    out.append(Gauge(
        "decode", "Decode throughput vs capacity", achieved, cap, "tok/s", u, _status(u, 0.7, 0.9),
        f"{achieved:,.0f} output tokens/s against the {cap:,.0f} tok/s the deployment could sustain with "
        f"{batch} sequences per replica, each request's prefill included.",
        "Continuous batching raises the batch; more replicas raise the ceiling.",
        detail=f"mean batch {s['mean_batch']:.1f} sequences per step"))

    slots = (1 if cfg.policy == "serial" else cfg.max_seqs)
    running = result.trace["running"] / max(s["replicas"], 1)
    p90 = float(np.percentile(running, 90)) if len(running) else 0.0
    r = p90 / slots
    out.append(Gauge(
        "slots", "Batch slot saturation", p90, slots, "sequences", r, _status(r, 0.7, 0.95),
        f"90% of the time a replica runs at most {p90:.0f} of its {slots} sequence slots.",
        "Raise max batch (if KV blocks allow) or add replicas.",
        detail=f"mean running per replica {float(running.mean()) if len(running) else 0:.1f}"))

    t = s["ttft_ms"]["p99"] / inputs.ttft_p99_ms
    out.append(Gauge(
        "ttft", "Time-to-first-token", s["ttft_ms"]["p99"], inputs.ttft_p99_ms, "ms (p99)", t, _status(t, 0.7, 1.0),
        f"p99 TTFT is {fmt_ms(s['ttft_ms']['p99'])} against the {fmt_ms(inputs.ttft_p99_ms)} target "
        f"(p50 {fmt_ms(s['ttft_ms']['p50'])}); queueing is {fmt_ms(s['queue_wait_ms']['p99'])} of it at p99.",
        "Chunked prefill, more replicas, tensor parallelism for long prompts, or a prefill pool.",
        detail=f"prefill of a {inputs.prompt_tokens}-token prompt alone: {prefill_ms(cfg, inputs):.0f} ms"))
    return out


def prefill_ms(cfg: SimConfig, inputs: LabInputs) -> float:
    return steptime(cfg, cfg.prefill_tp or cfg.tp, prefill_tokens=inputs.prompt_tokens)["step_ms"]


# ---------------------------------------------------------------- headline numbers

def headline(result: SimResult, inputs: LabInputs) -> list[dict]:
    s = result.summary
    return [
        dict(label="p50 TTFT", value=fmt_ms(s["ttft_ms"]["p50"]), help="time to first token, median"),
        dict(label="p99 TTFT", value=fmt_ms(s["ttft_ms"]["p99"]), target=f"target {fmt_ms(inputs.ttft_p99_ms)}",
             ok=s["ttft_ms"]["p99"] <= inputs.ttft_p99_ms, help="time to first token, 99th percentile"),
        dict(label="p50 TPOT", value=f"{s['tpot_ms']['p50']:.1f} ms", help="time per output token after the first"),
        dict(label="p99 TPOT", value=f"{s['tpot_ms']['p99']:.1f} ms", target=f"target {inputs.tpot_ms:g} ms",
             ok=s["tpot_ms"]["p99"] <= inputs.tpot_ms),
        dict(label="Throughput", value=f"{s['throughput_tok_s']:,.0f} tok/s",
             help=f"{s['throughput_req_s']:.2f} req/s completed"),
        dict(label="Goodput", value=f"{s['goodput_req_s']:.2f} req/s",
             help=f"{s['slo_attainment']:.1%} of requests meet both targets"),
        dict(label="GPUs / replicas", value=f"{s['gpus']} / {s['replicas']}", help=f"tp={s['tp']} per replica"),
        dict(label="Cost per 1M output tokens", value=f"${s['cost_per_1m_tokens_usd']:.2f}",
             help=f"at ${s['price_usd_per_gpu_hour']:.2f} per GPU-hour (list price, {s['price_date']})"),
    ]


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


# ---------------------------------------------------------------- trade-offs

TRADEOFFS = _data("tradeoffs.json")["tradeoffs"]


@dataclass
class ABResult:
    id: str
    off_label: str
    on_label: str
    off: SimResult | None
    on: SimResult | None
    note: str
    error: str | None = None


def ab(inputs: LabInputs, tradeoff_id: str) -> ABResult:
    """The trade-off switched off and on, on the current workload."""
    t = next(x for x in TRADEOFFS if x["id"] == tradeoff_id)
    try:
        off, on, note = _ab_configs(inputs, tradeoff_id)
        if tradeoff_id == "streaming":  # one run, two views of it
            res = run(on)
            return ABResult(tradeoff_id, t["off"], t["on"], res, res, note)
        return ABResult(tradeoff_id, t["off"], t["on"], run(off), run(on), note)
    except ValueError as e:
        return ABResult(tradeoff_id, t["off"], t["on"], None, None, "", str(e))


def _fits_one_gpu(inputs: LabInputs) -> bool:
    return (min_tp(inputs) or 99) == 1


def _ab_configs(inputs: LabInputs, tid: str) -> tuple[SimConfig, SimConfig, str]:
    tp = 1 if _fits_one_gpu(inputs) else auto_tp(replace(inputs, gpus=max(inputs.gpus, min_tp(inputs) or 2)))
    gpus = max(inputs.gpus, tp)
    here = replace(inputs, gpus=gpus)
    base = current_config(replace(here, tensor_parallel=tp > 1, tp=tp if tp > 1 else 0, continuous_batching=True))
    note = "" if gpus == inputs.gpus else f"run on {gpus} GPUs, the fewest that hold the model"
    if tid == "kv_cache":
        on = replace(base, policy="vllm")
        return replace(on, policy="orca"), on, note
    if tid == "continuous_batching":
        return replace(base, policy="static"), base, note
    if tid == "tensor_parallel":
        if not _fits_one_gpu(inputs):
            raise ValueError("the model does not fit one GPU, so there is no unsharded deployment to compare with: "
                             "sharding is not a choice here")
        g = max(inputs.gpus, 2)
        t2 = auto_tp(replace(inputs, gpus=g, tp=0))
        off = replace(base, gpus=g, tp=1)
        return off, replace(base, gpus=g, tp=t2), (f"both on {g} GPUs: {g} single-GPU replicas against "
                                                   f"{g // t2} replica(s) of tp={t2}")
    if tid == "disaggregation":
        g = max(gpus, 2 * tp)
        wide = replace(here, gpus=g)
        stage5 = run_stage(wide, 5)
        if stage5.config is None:
            raise ValueError(stage5.error)
        on = stage5.config
        return replace(base, gpus=g), on, (f"both on {g} GPUs; the prefill pool has {on.prefill_gpus} of them "
                                           f"(tp={on.prefill_tp}), the decode pool {g - on.prefill_gpus} (tp={on.decode_tp})")
    if tid == "autoscaling":
        replicas = max(2, gpus // tp)
        g = replicas * tp
        period = inputs.requests / inputs.rate  # the run spans one compressed day
        day = replace(base.workload, rate_schedule=diurnal_schedule(inputs.rate, period))
        fixed = replace(base, gpus=g, workload=day)
        return fixed, replace(fixed, autoscale=True, min_replicas=1, scale_target=max(8.0, inputs.max_seqs / 4)), \
            f"a day of load compressed into {period:.0f} s around {inputs.rate:g} req/s; up to {replicas} replicas"
    if tid == "streaming":
        return base, base, note
    raise ValueError(f"unknown trade-off '{tid}'")


def verdict(r: ABResult) -> str:
    """One sentence on what the trade-off buys on this workload."""
    if r.error:
        return r.error
    a, b = r.off.summary, r.on.summary
    tid = r.id
    if tid == "kv_cache":
        filled = (f"Paged blocks keep {b['kv_utilization']:.0%} of allocated KV slots filled against "
                  f"{a['kv_utilization']:.0%} with maximum-length reservation")
        if abs(b["throughput_tok_s"] / max(a["throughput_tok_s"], 1e-9) - 1) < 0.05 and a["preemptions"] == 0 \
                and abs(b["mean_batch"] - a["mean_batch"]) < 1:
            return (f"{filled}; but here memory does not limit the batch ({b['mean_batch']:.0f} sequences either way), "
                    f"so paging changes little. It pays when reservations would fill the cache: raise the request "
                    f"rate or the output length.")
        return (f"{filled}, so batches average {b['mean_batch']:.0f} sequences instead of {a['mean_batch']:.0f} and "
                f"throughput is {ratio(b['throughput_tok_s'], a['throughput_tok_s'])}.")
    if tid == "continuous_batching":
        return (f"Admitting requests every step cuts p99 TTFT from {fmt_ms(a['ttft_ms']['p99'])} to "
                f"{fmt_ms(b['ttft_ms']['p99'])} and changes goodput from {a['goodput_req_s']:.2f} to "
                f"{b['goodput_req_s']:.2f} req/s.")
    if tid == "tensor_parallel":
        return (f"Sharding changes p50 TPOT from {a['tpot_ms']['p50']:.1f} to {b['tpot_ms']['p50']:.1f} ms and p99 TTFT "
                f"from {fmt_ms(a['ttft_ms']['p99'])} to {fmt_ms(b['ttft_ms']['p99'])}, at "
                f"${b['cost_per_1m_tokens_usd']:.2f} against ${a['cost_per_1m_tokens_usd']:.2f} per 1M tokens.")
    if tid == "disaggregation":
        return (f"Splitting prefill from decode changes p99 TPOT from {a['tpot_ms']['p99']:.1f} to "
                f"{b['tpot_ms']['p99']:.1f} ms and goodput from {a['goodput_req_s']:.2f} to {b['goodput_req_s']:.2f} "
                f"req/s (p99 TTFT {fmt_ms(a['ttft_ms']['p99'])} against {fmt_ms(b['ttft_ms']['p99'])}).")
    if tid == "autoscaling":
        return (f"Over the day, autoscaling uses {b['gpu_hours']:.2f} GPU-hours against {a['gpu_hours']:.2f} "
                f"(${b['cost_per_1m_tokens_usd']:.2f} against ${a['cost_per_1m_tokens_usd']:.2f} per 1M tokens), "
                f"with p99 TTFT {fmt_ms(b['ttft_ms']['p99'])} against {fmt_ms(a['ttft_ms']['p99'])}.")
    if tid == "streaming":
        return (f"Streaming shows the first token after {fmt_ms(b['ttft_ms']['p50'])} (p50); waiting for the whole "
                f"answer takes {b['e2e_s']['p50']:.2f} s, {b['e2e_s']['p50'] * 1e3 / max(b['ttft_ms']['p50'], 1e-9):.0f}x longer.")
    return ""


def ratio(a: float, b: float) -> str:
    if b <= 0:
        return "higher"
    x = a / b
    return f"{x:.1f}x as high" if x >= 1 else f"{x:.0%} of it"


# ---------------------------------------------------------------- sweeps for the bottleneck charts

def sweep_rate(inputs: LabInputs, points: int = 10) -> list[dict]:
    """p99 TTFT and batch slots against request rate, from well below the current rate to past
    the deployment's decode capacity, so that the knee shows."""
    cfg, res = current(inputs)
    cap_tok_s, _ = decode_capacity(cfg, res)
    cap_rate = cap_tok_s / max(float(res.workload.output_tokens.mean()), 1.0)
    lo = min(0.25 * inputs.rate, 0.1 * cap_rate)
    hi = max(2.0 * inputs.rate, 1.3 * cap_rate)
    rows = []
    for r in np.geomspace(lo, hi, points):
        x = replace(inputs, rate=float(r))
        try:
            s = run(current_config(x)).summary
        except ValueError:
            continue
        rows.append(dict(rate=x.rate, ttft_p99_ms=s["ttft_ms"]["p99"], tpot_p50_ms=s["tpot_ms"]["p50"],
                         stable=s["stable"], mean_batch=s["mean_batch"], throughput_tok_s=s["throughput_tok_s"]))
    return rows


def sweep_output(inputs: LabInputs, points: int = 8) -> list[dict]:
    """KV cache pressure against output length, up to 16 times the current one (within the
    model's context)."""
    rows = []
    room = catalog.get_model(inputs.model).max_context - inputs.prompt_tokens
    for f in np.geomspace(0.25, min(16.0, max(room / max(inputs.output_tokens, 1), 0.25)), points):
        x = replace(inputs, output_tokens=max(1, int(inputs.output_tokens * f)))
        try:
            s = run(current_config(x)).summary
        except ValueError:
            continue
        rows.append(dict(output_tokens=x.output_tokens, peak_kv=s["peak_kv_blocks_used"] / max(s["kv_blocks_total"], 1),
                         preemptions=s["preemptions"], kv_utilization=s["kv_utilization"]))
    return rows


def sweep_tp(inputs: LabInputs) -> list[dict]:
    """Per-GPU weight footprint and KV room against the tensor-parallel degree (memory planner)."""
    gpu, model = catalog.get_gpu(inputs.gpu), catalog.get_model(inputs.model)
    rows = []
    for tp in (1, 2, 4, 8, 16):
        if model.heads % tp:
            continue
        try:
            p = plan_memory(gpu, model, tp, inputs.block_size, MEM_UTIL, inputs.max_batched_tokens, inputs.max_seqs,
                            inputs.dtype)
            rows.append(dict(tp=tp, weights_gb=p.weights_bytes / 1e9, kv_gb=p.kv_pool_bytes / 1e9,
                             usable_gb=p.usable_bytes / 1e9, fits=True))
        except ValueError:
            rows.append(dict(tp=tp, weights_gb=weight_bytes_per_gpu(model, tp, inputs.dtype) / 1e9, kv_gb=0.0,
                             usable_gb=usable_bytes(gpu) / 1e9, fits=False))
    return rows


def sweep_batch(inputs: LabInputs) -> list[dict]:
    """Decode throughput of one replica against batch size (cost model), at the workload's context."""
    cfg = current_config(inputs)
    ctx = int(inputs.prompt_tokens + inputs.output_tokens / 2)
    rows = []
    for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        if b > max(cfg.max_seqs, 1) * 2:
            break
        st = steptime(cfg, decode_batch=b, context=ctx)
        rows.append(dict(batch=b, step_ms=st["step_ms"], tok_s=b / st["step_ms"] * 1e3))
    return rows


def knee_rate(rows: list[dict], target_ms: float) -> float | None:
    """The highest swept rate still within the TTFT target and stable."""
    ok = [r["rate"] for r in rows if r["stable"] and r["ttft_p99_ms"] <= target_ms]
    return max(ok) if ok else None


def current(inputs: LabInputs) -> tuple[SimConfig, SimResult]:
    cfg = current_config(inputs)
    return cfg, run(cfg)


def lab_view(inputs: LabInputs) -> dict:
    """Everything the home page shows, in one call. The recommendation stands on its own: when
    the toggles describe a deployment that cannot run (say, a model too big for one GPU without
    sharding), `current_error` says why and the current-architecture parts are None."""
    inputs.validate()
    outcomes = evaluate_stages(inputs, stop_when_met=True)
    rec = recommend(outcomes, inputs)
    view = dict(outcomes=outcomes, recommendation=rec, path=architecture_path(rec.stage, inputs),
                config=None, result=None, gauges=None, headline=None, memory=None, current_misses=None,
                current_error=None)
    try:
        cfg, res = current(inputs)
    except ValueError as e:
        view["current_error"] = str(e)
        return view
    view.update(config=cfg, result=res, gauges=gauges(cfg, res, inputs), headline=headline(res, inputs),
                memory=memory_split(res), current_misses=misses(res.summary, inputs))
    return view


def describe_config(cfg: SimConfig) -> str:
    """A short description of a simulated deployment, for captions."""
    policy = {"serial": "one request at a time", "static": "request-level (static) batching",
              "orca": "continuous batching, reserved KV", "vllm": "continuous batching + paged attention",
              "sarathi": "continuous batching + paged attention + chunked prefill"}[cfg.policy]
    gpus = cfg.gpus or cfg.tp
    model = catalog.get_model(cfg.model).label()
    if cfg.disagg:
        return (f"{model}, {policy}; {cfg.prefill_gpus} prefill GPUs (tp={cfg.prefill_tp or cfg.tp}) + "
                f"{gpus - cfg.prefill_gpus} decode GPUs (tp={cfg.decode_tp or cfg.tp})")
    return f"{model}, {policy}; {gpus // cfg.tp} replica(s) x tp={cfg.tp} on {gpus} {cfg.gpu.upper()}"
