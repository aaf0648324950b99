"""The requests of a `python -m sglang.bench_serving --dataset-name random` run as it drew them, and
what the server's prefix cache already held of each when it arrived.

The benchmark seeds numpy with --seed (1 unless given) before it draws, then takes every request's
prompt length uniformly from 1 to --random-input-len and its output length from `output_min` (0 or 1,
by the version) to --random-output-len, in that order (sample_random_requests). Each prompt is the
i-th ShareGPT conversation of a shuffle seeded the same way, its tokens repeated or cut to the
length: so two runs with the same seed send the same prompt i, cut to each run's length.

Before it times anything the benchmark sends its first request once as a warm-up, and it flushes
the server's cache only when told to (--flush-cache). SGLang's radix cache is on by default: a
run's first prompt is cached when the timed run starts, and so is every prompt an earlier run
against the same server sent, as far as its pool still holds them (least recently used first out).

sgl-project/sglang python/sglang/bench_serving.py: `input_lens = np.random.randint(max(int(input_len *
range_ratio), 1), input_len + 1, size=num_prompts)`, `random.shuffle(dataset)`, `input_ids =
(prompt_token_ids * ratio)[: input_lens[i]]`, `# Use the first request for all warmup iterations
test_request = input_requests[0]`, `if ("sglang" in backend and _get_bool_env_var("SGLANG_IS_IN_CI"))
or flush_cache: requests.post(base_url + "/flush_cache")`; run_benchmark: `np.random.seed(args.seed)`.
"""
from __future__ import annotations

import numpy as np

from core.physics import catalog, memory
from core.serving.workload import Workload


def lengths(bench: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The prompt and output lengths of a run's n requests (an output of 0 tokens is sent as 1)."""
    rng = np.random.RandomState(bench.get("seed", 1))
    prompt = rng.randint(1, bench["input_len"] + 1, size=n)
    output = rng.randint(bench["output_min"], bench["output_len"] + 1, size=n)
    return prompt.astype(np.int64), np.maximum(output, 1).astype(np.int64)


def replay(run: dict, runs_by_id: dict, cfg) -> Workload:
    """The requests `run` sent as `cfg` (a SimConfig) replays it, after the runs its server_before
    names (looked up in runs_by_id), the server's pool holding what the memory planner gives the replica."""
    plan = memory.plan_memory(catalog.get_gpu(cfg.gpu), catalog.get_model(cfg.model), cfg.tp, cfg.block_size,
                              cfg.mem_util, cfg.max_batched_tokens, cfg.max_seqs, cfg.dtype, kv_dtype=cfg.kv_dtype,
                              ep=cfg.ep, dp_attention=cfg.dp_attention)
    earlier = [runs_by_id[i] for i in run["server_before"]]
    return workload(run, earlier, plan.kv_blocks * cfg.block_size)


def workload(run: dict, earlier: list[dict], pool_tokens: float) -> Workload:
    """A closed-loop run's requests in the order it sends them, each with the prompt tokens the cache
    holds when it arrives: its first prompt whole (the warm-up), and of each earlier run on the
    server, newest first while the pool holds all they left (prompt and output of every request),
    the prefix it shares with the same conversation's prompt there (the whole prompt at the same
    --random-input-len, else the shorter cut)."""
    prompt, output = lengths(run["bench_lengths"], run["requests"])
    cached = np.zeros_like(prompt)
    held = 0.0
    for before in reversed(earlier):
        p, o = lengths(before["bench_lengths"], before["requests"])
        held += float(p.sum() + o.sum())
        if held > pool_tokens:
            break
        k = min(len(p), len(prompt))
        cached[:k] = np.maximum(cached[:k], np.minimum(p[:k], prompt[:k]))
    cached[0] = prompt[0]
    return Workload(np.zeros(len(prompt)), prompt, output, cached_tokens=cached)
