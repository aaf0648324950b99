"""The teaching assumptions, said the way this simulator makes them, with their numbers filled in
live from the code and data they describe (the fitted constants, the calibration reports, the
memory planner, the catalogs), so the words cannot drift from what the simulation does.

    for a in assumptions(): print(a["title"], a["text"])

data/assumptions.json holds the texts with {placeholders}; `values()` computes every placeholder.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from .. import DATA
from ..physics import catalog, costmodel, memory
from ..serving.simulate import SimConfig
from ..text import count

ROOT = Path(__file__).parents[2]
FILE = DATA / "assumptions.json"
VALIDATION = ROOT / "calibration" / "VALIDATION.md"
PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _pct(x: float, digits: int = 0) -> str:
    return f"{x * 100:.{digits}f}%"


def _kib(model_id: str) -> str:
    return f"{catalog.get_model(model_id).kv_bytes_per_token() / 1024:.0f} KiB"


def _gb(model_id: str, dtype: str) -> str:
    return f"{catalog.get_model(model_id).weight_bytes(dtype) / 1e9:.1f} GB"


def validation_summary(path: Path = VALIDATION) -> dict:
    """The end-to-end comparison with real vLLM runs, as calibration/real_runs.py wrote it:
    {"comparisons": n, "metrics": {metric: (points, median %, max %)}, "diverging_runs": runs with
    an error above 100%}. Empty when the report is not there (a deploy without calibration/)."""
    if not path.exists():
        return {}
    text = path.read_text()
    total = re.search(r"\((\d+) comparisons", text)
    rows = re.findall(r"^\| ([^|]+?) \| (\d+) \| ([\d.]+)% \| ([\d.]+)% \|$", text, re.M)
    # a run's row: run | metric | measured | simulated | error | (its set, in later reports)
    per_run = re.findall(r"^\| (\S+) \| [^|]+ \| [\d.]+ \| [\d.]+ \| ([+-][\d.]+)% \|", text, re.M)
    metrics: dict = {}
    for m, n, med, mx in rows:  # the first table holding a metric is over all its runs; later ones split it
        metrics.setdefault(m, (int(n), float(med), float(mx)))
    return {"comparisons": int(total.group(1)) if total else sum(int(r[1]) for r in rows),
            "metrics": metrics, "diverging_runs": len({run for run, err in per_run if abs(float(err)) > 100})}


def _diverging(n: int) -> str:
    """The runs the simulator misses by more than 100%, and why, or that there are none."""
    if n == 0:
        return "no run is off by more than 100%"
    return (f"{count(n, 'run')} {'is' if n == 1 else 'are'} off by more than 100%, where the simulated deployment "
            f"saturates and the real one did not")


def _validation_values() -> dict[str, str]:
    v = validation_summary()
    metrics = v.get("metrics", {})

    def median(metric: str) -> str:
        return f"{metrics[metric][1]:.1f}%" if metric in metrics else "(report missing)"

    def points(metric: str) -> str:
        return str(metrics[metric][0]) if metric in metrics else "0"

    return dict(
        val_comparisons=str(v.get("comparisons", 0)), val_diverging=_diverging(int(v.get("diverging_runs", 0))),
        val_decode_points=points("decode ms/token"), val_decode_median=median("decode ms/token"),
        val_e2e_points=points("E2E mean ms"), val_e2e_median=median("E2E mean ms"),
        val_ttft_points=points("TTFT mean ms"), val_ttft_median=median("TTFT mean ms"),
        val_ttft_p50_points=points("TTFT p50 ms"), val_ttft_p50_median=median("TTFT p50 ms"),
        val_tput_points=points("throughput req/s"), val_tput_median=median("throughput req/s"),
    )


@lru_cache(maxsize=1)
def values() -> dict[str, str]:
    """Every placeholder of data/assumptions.json, as text with its unit."""
    eff = costmodel.fitted()
    families = costmodel.families()
    family = families["families"]
    fit = json.loads(costmodel.FIT_FILE.read_text())["fit"]
    h200 = catalog.get_gpu("h200")
    sim = SimConfig()
    return dict(
        # the catalogs
        gpu_count=str(len(catalog.gpu_ids())), model_count=str(len(catalog.model_ids())),
        kv_llama8b=_kib("llama-3.1-8b"), kv_llama70b=_kib("llama-3.1-70b"), kv_deepseek=_kib("deepseek-v3"),
        # the step-time fit (calibration/REPORT.md)
        fit_points=str(fit["points"]), fit_median=_pct(fit["median_abs_error"], 1), fit_max=_pct(fit["max_abs_error"], 1),
        loo_median=_pct(fit["leave_one_out_median_abs_error"], 1), loo_max=_pct(fit["leave_one_out_max_abs_error"], 1),
        eta_bw=_pct(eff.eta_bw), eta_gemm=_pct(eff.eta_gemm), eta_attn=_pct(eff.eta_attn),
        h200_bw=f"{h200.hbm_tbps * eff.eta_bw:.2f} of {h200.hbm_tbps:g} TB/s",
        h200_gemm=f"{h200.bf16_tflops * eff.eta_gemm:.0f} of {h200.bf16_tflops:g} TFLOP/s",
        cta_saturation=f"{eff.cta_saturation:.2f}", t_layer_us=f"{eff.t_layer_us:.0f} µs",
        t_issue_decode_us=f"{eff.t_issue_decode_us:.0f} µs", t_issue_prefill_us=f"{eff.t_issue_prefill_us:.0f} µs",
        # the serving-engine fit (calibration/real_runs.py --fit)
        engine_step_us=f"{eff.engine_step_us / 1e3:.2f} ms", t_layer_engine_us=f"{eff.t_layer_engine_us:.1f} µs",
        t_mla_layer_us=f"{eff.t_mla_layer_us:.0f} µs",
        sglang_moe_layer_us=f"{eff.sglang_moe_layer_us:.0f} µs",
        sglang_mla_layer_us=f"{eff.sglang_mla_layer_us:.0f} µs",
        t_moe_layer_us=f"{eff.t_moe_layer_us:.0f} µs", t_issue_engine_us=f"{eff.t_issue_engine_us:.0f} µs",
        # vLLM's speculative step beyond the proposer's GPU work (calibration/fit_spec.py)
        t_draft_pass_us=f"{eff.t_draft_pass_us:.0f} µs", t_spec_step_us=f"{eff.t_spec_step_us:.0f} µs",
        sglang_issue_moe_us=f"{eff.sglang_issue_moe_us / 1e3:.2f} ms",
        sglang_issue_mla_us=f"{eff.sglang_issue_mla_us / 1e3:.2f} ms",
        sglang_rocm_fp8_layer_us=f"{eff.sglang_rocm_fp8_layer_us:.0f} µs",
        moe_bw_eff=_pct(eff.moe_bw_eff), moe_gemm=_pct(eff.moe_gemm_eff), moe_gemm_fp8=_pct(eff.moe_gemm_eff_fp8, 1),
        link_eff=_pct(eff.link_eff), link_latency_us=f"{eff.link_latency_us:.0f} µs",
        allreduce_base_us=f"{eff.allreduce_base_us:.1f} µs", allreduce_peer_us=f"{eff.allreduce_peer_us:.2f} µs",
        # GPU families measured apart from the fitted one (data/gpu_families.json)
        ampere_bw=_pct(family["Ampere"]["eta_bw"]["value"]), cdna_bw=_pct(family["CDNA 3"]["eta_bw"]["value"]),
        ampere_gemv=_pct(family["Ampere"]["eta_bw"]["value"] * family["Ampere"]["gemv_bw_eff"]["value"]),
        ampere_gemm=f"{family['Ampere']['eta_gemm']['value']:.2f}x", ampere_attn=f"{family['Ampere']['eta_attn']['value']:.2f}x",
        cdna_gemm=_pct(family["CDNA 3"]["eta_gemm"]["value"]),
        cdna4_gemm=_pct(family["CDNA 4"]["eta_gemm"]["value"]),
        nccl_pcie=f"{families['collectives']['nccl_pcie_latency_us']['value']:.0f} µs",
        # memory (core/memory.py, the engine's defaults)
        mem_util=_pct(sim.mem_util), driver_reserved=f"{memory.DRIVER_RESERVED_GIB:g} GiB",
        non_torch=f"{memory.NON_TORCH_GIB:g} GiB", non_torch_tp=f"{memory.NON_TORCH_TP_GIB:g} GiB",
        block_size=f"{sim.block_size} tokens", watermark=_pct(sim.watermark),
        # quantisation (data/quantisation.json)
        no_fp8_gpus=", ".join(catalog.get_gpu(g).name for g in catalog.gpu_ids() if not catalog.get_gpu(g).supports_fp8),
        int4_bits=f"{catalog.weight_format('int4').bytes_per_weight * 8:.3g} bits",
        fp4_bits=f"{catalog.weight_format('fp4').bytes_per_weight * 8:.3g} bits",
        mxfp4_bits=f"{catalog.weight_format('mxfp4').bytes_per_weight * 8:.3g} bits",
        fp4_gpus=", ".join(catalog.get_gpu(g).name for g in catalog.gpu_ids() if catalog.get_gpu(g).supports_fp4),
        int4_gemm_rate=_pct(catalog.weight_format("int4").gemm_rate),
        fp4_gemm_rate=_pct(catalog.weight_format("fp4").gemm_rate),
        marlin_gemm_rate=_pct(catalog.weight_format("fp8").on(catalog.get_gpu("a100-80gb")).gemm_rate),
        block_fp8_quant=(f"{catalog.weight_format('fp8').block_quant_kernels} kernels, "
                         f"{costmodel.block_quant_us(catalog.weight_format('fp8'), eff):.0f} µs"),
        w70_bf16=_gb("llama-3.1-70b", "bf16"), w70_fp8=_gb("llama-3.1-70b", "fp8"), w70_int4=_gb("llama-3.1-70b", "int4"),
        w70_fp4=_gb("llama-3.1-70b", "fp4"),
        **_validation_values(),
    )


def fill(text: str, vals: dict[str, str] | None = None) -> str:
    """The text with its placeholders filled; an unknown placeholder is a bug in the data file."""
    vals = values() if vals is None else vals
    missing = set(PLACEHOLDER.findall(text)) - set(vals)
    if missing:
        raise KeyError(f"assumptions.json uses unknown placeholders: {', '.join(sorted(missing))}")
    return PLACEHOLDER.sub(lambda m: vals[m.group(1)], text)


def assumptions() -> list[dict]:
    """The assumptions, texts filled: id, title, text, and for the seed's own three `seed_text`
    (what the seed assumed) before `text` (what this simulator does instead)."""
    items = json.loads(FILE.read_text())["assumptions"]
    return [{**a, "text": fill(a["text"])} for a in items]
