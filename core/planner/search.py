"""Searching one deployment shape: the fewest replicas that meet the targets at the user's rate,
and the highest rate at which that deployment still meets them.

A shape is a deployment with its replica counts left open. More replicas never hurt (the same
requests, spread wider), so its cheapest passing size is found by walking up from the roofline's
lower bound, galloping, then bisecting; the sizes above it are not simulated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

from ..physics import catalog
from ..serving.metrics import overload
from ..serving.simulate import simulate
from ..serving.stepspread import engine_margin, family_margin, within_range
from .bounds import Bound, bound
from .space import Budget, Deployment, Workload, to_config

RATE_STEPS = 5  # bisection steps of the highest-rate search: (hi/lo)^(1/32) precision


@dataclass(frozen=True)
class Outcome:
    """One deployment simulated at one rate."""
    deployment: Deployment
    rate: float
    meets: bool
    stable: bool
    attainment: float
    ttft_p99_ms: float
    tpot_p99_ms: float
    served_req_s: float
    offered_req_s: float
    output_tok_s: float
    preemptions: int
    misses: tuple[str, ...] = ()
    error: str | None = None
    steps: int = 0  # engine steps the simulation took (a search's work)


def check_config(d: Deployment, w: Workload):
    """The simulation the targets are checked on: `d` serving `w` with every step at the targets'
    step scale (the trust band's slower edge), moved out as the Lab's band is on a GPU family no
    fitted validated run covers (stepspread.family_margin: B200, L40S; MI300X by its public runs' worst error),
    and for an engine whose runs no constant was fitted to (stepspread.engine_margin: TensorRT-LLM)."""
    return replace(to_config(d, w), step_scale=within_range(w.targets.step_scale * (1 + unvalidated_margin(d))
                                                            * (1 + _engine_margin(w.engine.name))))


@lru_cache(maxsize=64)
def _margin(gpu: str) -> float:
    return family_margin(catalog.get_gpu(gpu))[0]


@lru_cache(maxsize=8)
def _engine_margin(engine: str) -> float:
    return engine_margin(engine)[0]


def unvalidated_margin(d: Deployment) -> float:
    """How much slower the check takes `d`'s steps beyond the targets' scale: the wider of its pools'
    GPU families' margins (0 where a validated run covers the family)."""
    return max(_margin(g) for g in {d.gpu, d.prefill_gpu or d.gpu})


@lru_cache(maxsize=4096)
def outcome(d: Deployment, w: Workload) -> Outcome:
    """Deployment `d` serving `w` at w's own rate (Workload.judged adds the headroom), every step
    at the targets' step scale, judged against w's targets."""
    t = w.targets
    try:
        s = simulate(check_config(d, w)).summary
    except ValueError as e:
        return Outcome(d, w.spec.rate, False, False, 0.0, math.inf, math.inf, 0.0, w.spec.rate, 0.0, 0,
                       (str(e),), error=str(e))
    misses = []
    if not s["stable"]:
        misses.append(overload(s))
    if s["slo_attainment"] < t.attainment:
        misses.append(f"{s['slo_attainment']:.1%} of requests meet both targets, not {t.attainment:.0%}")
    meets = not misses
    served = min(s["served_req_s"], s["offered_req_s"])
    out_tok = s["completed_tok_s"] / max(s["completed_req_s"], 1e-12)  # mean output tokens per request
    return Outcome(d, w.spec.rate, meets, bool(s["stable"]), float(s["slo_attainment"]), float(s["ttft_ms"]["p99"]),
                   float(s["tpot_ms"]["p99"]), float(served), float(s["offered_req_s"]), served * out_tok,
                   int(s["preemptions"]), tuple(misses), steps=int(s["steps"]))


def slack(o: Outcome, w: Workload) -> float:
    return w.targets.slack(o.ttft_p99_ms, o.tpot_p99_ms)


def closeness(o: Outcome) -> tuple:
    """How near an outcome comes to meeting the targets (larger is nearer)."""
    return (o.error is None, o.stable, o.attainment, -o.ttft_p99_ms)


@dataclass
class ShapeResult:
    shape: Deployment
    enumerated: int  # deployments of this shape within the budget
    pruned_by: str = ""  # "memory", "roofline", or "" when simulated
    reason: str = ""
    below_bound: int = 0  # sizes the roofline rules out (too few replicas to carry the rate)
    simulated: int = 0  # sizes simulated at the user's rate
    rate_runs: int = 0  # simulations of the highest-rate search
    best: Outcome | None = None  # the cheapest size that meets the targets, else the nearest miss
    max_rate_req_s: float | None = None  # highest rate within the targets of `best` (when it meets)
    max_rate_capped: bool = False  # the search's upper end still met the targets
    max_users: int | None = None  # a closed loop's: the most users within the targets (served at max_rate_req_s)
    tried: list = field(default_factory=list)
    spare: int = 0  # spare replicas (of each pool) added to what meets the targets

    @property
    def meets(self) -> bool:
        return self.best is not None and self.best.meets

    @property
    def deployment(self) -> Deployment | None:
        """What to deploy: the size that meets the targets (best) and the spare replicas."""
        return self.best.deployment.with_spares(self.spare) if self.best else None

    def headroom(self, w: Workload) -> float | None:
        """Highest load within the targets over the offered one, less 1 (0.25: 25% more traffic
        still meets them, with the spares lost and every step at the trust band's slower edge)."""
        if self.max_users is not None:
            return self.max_users / w.spec.concurrency - 1
        if self.max_rate_req_s is None or w.spec.closed_loop:
            return None
        return self.max_rate_req_s / w.spec.rate - 1


def spare_gpus(shape: Deployment, budget: Budget) -> int:
    """GPUs the spare replicas of a shape take (one replica of each pool per spare)."""
    return budget.spare_replicas * (shape.replica_gpus + (shape.prefill_tp if shape.disagg else 0))


def room(shape: Deployment, budget: Budget) -> int:
    """GPUs of the budget left for the replicas that meet the targets, once the spares have theirs."""
    return budget.max_gpus - spare_gpus(shape, budget)


def sizes(shape: Deployment, budget: Budget) -> int:
    """How many replica counts of this shape fit the GPU budget (with its spares)."""
    top = room(shape, budget)
    if not shape.disagg:
        return max(0, top // shape.replica_gpus)
    n = 0
    for pre in range(1, max(0, top) // shape.prefill_tp + 1):
        n += max(0, (top - pre * shape.prefill_tp) // shape.replica_gpus)
    return n


def search_shape(shape: Deployment, w: Workload, budget: Budget, prompt_q: int, max_cost: float = math.inf,
                 rate_search: bool = True) -> ShapeResult:
    """The cheapest size of `shape` that meets the targets within the budget (and below `max_cost`
    $ per hour, when a cheaper answer is already known), and its highest rate within the targets.
    The targets are checked at the judged load (Workload.judged: the offered one and its headroom)
    on the replicas left when the spares are lost; the answer is that size plus the spares."""
    res = ShapeResult(shape, sizes(shape, budget), spare=budget.spare_replicas)
    wj = w.judged()
    b = bound(shape, wj, prompt_q)
    if b.refused:
        res.pruned_by, res.reason = b.pruned_by, b.refused
        return res
    spare_cost = budget.cost(replace(shape, replicas=budget.spare_replicas,
                                     prefill_replicas=budget.spare_replicas if shape.disagg else 0))
    top = room(shape, budget)

    def fits(d: Deployment) -> bool:  # within the budget and the best cost known, spares included
        return d.gpus <= top and budget.cost(d) + spare_cost <= max_cost + 1e-9

    walk = _walk_disagg if shape.disagg else _walk_colocated
    tried = walk(shape, wj, b, fits)
    res.tried = tried
    res.simulated = len(tried)
    res.below_bound = res.enumerated - res.simulated - _above(shape, tried, top)
    if not tried:
        need = b.min_replicas(wj.carried_rate) * shape.replica_gpus + (
            b.min_prefill_replicas(wj.carried_rate) * shape.prefill_tp if shape.disagg else 0)
        if need <= top:
            res.pruned_by, res.reason = "cost", "its smallest size that could carry the rate costs more than an answer found"
        else:
            res.pruned_by = "roofline"
            spares = f" with {budget.spare_replicas} spare" if budget.spare_replicas else ""
            res.reason = (f"carrying {wj.spec.rate:.3g} req/s (the offered rate and its headroom) needs at least "
                          f"{need} GPUs{spares}, beyond the {budget.max_gpus}-GPU budget")
        return res
    passing = [o for o in tried if o.meets]
    res.best = min(passing, key=lambda o: budget.cost(o.deployment)) if passing else max(tried, key=closeness)
    if rate_search and res.best.meets and w.spec.closed_loop:
        res.max_users, res.max_rate_req_s, res.max_rate_capped, res.rate_runs = most_users(res.best.deployment, wj)
    elif rate_search and res.best.meets:
        res.max_rate_req_s, res.max_rate_capped, res.rate_runs = highest_rate(res.best.deployment, wj, b)
    return res


def _above(shape: Deployment, tried: list[Outcome], top: int) -> int:
    """Sizes larger than the cheapest passing one that were not simulated: they pass too. (The walk's
    gallop may have simulated one past it before bisecting back: that one counts as simulated.)"""
    passing = [o.deployment.gpus for o in tried if o.meets]
    if not passing:
        return 0
    cheapest = min(passing)
    if not shape.disagg:
        larger = (top - cheapest) // shape.replica_gpus
    else:
        larger = sum(1 for pre in range(1, top // shape.prefill_tp + 1)
                     for dec in range(1, (top - pre * shape.prefill_tp) // shape.replica_gpus + 1)
                     if pre * shape.prefill_tp + dec * shape.replica_gpus > cheapest)
    return larger - sum(1 for o in tried if o.deployment.gpus > cheapest)


def _walk_colocated(shape: Deployment, w: Workload, b: Bound, fits) -> list:
    """Replica counts from the roofline's lower bound up: galloping (+1, +2, +4, ...) to the first
    that meets, then bisecting back over the gap."""
    top = 0
    while fits(replace(shape, replicas=top + 1)):
        top += 1
    r, step, last_fail, tried = b.min_replicas(w.carried_rate), 1, None, []
    while r <= top:
        o = outcome(replace(shape, replicas=r), w)
        tried.append(o)
        if o.meets:
            break
        last_fail, r, step = r, r + step, step * 2
    else:
        if last_fail is not None and last_fail < top:  # the gallop jumped past the largest size
            tried.append(outcome(replace(shape, replicas=top), w))
    passing = [o.deployment.replicas for o in tried if o.meets]
    if passing and last_fail is not None:
        lo, hi = last_fail, min(passing)  # lo fails, hi meets
        while hi - lo > 1:
            mid = (lo + hi) // 2
            o = outcome(replace(shape, replicas=mid), w)
            tried.append(o)
            lo, hi = (lo, mid) if o.meets else (mid, hi)
    return tried


def _walk_disagg(shape: Deployment, w: Workload, b: Bound, fits) -> list:
    """From the two pools' lower bounds, grow the pool that holds the targets back by one replica at
    a time: the prefill pool when the time to first token misses, the decode pool otherwise."""
    d = replace(shape, prefill_replicas=b.min_prefill_replicas(w.carried_rate), replicas=b.min_replicas(w.carried_rate))
    tried = []
    while fits(d):
        o = outcome(d, w)
        tried.append(o)
        if o.meets or o.error:
            break
        ttft_bound = o.ttft_p99_ms > w.targets.ttft_p99_ms and o.tpot_p99_ms <= w.targets.tpot_p99_ms
        d = replace(d, prefill_replicas=d.prefill_replicas + 1) if ttft_bound else replace(d, replicas=d.replicas + 1)
    return tried


def highest_rate(d: Deployment, w: Workload, b: Bound) -> tuple[float, bool, int]:
    """The highest request rate at which `d` still meets the targets (d meets them at w's rate):
    bisection on a log scale between w's rate and the roofline's capacity. Returns (rate, whether
    the capacity end itself met the targets, simulations run)."""
    lo = w.spec.rate
    cap = d.replicas * b.serving_req_s
    if d.disagg:
        cap = min(cap, d.prefill_replicas * b.prefill_req_s)
    hi = max(cap, lo * 1.05)
    runs = 0
    for _ in range(3):  # the roofline's end may still meet the targets: gallop past it
        runs += 1
        if not outcome(d, w.at_rate(hi)).meets:
            break
        lo, hi = hi, hi * 1.5
    else:
        return lo, True, runs
    for _ in range(RATE_STEPS):
        mid = math.sqrt(lo * hi)
        runs += 1
        if outcome(d, w.at_rate(mid)).meets:
            lo = mid
        else:
            hi = mid
    return lo, False, runs


USER_GALLOPS = 4  # doublings of a closed loop's users past the given count before the search gives up


def most_users(d: Deployment, w: Workload) -> tuple[int, float, bool, int]:
    """A closed loop's highest load within the targets: the most users `d` serves within them (d
    meets them at w's users), by doubling then bisection. Returns (users, requests/s served then,
    whether the last doubling still met the targets, simulations run)."""
    lo, served, runs = w.spec.concurrency, outcome(d, w).served_req_s, 0
    hi = None
    for _ in range(USER_GALLOPS):
        runs += 1
        o = outcome(d, w.at_users(2 * lo))
        if not o.meets:
            hi = 2 * lo
            break
        lo, served = 2 * lo, o.served_req_s
    if hi is None:
        return lo, served, True, runs
    for _ in range(RATE_STEPS):
        if hi - lo <= max(1, lo // 32):
            break
        mid = (lo + hi) // 2
        runs += 1
        o = outcome(d, w.at_users(mid))
        if o.meets:
            lo, served = mid, o.served_req_s
        else:
            hi = mid
    return lo, served, False, runs
