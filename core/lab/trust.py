"""How far to trust the Lab's figures.

Two readings, next to the headline metrics:
- the error of the simulator on the real serving run (vLLM's or SGLang's) nearest the user's setting
  (same GPU family, nearest model size, nearest load), from core/data/validation_errors.json, which
  calibration/real_runs.py --write writes with each run's source;
- a band on p99 TTFT and p99 TPOT: the same deployment re-simulated with every engine step
  scaled by the step-time model's error spread (the 10th and 90th percentiles of its errors on
  points it was not fitted to), two extra runs, memoised; for a GPU family no validated run covers,
  both edges move out by the largest end-to-end error measured on a family the cost model was not
  fitted on (family_margin).
"""
from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from ..physics import catalog, costmodel
from ..serving import engines
from ..serving.simulate import SimConfig, simulate
# the error spread lives below the planner, which checks its answers at the slower edge
from ..serving.stepspread import (QUANTILES, VALIDATION_FILE, engine_margin, family_margin, run_engine,  # noqa: F401
                                  step_errors, step_scales, validation, within_range)
from ..text import fmt_ms

# the vLLM V1 runs' decode time per token and a public run's mean TPOT are the same figure
METRIC_WORDS = {"E2E mean ms": "mean E2E", "TTFT mean ms": "mean TTFT", "decode ms/token": "mean TPOT",
                "TPOT mean ms": "mean TPOT", "TTFT median ms": "median TTFT"}


@lru_cache(maxsize=64)
def rerun(cfg: SimConfig, scale: float) -> dict:
    """p99 TTFT and TPOT (ms) and whether the queue stays bounded, with steps `scale` times as long."""
    s = simulate(replace(cfg, step_scale=scale)).summary
    return dict(ttft=float(s["ttft_ms"]["p99"]), tpot=float(s["tpot_ms"]["p99"]), stable=bool(s["stable"]))


def band(cfg: SimConfig, summary: dict, scales: tuple[float, float]) -> dict:
    """The range of p99 TTFT and TPOT over the fitted steps and the two scaled ones (the fitted
    model is itself inside the spread, so the band holds the simulated figure), and the smallest
    slow-down at which the queue grows without bound, if one does."""
    point = dict(ttft=float(summary["ttft_ms"]["p99"]), tpot=float(summary["tpot_ms"]["p99"]),
                 stable=bool(summary["stable"]))
    runs = [(1.0, point)] + [(s, rerun(cfg, s)) for s in scales]
    out = {k: (min(r[k] for _, r in runs), max(r[k] for _, r in runs)) for k in ("ttft", "tpot")}
    unstable = [s for s, r in runs if not r["stable"]]
    stable = [r for s, r in sorted(runs, key=lambda sr: sr[0]) if r["stable"]]
    out.update(point=point, scales=scales, overload_scale=min(unstable) if unstable else None,
               stable_low=stable[0] if stable else None)
    return out


def size_distance(model: catalog.Model, params_b: float, moe: bool) -> float:
    """How far two models are apart in size class: a decade of parameters counts 1, dense against
    MoE counts 1."""
    return abs(math.log10(model.params() / 1e9 / params_b)) + (1.0 if model.is_moe != moe else 0.0)


def nearest(gpu: catalog.GPU, model: catalog.Model, load: float, runs: list[dict] | None = None,
            engine: str = "vllm") -> dict:
    """The validated run nearest the setting: same GPU family first (a different family counts
    more than any size or load gap in the set; the family whose measured factors it carries, half
    as much), then the model's size class and the engine (another engine's run counts as a decade
    of size apart), then the load."""
    runs = validation()["runs"] if runs is None else runs
    if not runs:
        raise ValueError("no validated runs: run calibration/real_runs.py --write --logo")
    kin = costmodel.families()["families"].get(gpu.arch, {}).get("same_as")

    def distance(r):
        family = 0.0 if gpu.arch and gpu.arch == r["arch"] else 2.0 if kin and kin == r["arch"] else 4.0
        other = 0.0 if run_engine(r) == engine else 2.0
        return family + 2.0 * size_distance(model, r["params_b"], r["moe"]) + other + abs(load - r["load"])
    return min(runs, key=distance)


def _off(e: float) -> str:
    """An error in words: '12.6% under' (the simulator below the measurement), '5.5% over'."""
    return f"{abs(e) * 100:.1f}% {'under' if e < 0 else 'over'}"


def _off_short(e: float) -> str:
    """An error in words short enough for a metric card's figure: whole percents from 10% up."""
    pct = abs(e) * 100
    return f"{pct:.0f}% {'under' if e < 0 else 'over'}" if round(pct, 1) >= 10 else _off(e)


def _steps(scale: float) -> str:
    return f"{abs(scale - 1) * 100:.1f}% {'faster' if scale < 1 else 'slower'}"


def _range(lo: float, hi: float, fmt) -> str:
    """'63 – 76 ms', or '950 ms – 1.20 s' across units: short, as a metric card's figure reads best on one line."""
    a, b = fmt(lo), fmt(hi)
    if a == b:
        return a
    unit = a.split(" ")[-1]
    return f"{a.removesuffix(' ' + unit)} – {b}" if b.endswith(" " + unit) else f"{a} – {b}"


def _tpot(ms: float) -> str:
    return f"{ms:.1f} ms"


def _short_gpu(name: str) -> str:
    """'NVIDIA H200 SXM 141GB' -> 'H200', 'AMD Instinct MI300X' -> 'MI300X': a card's note has room for
    the chip's name only."""
    words = name.replace("NVIDIA ", "").replace("AMD Instinct ", "").split()
    return words[0] if words else name


def _source(src: dict) -> str:
    if src.get("url"):
        return src["url"]
    return f"{src.get('repo', '')} {src.get('path', '')} @ {str(src.get('commit', ''))[:8]}".strip()


def trust(cfg: SimConfig, summary: dict, data: dict | None = None) -> list[dict]:
    """Three metric cards (label, value, note, help): the p99 TTFT and TPOT bands and the nearest
    validated run's errors."""
    data = data or validation()
    errors = step_errors(data)
    fast, slow = step_scales(errors)
    gpu, model = catalog.get_gpu(cfg.gpu), catalog.get_model(cfg.model)
    margin, seen = family_margin(gpu, data["runs"])
    engine = engines.served_by(cfg)
    unseen, measured = engine_margin(engine, data)
    fitted_fast, fitted_slow = fast, slow
    fast, slow = (within_range(fast / (1 + margin) / (1 + unseen)),
                  within_range(slow * (1 + margin) * (1 + unseen)))
    b = band(cfg, summary, (fast, slow))
    spread = f"steps {_steps(fast)} to {_steps(slow)}"
    n_step, n_dec = (len(v) for v in data["step_time_errors"].values())
    why = (f"The same deployment re-simulated with every engine step {(1 - fast) * 100:.0f}% faster and "
           f"{(slow - 1) * 100:.0f}% slower than the cost model says: the 10th and 90th percentiles of its "
           f"errors on step times it was not fitted to ({n_step} H200 step times each predicted by a fit that did "
           f"not see it, {n_dec} real vLLM runs' decode time per token)")
    if margin:
        own = seen == gpu.arch  # its family's own public runs, each a check; else another's carry
        # a card's note holds about 40 characters: "steps -27% to +31%: no Ada Lovelace run"
        spread = (f"steps −{(1 - fast) * 100:.0f}% to +{(slow - 1) * 100:.0f}%: "
                  + (f"{gpu.arch} public runs" if own else f"no {gpu.arch} run"))
        because = (f"only public runs cover {gpu.arch}: the largest error on those the cost model is checked "
                   f"against and was not fitted to (calibration/family_check.py)" if own else
                   f"no {gpu.arch} GPU has a validated run: the largest end-to-end error on {seen} GPUs, a family "
                   f"the cost model was not fitted on")
        why += (f", {(1 - fitted_fast) * 100:.0f}% and {(fitted_slow - 1) * 100:.0f}% on their own, each widened by "
                f"{margin:.1%} because {because}")
    if unseen:
        name = engines.name(engine)
        spread = (f"steps −{(1 - fast) * 100:.0f}% to +{(slow - 1) * 100:.0f}%: {name} public runs"
                  if not margin else spread + f", {name} public runs")
        why += (f", each widened {'again ' if margin else ''}by {unseen:.1%} because the simulator's constants were "
                f"fitted to no {name} run: the worst error of its {measured} (calibration/VALIDATION.md)")
    if within_range(fast / 2) == fast or within_range(slow * 2) == slow:  # an edge at the simulator's range
        why += ", where it stops at the simulator's range of steps half to twice the cost model's"
    why += ". The band is the range over those two runs and the simulated figure."
    cards = []
    for key, label, fmt in (("ttft", "p99 TTFT", fmt_ms), ("tpot", "p99 TPOT", _tpot)):
        value, note = _range(*b[key], fmt), spread
        extra = f" Simulated {label}: {fmt(b['point'][key])}."
        if b["overload_scale"] is not None and key == "ttft":
            # an overloaded run's TTFT grows with the requests simulated: its figure is no bound. Its TPOT
            # does not (a saturated batch decodes at a steady pace), so the TPOT band stands
            grows = b["overload_scale"]
            if b["stable_low"] is None:
                value, note = "growing", "queue grows across the spread"
                extra += " Even with the faster steps the queue grows without bound: no figure holds."
            else:
                value = f"{fmt(b['stable_low'][key])} – growing"
                note = (f"queue grows if steps are {_steps(grows)}" if grows > 1
                        else "queue grows at the fitted step times")
                extra += (f" With every step {grows:.2f} times as long as the fitted one the queue grows without "
                          "bound, so the upper end is no figure: it grows with the number of requests simulated.")
        cards.append(dict(label=f"{label} band", value=value, note=note, help=why + extra))
    load = float(summary["utilisation"])
    r = nearest(gpu, model, load, data["runs"], engine)
    shown = [m for m in METRIC_WORDS if m in r["errors"]]
    # the figure is the largest error, the one to plan with: a card's figure holds about 16 characters
    # on one line and its note about 40 at 1440 px (longer ones wrap); every error is in the help
    worst = max(shown[:2], key=lambda m: abs(r["errors"][m]))
    value = f"{METRIC_WORDS[worst].split()[-1]} {_off_short(r['errors'][worst])}"
    left = r.get("errors_model_left_out") or {}
    family = (f"same GPU family ({gpu.arch})" if gpu.arch == r["arch"]
              else f"no {gpu.arch or 'such'} GPU validated, nearest family {r['arch']}")
    if run_engine(r) != engine:  # the engine's own runs are further off in GPU family, size or load
        family += f"; a {engines.name(run_engine(r))} run, nearer than any of {engines.name(engine)}'s"
    help_ = (f"How far the simulator was over or under the measurement on the real run nearest this setting (the card "
             f"shows the largest of its errors): {family}; model "
             f"{r['model_name']} ({r['params_b']:g}B) against {model.name} ({model.params() / 1e9:.1f}B); "
             f"simulated load {r['load']:.0%} of capacity against {load:.0%} here. Run {r['id']} "
             f"({r['engine']} {r['engine_version']}, tp={r['tp']}, {r['workload']} workload; source: "
             f"{_source(r['source'])}). Errors: "
             + "; ".join(f"{METRIC_WORDS[m]} {_off(r['errors'][m])}" for m in shown)
             + (". With its model class left out of the fit: "
                + "; ".join(f"{METRIC_WORDS[m]} {_off(left[m])}" for m in METRIC_WORDS if m in left)
                if left else "")
             + (". The host constants were fitted to this run" if r["set"] == "held in"
                else ". This run was held out of the host constants' fit") + " (calibration/VALIDATION.md).")
    cards.append(dict(label="Nearest validated run", value=value,
                      note=f"{r['model_name']} on {_short_gpu(r['gpu_name'])}, load {r['load']:.0%}",
                      help=help_))
    return cards
