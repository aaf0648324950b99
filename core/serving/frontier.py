"""The throughput-interactivity frontier: a deployment at a rising number of concurrent users.

Benchmarks are read this way now (`vllm bench serve --max-concurrency N` swept over N, genai-perf
and guidellm concurrency sweeps, InferenceX): each concurrency level is one point, its output
tokens/s per GPU (what the deployment earns) against its tokens/s per user (1000 / median TPOT ms:
how fast a reader sees the answer stream). More users raise the first and lower the second; past
the knee, each added user buys little throughput and costs every user speed.

The knee is where that trade turns: the first level from which the next raises throughput by less
than half as much, in proportion, as it adds users (the elasticity d ln throughput / d ln users
falls below 1/2). Below it throughput grows almost with the users; above it they mostly queue.
"""
from __future__ import annotations

import math
from dataclasses import replace

from .. import bounds
from .simulate import SimConfig, simulate

KNEE_ELASTICITY = 0.5
REQUESTS_PER_USER = 10  # each user sends this many requests at least: the loop reaches its steady state


def parse_levels(text: str) -> tuple[int, ...]:
    """'1,2,4,8' -> (1, 2, 4, 8): concurrency levels, whole numbers within the bounds, increasing."""
    levels = []
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        levels.append(bounds.parse("concurrency", part, f"concurrency level '{part[:20]}'"))
    return check_levels(levels)


def check_levels(levels) -> tuple[int, ...]:
    levels = tuple(int(bounds.check("concurrency", n, "a concurrency level")) for n in levels)
    if not levels:
        raise ValueError("give at least one concurrency level, e.g. 1,2,4,8,16,32,64")
    if any(b <= a for a, b in zip(levels, levels[1:])):
        raise ValueError("concurrency levels must increase, e.g. 1,2,4,8,16")
    if len(levels) > 32:
        raise ValueError(f"{len(levels)} concurrency levels are more than a sweep takes: give at most 32")
    return levels


def levels_for(cfg: SimConfig) -> list[int]:
    """Concurrency levels worth sweeping on `cfg`: powers of two from one user to twice the
    sequences its replicas run at once (past those, users only queue), at most 4,096."""
    gpus = cfg.gpus or cfg.tp * cfg.pp
    replicas = max(1, (gpus - (cfg.prefill_gpus if cfg.disagg else 0)) // ((cfg.decode_tp or cfg.tp) * cfg.pp))
    top = min(4096, 2 * replicas * max(1, cfg.max_seqs))
    return [2 ** k for k in range(0, 13) if 2 ** k <= top]


def level_config(cfg: SimConfig, users: int) -> SimConfig:
    """`cfg` served by a closed loop of `users` users (its workload's lengths, prefixes and think
    time; its rate too, where it has one), each sending REQUESTS_PER_USER requests at least."""
    spec = cfg.workload
    n = max(spec.n_requests, REQUESTS_PER_USER * users)
    return replace(cfg, workload=replace(spec, concurrency=users, n_requests=n,
                                         rate=spec.rate if spec.closed_loop else math.inf))


def point(cfg: SimConfig, users: int, run=simulate) -> dict:
    """One point of the frontier: `cfg` at `users` users (level_config), simulated by `run`; units
    in the keys."""
    level = level_config(cfg, users)
    s = run(level).summary
    tpot = s["tpot_ms"]["p50"]
    return dict(users=users, requests=level.workload.n_requests, output_tok_s=s["throughput_tok_s"], gpus=s["gpus"],
                output_tok_s_per_gpu=s["throughput_tok_s"] / s["gpus"],
                tok_s_per_user=1e3 / tpot if tpot > 0 else math.inf, req_s=s["throughput_req_s"],
                ttft_p50_ms=s["ttft_ms"]["p50"], ttft_p99_ms=s["ttft_ms"]["p99"], tpot_p50_ms=tpot,
                tpot_p99_ms=s["tpot_ms"]["p99"], e2e_mean_s=s["e2e_s"]["mean"], in_flight=s["clients"]["in_flight"],
                mean_batch=s["mean_batch"], preemptions=s["preemptions"], saturates=s["clients"]["saturates"],
                meets_tpot=s["tpot_ms"]["p99"] <= cfg.tpot_slo_ms, meets_ttft=s["ttft_ms"]["p99"] <= cfg.ttft_slo_ms)


def knee(points: list[dict]) -> int:
    """Index of the knee (the module's docstring): the first level from which the next adds less
    than half its share of users in throughput; the last level when every step still pays."""
    for i in range(len(points) - 1):
        a, b = points[i], points[i + 1]
        gain = math.log(max(b["output_tok_s_per_gpu"], 1e-12) / max(a["output_tok_s_per_gpu"], 1e-12))
        if gain / math.log(b["users"] / a["users"]) < KNEE_ELASTICITY:
            return i
    return len(points) - 1


def sweep(cfg: SimConfig, levels, on_point=None, run=simulate) -> dict:
    """One deployment over the concurrency levels, each simulated by `run`: its points, the knee,
    and in words what the knee means. on_point(i, n) is told after each level (a progress bar)."""
    levels = check_levels(levels)
    points = []
    for i, users in enumerate(levels):
        points.append(point(cfg, users, run))
        if on_point:
            on_point(i + 1, len(levels))
    k = knee(points)
    return dict(points=points, knee=k, knee_words=knee_words(points, k), tpot_slo_ms=cfg.tpot_slo_ms,
                slo_tok_s_per_user=1e3 / cfg.tpot_slo_ms)


def knee_words(points: list[dict], k: int) -> str:
    """'knee at 32 users: 2,698 output tok/s per GPU at 95 tok/s per user ...; 64 users raise ...'"""
    kp = points[k]
    words = (f"knee at {kp['users']:,} users: {kp['output_tok_s_per_gpu']:,.0f} output tok/s per GPU at "
             f"{kp['tok_s_per_user']:,.0f} tok/s per user (TPOT {kp['tpot_p50_ms']:.1f} ms)")
    if k < len(points) - 1:
        nxt = points[k + 1]
        gain = nxt["output_tok_s_per_gpu"] / kp["output_tok_s_per_gpu"] - 1
        return words + (f"; {nxt['users']:,} users raise the throughput only {gain:.0%} and slow every user to "
                        f"{nxt['tok_s_per_user']:,.0f} tok/s")
    return words + "; the throughput still grows at every level swept: sweep further to find where it stops"


def rows(result: dict, **named) -> list[dict]:
    """A sweep's points as rows of a chart or an exported table: each marked whether it is the knee,
    with the columns `named` gives (say its deployment)."""
    return [dict(p, knee=i == result["knee"], **named) for i, p in enumerate(result["points"])]

