"""Check the fused-MoE kernel's grouped-GEMM rate against public MoE serving runs
(calibration/moe_runs.json), one weight format at a time.

The dense constants come from H200 step times (fit_costmodel.py) and the host ones from real vLLM runs
(real_runs.py), among them an MoE layer's fixed kernels and its experts' stream rate, fitted to the Mixtral
runs and this file's runs marked fit_moe_layer (small batches on Hopper); what a mixture of
experts adds is the grouped GEMMs' FLOP rate on full tiles as a share of the dense GEMMs'
(moe_gemm_eff; the padding of each expert's tokens to whole tiles and the kernel's scratch rows
are physics, not fitted). Each run is replayed as its benchmark ran it (vLLM 0.11's defaults on an
H100/H200: 1,024 sequences, an 8,192-token budget unless the serve command sets one; every
request due at once, or a closed loop at its concurrency), and for each weight format the rate
that minimises the mean squared log error of total token throughput (and of mean TPOT at a fixed
concurrency) over its runs is found: 16-bit weights (moe_gemm_eff) and fp8 (moe_gemm_eff_fp8),
with block scales (Model.fp8_block_scales: DeepSeek-V3/R1's and Qwen3's -FP8 checkpoints scale every
128 x 128 block of weights), so that the kernel rescales its partial sums every 128 of K and
quantises the activations it reads in groups of 128. Each model family's own best rate within a format is reported beside it.
Last, SGLang's own constants (fit_sglang): its MoE routing and latent-attention kernels, and the host
issue of its prompt steps, which it runs without CUDA graphs, each fitted to one metric of the SGLang
cookbook's runs at one request at a time; its other runs check them.

  python calibration/fit_moe.py            # print the errors and each format's best rate
  python calibration/fit_moe.py --write    # also write the rates and calibration/MOE_FIT.md
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench_serving  # noqa: E402
import wide_ep  # noqa: E402
from core.physics import catalog, costmodel, hfconfig  # noqa: E402
from core.serving import engines  # noqa: E402
from core.serving.simulate import SimConfig, simulate  # noqa: E402
from core.serving.workload import Workload, WorkloadSpec  # noqa: E402

RUNS = ROOT / "calibration" / "moe_runs.json"
REPORT = ROOT / "calibration" / "MOE_FIT.md"
FIT = ROOT / "core" / "data" / "costmodel_fit.json"
GEMM_EFF = (0.12, 0.16, 0.2, 0.225, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
# each weight format's constant and the dtypes of the runs it is fitted to
FORMATS = {"16-bit": ("moe_gemm_eff", ("bf16", "fp16")), "block fp8": ("moe_gemm_eff_fp8", ("fp8",))}
MLA_LAYER_US = tuple(float(t) for t in range(0, 201, 10))
# SGLang's own small-kernel and issue times (fit_sglang): each fitted to one metric of its c1 runs on one
# vendor's GPUs, in turn (the AMD one after the others, which it adds to; its run, DeepSeek-V3.1's, is
# picked as the latent-attention one and takes the constant for its block-scaled fp8 weights)
# each constant fitted to the fit_sglang runs of one kind of model (grouped-query attention, latent attention,
# linear attention on most layers) on one vendor's GPUs, in this order
SGLANG = (("sglang_moe_layer_us", "mean_tpot_ms", "gqa", "NVIDIA", tuple(float(t) for t in range(0, 61, 4))),
          ("sglang_mla_layer_us", "mean_tpot_ms", "mla", "NVIDIA", tuple(float(t) for t in range(0, 121, 4))),
          ("sglang_issue_moe_us", "mean_ttft_ms", "gqa", "NVIDIA", tuple(float(t) for t in range(0, 1601, 80))),
          ("sglang_issue_mla_us", "mean_ttft_ms", "mla", "NVIDIA", tuple(float(t) for t in range(0, 3001, 100))),
          ("sglang_rocm_fp8_layer_us", "mean_tpot_ms", "mla", "AMD", tuple(float(t) for t in range(0, 401, 10))),
          ("t_linear_layer_us", "mean_tpot_ms", "linear", "NVIDIA", tuple(float(t) for t in range(0, 121, 4))),
          ("t_issue_linear_us", "mean_ttft_ms", "linear", "NVIDIA", tuple(float(t) for t in range(0, 4001, 100))))
METRICS = ("total_tok_s", "mean_tpot_ms", "mean_ttft_ms")
# the fit_sglang runs, by whether the model is MLA and the GPUs' vendor
SGLANG_MODELS = {("mla", "NVIDIA"): "DeepSeek-R1 on 8x B200 (SGLang 0.5.6)",
                 ("gqa", "NVIDIA"): "Qwen3-235B-A22B on 8x B200 (SGLang 0.5.6)",
                 ("mla", "AMD"): "DeepSeek-V3.1 on 8x MI300X (SGLang 0.5.7, ROCm)",
                 ("linear", "NVIDIA"): "Qwen3-Next-80B-A3B on 8x B200 (SGLang 0.5.6)"}


def kind(model) -> str:
    """The kind of model a fit_sglang constant is fitted on: linear attention on most layers, latent attention,
    or grouped-query attention."""
    return "linear" if model.linear_layers else "mla" if model.is_mla else "gqa"


def model_id(run: dict) -> str:
    if run["model"].endswith(".json"):
        model = hfconfig.parse((ROOT / run["model"]).read_bytes(), Path(run["model"]).name).model
        # the BF16 model's config, served from its fp8 checkpoint: the run says how that scales its weights
        return catalog.register_model(replace(model, fp8_block_scales=run.get("fp8_block_scales", False))).id
    return run["model"]


def config(run: dict) -> SimConfig:
    closed = run["concurrency"] is not None
    # sglang.bench_serving's random prompts are uniform up to the length asked for (the runs' token totals
    # are about half of it): a run says so (length_dist, spread); at least 50 requests, so that a short
    # run's replayed lengths keep its means, unless it replays the lengths its benchmark drew (bench_lengths)
    drawn = "bench_lengths" in run
    spec = WorkloadSpec(n_requests=max(run["requests"], 50) if "length_dist" in run and not drawn else run["requests"],
                        rate=math.inf if closed else 100000.0,
                        concurrency=run["concurrency"] or 0, prompt_mean=run["prompt_mean"],
                        output_mean=run["output_mean"],
                        length_dist=run.get("length_dist", "sharegpt" if run["dataset"] == "sharegpt" else "fixed"),
                        spread=run.get("spread", 0.5))
    # vLLM 0.11's batch limits on the run's GPU (its API-server defaults where the run gives them)
    engine = dict(policy="sarathi", max_seqs=run.get("max_seqs", 1024), max_batched_tokens=run["max_batched_tokens"])
    if run["engine"] == "SGLang":  # its own defaults for the GPU (serving/engines.py)
        engine = engines.sglang_defaults(catalog.get_gpu(run["gpu"]), run["tp"], run["dp_attention"])
        share = re.search(r"--mem-fraction-static[ =]([0-9.]+)", run.get("serve_command", ""))
        if share:  # the run's own mem_fraction_static in place of SGLang's for the GPU
            engine["mem_util"] = float(share.group(1))
    longest = {"max_model_len": run["bench_lengths"]["input_len"] + run["bench_lengths"]["output_len"]} if drawn else {}
    return SimConfig(gpu=run["gpu"], model=model_id(run), tp=run["tp"], ep=run["ep"], dtype=run["dtype"],
                     dp_attention=run["dp_attention"], workload=spec, router="lor",
                     async_scheduling=run.get("async_scheduling", True), **longest, **engine)


@lru_cache(maxsize=1)
def _runs_by_id() -> dict:
    return {r["id"]: r for r in json.loads(RUNS.read_text())["runs"]}


def workload(run: dict, cfg: SimConfig) -> Workload | None:
    """The requests of a run whose benchmark's draw is known (bench_lengths), with what the server's cache
    held of each when it arrived (its warm-up, and the runs before it on the same server, server_before, as far
    as the replica's KV pool holds them); None: the run's lengths are drawn from its stated distribution."""
    return bench_serving.replay(run, _runs_by_id(), cfg) if "bench_lengths" in run else None


def replay(run: dict, eff: costmodel.Efficiency) -> dict:
    """The run's simulated summary with `eff` (constants as fitted) taken to the run's GPU family."""
    cfg = config(run)
    return simulate(cfg, eff=costmodel.family_scaled(eff, catalog.get_gpu(cfg.gpu)), workload=workload(run, cfg)).summary


def errors(run: dict, eff: costmodel.Efficiency) -> dict:
    """The run's errors with `eff` (constants as fitted) taken to the run's GPU family."""
    s = replay(run, eff)
    # the benchmark's figure: every token of every request over the run's duration
    total = config(run).workload.n_requests * (run["prompt_mean"] + run["output_mean"]) / s["makespan_s"]
    p = dict(total_tok_s=total, mean_tpot_ms=s["tpot_ms"]["mean"], mean_ttft_ms=s["ttft_ms"]["mean"])
    return {m: p[m] / run["measured"][m] - 1 for m in METRICS if m in run["measured"]}


def vllm_kernels_tpot(run: dict, eff: costmodel.Efficiency) -> float:
    """The run's mean TPOT with vLLM's fitted MoE and latent-attention kernel times in place of SGLang's."""
    e = replace(eff, sglang_moe_layer_us=eff.t_moe_layer_us, sglang_mla_layer_us=eff.t_mla_layer_us)
    return replay(run, e)["tpot_ms"]["mean"]


def signed(errs: dict, metric: str) -> str:
    """A run's error in a metric, or '-' where its source gives no figure for it."""
    return f"{errs[metric]:+.1%}" if metric in errs else "-"


def loss(runs_errs: list[tuple[dict, dict]]) -> float:
    """Mean squared log error of total token throughput, and of mean TPOT where a closed loop fixes the
    batch. With every request due at once TPOT depends on how many sequences the KV cache admits (a
    batch of a thousand), and TTFT is mostly queueing: both are reported, not fitted."""
    terms = [math.log1p(e["total_tok_s"]) ** 2 for _, e in runs_errs]
    terms += [math.log1p(e["mean_tpot_ms"]) ** 2 for r, e in runs_errs if r["concurrency"] is not None]
    return sum(terms) / max(1, len(terms))


def fit_sglang(base: costmodel.Efficiency, runs: list[dict]) -> tuple[costmodel.Efficiency, dict]:
    """SGLang's own constants, each fitted in turn to one metric of its runs at one request at a time
    (fit_sglang): there a decode step is its small kernels over the weights of the few experts one token
    routes to, so TPOT says the MoE routing kernels (a grouped-query model) and then the latent-attention
    layer's (DeepSeek); and a prompt's step, run op by op, lasts as long as the host takes to issue it,
    so TTFT says what an MoE layer and then a latent-attention layer add to a layer's issue."""
    fitted = [r for r in runs if r.get("fit_sglang")]
    scores = {}
    for name, metric, model_kind, vendor, grid in SGLANG:
        rows = [r for r in fitted if kind(catalog.get_model(model_id(r))) == model_kind
                and catalog.get_gpu(r["gpu"]).vendor == vendor]
        scores[name] = {}
        for t in grid:
            eff = replace(base, **{name: t})
            scores[name][t] = sum(math.log1p(errors(r, eff)[metric]) ** 2 for r in rows) / len(rows)
        base = replace(base, **{name: min(grid, key=scores[name].get)})
        print(f"{name}: {getattr(base, name):g}", flush=True)
    return base, scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    runs = json.loads(RUNS.read_text())["runs"]
    fitted = [r for r in runs if r["fit"]]
    families = sorted({r["model_name"].split("-")[0] for r in fitted})
    base = costmodel.fitted()
    mla = [r for r in fitted if r["concurrency"] is not None and catalog.get_model(model_id(r)).is_mla]
    mla_scores = {}
    if mla:  # a latent-attention layer's small kernels: the decode pace at a fixed concurrency
        for t in MLA_LAYER_US:
            eff = replace(base, t_mla_layer_us=t)
            mla_scores[t] = sum(math.log1p(errors(r, eff)["mean_tpot_ms"]) ** 2 for r in mla) / len(mla)
            print(f"t_mla_layer_us {t:5.0f}  loss {mla_scores[t]:.4f}", flush=True)
        base = replace(base, t_mla_layer_us=min(MLA_LAYER_US, key=mla_scores.get))
    def members(fmt, family=None):
        return [r for r in fitted if r["dtype"] in FORMATS[fmt][1] and (family is None or r["model_name"].startswith(family))]
    groups = [(fmt, None) for fmt in FORMATS] + [(fmt, f) for fmt in FORMATS for f in families if members(fmt, f)]
    scores = {}  # rate -> {(format, family or None): loss}
    for g in GEMM_EFF:
        eff = replace(base, **{FORMATS[fmt][0]: g for fmt in FORMATS})
        errs = {r["id"]: errors(r, eff) for r in fitted}
        scores[g] = {k: loss([(r, errs[r["id"]]) for r in members(*k)]) for k in groups}
        print(f"moe_gemm_eff {g:.3f}  " + "  ".join(f"{k[0]}{'/' + k[1] if k[1] else ''} {v:.4f}"
                                                 for k, v in scores[g].items()), flush=True)
    best = {k: min(GEMM_EFF, key=lambda g: scores[g][k]) for k in groups}
    chosen = replace(base, **{FORMATS[fmt][0]: best[(fmt, None)] for fmt in FORMATS})
    print("best: " + ", ".join(f"{k[0]}{'/' + k[1] if k[1] else ''} {v:g}" for k, v in best.items()))
    chosen, sglang_scores = fit_sglang(chosen, runs)
    per_run = [(r, errors(r, chosen)) for r in runs]
    for r, e in per_run:
        print(f"{r['id']:<75} " + "  ".join(f"{m} {signed(e, m)}" for m in METRICS))
    if args.write:
        fit = json.loads(FIT.read_text())
        for fmt, (name, dtypes) in FORMATS.items():
            fit["constants"][name] = getattr(chosen, name)
            fit["sources"][name] = (f"fitted by calibration/fit_moe.py to the public vLLM 0.11 MoE runs with {fmt} weights "
                                    "in calibration/moe_runs.json (calibration/MOE_FIT.md)")
        if mla_scores:
            fit["constants"]["t_mla_layer_us"] = base.t_mla_layer_us
            fit["sources"]["t_mla_layer_us"] = (
                "fitted by calibration/fit_moe.py to the mean TPOT of the public vLLM 0.11 DeepSeek-R1 runs at a fixed "
                "concurrency (calibration/moe_runs.json): a served latent-attention layer's small kernels beyond the "
                "11 of a grouped-query layer (calibration/MOE_FIT.md)")
        for name, metric, model_kind, vendor, _ in SGLANG:
            fit["constants"][name] = getattr(chosen, name)
            fit["sources"][name] = (f"fitted by calibration/fit_moe.py to the {metric} of the public SGLang "
                                    f"runs of {SGLANG_MODELS[model_kind, vendor]} at one request at a time in "
                                    "calibration/moe_runs.json (calibration/MOE_FIT.md)")
        fit["moe_fit"] = dict(script="calibration/fit_moe.py", runs="calibration/moe_runs.json",
                              best={f"{k[0]}/{k[1]}" if k[1] else k[0]: v for k, v in best.items()})
        FIT.write_text(json.dumps(fit, indent=1) + "\n")
        write_report(scores, best, groups, chosen, per_run, mla_scores, base.t_mla_layer_us, sglang_scores)


def write_report(scores, best, groups, chosen, per_run, mla_scores, mla_us, sglang_scores) -> None:
    def name(k):
        return f"{k[0]}, {k[1]}" if k[1] else f"{k[0]}, all"
    out = ["# The fused-MoE kernel against public MoE runs", "",
           "Written by `python calibration/fit_moe.py --write` from `calibration/moe_runs.json` (public vLLM 0.11 "
           "runs of DeepSeek-R1 on 8x H200 and Qwen3-235B-A22B on 8x and 4x H100, each with its source and quote; "
           "the SGLang cookbook's runs on 8x B200, two of which fit SGLang's own constants, and on 8x MI300X, one of "
           "which fits its ROCm kernels' (last section); other SGLang runs, A100 runs and runs that fill the KV cache "
           "beside them as checks, not fitted).", ""]
    if mla_scores:
        out += ["First, a served latent-attention layer's small kernels beyond a grouped-query layer's "
                "(`t_mla_layer_us`), fitted to the mean TPOT of the DeepSeek-R1 runs at a fixed concurrency, where a "
                "decode step is mostly small kernels (at 4 concurrent requests a step reads about a tenth of the "
                "experts): the cost model's 11 kernels of a Llama layer at 4.6 µs each (and its MoE layer's "
                f"routing kernels) left the step {1 - math.exp(-math.sqrt(mla_scores[0.0])):.0%} short. "
                "DeepSeek's layer runs more: norms of its compressed query and latent KV, the absorbed per-head "
                "products, beyond the activation-quantising kernel before each block-fp8 GEMM that every such layer "
                "runs (priced apart: core/data/quantisation.json). Loss (mean squared log error of "
                "mean TPOT) by the time:", "", "| t_mla_layer_us | loss |", "|---|---|"]
        out += [f"| {t:g} | {v:.4f} |" for t, v in mla_scores.items()]
        out += ["", f"The cost model takes {mla_us:g} µs a layer (about {mla_us / 4.6:.0f} more kernels at the "
                "measured 4.6 µs each), then fits the grouped GEMMs' rate with it.", ""]
    out += ["The grouped GEMMs' rate on full tiles as a share of the dense GEMMs' is fitted for each weight format: "
            "16-bit weights (`moe_gemm_eff`, which fp8 scaled a tensor or a channel also takes) and fp8 scaled by "
            "blocks (`moe_gemm_eff_fp8`). DeepSeek-V3/R1's and Qwen3's -FP8 checkpoints scale every 128 x 128 block of "
            "weights (`Model.fp8_block_scales`, a config.json's `weight_block_size`), and vLLM's fused-MoE kernel for "
            "them rescales its partial sums every 128 of K and quantises the activations it reads in groups of 128, "
            "where the dense fp8 GEMMs the step-time fit measured carry one scale a tensor or a channel. Loss (mean squared log error of "
            "total token throughput, and of mean TPOT at a fixed concurrency, over the fitted runs) by the rate, for "
            "each format and each model family within it:", "",
            "| rate | " + " | ".join(name(k) for k in groups) + " |", "|---|" + "---|" * len(groups)]
    for g, row in scores.items():
        out.append(f"| {g:g} | " + " | ".join(f"{row[k]:.3f}" for k in groups) + " |")
    out += ["", "Best: " + "; ".join(f"{name(k)} {v:g}" for k, v in best.items()) + ".", "",
            f"The cost model takes {chosen.moe_gemm_eff:g} for 16-bit weights and {chosen.moe_gemm_eff_fp8:g} for block fp8, "
            "each format's best over its runs. Where a family's own best differs, the format's rate is a compromise:"]
    for k, v in best.items():
        if k[1] and v != best[(k[0], None)]:
            e = [x["total_tok_s"] for r, x in per_run if r["fit"] and r["dtype"] in FORMATS[k[0]][1]
                 and r["model_name"].startswith(k[1])]
            out.append(f"- {k[1]} with {k[0]} weights: best {v:g}; its fitted runs' throughput is {min(e):+.0%} to "
                       f"{max(e):+.0%} in the simulator at the format's {best[(k[0], None)]:g}.")
    out.append("- The Qwen3 runs are on H100, which carries the H200-fitted constants at tp 4-8; calibration/CAUSES.md "
               "finds that carry 7-18% slow on dense models, so the kernel's share on H200 may be lower still.")
    c1 = {catalog.get_model(model_id(r)).is_mla: r for r, _ in per_run
          if r.get("fit_sglang") and catalog.get_gpu(r["gpu"]).vendor == "NVIDIA"}
    as_vllm = {mla: vllm_kernels_tpot(r, chosen) for mla, r in c1.items()}
    out += ["", "## SGLang's own kernels and host issue", "",
            "SGLang replays a CUDA graph for a decode batch only, and runs a prompt's step op by op from Python "
            "(its piecewise graphs for prompts were opt-in up to v0.5; core/data/engines.json, `cuda_graphs`). Its "
            "runs at one request at a time show both: on 8x B200, DeepSeek-R1 decodes at 9.2 ms a token and "
            f"Qwen3-235B at 10.1 ms, where vLLM's fitted kernels (above, and `t_moe_layer_us`) would take "
            f"{as_vllm[True]:.0f} and {as_vllm[False]:.0f}; "
            "and the first token of a 610-token prompt takes 126-153 ms (DeepSeek) and 99-111 ms (Qwen3), 155-166 "
            "and 140 ms for 4,194 tokens: a time the prompt's length barely moves is the host issuing each "
            "layer's ops, not the GPU. Four constants, each fitted in turn to one metric of the runs of the "
            "1K/1K scenario at concurrency 1 (loss: squared log error), and a fifth on AMD's GPUs: on 8x MI300X "
            "(ROCm, its aiter kernels) DeepSeek-V3.1 decodes at 23.8 ms a token at one request, where the CUDA "
            "kernels' times and the MI300X's measured rates take about 11: what ROCm's kernels take a layer "
            "beyond them with block-scaled fp8 weights (`sglang_rocm_fp8_layer_us`; 16-bit layers take none: "
            "Llama-4 Scout and Maverick in bf16 on the same GPUs decode at the CUDA kernels' pace, 7.5 and 6.0 ms a "
            "token at one request, where the constant would have made them 16):", ""]
    for name, metric, model_kind, vendor, _ in SGLANG:
        losses = ", ".join(f"{t:g} µs {v:.4f}" for t, v in sglang_scores[name].items())
        out += [f"`{name}` ({SGLANG_MODELS[model_kind, vendor]}, {metric}): {losses}; takes {getattr(chosen, name):g} µs.", ""]
    out += ["The other SGLang runs (16 to 100 concurrent requests, 8K-token prompts, 8K-token outputs) are checks: "
            "their TPOT holds the prompts' steps that pause the decodes (SGLang runs a prompt's step alone), so "
            "it rises with the concurrency as fast as the prompts' steps are long and frequent.", "",
            "The cookbook's random runs replay the requests sglang.bench_serving drew: its seed 1 reproduces every "
            "run's printed token totals (`bench_lengths`; the B200 pages' build draws outputs from 0 tokens, the "
            "MI300X pages' from 1), and a run sends the same prompts as every run before it on the server, cut to "
            "its lengths. SGLang's radix cache is on and the benchmark flushes it only when told to, so each prompt "
            "arrives with its warm-up's copy (the first prompt) or an earlier run's (`server_before`, the page's "
            "order; as far as the replica's pool holds them) already cached (calibration/bench_serving.py). "
            "SGLang still runs such a prompt as an extend batch, op by op: the 1K/8K scenarios, whose prompts the "
            "1K/1K ones had sent, answer one request at a time after 126 ms (DeepSeek-R1), 109 ms (Qwen3) and 156 "
            "ms (DeepSeek-V3.1), about what the uncached prompts took. The mean TTFT of the runs at 16 to 100 "
            "clients is not a check of the steady state: their first requests wait longer than any queue of the "
            "run's prompts explains (DeepSeek-R1's 8K/1K at 64 clients: a mean of 914 ms over a median of 225), "
            "where the dense Llama-3.1-70B's runs on 8 A100s, replayed the same way, keep their means within 21% "
            "(calibration/family_runs.json); their medians and TPOT are the checks.", "",
            "GLM-4.6 on the same 8 B200s and build (16-bit weights) decodes 25-32% slower than the profile says at "
            "every concurrency, from one request (14.8 ms a token against 10.2) to 100: 161 µs a layer at one "
            "request, where Qwen3-235B-A22B, whose layers are of the same kind (grouped-query attention, 128 experts "
            "of 1,536), takes 108 µs and DeepSeek-R1 150 µs. SGLang's GLM layer adds a router in fp32 ('GLM requires "
            "FP32 gate projection', sglang glm4_moe.py) and its shared expert as a 161st expert of the grouped GEMM; "
            "neither accounts for 50 µs a layer at one request, and the gap grows with the batch as the experts' "
            "part does. vLLM 0.11.0 serves it slower than the model says too: on eight H200s, TPOT -13.7% at four "
            "clients, and its all-at-once runs' throughput +15% to +46% where DeepSeek-R1's of the same kind on the "
            "same page read -1% to +23% (+195% for 128-token prompts, API-server bound as DeepSeek-R1's). Both "
            "engines run GLM's router in fp32 (vLLM glm4_moe.py: the gate's params_dtype float32, its input cast "
            "to float32), on CUDA cores: about 5% of a prompt's step at 67 TFLOP/s, and at a decode step a "
            "narrow GEMM whose time no datasheet gives. Not fitted: one model, the cause not pinned. MiniMax-M2 on four MI300Xs "
            "(block fp8, SGLang 0.5.7) checks ROCm's fitted layer time on another model: TPOT -9% to +6%. "
            "MiniMax-M2.5 (M2's layers) on eight H100s with --ep 8 (SGLang 0.5.9), the one SGLang MoE check on "
            "Hopper at a fixed concurrency: TPOT 6-15% fast from 1 to 100 clients, median TTFT within 16%. "
            "MiniMax's query and key norms span all the heads, so every layer all-reduces each token's sums of "
            "squares over the attention's GPUs first (both engines; Model.qk_norm_allreduce): a latency-bound "
            "all-reduce a layer, 0.8 ms a token on eight H100s, without which these runs read 16-20% (H100) and "
            "8-11% (MI300X) fast.", "",
            "DeepSeek-V3.2 (V3's layers with sparse attention: each query attends the 2,048 tokens an fp8 indexer "
            "picks) on eight H200s with vLLM 0.13.0, every request at once (GPUStack): throughput +3% (ShareGPT), +79%, "
            "+67% and +47% (2K-, 4K- and 32K-token prompts), where DeepSeek-R1's runs of the same kind with vLLM 0.11 "
            "read +9% to +23%: the early sparse kernels (the indexer's scores and top-k, sparse MLA over the picked "
            "latents) take longer than their FLOPs and bytes say. Not fitted.", "",
            "gpt-oss-20b on one A100 and one H100 with vLLM 0.11.0, every request at once (GPUStack): on the H100 "
            "throughput +16% (ShareGPT; -0.2% with --async-scheduling) and +5% to +22% (32K-, 4K- and 2K-token "
            "prompts), as gpt-oss-120b's. On the A100 -13% to -26% at ShareGPT, 4K- and 2K-token prompts, and -40% "
            "at 128-token ones, where every other GPU's all-at-once short prompts read fast (API-server bound): the "
            "prompts' steps there are the experts' (122 of 142 ms for a 2,048-token prompt), whose Marlin kernel (vLLM's "
            "MXFP4 path on Ampere) is priced at Marlin's dense share of the 16-bit rate (0.61) times the grouped "
            "GEMMs' fitted share (0.6), which these runs say is too slow by about the second factor. At 32K-token "
            "prompts +64%: vLLM runs gpt-oss's attention sinks on Ampere with its Triton attention backend, not "
            "FlashAttention, whose rate the A100's prefill attention is fitted to (recipes OpenAI/GPT-OSS.md). Not "
            "fitted: one model on one Ampere GPU, two causes pulling opposite ways. GLM-4.6-FP8 on eight A100s (vLLM 0.11.0 "
            "runs its fp8 weights weight-only there, FP8 Marlin): throughput +34% to +40% at ShareGPT, at every token "
            "budget from 2,048 to 16,384 and with expert parallelism, where the 16-bit GLM-4.6 on eight H200s reads "
            "+18.5%: GLM runs fast in the model on both GPU families (above), so these runs do not isolate the "
            "weight-only kernel. Not fitted.", ""]
    out += wide_ep.lines(chosen)
    out += ["Errors at these rates (simulated / measured - 1):", "",
            "| run | fitted | dtype | ep | " + " | ".join(METRICS) + " |", "|---|---|---|---|" + "---|" * len(METRICS)]
    for r, e in per_run:
        fitted = ("yes" if r["fit"] else "SGLang's" if r.get("fit_sglang") else
                  "the MoE layer's" if r.get("fit_moe_layer") else "no")
        out.append(f"| {r['id']} | {fitted} | {r['dtype']} | {r['ep']} | "
                   + " | ".join(signed(e, m) for m in METRICS) + " |")
    out += ["", "Not fitted:"] + [f"- {r['id']}: {r['why']}" for r, _ in per_run if not r["fit"]]
    REPORT.write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
