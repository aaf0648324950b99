"""TensorRT-LLM's offline benchmark as the simulator's offline engine replays it.

usage: python calibration/trtllm_replay.py [--write]

`trtllm-bench throughput` runs every request of a fixed-length dataset at once. Three of its rules set the
batch a rank runs, and `python -m core simulate --engine trtllm --offline` follows all three where no flag
says otherwise, so a replay command gives the run's shape and workload alone:

1. The batch and token limits. Where the run sets neither, trtllm-bench sizes them from the dataset's lengths
   and the KV cache it expects for NVFP4, FP8 and 16-bit checkpoints; for other formats (gpt-oss's MXFP4) it
   takes the LLM API's defaults, 2,048 sequences and 8,192 tokens; with chunked prefill off, its default, the
   token limit is raised to hold a whole prompt beside a full batch (core/serving/trtllm_bench.py).
2. Admission. The capacity scheduler's default, GUARANTEED_NO_EVICT, admits a request only while the KV
   cache can hold all of it, prompt and every output token, so a rank runs at most its pool over one
   request's length and never preempts (the engine loop's no-evict rule, core/engine/loop.py).
3. The pool. TensorRT-LLM sizes its KV pool as if every layer attended the whole context, sliding-window
   layers included: "Currently the use of this function is not used for
   BaseKVCacheManager::calculateMaxNumBlocks because the we want to first achieve identical performance as
   assuming all layers as full attention" (cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp,
   calculateWindowSizeToShare). For gpt-oss, half of whose layers keep a 128-token window, its pool holds
   half the tokens the simulator's window-aware one (vLLM's hybrid KV cache manager) does
   (core/data/engines.json trtllm kv_pool).

The DeepSeek-R1 blog's runs state their batch and token limits, which replace rule 1: their commands carry
them as --max-seqs and --max-batched-tokens. This script writes each entry's command accordingly.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OFFLINE = ROOT / "calibration" / "offline_runs.json"
LIMITS = re.compile(r" --(max-seqs|max-batched-tokens) \d+")


def replay_command(command: str, entry: dict) -> str:
    """The entry's replay command: TensorRT-LLM's profile offline, with the batch and token limits the run
    states (rule 1 is the simulator's own where it states none)."""
    command = LIMITS.sub("", command)
    if "--engine trtllm" not in command:
        command = command.replace(" --offline", " --engine trtllm --offline")
    stated = entry["workload"].get("max_batch_size_per_rank"), entry["workload"].get("max_num_tokens_per_rank")
    if all(stated):
        command += f" --max-seqs {stated[0]} --max-batched-tokens {stated[1]}"
    return command


def main(argv: list[str]) -> int:
    raw = json.loads(OFFLINE.read_text())
    for entry in raw["entries"]:
        for r in entry["replay"]:
            r["command"] = replay_command(r["command"], entry)
            print(f"{entry['id'][:66]:66s} {r['command'].split(' --length-dist')[0][-60:]}")
    if "--write" in argv:
        OFFLINE.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
        print(f"written to {OFFLINE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
