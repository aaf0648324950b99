"""Clusters: replicas and routing, tensor parallelism, disaggregation, autoscaling, cost."""
import numpy as np
import pytest

from core.physics import catalog
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec


def run(**kw):
    wl = kw.pop("workload", None) or WorkloadSpec(**kw.pop("wl", {}))
    return simulate(SimConfig(workload=wl, **kw))


def test_gpus_over_tp_give_the_replicas():
    s = run(gpu="h100", model="llama-3.1-8b", gpus=8, tp=2, wl=dict(n_requests=200, rate=20)).summary
    assert (s["replicas"], s["gpus"], s["tp"]) == (4, 8, 2)
    with pytest.raises(ValueError, match="multiple of tp"):
        run(gpu="h100", model="llama-3.1-8b", gpus=6, tp=4, wl=dict(n_requests=5))


def test_llama_70b_is_refused_on_one_h100_and_runs_on_four_at_tp4():
    with pytest.raises(ValueError, match=r"at least 2 GPUs with tensor parallelism \(tp=2\)"):
        run(gpu="h100", model="llama-3.1-70b", wl=dict(n_requests=5))
    s = run(gpu="h100", model="llama-3.1-70b", gpus=4, tp=4, wl=dict(n_requests=300, rate=3)).summary
    assert s["stable"] and s["replicas"] == 1 and s["tpot_ms"]["mean"] > 0


def test_n_replicas_at_n_times_the_rate_match_one_replica():
    one = run(gpu="h100", model="llama-3.1-8b", wl=dict(n_requests=4000, rate=4, length_dist="sharegpt", seed=1))
    four = run(gpu="h100", model="llama-3.1-8b", gpus=4, router="rr",
               wl=dict(n_requests=16000, rate=16, length_dist="sharegpt", seed=2))
    a, b = one.summary, four.summary
    for metric, stats in (("ttft_ms", ("p50", "p90")), ("tpot_ms", ("mean", "p50", "p90")), ("e2e_s", ("mean", "p50"))):
        for k in stats:
            assert b[metric][k] == pytest.approx(a[metric][k], rel=0.10), (metric, k)
    assert b["throughput_req_s"] == pytest.approx(4 * a["throughput_req_s"], rel=0.05)


def test_tensor_parallelism_lowers_tpot_at_batch_one():
    wl = dict(n_requests=20, rate=0.05, prompt_mean=256, output_mean=256)  # one request at a time
    tp1 = run(gpu="h100", model="llama-3.1-8b", tp=1, wl=wl).summary["tpot_ms"]["mean"]
    tp2 = run(gpu="h100", model="llama-3.1-8b", tp=2, wl=wl).summary["tpot_ms"]["mean"]
    assert tp2 < 0.85 * tp1


def test_a_replica_across_nodes_pays_the_inter_node_link():
    wl = dict(n_requests=30, rate=0.2, prompt_mean=2048, output_mean=64)
    in_node = run(gpu="h100", model="llama-3.1-405b", tp=8, dtype="fp8", wl=wl).summary
    two_nodes = run(gpu="h100", model="llama-3.1-405b", tp=16, dtype="fp8", wl=wl).summary
    # twice the GPUs halve the weight traffic, but the all-reduces now cross 50 GB/s NICs
    assert two_nodes["ttft_ms"]["mean"] > in_node["ttft_ms"]["mean"]


def _long_prompt_trace(n=1500, rate=5.0, seed=0):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    prompt = rng.integers(3000, 6000, n)
    return "\n".join(["arrival_s,prompt_tokens,output_tokens"] + [f"{a:.4f},{p},200" for a, p in zip(t, prompt)])


def test_disaggregation_wins_goodput_for_long_prompts_under_a_tight_tpot():
    # DistServe's direction: colocated, every long prefill stalls the decodes sharing its GPU
    kw = dict(gpu="h100", model="llama-3.1-8b", gpus=8, max_model_len=8192,
              trace_csv=_long_prompt_trace(n=1500, rate=24), ttft_slo_ms=2000, tpot_slo_ms=10)
    colocated = simulate(SimConfig(policy="vllm", **kw)).summary
    split = simulate(SimConfig(policy="vllm", disagg=True, prefill_gpus=4, **kw)).summary
    assert split["goodput_req_s"] > 1.5 * colocated["goodput_req_s"]
    assert split["tpot_ms"]["p90"] < colocated["tpot_ms"]["p90"]


def test_disaggregation_need_not_win_for_short_prompts_under_a_loose_target():
    kw = dict(gpu="h100", model="llama-3.1-8b", gpus=4, ttft_slo_ms=2000, tpot_slo_ms=200,
              workload=WorkloadSpec(n_requests=4000, rate=40, prompt_mean=128, output_mean=256, seed=3))
    colocated = simulate(SimConfig(policy="sarathi", **kw)).summary
    split = simulate(SimConfig(policy="sarathi", disagg=True, prefill_gpus=1, **kw)).summary
    assert colocated["goodput_req_s"] >= 0.95 * split["goodput_req_s"]


def test_littles_law_per_pool_and_kv_transfer_times():
    r = simulate(SimConfig(gpu="h100", model="llama-3.1-8b", gpus=4, disagg=True, prefill_gpus=2, max_model_len=8192,
                           trace_csv=_long_prompt_trace(n=800, rate=4)))
    s, pools = r.summary, r.summary["pools"]
    for name in ("prefill", "decode", "transfer"):
        pool = pools[name]
        mean_in = pool.get("mean_in_pool", pool.get("mean_in_transfer"))
        assert mean_in == pytest.approx(pool["arrival_rate_req_s"] * pool["mean_time_s"], rel=0.05), name
    # each transfer moves the prompt's KV (and the first token's) over the link: bytes / bandwidth + latency
    q = r.requests
    moved = q["xfer_done_s"] >= 0
    kv = catalog.get_model("llama-3.1-8b").kv_bytes_per_token()
    wire = (q["xfer_done_s"] - q["xfer_start_s"])[moved]
    bytes_ = q["prompt_tokens"][moved] * kv
    bw = np.median(bytes_ / wire)
    assert 100e9 < bw < 450e9  # NVLink inside one 8-GPU node, per direction
    assert s["kv_transfer_ms"]["p50"] > 0
    assert (q["xfer_ready_s"][moved] <= q["xfer_start_s"][moved]).all()
    assert (q["xfer_done_s"][moved] <= q["finish_s"][moved]).all()


def test_autoscaler_follows_a_step_up_and_back_down():
    startup = 30.0
    spec = WorkloadSpec(n_requests=30000, rate_schedule=((0, 4), (300, 50), (800, 4)), prompt_mean=512,
                        output_mean=256, seed=1)
    r = simulate(SimConfig(gpu="h100", model="llama-3.1-8b", gpus=8, autoscale=True, min_replicas=1,
                           scale_interval_s=5, startup_fixed_s=startup, workload=spec, trace_cap=16384))
    tr = r.trace
    t, active = tr["time_s"], tr["active_replicas"]
    load_s = 16e9 / 5e9  # 16 GB of weights at 5 GB/s
    before = active[t < 295]
    assert before.max() == 1
    # within one tick, the start-up delay and a few more ticks, replicas are serving the new load
    react = 300 + 5 + startup + load_s + 3 * 5
    assert active[(t > react) & (t < 800)].min() >= 3
    assert active[(t > 1000)].max() <= 2  # drained after the step down
    s = r.summary
    assert 0 < s["gpu_hours"] < 8 * s["makespan_s"] / 3600  # less than keeping all 8 GPUs on


def test_cost_is_gpu_hours_times_the_list_price():
    r = run(gpu="a100-80gb", model="llama-3.1-8b", gpus=2, wl=dict(n_requests=500, rate=4))
    s = r.summary
    price = catalog.get_gpu("a100-80gb").price_usd_per_gpu_hour
    assert s["gpu_hours"] == pytest.approx(2 * r.summary["makespan_s"] / 3600, rel=0.02)
    tokens = r.requests["output_tokens"].sum()
    assert s["cost_per_1m_tokens_usd"] == pytest.approx(s["gpu_hours"] * price / (tokens / 1e6))


def test_least_outstanding_routing_beats_round_robin_on_heavy_tailed_requests():
    wl = dict(n_requests=8000, rate=45, length_dist="lognormal", prompt_mean=400, output_mean=300, spread=1.5, seed=4)
    rr = run(gpu="h100", model="llama-3.1-8b", gpus=4, router="rr", max_seqs=32, wl=wl).summary
    lor = run(gpu="h100", model="llama-3.1-8b", gpus=4, router="lor", max_seqs=32, wl=wl).summary
    # round robin keeps sending to a replica stuck behind long requests; least outstanding does not
    assert lor["ttft_ms"]["p99"] < 0.5 * rr["ttft_ms"]["p99"]
