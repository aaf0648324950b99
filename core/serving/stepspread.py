"""The step-time model's error spread (core/data/validation_errors.json, written by
calibration/real_runs.py --write): how much longer or shorter real engine steps may be than the
cost model says. The Lab's trust band (core/lab/trust.py) re-simulates at its edges; the planner's
headroom rule checks every answer at its slower edge. Both edges move out on a GPU family no
validated run covers (family_margin), and for an engine no serving run covers (engine_margin)."""
from __future__ import annotations

import json
from functools import lru_cache

import numpy as np

from .. import DATA, bounds
from ..physics import catalog

VALIDATION_FILE = DATA / "validation_errors.json"
QUANTILES = (0.1, 0.9)  # the band spans the middle 80% of the step-time errors


@lru_cache(maxsize=1)
def validation() -> dict:
    return json.loads(VALIDATION_FILE.read_text())


def step_errors(data: dict | None = None) -> np.ndarray:
    """Predicted / measured - 1 of step times the model was not fitted to (both kinds pooled)."""
    d = (data or validation())["step_time_errors"]
    return np.array([e for kind in d.values() for e in kind], dtype=float)


def step_scales(errors: np.ndarray | None = None, quantiles: tuple[float, float] = QUANTILES) -> tuple[float, float]:
    """(faster, slower): real step time over the modelled one at the spread's quantiles. An error e
    (predicted / measured - 1) means the real step takes 1 / (1 + e) of the modelled one."""
    e = step_errors() if errors is None else np.asarray(errors, dtype=float)
    if len(e) == 0:
        raise ValueError("no step-time errors to take a spread from: run calibration/real_runs.py --write --logo")
    low, high = np.quantile(e, quantiles)
    return 1.0 / (1.0 + high), 1.0 / (1.0 + low)


def family_margin(gpu: catalog.GPU, runs: list[dict] | None = None) -> tuple[float, str]:
    """(how much further out both edges of the band go, the family that error was measured on): 0
    for a GPU family a fitted validated run covers; the worst error of its public runs for a family
    only public runs cover (calibration/family_check.py's checks, the runs a family factor was fitted to
    left out: MI300X, B200); else carried_margin."""
    runs = validation()["runs"] if runs is None else runs
    # a mixture's checks at a fixed concurrency (moe_check) test the MoE layer, not the carry onto a family
    own = [r for r in runs if gpu.arch and r["arch"] == gpu.arch and not r.get("moe_check")]
    if own and not all(r.get("family_check") for r in own):
        return 0.0, ""
    if own:
        return max(abs(e) for r in own for e in r["errors"].values()), gpu.arch
    return carried_margin(runs)


def carried_margin(runs: list[dict] | None = None) -> tuple[float, str]:
    """The largest end-to-end error of the runs on a family the cost model was not fitted on,
    predicted with the fitted fractions carried unchanged (its constants come from H200 step times
    and carry to another family as fractions of its datasheet: how wrong that carry was, where it
    was measured, before that family's own factor), and that family."""
    runs = validation()["runs"] if runs is None else runs
    fitted = catalog.get_gpu("h200").arch

    def e2e(r):
        return r.get("errors_family_carried", r["errors"]).get("E2E mean ms")
    # a family_check run's error is with its family's own measured factors, not the carry
    carried = [r for r in runs if r["arch"] != fitted and not r.get("family_check") and e2e(r) is not None] or \
        [r for r in runs if e2e(r) is not None]
    if not carried:
        return 0.0, ""
    worst = max(carried, key=lambda r: abs(e2e(r)))
    return abs(e2e(worst)), worst["arch"]


def within_range(scale: float) -> float:
    """A step-time scale held within the simulator's range (bounds.json step_scale: half to twice the
    cost model's): where an unvalidated GPU family's and engine's margins compound beyond it, the
    band and the planner's check stop at its edge."""
    limits = bounds.TABLE["step_scale"]
    return min(max(scale, limits["min"]), limits["max"])


def run_engine(r: dict) -> str:
    """The engine of a validated run, as the simulator names it (vLLM's forks and builds are vLLM)."""
    names = {"SGLang": "sglang", "vLLM": "vllm", "TensorRT-LLM": "trtllm"}
    return next((e for prefix, e in names.items() if r["engine"].startswith(prefix)), r["engine"])


def engine_margin(engine: str, data: dict | None = None) -> tuple[float, str]:
    """(how much further out both edges of the band go for a serving engine, what that error was
    measured on), as family_margin for a GPU family: 0 where a run its constants were fitted to
    validates it (vLLM, SGLang); where only public serving runs check it, their worst error
    ("serving runs"); else the worst error of its other public checks (TensorRT-LLM's offline
    throughput: validation_errors.json engine_checks)."""
    data = data or validation()
    own = [r for r in data["runs"] if run_engine(r) == engine]
    if any(r["set"] == "held in" for r in own):
        return 0.0, ""
    if own:
        return max(abs(e) for r in own for e in r["errors"].values()), f"{len(own)} public serving runs"
    checks = data.get("engine_checks", {}).get(engine)
    if checks:
        return float(checks["worst_abs_error"]), f"{checks['metrics']} offline throughput checks"
    return carried_margin(data["runs"])[0], "no run of its own"
