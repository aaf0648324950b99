"""Fit the step-time model's efficiency and overhead constants to measured H200 step times.

usage: python calibration/fit_costmodel.py [MEASUREMENTS.json ...] [--check]

Reads step times measured by calibration/step_times.py (default: calibration/h200_public.json),
fits the constants the measurements can identify by least squares on log(predicted/measured),
writes them to core/data/costmodel_fit.json and a per-point report to calibration/REPORT.md.
With --check it only prints the current constants' errors.

The constants these measurements cannot see (tensor-parallel links, MoE kernels, the serving
engine's per-step time) keep the values and sources already in costmodel_fit.json.

Each point's leave-one-out error (predicted by a fit that did not see it) is stored with the fit:
the Lab scales step times by their spread to put a band on p99 TTFT and TPOT (core/lab/trust.py).
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.physics.catalog import get_gpu, get_model  # noqa: E402
from core.physics.costmodel import ENGINE_LAYER_KERNELS, FIT_FILE, Efficiency, fitted, steptime  # noqa: E402

# name, lower bound, upper bound (physically plausible ranges)
FITTED = [
    ("eta_bw", 0.5, 1.0),  # HBM read streams: fraction of datasheet bandwidth
    ("eta_gemm", 0.3, 1.0),  # large GEMMs: fraction of datasheet dense FLOP/s
    ("eta_attn", 0.2, 1.0),  # flash attention: fraction of datasheet dense FLOP/s
    ("cta_saturation", 0.1, 4.0),  # thread blocks per SM that saturate HBM in decode attention
    ("t_layer_us", 0.0, 200.0),  # per-layer small-kernel overhead inside a CUDA graph
    ("t_issue_decode_us", 20.0, 1000.0),  # eager host issue time per layer, decode path
    ("t_issue_prefill_us", 20.0, 1000.0),  # eager host issue time per layer, prefill path
]


# The per-layer GPU time of small kernels (t_layer_us) is fitted on the reference model; a serving
# engine runs fewer, fused kernels per layer. The time per kernel inside a CUDA graph (launch,
# ramp-up, tail) is the same, so vLLM's per-layer time is t_layer_us per reference kernel times
# vLLM's kernels (calibration/CAUSES.md section 6). Counted per decoder layer:
# reference (step_times.py Model.decode): rms_norm, qkv GEMM, K and V cache writes, SDPA, o GEMM,
#   residual add, rms_norm, gate-up GEMM, silu, mul, down GEMM, residual add = 13
# vLLM V1 Llama (torch.compile, full CUDA graph for decode): fused add+rms_norm, qkv GEMM, rotary,
#   reshape_and_cache_flash, flash attention and its split-KV combine, o GEMM, fused add+rms_norm,
#   gate-up GEMM, silu_and_mul, down GEMM = 11 (tensor-parallel all-reduces are timed apart)
KERNELS_REFERENCE_LAYER = 13
KERNELS_VLLM_LAYER = ENGINE_LAYER_KERNELS


def engine_layer_us(eff: Efficiency) -> float:
    return eff.t_layer_us / KERNELS_REFERENCE_LAYER * KERNELS_VLLM_LAYER


# H200 step times measured but never fitted, with their source: the fit is checked on them
HELD_OUT = [
    dict(model="llama-3.1-8b", phase="mixed", batch=32, ctx=1024, chunk=128, ms=8.8, cuda_graph=False,
         source="issue 14: a held-out H200 measurement of an eager mixed step (step_times.py --extra mixes "
                "attend over 1,024 tokens)"),
]


def load_runs(paths: list[Path]) -> tuple[list[dict], dict]:
    runs, rooflines = [], {}
    for path in paths:
        data = json.loads(path.read_text())
        rooflines[path.name] = data.get("roofline", {})
        for r in data["runs"]:
            if r["model"] in ("tiny",):
                continue
            runs.append(dict(r, file=path.name))
    return runs, rooflines


def predict(run: dict, eff: Efficiency) -> float:
    """Predicted ms of one measured run. The measurements hold one GPU's shard without the
    all-reduce, so the model's communication time is left out for tp > 1."""
    gpu, model, tp = get_gpu("h200"), get_model(run["model"]), int(run.get("tp", 1))
    phase = run["phase"]
    if phase == "decode":
        launch = "graph" if run.get("cuda_graph", True) else "eager"
        r = steptime(gpu, model, tp, decode_batch=run["batch"], context=run["ctx"], launch=launch, eff=eff)
    elif phase == "prefill":
        r = steptime(gpu, model, tp, prefill_tokens=run["tokens"], launch="eager", eff=eff)
    elif phase == "mixed":
        r = steptime(gpu, model, tp, decode_batch=run["batch"], context=run["ctx"], prefill_tokens=run["chunk"],
                     launch="eager", eff=eff)
    else:
        raise ValueError(f"unknown phase {phase}")
    return r["step_ms"] - r["comm_ms"]


def with_values(base: Efficiency, x) -> Efficiency:
    return dataclasses.replace(base, **{name: float(v) for (name, _, _), v in zip(FITTED, x)})


def log_errors(x, base, runs) -> np.ndarray:
    eff = with_values(base, x)
    return np.array([np.log(predict(r, eff) / r["ms"]) for r in runs])


def fit(base: Efficiency, runs: list[dict]) -> Efficiency:
    x0 = [getattr(base, n) for n, _, _ in FITTED]
    lo = [lo for _, lo, _ in FITTED]
    hi = [hi for _, _, hi in FITTED]
    x0 = np.clip(x0, lo, hi)
    sol = least_squares(log_errors, x0, bounds=(lo, hi), args=(base, runs), x_scale="jac")
    return with_values(base, sol.x)


def describe(run: dict) -> str:
    tp = f" tp{run.get('tp', 1)}" if run.get("tp", 1) > 1 else ""
    if run["phase"] == "decode":
        mode = "graph" if run.get("cuda_graph", True) else "eager"
        return f"{run['model']}{tp} decode B={run['batch']} ctx={run['ctx']} ({mode})"
    if run["phase"] == "prefill":
        return f"{run['model']}{tp} prefill {run['tokens']} tokens"
    return f"{run['model']}{tp} mixed B={run['batch']} ctx={run['ctx']} + chunk {run['chunk']}"


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv if not a.startswith("--")] or [ROOT / "calibration" / "h200_public.json"]
    check = "--check" in argv
    runs, rooflines = load_runs(paths)
    base = fitted()
    eff = base if check else fit(base, runs)
    eff = dataclasses.replace(eff, t_layer_engine_us=engine_layer_us(eff))

    errors = np.exp(log_errors([getattr(eff, n) for n, _, _ in FITTED], eff, runs)) - 1
    # leave-one-out: refit without each point and predict it (how the fit does on unseen points)
    loo = []
    if not check:
        for i in range(len(runs)):
            rest = runs[:i] + runs[i + 1:]
            e_i = fit(eff, rest)
            loo.append(predict(runs[i], e_i) / runs[i]["ms"] - 1)
    loo = np.array(loo)
    held = [(r, predict(r, eff) / r["ms"] - 1) for r in HELD_OUT]
    for r, e in held:
        print(f"held out: {describe(r)}: measured {r['ms']:.2f} ms, predicted {r['ms'] * (1 + e):.2f} ms ({e:+.1%})")

    med, worst = float(np.median(np.abs(errors))), float(np.max(np.abs(errors)))
    print(f"{len(runs)} points: median |error| {med:.1%}, max {worst:.1%}")
    if len(loo):
        print(f"leave-one-out: median |error| {np.median(np.abs(loo)):.1%}, max {np.max(np.abs(loo)):.1%}")
    for (name, _, _) in FITTED:
        print(f"  {name} = {getattr(eff, name):.4g}")
    print(f"  t_layer_engine_us = {eff.t_layer_engine_us:.4g} (derived: {KERNELS_VLLM_LAYER} of "
          f"{KERNELS_REFERENCE_LAYER} kernels per layer)")
    if check:
        return 0

    raw = json.loads(FIT_FILE.read_text())
    raw["constants"] = {k: round(v, 6) for k, v in dataclasses.asdict(eff).items()}
    raw["fit"] = {
        "measurements": [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p) for p in paths],
        "points": len(runs),
        "median_abs_error": round(med, 4),
        "max_abs_error": round(worst, 4),
        "leave_one_out_median_abs_error": round(float(np.median(np.abs(loo))), 4),
        "leave_one_out_max_abs_error": round(float(np.max(np.abs(loo))), 4),
        # signed predicted/measured - 1 of each point by a fit that did not see it (the Lab's band)
        "leave_one_out_errors": {describe(r): round(float(e), 4) for r, e in zip(runs, loo)},
        "held_out": {describe(r): {"measured_ms": r["ms"], "error": round(float(e), 4), "source": r["source"]}
                     for r, e in held},
        "fitted": [n for n, _, _ in FITTED],
        "script": "calibration/fit_costmodel.py",
    }
    FIT_FILE.write_text(json.dumps(raw, indent=1) + "\n")
    write_report(runs, errors, loo, eff, rooflines, med, worst, held)
    return 0


def write_report(runs, errors, loo, eff, rooflines, med, worst, held=()) -> None:
    gpu = get_gpu("h200")
    lines = [
        "# Step-time model: calibration report",
        "",
        "Written by `python calibration/fit_costmodel.py`; do not edit by hand.",
        "",
        f"Fitted on {len(runs)} measured H200 step times (`calibration/h200_public.json`: Llama-3.1-8B "
        "shapes, bf16, decode replayed through CUDA graphs unless marked eager, prefill eager).",
        "",
        f"- **median |error| {med:.1%}, max |error| {worst:.1%}** (targets, issue 14: median at most 8%, no held-out point worse than 35%)",
        f"- leave-one-out (each point predicted by a fit that did not see it): median |error| "
        f"{np.median(np.abs(loo)):.1%}, max {np.max(np.abs(loo)):.1%}",
    ]
    lines += [f"- held out (measured, never fitted): {describe(r)}: {r['ms']:.2f} ms measured, "
              f"{r['ms'] * (1 + e):.2f} ms predicted ({e:+.1%}); source: {r['source']}" for r, e in held]
    lines += [
        "",
        "## Fitted constants",
        "",
        "| constant | value | meaning |",
        "|---|---|---|",
    ]
    meaning = {
        "eta_bw": f"HBM read streams reach this fraction of the datasheet bandwidth ({gpu.hbm_tbps} TB/s on the H200 "
                  f"-> {gpu.hbm_tbps * eff.eta_bw:.2f} TB/s)",
        "eta_gemm": f"large GEMMs reach this fraction of the datasheet dense FLOP/s ({gpu.bf16_tflops:g} TFLOP/s -> "
                    f"{gpu.bf16_tflops * eff.eta_gemm:.0f})",
        "eta_attn": "flash attention reaches this fraction of the datasheet dense FLOP/s",
        "cta_saturation": f"decode attention saturates HBM at this many thread blocks per SM "
                          f"({eff.cta_saturation * gpu.sms:.0f} blocks on {gpu.sms} SMs); below that its "
                          f"bandwidth grows with the blocks ({gpu.hbm_tbps * eff.eta_bw / (eff.cta_saturation * gpu.sms) * 1e3:.0f} GB/s each)",
        "t_layer_us": "per-layer GPU time of small kernels (launch, ramp-up, tail) inside a CUDA graph, µs",
        "t_issue_decode_us": "eager mode: host time to issue one layer of a decode step, µs",
        "t_issue_prefill_us": "eager mode: host time to issue one layer of a prefill step, µs",
    }
    for name, _, _ in FITTED:
        lines.append(f"| `{name}` | {getattr(eff, name):.4g} | {meaning[name]} |")
    lines.append(f"| `t_layer_engine_us` | {eff.t_layer_engine_us:.4g} | derived, not fitted: vLLM's compiled layer "
                 f"runs {KERNELS_VLLM_LAYER} kernels where the reference layer runs {KERNELS_REFERENCE_LAYER}, at "
                 f"{eff.t_layer_us / KERNELS_REFERENCE_LAYER:.2f} µs each (`t_layer_us` / {KERNELS_REFERENCE_LAYER}) |")
    lines += [
        "",
        "Measured ceilings in the same run, for comparison: " + "; ".join(
            f"{k} = {v:.4g}" for f in rooflines.values() for k, v in f.items()) +
        f" (that is {rooflines and list(rooflines.values())[0].get('copy_TBps_read_plus_write', 0) / gpu.hbm_tbps:.1%} "
        f"of the datasheet bandwidth and "
        f"{rooflines and list(rooflines.values())[0].get('matmul_TFLOPs', 0) / gpu.bf16_tflops:.1%} of the datasheet FLOP/s).",
        "",
        "## Other GPUs: the stated rule",
        "",
        "Every other GPU gets the same constants, applied to its own datasheet: bandwidth and FLOP/s",
        "efficiencies as the same fractions of its datasheet peaks, decode attention saturating at the same",
        "number of thread blocks per SM, and the same per-layer and host overheads in microseconds (the",
        "software stack is the same). FP8 weights use the datasheet FP8 rate where the GPU has one.",
        "",
        "## Per point",
        "",
        "| run | measured ms | predicted ms | error | leave-one-out error |",
        "|---|---|---|---|---|",
    ]
    for i, (r, e) in enumerate(zip(runs, errors)):
        pred = r["ms"] * (1 + e)
        lo = f"{loo[i]:+.1%}" if len(loo) else ""
        lines.append(f"| {describe(r)} | {r['ms']:.2f} | {pred:.2f} | {e:+.1%} | {lo} |")
    (ROOT / "calibration" / "REPORT.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
