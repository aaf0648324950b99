"""The batch and token limits `trtllm-bench throughput` runs a rank with when the run sets neither:
what `python -m core simulate --engine trtllm --offline` takes where no flag sets them, so that an
offline TensorRT-LLM run replays as the benchmark ran it.

trtllm-bench sizes both from the dataset's lengths and the KV cache it expects for NVFP4, FP8 and
16-bit checkpoints; for other formats (gpt-oss's MXFP4) it takes the LLM API's defaults, 2,048
sequences and 8,192 tokens (tensorrt_llm/bench/benchmark/utils/general.py get_settings;
tensorrt_llm/bench/tuning/heuristics.py calc_engine_setting and finetune_setting, its MLA-aware form
that sizes one rank under attention data parallelism). With chunked prefill off, its default, the
token limit is raised to hold the longest prompt beside a full batch (max_isl + max_batch_size).
Admission then reserves each request whole (GUARANTEED_NO_EVICT, the engine's rule), so a rank runs
at most what its pool holds of them.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..physics import catalog, memory
from ..physics.catalog import kv_format
from .workload import generate, load_trace

# trtllm-bench throughput's --kv_cache_free_gpu_mem_fraction default (tensorrt_llm/bench/benchmark/throughput.py)
KV_FRACTION = 0.90
# the formats trtllm-bench sizes by its heuristic (TUNED_QUANTS: NVFP4, FP8, FP8 block scales, none)
TUNED = {"fp4", "fp8", "bf16", "fp16"}
# the LLM API's defaults otherwise (TorchLlmArgs max_batch_size 2048, max_num_tokens 8192)
DEFAULT_LIMITS = (2048, 8192)


def ceil_to(x: float, step: int) -> int:
    return step * math.ceil(x / step)


def finetune(requests: float, isl: float, osl: float) -> tuple[int, int]:
    """trtllm-bench's rounding of the requests its KV estimate holds into a batch and a token limit:
    'slightly optimistic' upper bounds (heuristics.py finetune_setting)."""
    raw_bs = min(requests, 4096)
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    bs = max(64, ceil_to(raw_bs, 32)) if raw_bs < 256 else ceil_to(raw_bs, 128 if raw_bs < 1024 else 256)
    tokens = (max(2048, ceil_to(raw_tokens, 256)) if raw_tokens < 4096
              else ceil_to(raw_tokens, 512 if raw_tokens < 8192 else 1024))
    return bs, tokens


def kv_bytes_per_token(model: catalog.Model, tp: int, kv_dtype: str) -> float:
    """The KV bytes trtllm-bench's estimate gives a token on the attention's GPUs together: one latent
    entry a layer (MLA), else every layer's heads, each GPU of the group holding one at least."""
    kv_bytes = kv_format(kv_dtype).bytes_per_value
    if model.is_mla:
        return model.layers * (model.mla_kv_lora_rank + model.mla_rope_dim) * kv_bytes
    return 2 * model.layers * max(tp, model.kv_heads) * model.head_dim * kv_bytes


def bench_limits(gpu: catalog.GPU, model: catalog.Model, tp: int, ep: int, dp_attention: bool, dtype: str,
                 kv_dtype: str, avg_isl: float, avg_osl: float, max_isl: int) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) of one rank, as trtllm-bench picks them for a dataset of
    these mean and longest lengths."""
    if dtype not in TUNED:
        bs, tokens = DEFAULT_LIMITS
    else:
        gpus = 1 if dp_attention else tp  # under attention DP one rank's memory, batch and share of the weights
        weights = memory.weight_bytes_per_gpu(model, tp, dtype, ep=ep, dp_attention=dp_attention)
        available = gpus * (gpu.memory_gib * catalog.GIB - weights)
        requests = available * KV_FRACTION / (kv_bytes_per_token(model, tp, kv_dtype) * (avg_isl + avg_osl))
        bs, tokens = finetune(requests, avg_isl, avg_osl)
    return bs, max(tokens, max_isl + bs)  # chunked prefill off: the longest prompt beside a full batch


def offline_limits(cfg) -> tuple[int, int]:
    """(max_seqs, max_batched_tokens) of an offline TensorRT-LLM run of `cfg` (a SimConfig): one
    rank's, as trtllm-bench picks them for the requests `cfg` sends (its trace, else its workload as the
    simulation draws it)."""
    gpu, model = catalog.get_gpu(cfg.gpu), catalog.get_model(cfg.model)
    longest = cfg.max_model_len or model.max_context  # before the command line fits one, the model's
    wl = (load_trace(cfg.trace_csv) if cfg.trace_csv is not None
          else generate(replace(cfg.workload, max_total_tokens=longest)))
    return bench_limits(gpu, model, cfg.tp, cfg.ep, cfg.dp_attention, cfg.dtype, cfg.kv_dtype,
                        float(wl.prompt_tokens.mean()), float(wl.output_tokens.mean()), int(wl.prompt_tokens.max()))
