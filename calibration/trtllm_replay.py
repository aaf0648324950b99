"""TensorRT-LLM's offline benchmark as the simulator's offline engine replays it.

usage: python calibration/trtllm_replay.py [--write]

`trtllm-bench throughput` runs every request of a fixed-length dataset at once. Three of its rules set the
batch a rank runs, and calibration/offline_runs.json's replay commands carry them as --max-seqs and
--max-batched-tokens, with --engine trtllm (TensorRT-LLM's PyTorch backend: whole prompts beside the decodes,
CUDA graphs of decode batches up to the batch limit, a step with prompt tokens issued op by op;
core/data/engines.json):

1. The batch and token limits. Where the run sets neither, trtllm-bench sizes them from the dataset's
   lengths and the KV cache it expects for NVFP4, FP8 and 16-bit checkpoints; for other formats (gpt-oss's
   MXFP4) it takes the LLM API's defaults, 2,048 sequences and 8,192 tokens
   (tensorrt_llm/bench/benchmark/utils/general.py get_settings; tensorrt_llm/bench/tuning/heuristics.py
   calc_engine_setting and finetune_setting, its MLA-aware form that sizes one rank under attention data
   parallelism). With chunked prefill off, its default, the token limit is raised to hold a whole prompt
   beside a full batch (max_isl + max_batch_size).
2. Admission. The capacity scheduler's default, GUARANTEED_NO_EVICT, admits a request only while the KV
   cache can hold all of it, prompt and every output token (32-token blocks), so a rank runs at most its
   pool over one request's length.
3. The pool. TensorRT-LLM sizes its KV pool as if every layer attended the whole context, sliding-window
   layers included: "Currently the use of this function is not used for
   BaseKVCacheManager::calculateMaxNumBlocks because the we want to first achieve identical performance as
   assuming all layers as full attention" (cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp,
   calculateWindowSizeToShare). For gpt-oss, half of whose layers keep a 128-token window, its pool holds
   half the tokens the simulator's window-aware one (vLLM's hybrid KV cache manager) does.

The pool's bytes are the simulator's own memory plan (core/physics/memory.py, 90% of the GPU); the
checkpoint's size in rule 1 is the plan's weights. The DeepSeek-R1 blog's runs state their batch and token
limits, which replace rule 1; rules 2 and 3 hold for them too.
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.physics import catalog, expert, memory  # noqa: E402
from core.physics.catalog import kv_format  # noqa: E402
from core.physics.costmodel import kv_bytes_per_token_per_gpu  # noqa: E402

OFFLINE = ROOT / "calibration" / "offline_runs.json"
GIB = 1024 ** 3
# trtllm-bench throughput's --kv_cache_free_gpu_mem_fraction default (tensorrt_llm/bench/benchmark/throughput.py)
KV_FRACTION = 0.90
# the formats trtllm-bench sizes by its heuristic (TUNED_QUANTS: NVFP4, FP8, FP8 block scales, none); the
# LLM API's defaults otherwise (TorchLlmArgs max_batch_size 2048, max_num_tokens 8192)
TUNED = {"fp4", "fp8", "bf16", "fp16"}
DEFAULT_LIMITS = (2048, 8192)
BLOCK_TOKENS = 32  # KvCacheConfig tokens_per_block


def ceil_to(x: float, step: int) -> int:
    return step * math.ceil(x / step)


def finetune(requests: float, isl: int, osl: int) -> tuple[int, int]:
    """trtllm-bench's rounding of the requests its KV estimate holds into a batch and a token limit:
    'slightly optimistic' upper bounds (heuristics.py finetune_setting)."""
    raw_bs = min(requests, 4096)
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    bs = max(64, ceil_to(raw_bs, 32)) if raw_bs < 256 else ceil_to(raw_bs, 128 if raw_bs < 1024 else 256)
    tokens = (max(2048, ceil_to(raw_tokens, 256)) if raw_tokens < 4096
              else ceil_to(raw_tokens, 512 if raw_tokens < 8192 else 1024))
    return bs, tokens


def bench_limits(gpu_id: str, model_id: str, tp: int, ep: int, dp_attention: bool, dtype: str, kv_dtype: str,
                 isl: int, osl: int) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) a rank runs with when the run sets neither (rule 1)."""
    if dtype not in TUNED:
        bs, tokens = DEFAULT_LIMITS
    else:
        gpu, model = catalog.get_gpu(gpu_id), catalog.get_model(model_id)
        kv_bytes = kv_format(kv_dtype).bytes_per_value
        if model.is_mla:  # one latent entry a token and layer
            per_token = model.layers * (model.mla_kv_lora_rank + model.mla_rope_dim) * kv_bytes
        else:  # every GPU of the tensor-parallel group holds at least one KV head
            per_token = 2 * model.layers * max(tp, model.kv_heads) * model.head_dim * kv_bytes
        gpus = 1 if dp_attention else tp  # under attention DP one rank's memory, batch and share of the weights
        weights = memory.weight_bytes_per_gpu(model, tp, dtype, ep=ep, dp_attention=dp_attention)
        available = gpus * (gpu.memory_gib * GIB - weights)
        requests = available * KV_FRACTION / (per_token * (isl + osl))
        bs, tokens = finetune(requests, isl, osl)
    return bs, max(tokens, isl + bs)  # chunked prefill off: a whole prompt beside a full batch


def admitted(gpu_id: str, model_id: str, tp: int, ep: int, dp_attention: bool, dtype: str, kv_dtype: str,
             isl: int, osl: int, max_seqs: int, max_tokens: int) -> int:
    """Requests a rank holds when each reserves its whole length in a pool sized as if every layer
    attended the whole context (rules 2 and 3)."""
    gpu, model = catalog.get_gpu(gpu_id), catalog.get_model(model_id)
    plan = memory.plan_memory(gpu, model, tp=tp, ep=ep, dp_attention=dp_attention, dtype=dtype, kv_dtype=kv_dtype,
                              max_seqs=max_seqs, max_batched_tokens=max_tokens)
    # a rank's own sequences: the attention's share of the GPUs it spans (its whole KV under attention DP)
    per_token = kv_bytes_per_token_per_gpu(model, expert.attention_tp(tp, dp_attention),
                                           kv_format(kv_dtype).bytes_per_value)
    blocks = int(plan.kv_pool_bytes // (BLOCK_TOKENS * per_token))
    return blocks // math.ceil((isl + osl) / BLOCK_TOKENS)


FLAG = re.compile(r"--([\w-]+) (?!--)(\S+)")  # a flag and its value (not a bare switch)


def replay_command(command: str, entry: dict) -> str:
    """The entry's replay command with the batch and token limits of rules 1-3 in place of its own."""
    args = dict(FLAG.findall(command))
    dp = "--dp-attention" in command
    gpu, model, dtype, kv = args["gpu"], args["model"], args["dtype"], args.get("kv-dtype", "bf16")
    tp, ep, isl, osl = int(args["tp"]), int(args.get("ep", 1)), int(args["prompt"]), int(args["output"])
    stated = entry["workload"].get("max_batch_size_per_rank"), entry["workload"].get("max_num_tokens_per_rank")
    bs, tokens = stated if all(stated) else bench_limits(gpu, model, tp, ep, dp, dtype, kv, isl, osl)
    seqs = min(bs, admitted(gpu, model, tp, ep, dp, dtype, kv, isl, osl, bs, tokens))
    command = re.sub(r"--max-seqs \d+", f"--max-seqs {seqs}", command)
    command = re.sub(r"--max-batched-tokens \d+", f"--max-batched-tokens {tokens}", command)
    return command if "--engine trtllm" in command else command.replace(" --offline", " --engine trtllm --offline")


def main(argv: list[str]) -> int:
    raw = json.loads(OFFLINE.read_text())
    for entry in raw["entries"]:
        for r in entry["replay"]:
            new = replay_command(r["command"], entry)
            limits = " ".join(new.split()[-4:])
            print(f"{entry['id'][:66]:66s} {limits}")
            r["command"] = new
    if "--write" in argv:
        OFFLINE.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
        print(f"written to {OFFLINE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
