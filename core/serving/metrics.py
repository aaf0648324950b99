"""Summary metrics of a simulation: latency percentiles, throughput, goodput, KV use, cost."""
from __future__ import annotations

import math

import numpy as np

from ..engine import layout as E
from ..physics import catalog
from ..physics.costmodel import SPEC_K
from ..physics.speculative import for_config

PCTS = (50, 90, 99)


def dist(x: np.ndarray) -> dict:
    """mean, p50, p90, p99 of a sample (NaN-free); zeros for an empty sample."""
    if len(x) == 0:
        return dict(mean=0.0, p50=0.0, p90=0.0, p99=0.0)
    p = np.percentile(x, PCTS)
    return dict(mean=float(x.mean()), p50=float(p[0]), p90=float(p[1]), p99=float(p[2]))


def itl_from_histogram(hist: np.ndarray, mean_s: float) -> dict:
    """Inter-token latency percentiles (ms) from the engine's log-binned histogram (about 1%
    resolution); the mean is exact (total decode time over decode tokens)."""
    total = hist.sum()
    if total == 0:
        return dict(mean=0.0, p50=0.0, p90=0.0, p99=0.0)
    cum = np.cumsum(hist) / total
    out = dict(mean=mean_s * 1e3)
    for q in PCTS:
        b = int(np.searchsorted(cum, q / 100.0))
        centre = 10 ** (E.ITL_LO + (b + 0.5) / E.ITL_PER_DECADE)
        out[f"p{q}"] = float(centre * 1e3)
    return out


def served_and_offered(arrival: np.ndarray, finish: np.ndarray) -> tuple[float, float]:
    """Requests/s served (finished) and offered (arrived) over the second half of the arrival window.

    By then a stable queue is in its steady state, where what finishes matches what arrives, however
    long a request takes; an overloaded one serves its capacity and the difference piles up. The
    first half is left out as the warm-up (the queue starts empty), and the drain after the last
    arrival is left out because it is an artefact of ending the run."""
    n = len(arrival)
    t0, t1 = float(arrival[n // 2]), float(arrival[-1])
    span = t1 - t0
    if n < 2 or span <= 0:
        return 1.0, 1.0
    arrived = n - n // 2 - 1
    finished = int(np.count_nonzero((finish > t0) & (finish <= t1)))
    return finished / span, arrived / span


def is_stable(arrival: np.ndarray, finish: np.ndarray) -> bool:
    """Overloaded when, in the steady state, fewer requests finish than arrive by more than counting
    noise allows (two standard deviations of a Poisson count, and at least 5%), and the queue's
    trend over the run confirms it (queue_trend): the queue then grows without bound, and the waits
    grow with the length of the run.

    The trend is the check against run length. Near capacity, a stable queue's length swings widely
    (17 to 141 requests in one 2,000-request run of Mistral-7B on an A100 at 4 req/s), so a run that
    ends on a swing counts fewer finished than arrived although nothing piles up; over the run the
    queue then shows no growth. An overloaded queue grows from the start, so both checks see it."""
    n = len(arrival)
    if n < 20:
        return True
    served, offered = served_and_offered(arrival, finish)
    tolerance = max(0.05, 2 / np.sqrt(n / 2))
    if served >= offered * (1 - tolerance):
        return True
    return queue_trend(arrival, finish) <= max(0.05, 2 / np.sqrt(n - n // 10))


def queue_trend(arrival: np.ndarray, finish: np.ndarray) -> float:
    """How fast the number of requests in the system grows, as a share of the arrival rate, from
    the first tenth of the arrivals (after the warm-up) to the last: the mean count over the
    window's first and last tenths, a line between them. About 1 - served/offered when the queue
    grows without bound (0.09 at 1.1 times the capacity), about 0 when it is stable."""
    n = len(arrival)
    arrival_sorted, finish_sorted = np.sort(arrival), np.sort(finish)
    t0, t1 = float(arrival_sorted[n // 10]), float(arrival_sorted[-1])
    if t1 <= t0:
        return 0.0
    ts = np.linspace(t0, t1, 401)
    in_system = (np.searchsorted(arrival_sorted, ts, side="right")
                 - np.searchsorted(finish_sorted, ts, side="right"))
    k = len(ts) // 10
    offered = (n - n // 10 - 1) / (t1 - t0)
    growth = (in_system[-k:].mean() - in_system[:k].mean()) / (ts[-k:].mean() - ts[:k].mean())
    return float(growth / offered)


def served_words(summary: dict) -> str:
    """'the queue grows without bound: 3.07 of 4 req/s served' (requests finished against requests
    arrived in the steady state), the words every view uses for an overloaded run."""
    return (f"the queue grows without bound: {summary['served_req_s']:.3g} of {summary['offered_req_s']:.3g} req/s "
            f"served")


def overload(summary: dict) -> str | None:
    """What an overloaded run means, in words (None when the queue is stable)."""
    if summary["stable"]:
        return None
    return served_words(summary) + ", so the time to first token and the end-to-end time grow with the number of requests simulated"


GROWING = " and growing"


def growing(reading: str, summary: dict) -> str:
    """A wait (TTFT, end-to-end time) as it reads: on an overloaded run it is no steady value but grows
    with the length of the run ('10 s and growing'). Not TPOT: a saturated batch decodes at a steady
    pace however long the queue behind it (31.0 ms p50 at 1,000 requests, 31.8 ms at 20,000)."""
    return reading if summary["stable"] else reading + GROWING


def steady_window(arrival: np.ndarray, finish: np.ndarray) -> tuple[float, float]:
    """The span every rate is measured over: the second half of the arrival window, as for
    served_and_offered. The first half is the warm-up (the system starts empty) and the drain
    after the last arrival is an artefact of ending the run (nothing new comes in, so the batch
    only empties); either would dilute the rates. A run too short for that uses its whole arrival
    window, and an offline batch (every request at once) its whole run."""
    n = len(arrival)
    if n >= 20 and arrival[-1] > arrival[n // 2]:
        return float(arrival[n // 2]), float(arrival[-1])
    if arrival[-1] > arrival[0]:
        return float(arrival[0]), float(arrival[-1])
    return float(arrival[0]), float(finish.max())


def tokens_in_window(first: np.ndarray, finish: np.ndarray, out_tok: np.ndarray, t0: float, t1: float) -> float:
    """Output tokens emitted between t0 and t1: each request's first token at its first-token time,
    the rest evenly over its decode (the per-request TPOT varies little within a request)."""
    first_in = ((first > t0) & (first <= t1)).sum()
    dur = finish - first
    overlap = np.clip(np.minimum(finish, t1) - np.maximum(first, t0), 0.0, None)
    frac = np.where(dur > 0, overlap / np.where(dur > 0, dur, 1.0), ((finish > t0) & (finish <= t1)).astype(float))
    return float(first_in + ((out_tok - 1) * frac).sum())


def summarize(cfg, wl, pools, req, PI, PF, oi, of, itl_hist, gpu, max_len, wall, cap, stream_dry_s=None,
              due_rate=math.inf) -> dict:
    """The run's figures. Rates (throughput, goodput) are over the steady state (steady_window), so
    goodput (the requests finished in it that met both targets) never exceeds throughput (all the
    requests finished in it), which is what the overload check calls served; utilisation is output
    tokens/s against the roofline capacity (capacity.py). A closed loop's steady state ends when its
    stream of new requests runs dry (stream_dry_s): after that its users retire one by one as their
    conversations end, and the load falls with them. due_rate: requests/s the workload made due (a
    closed loop with no rate: inf)."""
    arrival, first, finish = req["arrival_s"], req["first_token_s"], req["finish_s"]
    out_tok = req["output_tokens"]
    ttft = (first - arrival) * 1e3
    e2e = finish - arrival
    multi = out_tok > 1
    tpot = (finish[multi] - first[multi]) / (out_tok[multi] - 1) * 1e3
    tpot_all = np.zeros(len(arrival))
    tpot_all[multi] = tpot
    decode_s = float((finish[multi] - first[multi]).sum())
    decode_tokens = int((out_tok[multi] - 1).sum())
    start, end = float(arrival.min()), float(finish.max())
    span = max(end - start, 1e-9)
    good = (ttft <= cfg.ttft_slo_ms) & (tpot_all <= cfg.tpot_slo_ms)
    t0, t1 = steady_window(arrival, finish)
    if stream_dry_s is not None and t0 < stream_dry_s < t1:
        t1 = stream_dry_s
    window = max(t1 - t0, 1e-9)
    done_in = (finish > t0) & (finish <= t1)
    if t1 <= t0 or not done_in.any():  # nothing finished within it: the whole run
        t0, t1, window, done_in = start, end, span, np.ones(len(finish), bool)
    tok_s = tokens_in_window(first, finish, out_tok, t0, t1) / window

    replicas = int(sum(p.replicas for p in pools))
    gpu_seconds = usd = 0.0
    r = 0
    for p in pools:
        pool_s = float(PF[r:r + p.rows, E.Q_GPU_S].sum()) * p.tp  # a lane per stage: rows x tp = GPUs
        gpu_seconds += pool_s
        usd += pool_s / 3600 * (getattr(p, "gpu", None) or gpu).price_usd_per_gpu_hour  # a split may run two GPU types
        r += p.rows
    gpu_hours = gpu_seconds / 3600
    total_tokens = int(out_tok.sum())
    types = {(getattr(p, "gpu", None) or gpu).id for p in pools}
    price = gpu.price_usd_per_gpu_hour if len(types) == 1 else usd / max(gpu_hours, 1e-12)
    cost = gpu_hours * price / (total_tokens / 1e6)
    lam = len(arrival) / max(float(arrival[-1] - arrival[0]), 1e-9) if len(arrival) > 1 else 0.0
    served, offered = served_and_offered(arrival, finish)

    summary = dict(
        requests=len(arrival),
        ttft_ms=dist(ttft), tpot_ms=dist(tpot), itl_ms=itl_from_histogram(itl_hist, decode_s / max(decode_tokens, 1)),
        e2e_s=dist(e2e), queue_wait_ms=dist((req["scheduled_s"] - arrival) * 1e3),
        throughput_tok_s=tok_s, throughput_req_s=float(done_in.sum()) / window,
        goodput_req_s=float((good & done_in).sum()) / window, slo_attainment=float(good.mean()),
        # as benchmark clients report them: everything completed over the whole run, drain included
        completed_tok_s=total_tokens / span, completed_req_s=len(arrival) / span,
        # a run that serves more than the roofline estimate has shown a higher ceiling
        capacity_tok_s=max(cap.output_tok_s, tok_s), capacity_batch=cap.batch,
        utilisation=tok_s / max(cap.output_tok_s, tok_s, 1e-9),
        ttft_slo_ms=cfg.ttft_slo_ms, tpot_slo_ms=cfg.tpot_slo_ms,
        kv_utilization=float(of[E.OF_KV_DATA_S] / of[E.OF_KV_ALLOC_S]) if of[E.OF_KV_ALLOC_S] > 0 else 0.0,
        kv_blocks_total=int(PI[:, E.P_BLOCKS].sum()), kv_blocks_per_replica=[int(p.plan.kv_blocks) for p in pools],
        peak_kv_blocks_used=int(oi[E.O_PEAK_USED]), min_free_kv_blocks=int(oi[E.O_MIN_FREE]),
        # under no-evict admission, the blocks admitted requests hold at their whole length, at the peak
        peak_kv_blocks_reserved=int(oi[E.O_PEAK_RESERVED]),
        preemptions=int(oi[E.O_PREEMPTS]),
        # prefix caching (vLLM's PrefixCacheStats): prompt tokens found cached over those looked up at
        # admissions, the prefill they saved, and cached blocks evicted to make room
        prefix_hit_rate=float(PI[:, E.P_PC_HIT].sum() / max(PI[:, E.P_PC_QUERY].sum(), 1)),
        prefill_tokens_saved=int(PI[:, E.P_PC_HIT].sum()),
        prefix_cache_evictions=int(PI[:, E.P_PC_EVICTED].sum()),
        mean_batch=float(oi[E.O_SEQS_DECODE_STEPS] / max(oi[E.O_DECODE_STEPS], 1)), steps=int(oi[E.O_STEPS]),
        quiet_steps=int(oi[E.O_QUIET_STEPS]),  # of those, decode steps run back to back (fastforward.py)
        # a closed loop cannot overload: it never has more than its users' requests in the server
        stable=bool(cfg.workload.closed_loop or is_stable(arrival, finish)), arrival_rate_req_s=lam, makespan_s=span,
        served_req_s=served, offered_req_s=offered,
        mean_in_system=float(of[E.OF_AREA_FRONT] + of[E.OF_AREA_XFER] + of[E.OF_AREA_DECODE]) / span,
        replicas=replicas, gpus=int(sum(p.replicas * p.tp * p.pp for p in pools)), tp=pools[0].tp, pp=pools[0].pp,
        ep=cfg.ep, dp_attention=cfg.dp_attention,
        gpu_hours=gpu_hours, cost_per_1m_tokens_usd=cost,
        price_usd_per_gpu_hour=price,  # two GPU types: their mean over the GPU-hours each ran
        price_date=gpu.price_date,
        max_model_len=max_len, clipped_requests=wl.clipped, policy=cfg.policy,
        sim_wall_s=wall,
    )
    summary["speculative"] = speculative_summary(cfg, pools, oi)
    summary["pools"] = _pool_metrics(cfg, pools, req, PI, PF, of, span, (t0, t1), cap)
    in_flight = float(np.clip(np.minimum(finish, t1) - np.maximum(arrival, t0), 0.0, None).sum()) / window
    summary["clients"] = clients_summary(cfg, pools, summary, in_flight, due_rate)
    if cfg.disagg:
        moved = req["xfer_done_s"] >= 0
        summary["kv_transfer_ms"] = dist((req["xfer_done_s"][moved] - req["xfer_start_s"][moved]) * 1e3)
        summary["kv_transfer_wait_ms"] = dist((req["xfer_start_s"][moved] - req["xfer_ready_s"][moved]) * 1e3)
    else:
        summary["kv_transfer_ms"] = dist(np.zeros(0))
    return summary


def speculative_summary(cfg, pools, oi) -> dict | None:
    """Speculative decoding as vLLM's SpecDecodingStats count it: draft tokens accepted over those
    proposed, and the tokens a speculating sequence gained a step (1 + accepted); None when off."""
    if cfg.spec_method is None:
        return None
    k = int(pools[-1].params[SPEC_K])  # the decoding pool's
    seq_steps, accepted = int(oi[E.O_SPEC_SEQ_STEPS]), int(oi[E.O_SPEC_ACCEPTED])
    spec = for_config(cfg, catalog.get_model(cfg.model))
    return dict(method=cfg.spec_method, spec_tokens=k, draft_model=spec.draft.id if spec.draft else None,
                expected_tokens_per_step=spec.tokens_per_step, proposed_tokens=seq_steps * k,
                accepted_tokens=accepted, acceptance_rate=accepted / (seq_steps * k) if seq_steps else 0.0,
                tokens_per_step=1.0 + accepted / seq_steps if seq_steps else 1.0)


def _pool_metrics(cfg, pools, req, PI, PF, of, span, window, cap) -> dict:
    out = {}
    r = 0
    areas = {"serving": of[E.OF_AREA_FRONT], "prefill": of[E.OF_AREA_FRONT], "decode": of[E.OF_AREA_DECODE]}
    arrival, first, finish = req["arrival_s"], req["first_token_s"], req["finish_s"]
    moved = req["xfer_done_s"] >= 0
    for p in pools:
        sl = slice(r, r + p.rows)
        steps = int(PI[sl, E.P_STEPS].sum())
        if p.name == "decode":
            t_in = finish[moved] - req["xfer_done_s"][moved]
            t_arr = req["xfer_done_s"][moved]
        elif p.name == "prefill":
            t_in = first - arrival
            t_arr = arrival
        else:
            t_in = finish - arrival
            t_arr = arrival
        out[p.name] = dict(
            replicas=p.replicas, tp=p.tp, pp=p.pp, gpus=p.replicas * p.tp * p.pp, ep=p.ep, dp_attention=p.dp_attention,
            kv_blocks_per_replica=int(p.plan.kv_blocks),
            gpu=p.gpu.id if getattr(p, "gpu", None) is not None else cfg.gpu,
            weights_gb_per_gpu=p.plan.weights_bytes / 1e9, steps=steps,
            utilisation=_pool_utilisation(p.name, req, window, cap),
            peak_kv_blocks_used=int(PI[sl, E.P_PEAK].max()) if p.replicas else 0,
            preemptions=int(PI[sl, E.P_PREEMPTS].sum()),
            arrival_rate_req_s=len(t_arr) / span, mean_time_s=float(t_in.mean()) if len(t_in) else 0.0,
            mean_in_pool=float(areas[p.name]) / span,
        )
        r += p.rows
    if "decode" in out:
        out["transfer"] = dict(mean_in_transfer=float(of[E.OF_AREA_XFER]) / span,
                               mean_time_s=float((req["xfer_done_s"][moved] - first[moved]).mean()) if moved.any() else 0.0,
                               arrival_rate_req_s=int(moved.sum()) / span)
    return out


def _pool_utilisation(name: str, req: dict, window: tuple[float, float], cap) -> float:
    """A prefill pool's prompt tokens/s against what it could prefill; the serving or decode side's
    output tokens/s against its decode capacity (both over the arrival window)."""
    t0, t1 = window
    if name == "prefill":
        done = (req["first_token_s"] > t0) & (req["first_token_s"] <= t1)
        tok_s = float(req["prompt_tokens"][done].sum()) / max(t1 - t0, 1e-9)
        return tok_s / max(cap.prompt_tok_s, tok_s, 1e-9)
    tok_s = tokens_in_window(req["first_token_s"], req["finish_s"], req["output_tokens"], t0, t1) / max(t1 - t0, 1e-9)
    return tok_s / max(cap.output_tok_s, tok_s, 1e-9)


def clients_summary(cfg, pools, summary: dict, in_flight: float, due: float) -> dict:
    """How the load was offered, and for a closed loop what limits it. in_flight: the requests sent
    and not yet answered, on average over the steady state (a closed loop's users less those
    thinking); `saturates` says in words what stops more users from raising the throughput."""
    spec = cfg.workload
    if not spec.closed_loop:
        return dict(mode="open", users=None, think_s=None, think_dist=None, due_rate_req_s=due, in_flight=in_flight,
                    saturates=None)
    users = spec.concurrency
    slots = (1 if cfg.policy == "serial" else cfg.max_seqs) * pools[-1].replicas
    if math.isfinite(due) and summary["arrival_rate_req_s"] < 0.95 * due:
        saturates = (f"the client: requests fall due at {due:.3g} req/s, but {users:,} users waiting for their answers "
                     f"send only {summary['arrival_rate_req_s']:.3g} req/s")
    elif users > slots:
        saturates = (f"batch slots: {users:,} users against {slots:,} sequences the replicas run at once, so the rest "
                     f"wait in the queue (median {summary['queue_wait_ms']['p50']:,.0f} ms): more users lengthen the "
                     f"time to first token, not the throughput")
    elif summary["preemptions"] > 0 or summary["min_free_kv_blocks"] <= 0.02 * summary["kv_blocks_total"]:
        saturates = (f"the KV cache: the users' requests fill the KV blocks ({summary['preemptions']:,} preemptions); "
                     f"more users wait for blocks or recompute their prompts")
    else:
        saturates = None
    return dict(mode="closed" if math.isinf(due) else "rate+concurrency", users=users, think_s=spec.think_s,
                think_dist=spec.think_dist, due_rate_req_s=due, in_flight=in_flight, batch_slots=slots,
                saturates=saturates)


def clients_words(summary: dict) -> str | None:
    """How a closed loop offered its load and what limits it, in words (None for an open loop)."""
    c = summary["clients"]
    if c["mode"] == "open":
        return None
    think = f", thinking {c['think_s']:g} s ({c['think_dist']}) between requests" if c["think_s"] else ""
    how = (f"{c['users']:,} users in a closed loop{think}" if c["mode"] == "closed" else
           f"requests due at {c['due_rate_req_s']:.3g} req/s with at most {c['users']:,} in flight{think}")
    return (f"{how}: {summary['arrival_rate_req_s']:.3g} req/s sent, {c['in_flight']:.1f} in flight on average; "
            f"what saturates: {c['saturates'] or 'nothing yet (every request runs at once: more users raise the throughput)'}")
