"""Calibrate the cost model from a measured benchmark run.

A serving benchmark measures latencies of whole requests, not of single steps, so it pins down
only the factors that set those latencies directly:

  eta_bw    the share of the datasheet HBM bandwidth the GPU reaches. Decode steps at serving batch
            sizes stream every weight and the batch's KV cache once per token: they are bound by
            memory bandwidth, so the median time per output token (or, without it, the median
            inter-token gap) fixes eta_bw.
  eta_gemm  the share of the datasheet tensor FLOP/s the GEMMs reach. A prompt's prefill runs its
            tokens through every weight at once, compute bound, so the median time to first
            token fixes eta_gemm.

Medians, not means or tails: the tails of a run are its queueing, which the simulation produces
itself from the arrivals. The other constants (per-layer kernel overhead, the engine's per-step
host time, link efficiency) add time to the same steps, so one run cannot tell them apart from the
two above: they keep the values fitted to measured step times (calibration/REPORT.md), and the two
factors absorb whatever else this deployment differs in. Each factor is found by bisection on its
logarithm (the metric falls as the factor rises), the two in turn until both settle.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..physics import catalog, costmodel, hardware
from .benchfile import BenchRun
from .replay import Comparison, comparison_rows, config_for, notes, simulated_metrics
from .simulate import SimConfig, simulate

FACTORS = {"eta_bw": (("tpot", "itl"), "decode: time per output token"),
           "eta_gemm": (("ttft",), "prefill: time to first token")}
BOUNDS = (0.02, 1.0)  # a fraction of the datasheet peak
ROUNDS, STEPS, TOLERANCE = 4, 16, 0.002


@dataclass
class Calibration:
    run: BenchRun
    config: SimConfig
    before: dict  # factor -> value
    after: dict
    targets: dict  # factor -> (metric, measured median ms)
    rows_before: list[dict]
    rows_after: list[dict]
    warnings: list[str]
    efficiency: costmodel.Efficiency
    notes: list[str]

    def comparison(self, after: bool = True) -> list[dict]:
        return self.rows_after if after else self.rows_before

    def to_json(self) -> dict:
        return dict(factors={k: dict(before=self.before[k], after=self.after[k], metric=self.targets[k][0],
                                     measured_median_ms=self.targets[k][1]) for k in self.after},
                    before=self.rows_before, after=self.rows_after, warnings=self.warnings, notes=self.notes)


def targets(run: BenchRun) -> dict:
    """factor -> (metric, measured median) for the factors this run can pin down."""
    out = {}
    for name, (metrics, _) in FACTORS.items():
        for m in metrics:
            v = run.measured.get(m, {}).get("p50")
            if v and v > 0:
                out[name] = (m, float(v))
                break
    if not out:
        raise ValueError("the run reports no median TTFT, TPOT or ITL, so there is nothing to calibrate against")
    return out


def fit(run: BenchRun, base: SimConfig, seed: int = 0) -> Calibration:
    """The factors that bring the simulated medians onto the measured ones, before and after."""
    cfg = config_for(run, base, seed)
    start = costmodel.efficiency_for(catalog.get_gpu(base.gpu))
    goal = targets(run)

    def metrics(eff):
        return simulated_metrics(simulate(cfg, eff).summary)

    eff = start
    for _ in range(ROUNDS):
        moved = False
        for name, (metric, want) in goal.items():
            new = _solve(lambda x: metrics(replace(eff, **{name: x}))[metric]["p50"], want, getattr(eff, name))
            moved |= abs(math.log(new / getattr(eff, name))) > TOLERANCE
            eff = replace(eff, **{name: new})
        if not moved:
            break
    before_m, after_m = metrics(start), metrics(eff)
    warnings = []
    for name, (metric, want) in goal.items():
        got = after_m[metric]["p50"]
        if abs(got / want - 1) > 0.02:
            bound = getattr(eff, name)
            side = "slower" if got > want else "faster"
            warnings.append(f"{name} stops at {bound:.3g}: even there the simulated median {metric.upper()} "
                            f"({got:.1f} ms) is {side} than measured ({want:.1f} ms). Check the GPU, tp and model; "
                            f"a run that reuses cached prompts (vLLM's prefix caching) prefills faster than any "
                            f"compute rate allows.")
    return Calibration(run, cfg, {k: getattr(start, k) for k in goal}, {k: getattr(eff, k) for k in goal}, goal,
                       comparison_rows(run.measured, before_m), comparison_rows(run.measured, after_m), warnings,
                       eff, notes(run))


def _solve(f, want: float, x0: float) -> float:
    """x in BOUNDS with f(x) = want, f falling as x rises; the nearer bound when there is none."""
    lo, hi = math.log(BOUNDS[0]), math.log(BOUNDS[1])
    g = lambda lx: math.log(f(math.exp(lx)) / want)
    if g(hi) >= 0:
        return BOUNDS[1]
    if g(lo) <= 0:
        return BOUNDS[0]
    for _ in range(STEPS):
        mid = (lo + hi) / 2
        v = g(mid)
        if abs(v) < TOLERANCE / 4:
            return math.exp(mid)
        lo, hi = (mid, hi) if v > 0 else (lo, mid)
    return math.exp((lo + hi) / 2)


def profile(cal: Calibration, name: str) -> dict:
    """The calibration as a named hardware profile (physics.hardware.load_profile reads it back)."""
    gpu = catalog.get_gpu(cal.config.gpu)
    return hardware.profile_dict(gpu, name, cal.after, dict(
        source="benchmark run", tool=cal.run.tool, model_id=cal.run.model_id, line=cal.run.line,
        deployment=dict(gpu=cal.config.gpu, model=cal.config.model, tp=cal.config.tp, gpus=cal.config.gpus,
                        policy=cal.config.policy, max_batched_tokens=cal.config.max_batched_tokens,
                        max_seqs=cal.config.max_seqs),
        **cal.to_json()))


def comparison_after(cal: Calibration) -> Comparison:
    res = simulate(cal.config, cal.efficiency)
    return Comparison(cal.run, cal.config, res, cal.rows_after, cal.notes)
