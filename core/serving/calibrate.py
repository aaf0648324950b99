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
from dataclasses import dataclass, field, replace

from ..physics import catalog, costmodel, hardware
from . import replay
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
    bound: dict = field(default_factory=dict)  # factor -> "upper" or "lower": the bound its fit stopped at

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
    warnings, bound = [], {}
    for name, (metric, want) in goal.items():
        got = after_m[metric]["p50"]
        if abs(got / want - 1) > 0.02:
            value = getattr(eff, name)
            bound[name] = "upper" if value >= BOUNDS[1] else "lower" if value <= BOUNDS[0] else None
            warnings.append(_unreached(name, metric, want, got, bound[name], cfg, eff, run,
                                       decode_short=bound.get("eta_bw") == "upper"))
    return Calibration(run, cfg, {k: getattr(start, k) for k in goal}, {k: getattr(eff, k) for k in goal}, goal,
                       comparison_rows(run.measured, before_m), comparison_rows(run.measured, after_m), warnings,
                       eff, notes(run), bound)


# what a factor's bound is, in the hardware's words
LIMITS = {("eta_bw", "upper"): "the datasheet's HBM bandwidth: no GPU streams its memory faster",
          ("eta_gemm", "upper"): "the datasheet's peak FLOP/s: no GPU computes faster",
          ("eta_bw", "lower"): "2% of the datasheet's HBM bandwidth: slower than any GPU that works",
          ("eta_gemm", "lower"): "2% of the datasheet's peak FLOP/s: slower than any GPU that works"}
UNBOUNDED = 1e3  # a factor this far above the datasheet: that part of the step takes no time at all


def _unreached(name, metric, want, got, bound, cfg, eff, run, decode_short=False) -> str:
    """Why the fit could not bring the simulated median onto the measured one: the bound it stopped
    at, what that bound means, and what the replay's own parts account for (each one measured by
    simulating without it), or that the gap is unexplained."""
    def median(e=eff, c=cfg):
        return simulated_metrics(simulate(c, e).summary)[metric]["p50"]

    what = metric.upper()
    head = (f"{name} stopped at its {bound} bound, {BOUNDS[bound == 'upper']:.3f} ({LIMITS[name, bound]}), and the "
            if bound else f"{name} did not settle, and the ")
    head += f"simulated median {what} is still {got:.1f} ms against {want:.1f} ms measured"
    if bound != "upper":  # simulated too fast even on a crippled GPU: nothing in the GPU explains it
        return (head + ". This replay cannot explain the gap: a GPU that slow would be broken, so the time went "
                "elsewhere (a queue or network in front of the server, a server busy with other work or still "
                "warming up).")
    if name == "eta_bw":
        return head + ". " + _decode_gap(want, median(replace(eff, eta_bw=UNBOUNDED)), got, cfg, run)
    return head + ". " + _prefill_gap(want, got, median, cfg, eff, run, decode_short)


def _decode_gap(want, fixed, got, cfg, run) -> str:
    """A decode step slower than the measurement even at the datasheet's bandwidth."""
    said = replay.said_deployment(run).get("tp")
    out = (f"Streaming the weights and KV cache takes {got - fixed:.1f} ms of each output token at that bandwidth "
           f"and the rest of a step (kernel launches, the engine's host time, compute) {fixed:.1f} ms")
    if fixed >= want:
        return out + (": the rest alone is above the measurement, so this run's per-step time is shorter than the "
                      "one this replay assumes (fitted to vLLM 0.15 runs on H100s and H200s), and the gap is "
                      "unexplained by the bandwidth.")
    hint = (f"; {said[1]} says tp {said[0]}, not tp {cfg.tp}" if said and said[0] != cfg.tp else "")
    return out + (f". The measured {want:.1f} ms needs each GPU to stream fewer bytes per token than tp {cfg.tp} on "
                  f"this GPU does: a higher tp (each GPU holds 1/tp of the weights), another GPU, or fp8 or int4 "
                  f"weights{hint}.")


def _prefill_gap(want, got, median, cfg, eff, run, decode_short) -> str:
    """A first token later than the measurement even at the datasheet's FLOP/s: how much of it is
    prefill compute, and how much each other part of the replay holds (simulated without it)."""
    free = median(replace(eff, eta_gemm=UNBOUNDED))
    if free <= want:
        return (f"Prefill compute is {got - free:.1f} ms of it (with prefill infinitely fast: {free:.1f} ms), so this "
                f"run prefilled faster than the datasheet allows: its prompts were probably cached (vLLM's prefix "
                f"caching skips a repeated prompt's prefill, and a result file records no prompts), or the GPU, tp "
                f"or model differ.")
    out = [f"Prefill compute, the part eta_gemm scales, is only {max(got - free, 0):.1f} ms of it (with prefill "
           f"infinitely fast: {free:.1f} ms), so neither a faster GPU nor cached prompts would close the gap."]
    now, c = got, cfg
    if cfg.async_scheduling:
        c = replace(c, async_scheduling=False)
        t = median(eff, c)
        said = replay.said_deployment(run).get("async_scheduling")
        advice = ("if the server ran a vLLM before 0.14, replay it without async scheduling" if not said else
                  f"{said[1]} says vLLM 0.14 or later, which does" if said[0] else
                  f"{said[1]} says a vLLM before 0.14, which schedules each step after the last: replay it without "
                  f"async scheduling")
        out.append(f"Async scheduling accounts for {now - t:.1f} ms: the replay plans each step while the last runs, "
                   f"as vLLM 0.14 and later do, so a new request waits one step more (without it: {t:.1f} ms); "
                   f"{advice}.")
        now = t
    if cfg.api_server and eff.api_ms > 0:
        c = replace(c, api_server=False)
        t = median(eff, c)
        out.append(f"The API server's time is {now - t:.1f} ms of it (fitted to vLLM 0.15 runs; without it: "
                   f"{t:.1f} ms).")
        now = t
    if now > want * 1.02 and decode_short:
        out.append(f"The remaining {now - want:.1f} ms is in the decode steps a new request waits behind, too slow "
                   f"here as well (eta_bw's bound).")
    elif now <= want * 1.02:
        out.append("Without these parts the replay reaches the measurement.")
    else:
        out.append(f"The remaining {now - want:.1f} ms is unexplained by this replay.")
    return " ".join(out)


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
