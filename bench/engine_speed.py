"""Simulator speed and memory: simulated output tokens per second of wall time, peak memory, and
the compile time cold and from the on-disk cache. Speeds are warm (the process has already run
one small simulation) and the median of three runs (a shared VM's timings vary by a third from
run to run); "engine" is the jitted loop, "simulate" adds generating the workload, building the
engine's inputs and the summary metrics. "quiet_steps" are those run back to back
(core/engine/fastforward.py).

usage: python bench/engine_speed.py [--quick] [--out bench/results/engine.json]
       python bench/engine_speed.py --speculative [--out bench/results/engine_speculative.json]
       python bench/engine_speed.py --offload [--out bench/results/engine_offload.json]
       python bench/engine_speed.py --experts [--out bench/results/engine_experts.json]

Each case runs in a fresh process (so that peak memory is its own) after the cache is warm; the
cold compile runs with an empty numba cache directory. Figures are for one core: numba code here
is single-threaded. "simulate_cpu_s" is the CPU time of the whole simulate call (the least of the
runs): on a machine other processes share, wall times grow with the load and CPU time much less.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASE = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec
import_s = time.perf_counter() - t0
def config(n):
    spec = WorkloadSpec(n_requests=n, rate={rate}, prompt_mean={prompt}, output_mean=128, length_dist="lognormal", seed=1,
                        {shared})
    return SimConfig(gpu="h100", model="llama-3.1-8b", gpus={gpus}, pp={pp}, router="rr", workload=spec)
t1 = time.perf_counter()
simulate(config(10))  # the first call in a process loads the compiled engine
first_s = time.perf_counter() - t1
engine, total, cpu, r = [], [], [], None
for _ in range({repeat}):
    r = None  # free the last run's tables: peak memory is one run's
    t1, c1 = time.perf_counter(), time.thread_time()
    r = simulate(config({n}))
    total.append(time.perf_counter() - t1)
    cpu.append(time.thread_time() - c1)
    engine.append(r.summary["sim_wall_s"])
s = r.summary
tokens = int(r.requests["output_tokens"].sum())
engine_s, total_s = sorted(engine)[len(engine) // 2], sorted(total)[len(total) // 2]
print(json.dumps(dict(requests={n}, rate={rate}, gpus={gpus}, replicas=s["replicas"], engine_s=engine_s,
                      prefix_hit_rate=s["prefix_hit_rate"], prefix_cache_evictions=s["prefix_cache_evictions"],
                      engine_runs_s=engine, simulate_s=total_s, simulate_cpu_s=min(cpu), first_call_s=import_s + first_s, steps=s["steps"],
                      quiet_steps=s["quiet_steps"], mean_batch=s["mean_batch"], stable=s["stable"],
                      output_tokens=tokens, sim_tokens_per_wall_s=tokens / engine_s,
                      peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
"""


# prefix caching at work: the same 512-token prompts, half of them one of 10 shared 256-token system
# prompts; or conversations of 4 turns 30 s apart (each prompt holds the earlier turns)
SHARED = {"off": (512, ""), "shared": (256, "prefix_groups=10, prefix_tokens=256"),
          "turns": (128, "turns=4, turn_gap_s=30.0")}


def run_case(n: int, rate: float, gpus: int = 1, env: dict | None = None, repeat: int = 3, prefix: str = "off",
             pp: int = 1) -> dict:
    prompt, shared = SHARED[prefix]
    code = CASE.format(root=str(ROOT), n=n, rate=rate, gpus=gpus, repeat=repeat, prompt=prompt, shared=shared, pp=pp)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env or os.environ.copy(),
                         timeout=3600)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(r: dict) -> str:
    return (f"engine {r['engine_s']:.3f} s (simulate {r['simulate_s']:.3f} s, {r['simulate_cpu_s']:.3f} s of CPU), "
            f"{r['sim_tokens_per_wall_s'] / 1e6:.1f}M simulated tok/s, {r['steps'] / 1e6:.2f}M steps "
            f"({r['quiet_steps'] / max(r['steps'], 1):.0%} quiet), peak {r['peak_rss_mb']:.0f} MB")


SPECULATIVE_CASE = r"""
import json, sys
sys.path.insert(0, {root!r})
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec
def config(rate, **spec):
    return SimConfig(gpu="h100", model="llama-3.1-8b", gpus=1, router="rr", workload=WorkloadSpec(
        n_requests={n}, rate=rate, prompt_mean=512, output_mean=128, length_dist="lognormal", seed=1), **spec)
out = []
for load, rate in (("light", 5.0), ("heavy", 40.0)):
    cases = {{"plain": config(rate), "eagle": config(rate, spec_method="eagle"), "ngram": config(rate, spec_method="ngram")}}
    simulate(config(rate, spec_method="eagle")).summary  # warm
    best, runs = interleave(cases, {repeat})
    for k in cases:
        s = runs[k].summary
        out.append(dict(load=load, rate=rate, spec=k, requests={n}, engine_s=best[k], engine_vs_plain=best[k] / best["plain"],
                        steps=s["steps"], quiet_steps=s["quiet_steps"], mean_batch=s["mean_batch"],
                        output_tokens=int(runs[k].requests["output_tokens"].sum()),
                        tokens_per_step=(s["speculative"] or {{}}).get("tokens_per_step", 1.0)))
print(json.dumps(out))
"""


# prepended to a case script: each case runs `repeat` times, the cases in turn, so that a slow spell of
# the machine falls on every case alike; the least engine time of each, and its last run (`rounds`: every
# run's engine time, round by round, for ratios of runs a second apart)
INTERLEAVE = r"""
rounds = {}
def interleave(cases, repeat):
    best, runs = {k: 1e9 for k in cases}, {}
    rounds.clear()
    rounds.update({k: [] for k in cases})
    for _ in range(repeat):
        for k, c in cases.items():
            runs[k] = simulate(c)
            best[k] = min(best[k], runs[k].wall_s)
            rounds[k].append(runs[k].wall_s)
    return best, runs
"""


def interleaved(case: str, n: int, repeat: int) -> list[dict]:
    """The rows a case script prints (its cases run interleaved in one fresh process)."""
    code = case.format(root=str(ROOT), n=n, repeat=repeat)
    if "interleave(" in code:  # after the script's imports, before its cases
        head, sep, rest = code.partition("out = []")
        code = head + INTERLEAVE + sep + rest
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def speculative_cases(n: int = 100_000, repeat: int = 7) -> list[dict]:
    """Speculative decoding against the plain engine on the same requests (the same output tokens):
    engine time (the least of `repeat` interleaved runs in one process) as a ratio of the plain run's,
    light and heavy. Interleaving matters: a shared VM's speed drifts by a third between runs."""
    rows = interleaved(SPECULATIVE_CASE, n, repeat)
    for r in rows:
        print(f"{n:>9,} requests, {r['load']:>5} ({r['rate']:g} req/s), {r['spec']:>5}: engine {r['engine_s']:.3f} s, "
              f"{r['steps'] / 1e6:.2f}M steps ({r['quiet_steps'] / max(r['steps'], 1):.0%} quiet), batch "
              f"{r['mean_batch']:.1f}, {r['tokens_per_step']:.2f} tokens a step: {r['engine_vs_plain']:.2f}x the "
              f"plain engine's time", flush=True)
    return rows


OFFLOAD_CASE = r"""
import json, sys
sys.path.insert(0, {root!r})
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec
def config(load, **reuse):
    users, rate = load
    spec = WorkloadSpec(n_requests={n}, rate=rate, prompt_mean=256, output_mean=256, length_dist="lognormal", seed=1,
                        turns=4, turn_gap_s=30.0, prefix_groups=8, prefix_tokens=1024, concurrency=users,
                        think_s=5.0 if users else 0.0)
    return SimConfig(gpu="l40s", model="llama-3.1-8b", gpus=4, router=reuse.pop("router", "lor"), workload=spec, **reuse)
out = []
for label, load in (("open loop, 12 req/s", (0, 12.0)), ("closed loop, 256 users", (256, float("inf")))):
    cases = {{"plain": config(load), "tier": config(load, kv_offload_gb=128.0), "prefix": config(load, router="prefix"),
             "tier+prefix": config(load, kv_offload_gb=128.0, router="prefix")}}
    simulate(config(load, kv_offload_gb=128.0, router="prefix"))  # warm
    best, runs = interleave(cases, {repeat})
    for k in cases:
        s = runs[k].summary
        off = s["kv_offload"] or {{}}
        paired = sorted(a / b for a, b in zip(rounds[k], rounds["plain"]))  # each against the plain run of its round
        out.append(dict(load=label, case=k, requests={n}, engine_s=best[k], engine_vs_plain=best[k] / best["plain"],
                        paired_vs_plain=paired[len(paired) // 2], paired_range=[paired[0], paired[-1]],
                        steps=s["steps"], prefix_hit_rate=s["prefix_hit_rate"], ttft_p50_ms=s["ttft_ms"]["p50"],
                        blocks_loaded=off.get("blocks_loaded", 0), stable=s["stable"]))
print(json.dumps(out))
"""


def offload_cases(n: int = 100_000, repeat: int = 7) -> list[dict]:
    """A host KV tier and prefix-aware routing against the plain engine (least outstanding requests,
    no tier) on the same multi-turn chat over four L40S replicas: engine time as a ratio of the
    plain run's, the least of `repeat` interleaved runs in one process against the least, and the
    median of each round's run against the plain run of its round (a second apart, so that a slow
    spell of the machine slows both sides of a ratio)."""
    rows = interleaved(OFFLOAD_CASE, n, repeat)
    for r in rows:
        lo, hi = r["paired_range"]
        print(f"{n:>9,} requests, {r['load']}, {r['case']:>11}: engine {r['engine_s']:.3f} s, {r['steps'] / 1e6:.2f}M "
              f"steps, hit rate {r['prefix_hit_rate']:.0%}, p50 TTFT {r['ttft_p50_ms']:.0f} ms, "
              f"{r['blocks_loaded']:,} blocks loaded: {r['engine_vs_plain']:.2f}x the plain engine's time (round by "
              f"round: median {r['paired_vs_plain']:.2f}x, {lo:.2f}-{hi:.2f}x)", flush=True)
    return rows


EXPERT_CASE = r"""
import json, sys
sys.path.insert(0, {root!r})
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec
def config(rate, **shape):
    return SimConfig(gpu="h100", model="mixtral-8x7b", tp=4, gpus=8, router="rr", workload=WorkloadSpec(
        n_requests={n}, rate=rate, prompt_mean=512, output_mean=128, length_dist="lognormal", seed=1), **shape)
out = []
for load, rate in (("light", 4.0), ("heavy", 30.0)):
    cases = {{"tp": config(rate), "ep": config(rate, ep=4), "ep+dp": config(rate, ep=4, dp_attention=True)}}
    simulate(config(rate, ep=4, dp_attention=True))  # warm
    best, runs = interleave(cases, {repeat})
    for k in cases:
        s = runs[k].summary
        out.append(dict(load=load, rate=rate, shape=k, requests={n}, engine_s=best[k],
                        engine_vs_tp=best[k] / best["tp"], steps=s["steps"], mean_batch=s["mean_batch"],
                        tpot_p50_ms=s["tpot_ms"]["p50"], stable=s["stable"]))
print(json.dumps(out))
"""


def expert_cases(n: int = 100_000, repeat: int = 5) -> list[dict]:
    """Mixtral-8x7B on two replicas of 4 H100s, its experts sliced by tensor parallelism, expert
    parallel, and expert parallel with data-parallel attention, on the same requests: engine time as
    a ratio of the sliced run's, the least of `repeat` interleaved runs in one process."""
    rows = interleaved(EXPERT_CASE, n, repeat)
    for r in rows:
        print(f"{n:>9,} requests, {r['load']:>5} ({r['rate']:g} req/s), {r['shape']:>5}: engine {r['engine_s']:.3f} s, "
              f"{r['steps'] / 1e6:.2f}M steps, batch {r['mean_batch']:.1f}, p50 TPOT {r['tpot_p50_ms']:.1f} ms: "
              f"{r['engine_vs_tp']:.2f}x the sliced run's time", flush=True)
    return rows


def main(argv: list[str]) -> None:
    if "--experts" in argv:
        out_path = Path(argv[argv.index("--out") + 1]) if "--out" in argv else \
            ROOT / "bench" / "results" / "engine_experts.json"
        out_path.write_text(json.dumps(expert_cases(), indent=1) + "\n")
        return
    if "--offload" in argv:
        out_path = Path(argv[argv.index("--out") + 1]) if "--out" in argv else \
            ROOT / "bench" / "results" / "engine_offload.json"
        out_path.write_text(json.dumps(offload_cases(), indent=1) + "\n")
        return
    if "--speculative" in argv:
        out_path = Path(argv[argv.index("--out") + 1]) if "--out" in argv else \
            ROOT / "bench" / "results" / "engine_speculative.json"
        out_path.write_text(json.dumps(speculative_cases(), indent=1) + "\n")
        return
    quick = "--quick" in argv
    out_path = Path(argv[argv.index("--out") + 1]) if "--out" in argv else ROOT / "bench" / "results" / "engine.json"
    results = {}

    # compile: cold (empty cache dir), then cached (a new process finds the cache)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, LLM_LAB_SHIPPED_CACHE="0")  # not the shipped engine: compile
        cold = run_case(10, 5.0, env=env, repeat=1)
        cached = run_case(10, 5.0, env=env, repeat=1)
    results["compile"] = dict(cold_first_call_s=cold["first_call_s"], cached_first_call_s=cached["first_call_s"])
    print(f"compile: cold {cold['first_call_s']:.1f} s, from cache {cached['first_call_s']:.2f} s "
          f"(import + a 10-request simulation)", flush=True)

    # light load: ~5 running sequences; heavy: ~100 (one H100, Llama-3.1-8B, 512 in / 128 out)
    sizes = [10_000, 100_000] if quick else [10_000, 100_000, 1_000_000]
    results["single_replica"] = []
    for n in sizes:
        for label, rate in (("light", 5.0), ("heavy", 40.0)):
            r = run_case(n, rate)
            r["load"] = label
            results["single_replica"].append(r)
            print(f"{n:>9,} requests, {label:>5} ({rate:g} req/s): {summary(r)}, batch {r['mean_batch']:.1f}",
                  flush=True)

    # the same with prefix caching finding shared system prompts, and earlier turns
    results["prefix_caching"] = []
    for n in sizes[:1] + sizes[-1:]:
        for prefix in ("shared", "turns"):
            for label, rate in (("light", 5.0), ("heavy", 40.0)):
                r = run_case(n, rate, prefix=prefix)
                r.update(load=label, prefix=prefix)
                results["prefix_caching"].append(r)
                print(f"{n:>9,} requests, {label:>5} ({rate:g} req/s), {prefix}: {summary(r)}, hit rate "
                      f"{r['prefix_hit_rate']:.0%}", flush=True)

    # pipeline parallelism: the same traffic on one replica of two stages (two batches in flight)
    results["pipeline_pp2"] = []
    for n in sizes:
        for label, rate in (("light", 5.0), ("heavy", 40.0)):
            r = run_case(n, rate, gpus=2, pp=2)
            r["load"] = label
            results["pipeline_pp2"].append(r)
            print(f"{n:>9,} requests, {label:>5} ({rate:g} req/s), pp=2: {summary(r)}, batch {r['mean_batch']:.1f}",
                  flush=True)

    results["speculative"] = speculative_cases(sizes[1])
    results["offload"] = offload_cases(sizes[1])

    # a cluster: 64 single-GPU replicas behind the gateway
    n = 100_000 if quick else 1_000_000
    r = run_case(n, 64 * 40.0, gpus=64)
    results["cluster_64"] = r
    print(f"64 replicas, {n:,} requests at {64 * 40:g} req/s: {summary(r)}", flush=True)

    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
