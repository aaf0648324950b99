"""The series behind the bottleneck charts: each gauge's input swept across its range, simulated
(request rate, output length) or from the cost model and memory planner (tp, batch)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import progress
from ..physics import catalog
from ..physics.memory import usable_bytes, weight_bytes_per_gpu
from ..serving import experts, frontier
from ..serving.simulate import steptime
from ..text import fmt_ms, gb
from ..serving.workload import load_trace
from .inputs import LabInputs, check_page_work, current, current_config, memory_plan, request_tokens, run


def sweep_rate(inputs: LabInputs, points: int = 10) -> list[dict]:
    """p99 TTFT and batch slots against request rate, from well below the current rate to past
    the deployment's decode capacity, so that the knee shows."""
    progress.expect(points + 1)
    cfg, res = current(inputs)
    cap_tok_s = res.summary["capacity_tok_s"]
    cap_rate = cap_tok_s / max(float(res.workload.output_tokens.mean()), 1.0)
    # a closed loop's requests/s as sent: the open-loop sweep runs around it
    rate = res.summary["arrival_rate_req_s"] if inputs.closed_loop else inputs.rate
    lo = min(0.25 * rate, 0.1 * cap_rate)
    hi = max(2.0 * rate, 1.3 * cap_rate)
    rows = []
    configs = _configs([replace(inputs, load="rate", rate=float(r)) for r in np.geomspace(lo, hi, points)])
    check_page_work([c for _, c in configs], "This sweep")
    for x, cfg in configs:
        try:
            s = run(cfg).summary
        except ValueError:
            continue
        rows.append(dict(rate=x.rate, ttft_p99_ms=s["ttft_ms"]["p99"], tpot_p50_ms=s["tpot_ms"]["p50"],
                         stable=s["stable"], mean_batch=s["mean_batch"], throughput_tok_s=s["throughput_tok_s"]))
    return rows


def sweep_output(inputs: LabInputs, points: int = 8) -> list[dict]:
    """KV cache pressure against output length, up to 16 times the current one (within the
    model's context)."""
    progress.expect(points)
    rows = []
    room = catalog.get_model(inputs.model).max_context - inputs.prompt_tokens
    configs = _configs([replace(inputs, output_tokens=max(1, int(inputs.output_tokens * f)))
                        for f in np.geomspace(0.25, min(16.0, max(room / max(inputs.output_tokens, 1), 0.25)), points)])
    check_page_work([c for _, c in configs], "This sweep")
    for x, cfg in configs:
        try:
            s = run(cfg).summary
        except ValueError:
            continue
        rows.append(dict(output_tokens=x.output_tokens, peak_kv=s["peak_kv_blocks_used"] / max(s["kv_blocks_total"], 1),
                         preemptions=s["preemptions"], kv_utilization=s["kv_utilization"]))
    return rows


def _configs(points: list[LabInputs]) -> list[tuple[LabInputs, object]]:
    """(inputs, configuration) of each sweep point that can run at all."""
    out = []
    for x in points:
        try:
            out.append((x, current_config(x)))
        except ValueError:
            continue
    return out


def sweep_tp(inputs: LabInputs) -> list[dict]:
    """Per-GPU weight footprint and KV room against the tensor-parallel degree (memory planner); a
    degree fits where the KV cache holds one request of the workload."""
    gpu, model = catalog.get_gpu(inputs.gpu), catalog.get_model(inputs.model)
    need, rows = request_tokens(inputs), []
    for tp in (1, 2, 4, 8, 16):
        if not model.splits_over(tp):
            continue
        try:
            p = memory_plan(inputs, gpu, model, tp)
            rows.append(dict(tp=tp, weights_gb=p.weights_bytes / 1e9, kv_gb=p.kv_pool_bytes / 1e9,
                             usable_gb=p.usable_bytes / 1e9, fits=p.kv_tokens >= need))
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


# requests each concurrency level sends at least: about as many a user as frontier.REQUESTS_PER_USER,
# but the light levels stay cheap (a single user's 2,000 requests would be 2,000 requests in a row)
USERS_SWEEP_REQUESTS = 400


def user_levels(inputs: LabInputs, cfg) -> list[int]:
    """Concurrency levels of the frontier (frontier.levels_for), and the sidebar's users."""
    levels = frontier.levels_for(cfg)
    if inputs.closed_loop and inputs.users not in levels:
        levels = sorted(set(levels) | {inputs.users})
    return levels


def sweep_users(inputs: LabInputs) -> list[dict]:
    """The throughput-interactivity frontier of the current deployment (core/serving/frontier.py):
    output tok/s per GPU against tok/s per user, one point per concurrency level, the knee marked."""
    cfg = current_config(inputs)
    base = replace(cfg, workload=replace(cfg.workload, n_requests=min(cfg.workload.n_requests, USERS_SWEEP_REQUESTS)))
    levels = user_levels(inputs, cfg)
    progress.expect(len(levels))
    check_page_work([frontier.level_config(base, n) for n in levels], "This concurrency sweep")
    return [dict(r, current=inputs.closed_loop and r["users"] == inputs.users)
            for r in frontier.rows(frontier.sweep(base, levels, run=run))]


def users_caption(rows: list[dict], inputs: LabInputs) -> str:
    """The frontier in words: the knee, and where the TPOT target cuts the curve."""
    k = next(i for i, r in enumerate(rows) if r["knee"])
    words = frontier.knee_words(rows, k)
    within = [r for r in rows if r["tpot_p99_ms"] <= inputs.tpot_ms]
    slo = (f"The {fmt_ms(inputs.tpot_ms)} p99 TPOT target (dashed: {1e3 / inputs.tpot_ms:,.0f} tok/s per user) holds "
           f"up to {within[-1]['users']:,} users." if within else
           f"No level meets the {fmt_ms(inputs.tpot_ms)} p99 TPOT target (dashed).")
    return f"{words[0].upper()}{words[1:]}. {slo} Each point is a closed loop of that many users (hover for TTFT)."


def knee_rate(rows: list[dict], target_ms: float) -> float | None:
    """The highest swept rate still within the TTFT target and stable."""
    ok = [r["rate"] for r in rows if r["stable"] and r["ttft_p99_ms"] <= target_ms]
    return max(ok) if ok else None


TRACE_FIXES = {"rate": "the request rate", "output": "the output length"}


def trace_fixes(inputs: LabInputs, kind: str) -> str | None:
    """Why a sweep means nothing on a replayed trace (None when it does): the trace fixes every
    arrival time and length, so each point of the sweep would replay the same requests."""
    if inputs.trace_csv is None or kind not in TRACE_FIXES:
        return None
    return (f"A replayed trace fixes every request's arrival time and lengths, so sweeping {TRACE_FIXES[kind]} "
            f"would replay the same requests at every point. Remove the trace (sidebar, Advanced) to see this sweep "
            f"on a generated workload.")


def trace_replaces(text: str) -> str:
    """Which sidebar inputs an uploaded trace replaces, with what the trace holds instead. Raises
    ValueError naming the line when the trace cannot be read."""
    wl = load_trace(text)
    n, span = wl.n, float(wl.arrival_s[-1] - wl.arrival_s[0])
    pace = f"over {span:.3g} s ({n / span:.3g} req/s)" if span > 0 else "all at once"
    return (f"The trace's {n:,} requests, arriving {pace} with {wl.prompt_tokens.mean():,.0f} prompt and "
            f"{wl.output_tokens.mean():,.0f} output tokens on average, replace the request rate, the average prompt "
            f"and output tokens, the length distribution, the number of simulated requests and the seed. The model, "
            f"GPUs, targets, toggles and the rest of Advanced still apply.")


SWEEPS = {"rate": sweep_rate, "output": sweep_output, "tp": sweep_tp, "batch": sweep_batch, "users": sweep_users}


# ---------------------------------------------------------------- what each sweep shows, in words

def current_rate(inputs: LabInputs, summary: dict) -> float:
    """The request rate the sidebar's load offers: its rate, or what a closed loop's users sent."""
    return summary["arrival_rate_req_s"] if inputs.closed_loop else inputs.rate


def rate_caption(rows: list[dict], inputs: LabInputs, summary: dict | None = None) -> str:
    """The rate sweep in words; a closed loop's needs its run's summary (what its users sent)."""
    knee = knee_rate(rows, inputs.ttft_p99_ms)
    now = (f"the {current_rate(inputs, summary):.3g} req/s the {inputs.users:,} users send (each point an open loop)"
           if inputs.closed_loop and summary else f"the current {inputs.rate:g} req/s")
    return ((f"Within the target up to about {knee:.3g} req/s on this deployment" if knee else
             "No swept rate meets the target on this deployment") +
            f"; dashed: the {fmt_ms(inputs.ttft_p99_ms)} target and {now}."
            + overloaded_caption(rows))


def overloaded_caption(rows: list[dict]) -> str:
    """A swept rate at which the queue grows without bound has no steady p99 TTFT: its point measures
    how many requests were simulated. Say where that starts (red points on the chart)."""
    over = [r["rate"] for r in rows if not r["stable"]]
    if not over:
        return ""
    return (f" Red: from {min(over):.3g} req/s the queue grows without bound, so those p99 TTFTs grow with the "
            f"number of requests simulated.")


def output_caption(rows: list[dict]) -> str:
    """Where along the sweep the cache first fills and first runs out (the chart's line reaches 100%
    there), not only where the most requests were preempted."""
    full = next((r for r in rows if r["peak_kv"] >= 0.99), None)
    short = next((r for r in rows if r["preemptions"]), None)
    if short:
        worst = max(rows, key=lambda r: r["preemptions"])
        text = (f"From {short['output_tokens']:,} output tokens the cache runs out: running requests are preempted "
                f"and recomputed ({worst['preemptions']:,} preemptions at {worst['output_tokens']:,}).")
        if full and full["output_tokens"] < short["output_tokens"]:
            text = (f"At {full['output_tokens']:,} output tokens the cache is full at its peak without preempting "
                    f"anyone. " + text)
        return text
    if full:
        return (f"From {full['output_tokens']:,} output tokens the cache is full at its peak, but no request had to "
                f"be preempted.")
    return "No preemptions across the sweep: the cache holds every running sequence."


def tp_caption(rows: list[dict]) -> str:
    usable = rows[0]["usable_gb"] if rows else 0
    fits = [r["tp"] for r in rows if r["fits"]]
    return ((f"Fits from tp={fits[0]}" if fits else "Does not fit at any swept tp") +
            f"; the limit is the {usable:.0f} GB usable per GPU. KV room per GPU at each tp: " +
            ", ".join(f"tp={r['tp']}: {gb(r['kv_gb'] * 1e9) if r['kv_gb'] > 0 else 'none'}" for r in rows) + ".")


def batch_caption(mean_batch: float) -> str:
    return (f"Dotted: this run's running batch of {mean_batch:.1f} sequences (the mean over steps that decode). "
            f"Memory-bound, then compute-bound: a bigger "
            f"batch shares each pass over the weights among more tokens, until the attention reads and the FLOPs "
            f"catch up.")


def slot_limit(cfg) -> int:
    """Sequences one replica may run in a step (serving.experts.replica_slots)."""
    return experts.replica_slots(cfg)


def slot_words(cfg) -> str:
    """Where the slot limit comes from, in the page's words."""
    slots = slot_limit(cfg)
    ranks = slots // cfg.max_seqs if cfg.policy != "serial" else 1
    if cfg.policy == "serial":
        return "1 sequence per replica (one request at a time)"
    if ranks > 1:
        return (f"{slots:,} sequences per replica: max batch ({cfg.max_seqs:,}, Advanced) on each of its {ranks} "
                f"data-parallel attention ranks")
    return f"{slots:,} sequences per replica (Advanced: max batch)"
