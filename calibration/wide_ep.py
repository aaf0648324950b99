"""Wide expert parallelism at a steady batch: DeepSeek-V3's decode and prefill over many GPUs.

usage: python calibration/wide_ep.py

The rows of calibration/moe_public.json that carry a `step_check` are throughputs a GPU measured at a
fixed batch (LMSYS's 72-GPU decode and 32-GPU prefill on H100s, SGLang on a GB200 NVL72's 48 decode
ranks): data-parallel attention, DeepEP's all-to-all across nodes, EPLB's redundant experts. Each is
replayed as one step of the cost model in SGLang's profile, every GPU with its own batch: a decode
step of `batch_per_gpu` sequences at `context` tokens, or a prefill step of `tokens_per_gpu` new
tokens as whole prompts of one length. Checks, nothing fitted: fit_moe.py puts the table in
calibration/MOE_FIT.md.

Beside the model, what the experts' GEMMs would take at DeepGEMM's own rate (DEEPGEMM_RATE): SGLang's
DeepEP path computes them with DeepGEMM's grouped GEMMs, where the cost model's rate for block-scaled
fp8 experts is fitted to vLLM's runs (moe_gemm_eff_fp8). A run with two-batch overlap is replayed with
the model's micro-batch overlap (--micro-batch-overlap).
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.physics import catalog, costmodel  # noqa: E402

PUBLIC = ROOT / "calibration" / "moe_public.json"
# DeepGEMM's grouped GEMMs as a share of the dense GEMMs' fitted rate: 0.98 of its own dense GEMMs of the
# same N and K, FLOP-weighted over the gate-up and down shapes (1,299 against 1,319 TFLOP/s on an H800), which
# run at the fitted dense share of the FP8 peak (0.686 x 1,979 = 1,358): deepseek-ai/DeepGEMM@327ec92 README.md,
# 'Grouped GEMMs for MoE models (contiguous layout) | 4 | 8192 | 4096 | 7168 | 1346 TFLOPS', '| 4 | 8192 | 7168 |
# 2048 | 1214 TFLOPS'; 'Normal GEMMs for dense models | 4096 | 4096 | 7168 | 1410 TFLOPS', '| 4096 | 7168 | 2048 |
# 1168 TFLOPS'
DEEPGEMM_RATE = 0.98


def checks() -> list[dict]:
    return [dict(row, check=row["step_check"]) for row in json.loads(PUBLIC.read_text()) if "step_check" in row]


def per_gpu_tok_s(check: dict, eff: costmodel.Efficiency) -> list[float]:
    """Tokens a second one GPU computes in the check's steady step, for each of its prompt lengths (prefill)
    or its one batch (decode)."""
    gpu, model, ep = catalog.get_gpu(check["gpu"]), catalog.get_model(check["model"]), check["ep"]
    capture = check.get("cuda_graph_batch", 0) * ep
    p = costmodel.build(gpu, model, ep, check["dtype"], engine="sglang", eff=costmodel.family_scaled(eff, gpu),
                        capture_tokens=capture, ep=ep, dp_attention=True, eplb=True,
                        redundant_experts=check["redundant_experts"], micro_batch_overlap=check["micro_batch_overlap"])
    out = np.zeros(costmodel.N_SCRATCH)
    if check["phase"] == "decode":
        n, ctx = ep * check["batch_per_gpu"], check["context"]
        ctas = n * costmodel.decode_ctas(p, ctx)
        t = costmodel.step_breakdown(p, n, n, n * ctx, ctas, 0.0, 0, n, out)
        return [check["batch_per_gpu"] / t]
    rates = []
    for length in check["prompt_tokens"]:
        prompts = ep * (check["tokens_per_gpu"] // length)
        attention = prompts * costmodel.prefill_attention_time(p, length, 0)
        t = costmodel.step_breakdown(p, ep * check["tokens_per_gpu"], 0, 0, 0.0, attention, prompts, prompts, out)
        rates.append(check["tokens_per_gpu"] / t)
    return rates


def rows(eff: costmodel.Efficiency) -> list[dict]:
    """One row a measured figure: the check, its label, measured and simulated tok/s a GPU, and the
    simulated figure with DeepGEMM's rate for the experts' GEMMs."""
    out = []
    deepgemm = replace(eff, moe_gemm_eff_fp8=DEEPGEMM_RATE)
    for row in checks():
        c = row["check"]
        labels = ([f"{n:,}-token prompts" for n in c["prompt_tokens"]] if c["phase"] == "prefill"
                  else [f"{c['batch_per_gpu']:,} sequences a GPU at {c['context']:,} tokens"])
        for label, measured, sim, dg in zip(labels, c["measured_tok_s_per_gpu"], per_gpu_tok_s(c, eff),
                                            per_gpu_tok_s(c, deepgemm)):
            out.append(dict(row=row, label=label, measured=measured, simulated=sim, deepgemm=dg))
    return out


def overlap_gain(check: dict, eff: costmodel.Efficiency, batch: int) -> float:
    """The check's decode throughput with its micro-batches overlapped over without, at `batch` a GPU."""
    rates = [per_gpu_tok_s(dict(check, batch_per_gpu=batch, cuda_graph_batch=batch, micro_batch_overlap=on), eff)[0]
             for on in (False, True)]
    return rates[1] / rates[0] - 1


def lines(eff: costmodel.Efficiency) -> list[str]:
    """The section calibration/MOE_FIT.md shows."""
    out = ["## Wide expert parallelism at a steady batch (checks)", "",
           "Throughput a GPU measured at a fixed batch over many GPUs, replayed by `calibration/wide_ep.py` as one "
           "step of the cost model in SGLang's profile (data-parallel attention, DeepEP's all-to-all, EPLB with 32 "
           "redundant experts, two-batch overlap where the run had it: `--micro-batch-overlap`): DeepSeek-V3 in fp8. "
           "A prompt's step dispatches with DeepEP's normal kernels, a token's row crossing the network once for "
           "each other node its experts live on; a decode step with its low-latency ones, every routed copy on its "
           "own. The last column gives the experts' GEMMs DeepGEMM's own rate "
           f"({DEEPGEMM_RATE:g} of the dense GEMMs', its README's H800 table) in place of the rate fitted to vLLM's "
           "runs above: SGLang's DeepEP path computes them with DeepGEMM.", "",
           "| measurement | GPUs | measured tok/s a GPU | simulated | error | with DeepGEMM's rate | overlap in the "
           "measured run |", "|---|---|---|---|---|---|---|"]
    table = rows(eff)
    for r in table:
        c = r["row"]["check"]
        what = f"{r['row']['source'].rstrip('/').rsplit('/', 1)[-1]}, {c['phase']}, {r['label']}"
        out.append(f"| {what} | {c['ep']} x {c['gpu'].upper()} | {r['measured']:,} | {r['simulated']:,.0f} | "
                   f"{r['simulated'] / r['measured'] - 1:+.0%} | {r['deepgemm'] / r['measured'] - 1:+.0%} | "
                   f"{c['overlap']} |")
    for r in (r for r in table if "without_overlap_tok_s_per_gpu" in r["row"]["check"]):
        c = r["row"]["check"]
        off = per_gpu_tok_s(dict(c, micro_batch_overlap=False), eff)[0]
        out += ["", f"Without two-batch overlap the 72-GPU decode would make {c['without_overlap_tok_s_per_gpu']:,} "
                f"tok/s a GPU (derived from the blog's ablation); the model without it reads "
                f"{off / c['without_overlap_tok_s_per_gpu'] - 1:+.0%}. The overlap's gain in the model: "
                f"{overlap_gain(c, eff, 32):+.0%} at 32 sequences a GPU and {overlap_gain(c, eff, 256):+.0%} at 256, "
                "where the blog measured -27% and +25.5%: the model hides every all-to-all behind the other "
                "micro-batch's compute and charges the split only its second stream of the weights and kernels."]
    out += ["", "The cost model keeps the fitted rate, not DeepGEMM's: with the overlap on, DeepGEMM's rate reads the "
            "H100 runs far fast. Which kernel a data-parallel deployment's experts run depends on its all-to-all "
            "backend (SGLang's DP attention without DeepEP, as in GPUStack's H200 runs above, keeps the Triton kernel; "
            "vLLM's default all-gathers the tokens), which the command line does not say."]
    return out + [""]


def main() -> None:
    for line in lines(costmodel.fitted()):
        print(line)


if __name__ == "__main__":
    main()
