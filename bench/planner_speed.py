"""How fast the planner searches, in a fresh process, on the local process pool, 2,000 requests per
simulation, every answer checked by the default rule (20% headroom, steps at the trust band's
slower edge): the Planner view's default search (one GPU type, up to 16 GPUs), the same with one
spare replica over two GPU types (H100 and H200, splits over each pair), and a 32-GPU search over
three GPU types (H100, H200, B200) with one spare replica; and two mixtures of experts, whose
expert-parallel shapes the search adds (Mixtral-8x7B on the default budget, DeepSeek-V3 on up to
32 H200s).

usage: python bench/planner_speed.py [--out bench/results/planner.json] [--workers N] [--engine {vllm,sglang,trtllm}]

--engine plans every case on SGLang or TensorRT-LLM as each runs out of the box (one schedule of its own
where vLLM's three are searched; bench/results/planner_sglang.json, planner_trtllm.json).

"first" includes starting the pool (each worker loads the compiled engine from numba's disk cache);
"warm" is a second search on the running pool at a 2% higher rate (so that no simulation is reused
from the first), which is what a search after a slider move costs in the dashboard. Candidates per second count every
deployment within the budget (most are pruned without simulating); simulations per second count
the engine runs.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.planner import executors  # noqa: E402
from core.planner.plan import plan  # noqa: E402
from core.planner.space import Budget, Engine, Targets, Workload  # noqa: E402
from core.serving import engines  # noqa: E402
from core.serving.workload import WorkloadSpec  # noqa: E402

ONE, TWO, THREE = ("h100",), ("h100", "h200"), ("h100", "h200", "b200")
CASES = [  # (label, model, rate, prompt, output, TTFT target ms, TPOT target ms, GPU types, most GPUs, spares)
    ("Llama-3.1-8B, 4 req/s, 512/256 tokens", "llama-3.1-8b", 4.0, 512, 256, 1000, 100, ONE, 16, 0),
    ("Llama-3.1-8B, 44 req/s, 512/256 tokens", "llama-3.1-8b", 44.0, 512, 256, 1000, 100, ONE, 16, 0),
    ("Llama-3.1-70B, 8 req/s, 4096/256 tokens", "llama-3.1-70b", 8.0, 4096, 256, 3000, 50, ONE, 16, 0),
    ("Llama-3.1-8B, 44 req/s, N+1, H100+H200, 16 GPUs", "llama-3.1-8b", 44.0, 512, 256, 1000, 100, TWO, 16, 1),
    ("Llama-3.1-70B, 8 req/s, N+1, H100+H200, 16 GPUs", "llama-3.1-70b", 8.0, 4096, 256, 3000, 50, TWO, 16, 1),
    ("Llama-3.1-70B, 20 req/s, N+1, H100+H200+B200, 32 GPUs", "llama-3.1-70b", 20.0, 4096, 256, 3000, 50, THREE, 32, 1),
    # mixtures of experts: expert-parallel shapes (with and without data-parallel attention) beside tp and pp
    ("Mixtral-8x7B, 8 req/s, 512/256 tokens", "mixtral-8x7b", 8.0, 512, 256, 1000, 100, ONE, 16, 0),
    ("DeepSeek-V3, 4 req/s, 1024/512 tokens, H200, 32 GPUs", "deepseek-v3", 4.0, 1024, 512, 2000, 100, ("h200",), 32, 0),
]


def main(argv: list[str]) -> None:
    engine = argv[argv.index("--engine") + 1] if "--engine" in argv else "vllm"
    name = "planner.json" if engine == "vllm" else f"planner_{engine}.json"
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else ROOT / "bench" / "results" / name
    workers = int(argv[argv.index("--workers") + 1]) if "--workers" in argv else (os.cpu_count() or 1)
    results = []
    for label, model, rate, prompt, output, ttft, tpot, gpu_types, max_gpus, spares in CASES:
        w = Workload(model, WorkloadSpec(n_requests=2000, rate=rate, prompt_mean=prompt, output_mean=output,
                                         length_dist="lognormal"), Targets(ttft, tpot),
                     Engine(name=engine, max_seqs=engines.max_seqs(engine, Engine().max_seqs)))
        budget = Budget(gpu_types=gpu_types, max_gpus=max_gpus, spare_replicas=spares)
        runs = []
        for scale in (1.0, 1.02):
            t0 = time.perf_counter()
            p = plan(w.at_rate(rate * scale), budget, executor="local", workers=workers)
            runs.append(time.perf_counter() - t0)
        for pool in executors._pools.values():  # the next case starts its own pool
            pool.shutdown()
        executors._pools.clear()
        c = p.counts
        best = p.row(p.cheapest) if p.cheapest else None
        row = dict(case=label, first_s=runs[0], warm_s=runs[1], workers=workers, deployments=c["deployments"],
                   pruned_memory=c["pruned_memory"], pruned_roofline=c["pruned_roofline"], not_needed=c["not_needed"],
                   simulated=c["simulated"], rate_search_runs=c["rate_search_runs"],
                   candidates_per_s=c["deployments"] / runs[1], simulations_per_s=c["simulations"] / runs[1],
                   cheapest=best["deployment"] if best else None, headroom=best["headroom"] if best else None)
        results.append(row)
        print(f"{label}: {runs[0]:.1f} s first (pool start included), {runs[1]:.1f} s warm; {c['deployments']} "
              f"deployments, {c['simulated']} simulated + {c['rate_search_runs']} rate runs; "
              f"{row['candidates_per_s']:.0f} candidates/s, {row['simulations_per_s']:.0f} simulations/s; "
              f"cheapest: {row['cheapest']}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(cpus=os.cpu_count(), engine=engine,
                                   rule="20% headroom, steps at the trust band's slower edge", cases=results),
                              indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv)
