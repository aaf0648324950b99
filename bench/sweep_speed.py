"""Speed of a concurrency sweep: ten levels (1 to 512 users) of one deployment, as
`python -m core sweep` and the Bottlenecks view run them. Warm (the process has loaded the compiled
engine and run one small simulation); wall and CPU time of each whole sweep, median and range of
five. numba's code is single-threaded: run it under `taskset -c 0` to hold it to one core.

usage: python bench/sweep_speed.py [--out bench/results/sweep.json]
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.serving import frontier  # noqa: E402
from core.serving.simulate import SimConfig, simulate  # noqa: E402
from core.serving.workload import WorkloadSpec  # noqa: E402

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
CASES = {
    # 500 requests a level at least, fixed lengths
    "8b_h100_fixed_lengths": SimConfig(gpu="h100", model="llama-3.1-8b", policy="sarathi",
                                     workload=WorkloadSpec(n_requests=500, prompt_mean=1024, output_mean=256)),
    # the Lab's workload shape: log-normal lengths, 2,048-token budget, 400 requests a level at least
    "lab_8b_h100_lognormal": SimConfig(gpu="h100", model="llama-3.1-8b", policy="sarathi", max_batched_tokens=2048,
                                       workload=WorkloadSpec(n_requests=400, prompt_mean=512, output_mean=256,
                                                             length_dist="lognormal")),
    "70b_tp4_h100_lognormal": SimConfig(gpu="h100", model="llama-3.1-70b", tp=4, policy="sarathi",
                                        max_batched_tokens=2048,
                                        workload=WorkloadSpec(n_requests=400, prompt_mean=2048, output_mean=256,
                                                              length_dist="lognormal")),
}


def main(argv: list[str]) -> None:
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else None
    warm = CASES["8b_h100_fixed_lengths"]
    simulate(replace(warm, workload=replace(warm.workload, n_requests=10)))
    results = {}
    for name, cfg in CASES.items():
        wall, cpu, steps = [], [], 0
        for _ in range(5):
            t0, c0 = time.perf_counter(), time.process_time()
            r = frontier.sweep(cfg, LEVELS)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        requests = sum(p["requests"] for p in r["points"])
        results[name] = dict(levels=list(LEVELS), requests=requests, wall_s_median=sorted(wall)[2],
                             wall_s_min=min(wall), wall_s_max=max(wall), cpu_s_median=sorted(cpu)[2],
                             knee_users=r["points"][r["knee"]]["users"])
        print(f"{name}: {len(LEVELS)} levels, {requests:,} requests: wall {sorted(wall)[2]:.3f} s median "
              f"({min(wall):.3f}-{max(wall):.3f}), CPU {sorted(cpu)[2]:.3f} s; knee at "
              f"{results[name]['knee_users']} users")
    if out:
        out.write_text(json.dumps(results, indent=1) + "\n")
        print("wrote", out)


if __name__ == "__main__":
    main(sys.argv[1:])
