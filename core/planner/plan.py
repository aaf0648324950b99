"""The planner's answer: every deployment shape searched within a budget, the cheapest deployment
that meets the targets, and the frontier of cost against p99 TTFT and p99 TPOT.

    w = Workload("llama-3.1-70b", WorkloadSpec(n_requests=2000, rate=8, prompt_mean=4096, output_mean=256),
                 Targets(ttft_p99_ms=3000, tpot_p99_ms=50))
    p = plan(w, Budget(gpu_types=("h100", "h200"), max_gpus=16))
    p.cheapest.deployment.label()
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable

from .bounds import prompt_quantile
from .executors import run_tasks
from .search import ShapeResult, search_shape, slack
from ..physics import catalog
from ..serving import engines, frontier, serve_command
from .space import Budget, Workload, shapes, to_config


def highest_load(row: dict) -> str:
    """A row's highest load within the targets, in words: a rate ('12.3 req/s'), or a closed loop's
    users and what they send ('96 users (31.2 req/s)'); '≥' where the search's upper end still met them."""
    more = "≥ " if row["max_rate_is_lower_bound"] else ""
    if row["max_rate_req_s"] is not None and row.get("headroom") is not None:
        room = f", {row['headroom']:.0%} headroom"
        if row.get("max_users") is not None:
            return f"{more}{row['max_users']:,} users ({row['max_rate_req_s']:.3g} req/s){room}"
        return f"{more}{row['max_rate_req_s']:.3g} req/s{room}"
    if row.get("max_users") is not None:
        return f"{more}{row['max_users']:,} users ({row['max_rate_req_s']:.3g} req/s)"
    return f"{more}{row['max_rate_req_s']:.3g} req/s" if row["max_rate_req_s"] is not None else "-"


def row(r: ShapeResult, w: Workload, budget: Budget, frontier: list | None = None) -> dict:
    """A searched shape as a table row (Plan.row): its deployment (spares included), what it costs,
    its p99s where the targets were checked (rule), its highest load within them and the headroom
    that leaves, and the vllm serve commands and Kubernetes manifest that run it."""
    d, o = r.deployment, r.best
    usd_h = budget.cost(d)
    tok_h = o.output_tok_s * 3600
    cfg = to_config(d, w)
    headroom = r.headroom(w)
    return dict(deployment=d.label(), gpu=d.gpu, prefill_gpu=d.prefill_gpu or (d.gpu if d.disagg else ""),
                gpus=d.gpus, stage=d.stage, dtype=d.dtype, kv_dtype=d.kv_dtype, policy=d.policy,
                chunk=d.chunk, tp=d.tp, pp=d.pp, replicas=d.replicas, prefill_tp=d.prefill_tp,
                prefill_replicas=d.prefill_replicas, spare_replicas=d.spare, spec=d.spec, ep=d.ep,
                dp_attention=d.dp_attention, eplb=d.eplb, engine=w.engine.name, meets=o.meets,
                max_rate_req_s=r.max_rate_req_s, max_rate_is_lower_bound=r.max_rate_capped, max_users=r.max_users,
                headroom=headroom, checked=w.targets.rule() + (f", {d.spare} spare replica{'s' if d.spare > 1 else ''}"
                                                               f"{' of each pool' if d.disagg else ''} lost"
                                                               if d.spare else ""),
                ttft_p99_ms=o.ttft_p99_ms, tpot_p99_ms=o.tpot_p99_ms, attainment=o.attainment,
                usd_per_hour=usd_h, usd_per_1m_output_tokens=usd_h / (tok_h / 1e6) if tok_h > 0 else math.inf,
                requests_per_usd=(r.max_rate_req_s or 0.0) * 3600 / usd_h,
                frontier=r in (frontier or ()), misses="; ".join(o.misses),
                serve=serve_command.commands(cfg), kubernetes=serve_command.manifest(cfg))


def rank(r: ShapeResult, w: Workload, budget: Budget) -> tuple:
    """The order of answers: cheapest, then the simpler stage, bf16, and the most room under the targets."""
    return budget.preference(r.deployment) + (slack(r.best, w),)


def search_task(task: tuple) -> ShapeResult:
    """One shape's search: the unit of work an executor runs (a top-level function, so that a
    process pool or Ray can ship it)."""
    shape, w, budget, prompt_q = task
    return search_shape(shape, w, budget, prompt_q)


@dataclass
class Plan:
    workload: Workload
    budget: Budget
    results: list[ShapeResult]
    wall_s: float
    executor: str

    def cost_per_hour(self, r: ShapeResult) -> float:
        return self.budget.cost(r.deployment)

    def rank(self, r: ShapeResult) -> tuple:
        return rank(r, self.workload, self.budget)

    @property
    def passing(self) -> list[ShapeResult]:
        return sorted((r for r in self.results if r.meets), key=self.rank)

    @property
    def cheapest(self) -> ShapeResult | None:
        return self.passing[0] if self.passing else None

    @property
    def frontier(self) -> list[ShapeResult]:
        """Passing deployments that no other beats on cost, p99 TTFT and p99 TPOT at once."""
        pts = [(self.cost_per_hour(r), r.best.ttft_p99_ms, r.best.tpot_p99_ms, r) for r in self.passing]
        keep = []
        for c, t, p, r in pts:
            dominated = any(c2 <= c and t2 <= t and p2 <= p and (c2, t2, p2) != (c, t, p) for c2, t2, p2, _ in pts)
            if not dominated and not any((c, t, p) == (self.cost_per_hour(k), k.best.ttft_p99_ms, k.best.tpot_p99_ms)
                                         for k in keep):
                keep.append(r)
        return sorted(keep, key=self.cost_per_hour)

    @property
    def counts(self) -> dict:
        by = lambda kind: sum(r.enumerated for r in self.results if r.pruned_by == kind)  # noqa: E731
        simulated = sum(r.simulated for r in self.results)
        rate_runs = sum(r.rate_runs for r in self.results)
        return dict(deployments=sum(r.enumerated for r in self.results), shapes=len(self.results),
                    pruned_memory=by("memory"),
                    pruned_roofline=by("roofline") + sum(r.below_bound for r in self.results if not r.pruned_by),
                    pruned_cost=by("cost"),
                    not_needed=sum(r.enumerated - r.simulated - r.below_bound for r in self.results if not r.pruned_by),
                    simulated=simulated, rate_search_runs=rate_runs, simulations=simulated + rate_runs,
                    wall_s=self.wall_s,
                    deployments_per_s=sum(r.enumerated for r in self.results) / max(self.wall_s, 1e-9),
                    simulations_per_s=(simulated + rate_runs) / max(self.wall_s, 1e-9))

    def row(self, r: ShapeResult) -> dict:
        """One searched shape as the Planner's table shows it: its cheapest passing size (or nearest
        miss) with its spare replicas, with units in the keys, and the commands that run it."""
        return row(r, self.workload, self.budget, self.frontier)

    def recipe(self):
        """The vendor recipe's shape beside the cheapest answer (recipe.compare), or None when
        nothing meets the targets; searched once."""
        if self.cheapest is None:
            return None
        if not hasattr(self, "_recipe"):
            from .recipe import compare
            self._recipe = compare(self.workload, self.budget, self.cheapest, self.results,
                                   prompt_quantile(self.workload, self.workload.targets.attainment))
        return self._recipe

    def recipe_json(self) -> dict | None:
        c = self.recipe()
        if c is None:
            return None
        return dict(shape=c.shape.label().split(": ", 1)[1], is_cheapest=c.is_cheapest, why=c.sentence,
                    row=row(c.result, self.workload, self.budget) if c.result.best is not None else None,
                    reason=c.result.reason)

    def interactivity(self, top: int = 3, requests: int = 400, on_point=None) -> list[dict]:
        """The throughput-interactivity frontier (serving/frontier.py) of the cheapest passing
        deployment and the next of the cost frontier, up to `top` in all: rows of every level of
        each, named by deployment, the knee of each marked. on_point(done, total) after each level."""
        picked = [r for r in sorted(self.frontier, key=self.rank) if r.meets][:top]
        if self.cheapest is not None and self.cheapest not in picked:
            picked = [self.cheapest] + picked[:top - 1]
        cfgs = [(r.deployment.label(), to_config(r.deployment, self.workload)) for r in picked]
        cfgs = [(name, replace(c, workload=replace(c.workload, n_requests=min(c.workload.n_requests, requests))))
                for name, c in cfgs]
        plans = [(name, c, frontier.levels_for(c)) for name, c in cfgs]
        total, done, rows = sum(len(levels) for _, _, levels in plans), 0, []
        for name, c, levels in plans:
            tick = (lambda i, n, before=done: on_point(before + i, total)) if on_point else None
            rows += frontier.rows(frontier.sweep(c, levels, tick), deployment=name)
            done += len(levels)
        return rows

    def rows(self) -> list[dict]:
        simulated = [r for r in self.results if r.best is not None]
        simulated.sort(key=lambda r: (not r.meets, self.rank(r)))
        return [self.row(r) for r in simulated]

    def pruned(self) -> list[dict]:
        return [dict(shape=r.shape.label().split(": ", 1)[1], gpu=r.shape.gpu, pruned_by=r.pruned_by, reason=r.reason,
                     deployments=r.enumerated) for r in self.results if r.pruned_by]

    def to_json(self) -> dict:
        c = self.cheapest
        return dict(workload=dict(model=self.workload.model, spec=asdict(self.workload.spec),
                                  targets=asdict(self.workload.targets), engine=asdict(self.workload.engine)),
                    budget=asdict(self.budget), counts=self.counts,
                    rule=self.workload.targets.rule(), spare_replicas=self.budget.spare_replicas,
                    cheapest=self.row(c) if c else None, recipe=self.recipe_json(),
                    frontier=[self.row(r) for r in self.frontier], results=self.rows(), pruned=self.pruned())


def plan(w: Workload, budget: Budget, executor: str = "local", workers: int | None = None,
         address: str | None = None, progress: Callable[[int, int], None] | None = None) -> Plan:
    """Search every deployment shape within `budget` for workload `w`."""
    w.check()
    budget.check()
    check_engine(w, budget)
    budget = budget.for_model(w.model)
    t0 = time.perf_counter()
    prompt_q = prompt_quantile(w, w.targets.attainment)
    tasks = [(s, w, budget, prompt_q) for s in shapes(w, budget)]
    if not tasks:
        raise ValueError(f"no deployment of {w.model} fits the chosen GPUs within {budget.max_gpus} GPUs: "
                         f"raise the GPU budget or add a GPU type with more memory")
    results = run_tasks(search_task, tasks, executor, workers, address, progress)
    return Plan(w, budget, results, time.perf_counter() - t0, executor)


def check_engine(w: Workload, budget: Budget) -> None:
    """Refuse an engine none of the budget's GPU types runs (TensorRT-LLM on AMD GPUs alone)."""
    gpus = [catalog.get_gpu(g) for g in budget.gpu_types]
    if not any(engines.runs_on(w.engine.name, g) for g in gpus):
        engines.check_gpu(w.engine.name, gpus[0])


class StepMeter:
    """Engine steps a page's searches may still take, shared by every search it runs."""

    def __init__(self, steps: float = math.inf):
        self.left = steps


def cheapest(w: Workload, budget: Budget, meter: StepMeter | None = None) -> tuple[ShapeResult | None, list[ShapeResult]]:
    """The cheapest passing deployment alone, by branch and bound in this process: shapes in the
    order of the least they could cost, each searched only below the best cost found so far. Also
    returns every shape searched (the nearest miss is among them when nothing passes). A page's
    searches stop once their simulations have taken what `meter` allows."""
    meter = meter or StepMeter()
    w.check()
    budget.check()
    check_engine(w, budget)
    budget = budget.for_model(w.model)
    prompt_q = prompt_quantile(w, w.targets.attainment)
    best, best_key, searched = None, None, []
    for shape in sorted(shapes(w, budget), key=budget.preference):
        if meter.left < 0:
            break
        if best_key is not None and budget.preference(shape) > best_key:
            continue  # even its smallest size would not beat the answer found
        limit = best_key[0] if best_key else math.inf
        r = search_shape(shape, w, budget, prompt_q, max_cost=limit, rate_search=False)
        searched.append(r)
        meter.left -= sum(o.steps for o in r.tried)
        if r.meets and (best is None or rank(r, w, budget) < rank(best, w, budget)):
            best, best_key = r, budget.preference(r.deployment)
    return best, searched
