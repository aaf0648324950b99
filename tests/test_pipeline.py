"""Pipeline parallelism: a replica of tp x pp GPUs, pp batches in flight, activations handed from
stage to stage over the node's links or the network."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.physics import catalog, costmodel
from core.physics.memory import plan_memory
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec
from tests.test_engine import assert_same_run


def run(**kw):
    wl = kw.pop("workload", None) or WorkloadSpec(**kw.pop("wl", {}))
    return simulate(SimConfig(workload=wl, **kw))


def test_one_request_takes_one_full_pass_plus_the_handoffs():
    # alone, a request's batch crosses both stages one after the other (the other stage idles: the
    # bubble), so each token takes what one GPU holding the whole model takes, plus the hand-off of
    # its activations (hidden state and residual, 16-bit) over NVLink
    one = dict(model="llama-3.1-8b", gpu="h100", policy="sarathi",
               wl=dict(n_requests=1, rate=1.0, prompt_mean=512, output_mean=64, length_dist="fixed"))
    whole, staged = run(**one).summary, run(pp=2, gpus=2, **one).summary
    model, gpu, eff = catalog.get_model("llama-3.1-8b"), catalog.get_gpu("h100"), costmodel.fitted()
    handoff_ms = (eff.link_latency_us * 1e-6 + 2 * model.hidden * 2 / (gpu.link_gbps_per_dir * 1e9 * eff.link_eff)) * 1e3
    assert staged["tpot_ms"]["p50"] == pytest.approx(whole["tpot_ms"]["p50"] + handoff_ms, rel=2e-3)
    assert staged["ttft_ms"]["p50"] > whole["ttft_ms"]["p50"]
    assert staged["ttft_ms"]["p50"] == pytest.approx(whole["ttft_ms"]["p50"], rel=0.01)


def test_two_stages_at_saturation_serve_twice_what_one_pass_at_a_time_serves():
    # prompts arrive faster than either deployment serves them; each step is a full token budget,
    # compute bound. One GPU runs every layer of a batch; two stages each run half the layers of
    # one batch while the other batch is on the other stage: twice the batches per unit time
    sat = dict(model="llama-3.1-8b", gpu="h100", policy="sarathi", max_batched_tokens=2048,
               wl=dict(n_requests=2000, rate=200.0, prompt_mean=2000, output_mean=16, length_dist="fixed"))
    one, two = run(**sat).summary, run(pp=2, gpus=2, **sat).summary
    assert not one["stable"] and not two["stable"]  # saturated
    assert 1.85 < two["throughput_tok_s"] / one["throughput_tok_s"] < 2.02


def test_tp8_pp2_beats_tp16_across_nodes_on_decode_latency_for_405b_on_h100():
    # tp=16 spans two 8-GPU nodes: every layer's two all-reduces cross the network (50 GB/s per
    # GPU against NVLink's 450), and a step that carries prompt chunks carries their activations
    # too; tp=8 within each node and pp=2 across crosses the network once per step
    w = dict(n_requests=300, rate=2.0, prompt_mean=1000, output_mean=200, seed=3)
    kw = dict(model="llama-3.1-405b", gpu="h100", gpus=16, policy="sarathi", wl=w)
    tp16, tp8pp2 = run(tp=16, **kw).summary, run(tp=8, pp=2, **kw).summary
    assert tp8pp2["tpot_ms"]["p50"] < 0.5 * tp16["tpot_ms"]["p50"]
    assert tp8pp2["tpot_ms"]["p99"] < tp16["tpot_ms"]["p99"]
    assert tp8pp2["stable"] and not tp16["stable"]


def test_each_stage_holds_its_layers_and_their_share_of_the_kv_cache():
    gpu, model = catalog.get_gpu("h100"), catalog.get_model("llama-3.1-405b")
    with pytest.raises(ValueError, match="does not fit"):
        plan_memory(gpu, model, tp=8)  # 810 GB of weights over 8 GPUs of 80 GB
    staged = plan_memory(gpu, model, tp=8, pp=2)
    assert staged.weights_bytes == pytest.approx(model.weight_bytes() / 16, rel=0.02)
    # every GPU holds 63 of the 126 layers of each cached token
    assert staged.kv_bytes_per_token == pytest.approx(model.kv_bytes_per_token() / 8 / 2)
    eight = plan_memory(gpu, catalog.get_model("llama-3.1-8b"))
    halves = plan_memory(gpu, catalog.get_model("llama-3.1-8b"), pp=2)
    assert halves.kv_blocks > 2 * eight.kv_blocks  # half the layers per token, and half the weights


def test_batches_in_flight_share_one_pool_and_one_sequence_limit():
    # max_num_seqs counts every running request of the replica, whichever batch it is in
    r = run(model="llama-3.1-8b", gpu="h100", pp=2, gpus=2, max_seqs=16, policy="sarathi",
            wl=dict(n_requests=600, rate=100.0, prompt_mean=300, output_mean=200, seed=2))
    s, q = r.summary, r.requests
    assert (q["generated_tokens"] == q["output_tokens"]).all()
    assert s["replicas"] == 1 and s["gpus"] == 2 and set(np.unique(q["replica"])) == {0}
    assert s["mean_batch"] <= 16 / 2 + 1e-9  # two batches in flight: at most 16 sequences between them
    assert 0 < s["peak_kv_blocks_used"] <= s["kv_blocks_total"] == plan_memory(
        catalog.get_gpu("h100"), catalog.get_model("llama-3.1-8b"), 1, 16, 0.9, 8192, 16, "bf16", 2).kv_blocks


@pytest.mark.parametrize("pp,gpus,policy,rate", [(2, 4, "vllm", 20.0), (4, 4, "sarathi", 3.0), (3, 3, "orca", 6.0),
                                                 (2, 2, "static", 3.0)])
def test_quiet_pipeline_steps_run_back_to_back_with_the_loops_results(pp, gpus, policy, rate):
    kw = dict(gpu="l4", model="llama-3.1-8b", pp=pp, gpus=gpus, policy=policy, max_seqs=32, mem_util=0.85,
              max_model_len=2048, trace_cap=64,
              wl=dict(n_requests=400, rate=rate, prompt_mean=500, output_mean=200, length_dist="lognormal", seed=pp))
    fast = run(**kw)
    assert fast.summary["quiet_steps"] > 0
    assert_same_run(fast, run(**kw, fast_forward=False))


def test_a_pipeline_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="multiple of 4"):
        run(model="llama-3.1-8b", tp=2, pp=2, gpus=6, wl=dict(n_requests=5))
    with pytest.raises(ValueError, match="colocated"):
        run(model="llama-3.1-8b", pp=2, gpus=4, disagg=True, prefill_gpus=2, wl=dict(n_requests=5))
    with pytest.raises(ValueError, match="layers"):
        run(model="llama-3.1-8b", pp=64, gpus=64, wl=dict(n_requests=5))


def test_the_lab_runs_a_replica_larger_than_a_node_as_tp_within_and_pp_across_and_says_so():
    from core.lab.inputs import LabInputs, current_config
    from core.lab.report import describe_config, lab_view
    inputs = LabInputs(model="llama-3.1-405b", gpu="h100", gpus=16, tensor_parallel=True, rate=2.0,
                       prompt_tokens=1000, output_tokens=200, requests=200)
    cfg = current_config(inputs)
    assert (cfg.tp, cfg.pp) == (8, 2)
    assert "tp=8 x pp=2 on 16 H100" in describe_config(cfg)
    view = lab_view(inputs)
    assert "pipeline parallel across" in view["placement"] and "8-GPU nodes" in view["placement"]
    one_node = current_config(LabInputs(model="llama-3.1-70b", gpu="h100", gpus=8, tensor_parallel=True, tp=4))
    assert one_node.pp == 1 and lab_view(LabInputs(model="llama-3.1-8b"))["placement"] is None


def test_the_planner_searches_pipelined_replicas():
    from core.planner.space import Budget, Workload, shapes, to_config
    w = Workload(model="llama-3.1-405b", spec=WorkloadSpec(n_requests=100, rate=2.0, prompt_mean=1000, output_mean=200))
    found = {(d.tp, d.pp) for d in shapes(w, Budget(gpu_types=("h100",), max_gpus=16, dtypes=("bf16",)))}
    assert {(16, 1), (8, 2)} <= found
    d = next(d for d in shapes(w, Budget(gpu_types=("h100",), max_gpus=16, dtypes=("bf16",))) if d.pp == 2)
    assert d.gpus == 16 and "tp8×pp2" in d.label() and d.stage == 4
    assert simulate(to_config(d, w)).summary["pp"] == 2


def test_a_pinned_pipelined_deployment_keeps_its_stages_in_compare():
    from core.lab import compare
    from core.lab.inputs import LabInputs
    inputs = LabInputs(model="llama-3.1-405b", gpu="h100", gpus=16, tensor_parallel=True, rate=1.0, requests=100)
    d = compare.from_lab(inputs)
    assert (d["tp"], d["pp"]) == (8, 2) and "tp 8 x pp 2" in d["label"]
    cfg = compare.config(d, inputs)
    assert (cfg.tp, cfg.pp, cfg.gpus) == (8, 2, 16)
    with pytest.raises(ValueError, match="multiple of 16"):
        compare.normalise(dict(d, gpus=24), inputs)


def test_a_handoff_between_nodes_crosses_the_network_and_one_within_a_node_nvlink():
    # tp=4 x pp=4 on 8-GPU nodes: stages 0-1 on one node, 2-3 on the other. One 8,192-token prompt
    # alone, in 2,048-token chunks: each chunk crosses the pipeline once, with two hand-offs over
    # NVLink and one over the network; each hand-off moves the chunk's hidden state and residual,
    # 1/4 from each GPU of the stage, then all-gathered within the next stage's NVLink group
    one = dict(model="llama-3.1-70b", gpu="h100", tp=4, policy="sarathi", max_batched_tokens=2048,
               wl=dict(n_requests=1, rate=1.0, prompt_mean=8192, output_mean=2, length_dist="fixed"))
    whole, staged = run(**one).summary, run(pp=4, gpus=16, **one).summary
    model, gpu, eff = catalog.get_model("llama-3.1-70b"), catalog.get_gpu("h100"), costmodel.fitted()
    chunk_bytes = 2048 * 2 * model.hidden * 2
    gather = 3 / 4 * chunk_bytes / (gpu.link_gbps_per_dir * 1e9 * eff.link_eff)
    calls = 2 * eff.link_latency_us * 1e-6  # the send and the all-gather

    def hop(gbps):
        return calls + chunk_bytes / 4 / (gbps * 1e9 * eff.link_eff) + gather

    chunks = 8192 // 2048
    expected_ms = chunks * (2 * hop(gpu.link_gbps_per_dir) + hop(gpu.internode_gbps_per_dir)) * 1e3
    assert staged["ttft_ms"]["p50"] - whole["ttft_ms"]["p50"] == pytest.approx(expected_ms, rel=0.05)
    assert expected_ms > 1.5 * chunks * 3 * hop(gpu.link_gbps_per_dir) * 1e3  # the network hop shows


@st.composite
def pipelines(draw):
    pp = draw(st.integers(2, 4))
    shared = draw(st.booleans())  # system prompts the prefix cache finds, in a pool the lanes share
    wl = WorkloadSpec(n_requests=draw(st.integers(1, 150)), rate=draw(st.floats(0.5, 300)),
                      # with a 64-token system prompt, within the max model length below (1,024)
                      prompt_mean=draw(st.floats(1, 660)), output_mean=draw(st.floats(1, 300)),
                      length_dist=draw(st.sampled_from(["fixed", "exponential", "lognormal"])),
                      prefix_groups=draw(st.integers(1, 4)) if shared else 0, prefix_tokens=64 if shared else 0,
                      seed=draw(st.integers(0, 10_000)))
    policy = draw(st.sampled_from(["serial", "static", "orca", "vllm", "sarathi"]))
    max_seqs = draw(st.integers(1, 64))
    return dict(gpu="l4", model="llama-3.1-8b", pp=pp, gpus=pp * draw(st.integers(1, 2)), policy=policy,
                mem_util=draw(st.floats(0.8, 0.92)), router=draw(st.sampled_from(["rr", "lor", "kv"])), workload=wl,
                max_seqs=max_seqs, max_batched_tokens=max(max_seqs, draw(st.integers(64, 4096))), max_model_len=1024,
                trace_cap=64)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelines())
def test_any_pipeline_serves_every_request_within_its_pool_and_runs_quiet_steps_exactly(kw):
    r = run(**kw)
    q, s = r.requests, r.summary
    assert (q["generated_tokens"] == q["output_tokens"]).all()
    assert (q["arrival_s"] <= q["scheduled_s"]).all() and (q["first_token_s"] <= q["finish_s"]).all()
    assert 0 <= s["peak_kv_blocks_used"] <= s["kv_blocks_total"] and s["min_free_kv_blocks"] >= 0
    assert set(np.unique(q["replica"])) <= set(range(kw["gpus"] // kw["pp"]))
    assert_same_run(r, run(**kw, fast_forward=False))
