"""Public runs on GPU families the step times were not measured on, replayed through the command line.

usage: python calibration/family_check.py [--fit {gemv,attention,decode} FAMILY] [--offline]

Each run of calibration/family_runs.json that carries a `replay` is simulated with the command it
gives (`python -m core simulate ...`, exactly as a user would type it: the run's GPU, model, dtype,
tp, lengths and load, and the engine settings the run used, or vLLM's own defaults for that GPU
where the source says none) and each measured metric is set beside the simulated one. AMD's MI300X
runs check the CDNA 3 factors of core/data/gpu_families.json, which come from microbenchmarks
(calibration/CAUSES.md section 7), bar one: its August 2025 sweep of batch sizes (vLLM 0.10.0, V1),
tagged `fit: decode`, is what `--fit decode 'CDNA 3'` fits the link rate of a decoding sequence's
all-reduced bytes to; the same sweep on the January 2025 build checks it. AccelMark's runs decode one request at
a time with one harness on every GPU: those on Ampere and Ada GPUs tagged `fit: gemv` are what
`--fit gemv` fits a family's weight stream in a one-token step to (its matrix-vector products), those
tagged `fit: attention` (prefills of 28,650-token prompts) what `--fit attention` fits its prefill
attention's rate to; the H100 and H200 ones check the fitted family in the same harness. The rest check without
a fit: an A100 80GB serving Qwen2-7B with vLLM 0.10.1.1 from one prompt to 200 sent at once (TPOT; TTFT only
where the server's prefix cache hit under 10% of the prompts) and Qwen3-32B with vLLM 0.11.0, 500 prompts of 2,000 and
4,000 tokens at once (GPUStack's performance lab), and SGLang 0.3.0 serving Llama-3.1-8B on an
A100 (its profile, `--engine sglang`) and SGLang 0.5.6 serving Llama-3.1-70B on eight A100s at 1 to 100 clients (the
SGLang cookbook, replayed with the requests its benchmark drew and what the server had cached of them:
calibration/bench_serving.py), and four B200s serving Llama-3.1-70B with vLLM's V1 engine at a Poisson rate
(vLLM PR #20759's baseline). --offline replays calibration/offline_runs.json instead: TensorRT-LLM's own offline
throughput at large batches on B200 (FP4) and H200 and H100 (FP8), another engine's runs that check the cost model
where a batch of thousands is compute bound, with TensorRT-LLM's profile (--engine trtllm) at the limits
the simulator takes from their lengths where a run states none (calibration/trtllm_replay.py).
calibration/real_runs.py --write adds both tables to calibration/VALIDATION.md.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench_serving  # noqa: E402
from core.cli.main import simulation_of  # noqa: E402
from core.physics import catalog, costmodel  # noqa: E402
from core.serving.simulate import simulate  # noqa: E402

RUNS = ROOT / "calibration" / "family_runs.json"
OFFLINE = ROOT / "calibration" / "offline_runs.json"

# a replay's metric: how to read it from a simulation's summary
METRICS = {
    "E2E mean ms": lambda s: s["e2e_s"]["mean"] * 1000.0,
    "TTFT mean ms": lambda s: s["ttft_ms"]["mean"],
    "TPOT mean ms": lambda s: s["tpot_ms"]["mean"],
    "TPOT p50 ms": lambda s: s["tpot_ms"]["p50"],
    "TTFT p50 ms": lambda s: s["ttft_ms"]["p50"],
    "E2E p50 ms": lambda s: s["e2e_s"]["p50"] * 1000.0,
    "throughput req/s": lambda s: s["throughput_req_s"],
    "output tok/s per GPU": lambda s: s["completed_tok_s"] / s["gpus"],
}


def replays(path: Path = RUNS, eff_of=None, fit: str | None = None) -> list[dict]:
    """Every replayed metric: run id, GPU, engine version, command, metric, measured, simulated and
    the signed error (simulated / measured - 1). eff_of(gpu) gives the cost-model constants to run a
    GPU with (None: its own, costmodel.efficiency_for); `fit` keeps only the runs fitted as it names."""
    rows = []
    entries = json.loads(path.read_text())["entries"]
    by_id = {run["id"]: run for run in entries}
    for run in entries:
        if fit is not None and run.get("fit") != fit:
            continue
        for r in run.get("replay", []):
            cfg = simulation_of(r["command"])
            # a benchmark whose draw is known replays its own requests, and what the server had cached of them
            drawn = bench_serving.replay(run, by_id, cfg) if "bench_lengths" in run else None
            summary = simulate(cfg, eff_of(catalog.get_gpu(cfg.gpu)) if eff_of else None, workload=drawn).summary
            measured = float(run["measured"][r["measured"]])
            simulated = float(METRICS[r["metric"]](summary))
            users = cfg.workload.concurrency
            rows.append(dict(id=run["id"], gpu=run["gpu"], engine=run["engine_version"], command=r["command"],
                             metric=r["metric"], measured=measured, simulated=simulated,
                             error=simulated / measured - 1.0, label=r.get("label", ""), source=run["source"],
                             engine_name=run["engine"], gpu_id=cfg.gpu, model_id=cfg.model, tp=cfg.tp,
                             workload=(f"offline batch of {users}" if not cfg.api_server else f"{users} clients"),
                             load=float(summary["utilisation"]), stable=bool(summary["stable"]),
                             preemptions=int(summary["preemptions"]),
                             fitted=run.get("fit") is not None))
    return rows


# The ceilings a fitted factor stops at: no kernel beats what its resource was measured to reach on an A100.
# gpt-fast's A100 80GB: 'Empirically, seems like peak bandwidth is about 1700 GB/s' (pytorch-labs/gpt-fast@0f925b5
# README.md; BabelStream measures 1.70 TB/s on it too, calibration/gpu_families.json); FlashAttention-2 'reaching
# 50-73% of the theoretical maximum FLOPs/s on A100' (arXiv 2307.08691, abstract)
A100_STREAM_CEILING_TBPS = 1.70
A100_ATTENTION_CEILING = 0.73


# --fit NAME FAMILY: the constant fitted to the runs tagged `fit: NAME`, and the factors on it the grid tries
# (from the fitted constants): up to what an A100 was measured to reach, or, for a rate that nothing measured
# bounds from below, down from the fitted family's
def up_to(ceiling: float) -> list[float]:
    return [round(1.0 + 0.01 * i, 2) for i in range(int((ceiling - 1.0) / 0.01 + 1e-9) + 1)]


def gemv_grid(eff) -> list[float]:
    a100 = catalog.get_gpu("a100-80gb")
    return up_to(A100_STREAM_CEILING_TBPS / (a100.hbm_tbps * costmodel.family_scaled(eff, a100).eta_bw))


def share_grid(eff) -> list[float]:
    return [round(0.05 + 0.01 * i, 2) for i in range(26)] + [round(0.35 + 0.05 * i, 2) for i in range(14)]


FITS = {
    "gemv": ("gemv_bw_eff", "a one-token step's matrix-vector stream, on eta_bw's", gemv_grid),
    "attention": ("eta_attn", "prefill attention's share of the tensor cores' peak, on the fitted family's",
                  lambda eff: up_to(A100_ATTENTION_CEILING / eff.eta_attn)),
    "decode": ("decode_allreduce_share", "the link rate a decoding sequence's all-reduced bytes take, on link_eff's",
               share_grid),
}


def fit_factor(fit: str, family: str, quiet: bool = False) -> tuple[float, list[dict], list[dict]]:
    """A GPU family's factor on one cost-model constant (FITS), on a grid against its runs tagged with
    the fit (median |log error| of their replayed metric). The family's other factors stay as they
    are. Returns (factor, rows at 1, rows at the factor)."""
    name, _, grid_of = FITS[fit]
    fitted = costmodel.fitted()
    kernels = {arch: entry.get("same_as", arch) for arch, entry in costmodel.families()["families"].items()}
    members = {g.id for g in map(catalog.get_gpu, catalog.gpu_ids()) if kernels.get(g.arch) == family}

    def eff_of(f):
        def of(gpu):
            own = costmodel.family_scaled(fitted, gpu)
            return replace(own, **{name: getattr(fitted, name) * f}) if gpu.id in members else own
        return of

    def score(f):
        rows = [r for r in replays(eff_of=eff_of(f), fit=fit) if r["gpu_id"] in members]
        return (float(np.median([abs(np.log1p(r["error"])) for r in rows])) if rows else 0.0), rows

    grid = grid_of(fitted)
    scored = {f: score(f) for f in grid}
    if not scored[1.0][1]:
        raise ValueError(f"no public run on a {family} GPU tagged fit: {fit} to fit {name} to")
    best = min(grid, key=lambda f: scored[f][0])
    if not quiet:
        for f in grid:
            print(f"  {family} {name} x {f:.2f}: median |log error| {scored[f][0]:.4f}", flush=True)
        print(f"  grid: x {grid[0]:.2f} to x {grid[-1]:.2f}")
    return best, scored[1.0][1], scored[best][1]


def write_factor(family: str, name: str, value: float) -> Path:
    """Set a GPU family's factor on one constant in core/data/gpu_families.json (its how and evidence kept)."""
    path = ROOT / "core" / "data" / "gpu_families.json"
    raw = json.loads(path.read_text())
    raw["families"].setdefault(family, {}).setdefault(name, {})["value"] = value
    path.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
    costmodel.families.cache_clear()
    return path


FAMILY_HEADER = ("**Public runs on other GPU families (calibration/family_runs.json, replayed by "
                 "`python calibration/family_check.py` with the command each gives)**: AMD MI300X (vLLM on ROCm): the "
                 "batch-size sweep of Llama-3.1-70B and 405B on the August 2025 build (vLLM 0.10.0, V1, its prompts from "
                 "the prefix cache) fits the link rate of a decoding sequence's all-reduced bytes (`--fit decode "
                 "'CDNA 3'`: fitted = yes), the same sweep on the January 2025 build (V0) and AMD's other runs check it; "
                 "AccelMark's one request at a time, one harness on every GPU: the Ampere and Ada "
                 "one-GPU decodes fit their family's matrix-vector stream (`--fit gemv Ampere`), the A100 first tokens of "
                 "28,650-token prompts its prefill attention (`--fit attention Ampere`): fitted = yes; the eight-GPU runs and "
                 "the H100 and H200 ones check them and the fitted family in the same harness; an A100 80GB serving Qwen2-7B "
                 "with vLLM 0.10.1.1 (V1) from one prompt to 200 at once and Qwen3-32B with vLLM 0.11.0, 500 prompts of 2,000 "
                 "and 4,000 tokens at once, and SGLang 0.3.0 serving Llama-3.1-8B on an A100 "
                 "at 4 and 8 req/s (replayed with `--engine sglang`), SGLang 0.5.6 serving Llama-3.1-70B on eight A100s at 1 "
                 "to 100 clients (the SGLang cookbook; each run's own requests, seed 1's draw, and what its warm-up and the "
                 "earlier runs on the server left cached: calibration/bench_serving.py), and four B200s serving "
                 "Llama-3.1-70B with vLLM's V1 engine at 1, 5 and 10 req/s, and GPUStack's TensorRT-LLM serving runs "
                 "(trtllm-serve 1.2.0rc1 and 1.0.0, replayed with `--engine trtllm`): Qwen3-8B on an H100 at 4 clients "
                 "beside the same page's vLLM and SGLang rows, Qwen3-32B on an H100 and DeepSeek-R1 on eight H200s with "
                 "every request at once (their output tokens a second and mean TPOT): checks, nothing fitted; the "
                 "Lab widens TensorRT-LLM's band by their worst error")
OFFLINE_HEADER = ("**TensorRT-LLM's offline throughput (calibration/offline_runs.json, replayed by `python "
                  "calibration/family_check.py --offline`)**: its performance overview's runs of DeepSeek-R1, gpt-oss, "
                  "Llama-3.3-70B and Qwen3-30B-A3B on B200, B300, GB200 and GB300 (FP4; the page marks B300 and GB300 "
                  "beta) and H200 and H100 (FP8) at 1K/1K, 1K/8K and 8K/1K "
                  "tokens, every request at once, and its DeepSeek-R1 blog's runs with the batch they give: another "
                  "engine, replayed with its profile (`--engine trtllm`: whole prompts in steps of their own, CUDA graphs "
                  "of decode batches only, a step with prompt tokens issued op by op, admission of a request only "
                  "while the pool holds it whole, a pool that takes 90% of the memory the weights leave and counts "
                  "a sliding-window layer whole) at the batch and token limits trtllm-bench runs a rank with "
                  "(core/serving/trtllm_bench.py; calibration/trtllm_replay.py); checks, nothing fitted")


def lines(rows: list[dict], header: str = FAMILY_HEADER) -> list[str]:
    """A section calibration/VALIDATION.md shows: one line a replayed metric, and the worst error
    of those nothing was fitted to."""
    if not rows:
        return []
    checks = [r for r in rows if not r["fitted"]] or rows
    worst = max(checks, key=lambda r: abs(r["error"]))
    out = [header, "",
           f"{len(rows)} metrics; worst of those not fitted {worst['error']:+.1%} ({worst['id']}, {worst['metric']}).",
           "", "| run | metric | measured | simulated | error | engine | fitted |", "|---|---|---|---|---|---|---|"]
    # an error as validation_errors.json keeps it (six places), so that the two read alike at a rounding edge
    for r in rows:
        engine = re.split(r" \(|, ", r["engine"])[0] if not r["engine"].startswith("unknown") else "vLLM, build not pinned"
        engine = f"SGLang {engine}" if r["engine_name"].startswith("SGLang") else engine
        out.append(f"| {r['id']}{' ' + r['label'] if r['label'] else ''} | {r['metric']} | {r['measured']:.2f} | "
                   f"{r['simulated']:.2f} | {round(r['error'], 6):+.1%} | {engine} | {'yes' if r['fitted'] else 'no'} |")
    return out + [""]


def main(argv: list[str]) -> int:
    if "--fit" in argv:
        fit, family = argv[argv.index("--fit") + 1:argv.index("--fit") + 3]
        if fit not in FITS:
            raise SystemExit(f"--fit takes one of {', '.join(FITS)}, not {fit!r}")
        f, before, after = fit_factor(fit, family)
        name, what, _ = FITS[fit]
        path = write_factor(family, name, f)
        for b, a in zip(before, after):
            print(f"  {b['id'][:58]:<58} {b['metric']:<12} measured {b['measured']:8.2f}  "
                  f"{b['error']:+6.1%} -> {a['error']:+6.1%}")
        print(f"{family}: {name} x {f:.2f} ({what}) written to {path.relative_to(ROOT)}")
        return 0
    for r in replays(OFFLINE if "--offline" in argv else RUNS):
        print(f"{r['id'][:62]:62s} {r['label']:4s} {r['metric']:16s} measured {r['measured']:10.2f} "
              f"simulated {r['simulated']:10.2f} {r['error']:+7.1%}{'  (fitted)' if r['fitted'] else ''}")
        print(f"    {r['command']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
