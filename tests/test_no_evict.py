"""No-evict admission (TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler) as a rule on the engine
loop, and the batch limits trtllm-bench runs an offline TensorRT-LLM rank with."""
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from core.physics import catalog
from core.serving import serve_command, trtllm_bench
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec

ROOT = Path(__file__).resolve().parent.parent

# a burst of long requests on one H100 whose KV cache holds a few dozen of them at their whole length
BURST = SimConfig(gpu="h100", model="llama-3.1-8b", max_seqs=512, max_batched_tokens=8192, policy="vllm",
                  workload=WorkloadSpec(n_requests=300, rate=100000.0, prompt_mean=2000, output_mean=2000,
                                        length_dist="fixed"))


def whole_requests(summary: dict, tokens: int, block_size: int = 16) -> int:
    """Requests of `tokens` tokens that a pool of the run's blocks holds at their whole length."""
    return summary["kv_blocks_total"] // math.ceil(tokens / block_size)


def test_no_evict_admission_never_preempts_and_runs_what_the_pool_holds_whole():
    fits_now = simulate(BURST).summary
    no_evict = simulate(replace(BURST, no_evict=True)).summary
    # admitting by the prompt's blocks fills the cache with prompts that outgrow it: the newest are preempted
    assert fits_now["preemptions"] > 0
    # reserving each request whole never runs out of blocks, and runs at most what the pool holds whole
    assert no_evict["preemptions"] == 0
    assert no_evict["mean_batch"] <= whole_requests(no_evict, 4000) < fits_now["mean_batch"]
    assert no_evict["peak_kv_blocks_used"] <= no_evict["kv_blocks_total"]
    assert no_evict["completed_req_s"] > 0 and no_evict["requests"] == 300


@settings(max_examples=12, deadline=None)
@given(prompt=st.integers(64, 6000), output=st.integers(16, 3000), rate=st.floats(1.0, 200.0),
       dist=st.sampled_from(["fixed", "lognormal", "uniform"]), policy=st.sampled_from(["vllm", "sarathi"]))
def test_no_evict_admission_never_preempts_and_serves_every_request(prompt, output, rate, dist, policy):
    cfg = replace(BURST, policy=policy, no_evict=True,
                  workload=WorkloadSpec(n_requests=120, rate=rate, prompt_mean=prompt, output_mean=output,
                                        length_dist=dist, seed=prompt))
    s = simulate(cfg).summary
    assert s["preemptions"] == 0
    assert s["peak_kv_blocks_used"] <= s["kv_blocks_total"]
    assert s["requests"] == 120 and s["completed_req_s"] > 0


def test_a_split_under_no_evict_serves_every_request_without_preempting():
    # the prefill pool holds a prompt and its first token, the decode pool the whole request as it lands
    cfg = replace(BURST, gpus=2, disagg=True, prefill_gpus=1, no_evict=True, policy="sarathi",
                  workload=replace(BURST.workload, n_requests=150, rate=20.0))
    s = simulate(cfg).summary
    assert s["preemptions"] == 0 and s["requests"] == 150 and s["completed_req_s"] > 0


def test_a_stage_that_reserves_the_maximum_length_runs_the_same_under_no_evict():
    # Orca's reservation and static batches never evict already: TensorRT-LLM's trade-offs and teaching
    # stages, which keep the engine's admission, run as they do without it
    for policy in ("orca", "static"):
        cfg = replace(BURST, policy=policy, workload=replace(BURST.workload, n_requests=60))
        assert simulate(replace(cfg, no_evict=True)).summary["tpot_ms"] == simulate(cfg).summary["tpot_ms"]


def test_every_trade_off_runs_under_tensorrt_llm():
    from core.lab import tradeoffs
    from core.lab.content import tradeoffs as all_tradeoffs
    from core.lab.inputs import LabInputs
    for t in all_tradeoffs():
        r = tradeoffs.ab(LabInputs(engine="trtllm", requests=200), t["id"])
        assert r.error is None, (t["id"], r.error)


def test_tensorrt_llm_admits_no_evict_by_default_and_a_command_line_flag_turns_it_off():
    base = [sys.executable, "-m", "core", "simulate", "--gpu", "h100", "--model", "llama-3.1-8b", "--rate", "100000",
            "--requests", "200", "--prompt", "2000", "--output", "2000", "--length-dist", "fixed", "--json"]

    def run(*flags):
        r = subprocess.run(base + list(flags), capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    trt = run("--engine", "trtllm")
    packed = run("--engine", "trtllm", "--admission", "fits-now")
    assert trt["preemptions"] == 0 and trt["mean_batch"] < packed["mean_batch"]


def test_a_deployment_admitted_otherwise_than_its_engine_says_so_beside_its_serve_line():
    from core.serving.command import on_engine
    trt = on_engine(replace(BURST, policy="sarathi"), "trtllm")
    assert trt.no_evict
    assert not any("capacity scheduler" in p["command"] for p in serve_command.pools(trt))
    packed = replace(trt, no_evict=False)
    assert any("MAX_UTILIZATION" in p["command"] for p in serve_command.pools(packed))
    vllm = replace(BURST, no_evict=True)
    assert any("admits a prompt as its blocks fit" in p["command"] for p in serve_command.pools(vllm))


def test_trtllm_bench_takes_the_llm_apis_defaults_for_formats_it_does_not_size():
    # gpt-oss's MXFP4 is not among the formats trtllm-bench's heuristic sizes: 2,048 sequences and 8,192 tokens
    b200, oss = catalog.get_gpu("b200"), catalog.get_model("gpt-oss-120b")
    assert trtllm_bench.bench_limits(b200, oss, 1, 1, False, "mxfp4", "fp8", 1024, 1024, 1024) == (2048, 8192)
    # a prompt longer than the token limit leaves room for itself beside a full batch (chunked prefill off)
    assert trtllm_bench.bench_limits(b200, oss, 1, 1, False, "mxfp4", "fp8", 8192, 1024, 9000) == (2048, 9000 + 2048)


def test_trtllm_bench_sizes_a_smaller_batch_where_each_request_takes_more_of_the_cache():
    b200, llama = catalog.get_gpu("b200"), catalog.get_model("llama-3.1-70b")
    short = trtllm_bench.bench_limits(b200, llama, 1, 1, False, "fp4", "fp8", 1024, 1024, 1024)
    long = trtllm_bench.bench_limits(b200, llama, 1, 1, False, "fp4", "fp8", 1024, 8192, 1024)
    wide = trtllm_bench.bench_limits(b200, llama, 2, 1, False, "fp4", "fp8", 1024, 8192, 1024)
    assert long[0] < short[0] < 4096
    assert wide[0] > long[0]  # two GPUs hold more of the requests' cache
    assert all(tokens >= 1024 + bs for bs, tokens in (short, long, wide))


def test_an_offline_tensorrt_llm_run_takes_trtllm_benchs_limits_where_no_flag_sets_them():
    from core.cli.main import simulation_of
    line = ("python -m core simulate --gpu b200 --model llama-3.1-70b --dtype fp4 --kv-dtype fp8 --prompt 1024 "
            "--output 8192 --length-dist fixed --requests 500 --concurrency 500 --engine trtllm")
    cfg = simulation_of(line + " --offline")
    assert (cfg.max_seqs, cfg.max_batched_tokens) == trtllm_bench.offline_limits(cfg) and cfg.no_evict
    assert simulation_of(line + " --offline --max-seqs 64").max_seqs == 64  # a flag wins
    online = simulation_of(line)
    assert (online.max_seqs, online.max_batched_tokens) == (2048, 8192)  # trtllm-serve's LLM API defaults
    # the page's reproduce line of such a run leaves them unsaid, and reads back the same limits
    from core.serving.command import simulate_command
    again = simulation_of(simulate_command(cfg))
    assert (again.max_seqs, again.max_batched_tokens, again.no_evict) == (cfg.max_seqs, cfg.max_batched_tokens, True)
    assert "--max-seqs" not in simulate_command(cfg)


def test_the_kv_gauge_reads_the_cache_as_reserved_where_admission_reserves_each_request_whole():
    # a long-output burst on TensorRT-LLM: the blocks in use stay well below what admission has promised,
    # and it is the promise that keeps the queue waiting
    from core.lab import gauges
    from core.lab.inputs import LabInputs, current_config, run
    inputs = LabInputs(engine="trtllm", prompt_tokens=512, output_tokens=4096, rate=50.0, requests=300)
    cfg = current_config(inputs)
    result = run(cfg)
    s = result.summary
    assert s["peak_kv_blocks_reserved"] > s["peak_kv_blocks_used"] and s["preemptions"] == 0
    g = next(g for g in gauges.gauges(cfg, result, inputs) if g.id == "kv")
    assert g.ratio == pytest.approx(s["peak_kv_blocks_reserved"] / s["kv_blocks_total"])
    assert "whole length" in g.why
    vllm = LabInputs(prompt_tokens=512, output_tokens=4096, rate=50.0, requests=300)
    assert "whole length" not in next(g for g in gauges.gauges(current_config(vllm), run(current_config(vllm)), vllm)
                                      if g.id == "kv").why


def test_the_memory_command_sizes_tensorrt_llms_pool_from_what_the_weights_leave():
    def pool(*flags):
        r = subprocess.run([sys.executable, "-m", "core", "memory", "--gpu", "h100", "--model", "qwen3-32b", "--dtype",
                            "fp8", "--json", *flags], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    vllm, trt = pool(), pool("--engine", "trtllm")
    left = trt["usable_bytes"] - trt["weights_bytes"] - trt["workspace_bytes"]
    assert trt["kv_pool_bytes"] == pytest.approx(0.9 * left)
    # a tenth of the weights' and workspace's memory more than vLLM's share of the whole GPU
    assert trt["kv_pool_bytes"] - vllm["kv_pool_bytes"] == pytest.approx(
        0.1 * (vllm["weights_bytes"] + vllm["workspace_bytes"]), rel=1e-6)
