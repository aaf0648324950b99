"""Expert parallelism and data-parallel attention: what physics demands of a MoE layer split over
GPUs, and one sentence for every shape no engine runs."""
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from core.physics import catalog, costmodel, expert
from core.physics.memory import plan_memory
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec

ROOT = Path(__file__).resolve().parent.parent
H200 = catalog.get_gpu("h200")
DSV3 = catalog.get_model("deepseek-v3")
MIXTRAL = catalog.get_model("mixtral-8x7b")


def step(model=DSV3, tp=8, ep=1, dp=False, gpu=H200, cv=None, **mix):
    return costmodel.steptime(gpu, model, tp, dtype="fp8", engine="vllm", attn_kernel="paged", ep=ep,
                              dp_attention=dp, ep_load_cv=cv, **mix)


@pytest.mark.parametrize("model,tp,ep,dp,fix", [
    ("llama-3.1-70b", 8, 8, False, "drop --ep"),  # a dense model has no experts to split
    ("deepseek-v3", 6, 6, False, "choose ep among"),  # 256 experts do not split over 6 GPUs
    ("deepseek-v3", 8, 1, True, "add --ep 8"),  # DP attention needs the MoE layers to join the ranks
    ("deepseek-v3", 8, 4, False, "give --tp 4"),  # ep is the replica's GPUs
])
def test_a_shape_no_engine_runs_is_refused_in_one_sentence_naming_the_fix(model, tp, ep, dp, fix):
    with pytest.raises(ValueError, match=fix) as e:
        simulate(SimConfig(gpu="h200", model=model, tp=tp, ep=ep, dp_attention=dp, dtype="fp8",
                           workload=WorkloadSpec(n_requests=10)))
    assert str(e.value).count(". ") == 0 and "Traceback" not in str(e.value)


def test_the_command_line_refuses_ep_on_a_dense_model_without_a_traceback():
    r = subprocess.run([sys.executable, "-m", "core", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100",
                        "--ep", "2", "--requests", "10"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr and "drop --ep" in r.stderr


def test_expert_parallelism_holds_the_same_expert_bytes_and_dp_attention_replicates_attention():
    tp_plan = plan_memory(H200, DSV3, 8, dtype="fp8")
    ep_plan = plan_memory(H200, DSV3, 8, dtype="fp8", ep=8)
    dp_plan = plan_memory(H200, DSV3, 8, dtype="fp8", ep=8, dp_attention=True)
    # experts / ep whole experts weigh what a 1/tp slice of every expert weighs
    assert ep_plan.weights_bytes == pytest.approx(tp_plan.weights_bytes, rel=1e-9)
    # every GPU holds attention, the dense layers, the shared expert and the LM head whole
    replicated = (DSV3.layers * DSV3.attn_params() + DSV3.dense_layers * DSV3.mlp_params(DSV3.ffn)) * 7 / 8
    assert dp_plan.weights_bytes - tp_plan.weights_bytes > replicated  # fp8: a byte a weight, and more besides
    # MLA's latent is whole on every GPU under tp; under DP attention a GPU holds its own sequences only
    assert dp_plan.kv_bytes_per_token == pytest.approx(tp_plan.kv_bytes_per_token / 8)
    assert dp_plan.kv_tokens > 4 * tp_plan.kv_tokens


def test_the_busiest_rank_sets_the_pace_and_balance_brings_it_back_to_the_mean():
    assert expert.busiest_rank_z(1) == 0 and expert.busiest_rank_z(8) < expert.busiest_rank_z(64)
    tokens = dict(prefill_tokens=8192)
    skewed, even = step(ep=8, **tokens), step(ep=8, cv=0.0, **tokens)
    assert skewed["breakdown_ms"]["experts"] > even["breakdown_ms"]["experts"]
    # routings spread more evenly over more tokens: the imbalance of sampling falls with the batch
    p = costmodel.build(H200, DSV3, 8, "fp8", ep=8, ep_load_cv=0.0)
    assert costmodel.busiest_share(p, 64.0) > costmodel.busiest_share(p, 8192.0) > 1.0
    assert costmodel.busiest_share(costmodel.build(H200, DSV3, 8, "fp8"), 64.0) == 1.0  # tp slices are even


def test_a_moe_prefill_computes_every_token_through_its_experts():
    # past the point where every expert is touched, twice the tokens take about twice the expert time
    one, two = (step(prefill_tokens=n)["breakdown_ms"]["experts"] for n in (8192, 16384))
    assert 1.8 < two / one < 2.2
    # while a decode step's weight reads stop growing once every expert is touched
    reads = [step(decode_batch=b, context=1000)["weight_bytes_read_per_gpu"] for b in (8, 64, 512, 1024)]
    assert reads[0] < reads[1] < reads[2] and reads[3] == pytest.approx(reads[2], rel=0.01)


def test_block_scaled_fp8_experts_compute_slower_but_read_the_same_bytes():
    # DeepSeek-V3's fp8 checkpoint scales each 128 x 128 block: its fused-MoE kernel rescales partial
    # sums every 128 of K, so a prefill's experts take longer than the same weights scaled a tensor
    # or a channel (fp8 quantised at load); a small decode step only reads the experts, alike
    per_tensor = dataclasses.replace(DSV3, fp8_block_scales=False)
    assert DSV3.fp8_block_scales
    block, plain = (step(model=m, prefill_tokens=8192)["breakdown_ms"]["experts"] for m in (DSV3, per_tensor))
    assert block > 1.5 * plain
    block, plain = (step(model=m, decode_batch=4, context=1000) for m in (DSV3, per_tensor))
    assert block["weight_bytes_read_per_gpu"] == plain["weight_bytes_read_per_gpu"]
    assert block["breakdown_ms"]["experts"] == pytest.approx(plain["breakdown_ms"]["experts"], rel=0.1)


def test_dp_attention_trades_all_reduces_for_an_all_to_all_that_costs_more_across_nodes():
    tp = step(prefill_tokens=4096)["breakdown_ms"]
    dp = step(ep=8, dp=True, prefill_tokens=4096)["breakdown_ms"]
    assert tp["comm"] > 0 and dp["comm"] == 0  # no tensor-parallel all-reduce left
    s8, remote8 = expert.a2a_link(H200, 8)
    s16, remote16 = expert.a2a_link(H200, 16)
    assert remote8 == 0 and remote16 == 0.5 and s16 > s8  # half of the bytes leave the node over its NICs
    # a token's dispatch and combine take longer across two nodes than within one: a decode step's
    # low-latency kernels send half its routed copies over the network, a prompt's normal ones its row
    # once to the other node, which forwards it over NVLink
    decode = {ep: expert.dispatch_combine_bytes(DSV3, ep) * expert.a2a_link(H200, ep)[0] for ep in (8, 16)}
    assert decode[16] > 2 * decode[8]
    assert expert.a2a_prompt_s_per_token(DSV3, H200, 16) > expert.a2a_prompt_s_per_token(DSV3, H200, 8)


def test_a_prompt_crosses_the_network_once_a_node_where_a_decode_step_sends_every_routed_copy():
    """DeepEP's normal kernels (a step with prompt tokens) send a token's row once to each other node
    holding one of its experts and forward it over NVLink there; its low-latency ones (a decode step)
    send each of the top-k copies on its own. Within a node the two move the same bytes."""
    k = DSV3.experts_per_token
    for ep in (16, 32, 64):
        nodes = ep // H200.gpus_per_node
        remote = expert.remote_nodes(DSV3, ep, H200.gpus_per_node)
        assert k * (nodes - 1) / nodes > remote > 0 and remote <= nodes - 1  # fewer rows than routed copies
    low_latency = expert.dispatch_combine_bytes(DSV3, 32) * expert.a2a_link(H200, 32)[0]
    assert expert.a2a_prompt_s_per_token(DSV3, H200, 32) < low_latency
    assert expert.a2a_prompt_s_per_token(DSV3, H200, 8) == pytest.approx(
        expert.dispatch_combine_bytes(DSV3, 8) * expert.a2a_link(H200, 8)[0])
    # a prefill step across four nodes spends less on its all-to-all than per-copy sends would: the same
    # step's experts with the prompt-mode time per token swapped for the decode mode's take longer
    p = costmodel.build(H200, DSV3, 32, "fp8", engine="vllm", ep=32, dp_attention=True, ep_load_cv=0.0)
    tokens = 32 * 4096
    prompt = costmodel.experts_time(p, tokens, True)
    assert costmodel.experts_time(p, tokens, False) - prompt == pytest.approx(
        DSV3.moe_layers * tokens * costmodel.busiest_share(p, tokens)
        * (p[costmodel.A2A_BYTES] * p[costmodel.S_A2A_BYTE] - p[costmodel.A2A_PROMPT_S]), rel=1e-9)
    assert p[costmodel.A2A_BYTES] * p[costmodel.S_A2A_BYTE] > p[costmodel.A2A_PROMPT_S] > 0


def test_dp_attention_reads_a_gpus_own_sequences_kv_not_the_whole_batchs():
    tp = step(decode_batch=256, context=2000)["breakdown_ms"]["attn_decode"]
    dp = step(ep=8, dp=True, decode_batch=256, context=2000)["breakdown_ms"]["attn_decode"]
    assert dp < tp / 2


def test_a_run_with_dp_attention_holds_more_sequences_at_once_on_the_same_gpus():
    spec = WorkloadSpec(n_requests=400, rate=1000.0, prompt_mean=2000, output_mean=200, length_dist="fixed")
    base = dict(gpu="h200", model="deepseek-v3", tp=8, dtype="fp8", workload=spec, max_seqs=1024)
    tp = simulate(SimConfig(**base)).summary
    dp = simulate(SimConfig(**base, ep=8, dp_attention=True)).summary
    assert dp["mean_batch"] > tp["mean_batch"]


@settings(max_examples=25, deadline=None)
@given(ep=st.sampled_from([2, 4, 8]), tokens=st.integers(1, 20000), cv=st.floats(0.0, 3.0))
def test_expert_time_never_falls_as_the_load_grows_more_uneven(ep, tokens, cv):
    even = costmodel.build(H200, MIXTRAL, ep, "fp8", ep=ep, ep_load_cv=0.0)  # Mixtral's 8 experts split evenly
    skewed = costmodel.build(H200, MIXTRAL, ep, "fp8", ep=ep, ep_load_cv=cv)
    assert costmodel.experts_time(skewed, float(tokens)) >= costmodel.experts_time(even, float(tokens))


def test_the_planner_searches_expert_parallel_shapes_for_a_mixture_of_experts_only():
    from core.planner.space import Budget, Workload, shapes
    w = Workload("deepseek-v3", WorkloadSpec(n_requests=200, rate=2.0, prompt_mean=1000, output_mean=300))
    found = {(d.tp, d.ep, d.dp_attention) for d in shapes(w, Budget(gpu_types=("h200",), max_gpus=32, dtypes=("fp8",)))}
    assert {(8, 8, False), (8, 8, True), (16, 16, True), (32, 32, True)} <= found
    assert (16, 16, False) not in found  # attention is not tensor-parallel across nodes
    dense = Workload("llama-3.1-70b", w.spec)
    assert all(d.ep == 1 for d in shapes(dense, Budget(gpu_types=("h200",), max_gpus=32)))


def test_the_planner_searches_splits_of_a_narrow_expert_parallel_prefill_pool_and_a_wider_decode_one():
    from core.planner.bounds import bound, prompt_quantile
    from core.planner.space import Budget, Workload, shapes, to_config
    w = Workload("deepseek-r1", WorkloadSpec(n_requests=200, rate=2.0, prompt_mean=1000, output_mean=300))
    split = [d for d in shapes(w, Budget(gpu_types=("h200",), max_gpus=32, dtypes=("fp8",))) if d.disagg and d.ep > 1]
    # DeepSeek-R1's fp8 weights need 8 H200s with attention whole on each; no pool narrower is tried
    assert {(d.prefill_tp, d.tp) for d in split} == {(8, 8), (8, 16), (16, 16)}
    d = next(d for d in split if (d.prefill_tp, d.tp) == (8, 16))
    assert "ep8 prefill + 1×ep16 decode with DP attention" in d.label()
    assert bound(d, w, prompt_quantile(w, 0.99)).refused is None
    s = simulate(to_config(d, w)).summary
    assert (s["pools"]["prefill"]["ep"], s["pools"]["decode"]["ep"]) == (8, 16)


def test_an_expert_parallel_answer_ends_in_a_serve_command_that_runs_it():
    from core.serving.serve_command import pools
    cfg = SimConfig(gpu="h200", model="deepseek-v3", tp=8, ep=8, dp_attention=True, dtype="fp8", max_model_len=4096)
    args = pools(cfg)[0]["args"]
    assert args[args.index("--data-parallel-size") + 1] == "8" and "--enable-expert-parallel" in args
    assert args[args.index("--tensor-parallel-size") + 1] == "1"
    tp_only = pools(SimConfig(gpu="h200", model="deepseek-v3", tp=8, ep=8, dtype="fp8", max_model_len=4096))[0]["args"]
    assert "--enable-expert-parallel" in tp_only and "--data-parallel-size" not in tp_only


def test_a_data_parallel_deployment_across_nodes_ends_in_deepeps_kernels_as_it_was_priced():
    from core.serving.serve_command import pools
    base = dict(gpu="h200", model="deepseek-v3", dtype="fp8", max_model_len=4096)
    within = pools(SimConfig(**base, tp=8, ep=8, dp_attention=True))[0]
    assert "--all2all-backend" not in within["args"]  # vLLM's default within a node
    across = pools(SimConfig(**base, tp=16, ep=16, dp_attention=True))[0]
    assert across["args"][across["args"].index("--all2all-backend") + 1] == "deepep_low_latency"
    assert "DeepEP's normal kernels" in across["command"]  # one mode a server, said where prompts share it
    split = pools(SimConfig(**base, gpus=32, tp=16, ep=16, dp_attention=True, disagg=True, prefill_gpus=16))
    backend = {p["role"]: p["args"][p["args"].index("--all2all-backend") + 1] for p in split}
    assert backend == {"prefill": "deepep_high_throughput", "decode": "deepep_low_latency"}


def test_micro_batch_overlap_hides_the_all_to_all_at_a_large_batch_and_costs_at_a_small_one():
    """LMSYS's 72-GPU decode ablation: two-batch overlap +25.5% at 256 tokens a GPU, -27% at 32; the two
    micro-batches each stream the weights, and only a large batch has all-to-all enough to hide."""
    h100 = catalog.get_gpu("h100")

    def tok_s(batch, overlap):
        r = costmodel.steptime(h100, DSV3, 72, decode_batch=72 * batch, context=2000, dtype="fp8", engine="sglang",
                               ep=72, dp_attention=True, eplb=True, redundant_experts=32, capture_tokens=72 * batch,
                               micro_batch_overlap=overlap)
        return batch / r["step_ms"], r["breakdown_ms"]
    assert tok_s(256, True)[0] > tok_s(256, False)[0]
    assert tok_s(32, True)[0] < tok_s(32, False)[0]
    _, parts = tok_s(256, True)
    assert parts["all_to_all"] >= 0.0 and parts["layer_overhead"] == pytest.approx(
        2 * tok_s(256, False)[1]["layer_overhead"])  # every kernel launched once a micro-batch


def test_micro_batch_overlap_without_dp_attention_is_refused_and_a_run_with_it_ends_in_vllms_flag():
    from core.serving.command import simulate_command
    from core.serving.serve_command import pools
    with pytest.raises(ValueError, match="add --ep 8 --dp-attention or drop --micro-batch-overlap"):
        simulate(SimConfig(gpu="h200", model="deepseek-v3", tp=8, ep=8, dtype="fp8", micro_batch_overlap=True,
                           workload=WorkloadSpec(n_requests=20)))
    cfg = SimConfig(gpu="h200", model="deepseek-v3", tp=8, ep=8, dp_attention=True, micro_batch_overlap=True,
                    dtype="fp8", max_model_len=4096, workload=WorkloadSpec(n_requests=20, prompt_mean=256, output_mean=32))
    assert "--enable-dbo" in pools(cfg)[0]["args"]
    assert "--micro-batch-overlap" in simulate_command(cfg)
    out = subprocess.run([sys.executable, "-m", "core", "simulate", "--model", "deepseek-v3", "--gpu", "h200", "--ep",
                          "8", "--micro-batch-overlap", "--requests", "20"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0 and "Traceback" not in out.stderr and "--dp-attention" in out.stderr


def test_the_lab_runs_the_experts_choice_and_ignores_it_for_a_dense_model():
    from core.lab.inputs import LabInputs, current_config
    base = dict(model="deepseek-v3", gpu="h200", gpus=8, tensor_parallel=True, dtype="fp8", requests=200)
    cfg = current_config(LabInputs(**base, experts="ep_dp"))
    assert (cfg.ep, cfg.dp_attention, cfg.pp) == (cfg.tp, True, 1) and cfg.tp == 8 and not cfg.micro_batch_overlap
    overlap = current_config(LabInputs(**base, experts="ep_dp_overlap"))
    assert (overlap.ep, overlap.dp_attention, overlap.micro_batch_overlap) == (8, True, True)
    from core.lab.report import describe_config
    assert "data-parallel attention and two-batch overlap" in describe_config(overlap)
    dense = current_config(LabInputs(model="llama-3.1-70b", gpu="h100", gpus=4, tensor_parallel=True, experts="ep"))
    assert dense.ep == 1
    with pytest.raises(ValueError, match="experts split as one of"):
        LabInputs(**base, experts="sideways").validate()


def test_the_lab_shards_a_dp_attention_replica_widely_enough_to_hold_attention_on_every_gpu():
    # DeepSeek-R1's fp8 weights fit four B200s sliced by tp, but not with attention whole on every GPU:
    # the auto degree is the smallest whose replicas hold the weights as the experts' split places them
    from core.lab.inputs import LabInputs, current_config, min_tp
    base = dict(model="deepseek-r1", gpu="b200", gpus=16, tensor_parallel=True, dtype="fp8", requests=200)
    assert min_tp(LabInputs(**base, experts="tp")) < min_tp(LabInputs(**base, experts="ep_dp"))
    cfg = current_config(LabInputs(**base, experts="ep_dp"))
    assert cfg.dp_attention and cfg.ep == cfg.tp >= min_tp(LabInputs(**base, experts="ep_dp"))
    plan_memory(catalog.get_gpu("b200"), catalog.get_model("deepseek-r1"), tp=cfg.tp, ep=cfg.ep, dp_attention=True,
                dtype="fp8")


def test_eplbs_redundant_experts_widen_the_lab_replica_where_they_tip_the_weights_past_the_budget():
    # Qwen3-235B-A22B's 16-bit experts over eight H100s fill 76 of a GPU's 76.5 GB once each holds a redundant
    # expert besides its sixteen: the Lab takes the next degree that holds them instead of an error
    from core.lab.inputs import LabInputs, current_config, min_tp
    base = dict(model="qwen3-235b-a22b", gpu="h100", gpus=16, tensor_parallel=True, experts="ep_dp", requests=200)
    assert min_tp(LabInputs(**base, eplb=True)) > min_tp(LabInputs(**base))
    cfg = current_config(LabInputs(**base, eplb=True))
    plan_memory(catalog.get_gpu("h100"), catalog.get_model("qwen3-235b-a22b"), tp=cfg.tp, ep=cfg.ep,
                dp_attention=True, redundant_experts=cfg.redundant_experts)


def test_a_dp_attention_replica_across_nodes_is_said_to_cross_them_in_its_all_to_all_not_all_reduces():
    from core.lab.inputs import LabInputs, current_config, placement_note
    cfg = current_config(LabInputs(model="deepseek-v3", gpu="h200", gpus=16, tensor_parallel=True, dtype="fp8",
                                   experts="ep_dp", requests=200))
    note = placement_note(cfg)
    assert cfg.tp == 16 and "all-to-all" in note and "50%" in note and "all-reduce" not in note


def test_a_split_runs_each_pools_experts_over_its_own_replicas_gpus():
    # DeepSeek's and SGLang's disaggregated deployments: a narrow expert-parallel prefill replica, a wide
    # decode one. Each pool holds experts/width whole experts a GPU and batches its own attention ranks
    from core.serving.serve_command import pools
    spec = WorkloadSpec(n_requests=300, rate=4.0, prompt_mean=1024, output_mean=256, length_dist="fixed")
    cfg = SimConfig(gpu="gb200", model="deepseek-r1", dtype="fp8", tp=16, ep=16, dp_attention=True, disagg=True,
                    gpus=24, prefill_gpus=8, prefill_tp=8, decode_tp=16, workload=spec)
    s = simulate(cfg).summary
    pre, dec = s["pools"]["prefill"], s["pools"]["decode"]
    assert (pre["ep"], dec["ep"]) == (8, 16) and pre["dp_attention"] and dec["dp_attention"]
    assert pre["weights_gb_per_gpu"] > dec["weights_gb_per_gpu"]  # half the GPUs for the same experts
    assert s["requests"] == 300 and s["stable"]
    args = [p["args"] for p in pools(cfg)]
    assert [a[a.index("--data-parallel-size") + 1] for a in args] == ["8", "16"]


def test_a_split_pool_whose_width_does_not_divide_the_experts_is_refused_in_one_sentence():
    spec = WorkloadSpec(n_requests=50, rate=1.0, prompt_mean=256, output_mean=64)
    cfg = SimConfig(gpu="h200", model="mixtral-8x7b", tp=8, ep=8, dp_attention=True, disagg=True, gpus=14,
                    prefill_gpus=6, prefill_tp=6, decode_tp=8, workload=spec)
    with pytest.raises(ValueError, match="does not divide Mixtral.*experts: choose ep among"):
        simulate(cfg)


def test_the_labs_disaggregation_stage_splits_each_pools_experts_as_the_sidebar_chose():
    # the sidebar's "experts + DP attention" carries to stage 5: each pool's experts over its own replica,
    # the decode pool as wide as the prefill pool or wider; slicing by tp keeps every split it had
    from core.lab.inputs import LabInputs, disagg_splits
    from core.lab.report import describe_config
    from core.lab.stages import run_stage
    base = dict(model="deepseek-r1", gpu="h200", gpus=32, dtype="fp8", rate=4, prompt_tokens=2000,
                output_tokens=300, requests=200)
    ep_dp, sliced = LabInputs(**base, experts="ep_dp"), LabInputs(**base, experts="tp")
    assert all(dtp >= ptp for _, ptp, dtp in disagg_splits(ep_dp))
    assert any(dtp < ptp for _, ptp, dtp in disagg_splits(sliced))
    o = run_stage(ep_dp, 5)
    assert o.error is None and o.result.summary["stable"]
    pools = o.result.summary["pools"]
    assert pools["prefill"]["ep"] == o.config.prefill_tp and pools["decode"]["ep"] == o.config.decode_tp
    assert pools["prefill"]["dp_attention"] and pools["decode"]["dp_attention"]
    assert "experts split over its replica's GPUs with data-parallel attention" in describe_config(o.config)
    plain = run_stage(sliced, 5)
    assert plain.result.summary["pools"]["decode"]["ep"] == 1 and "experts" not in describe_config(plain.config)


def test_every_trade_off_and_a_pinned_split_keep_the_sidebars_expert_split_at_their_own_widths():
    # the sharding A/B compares tp 8 against tp 16 and the split runs 8-GPU pools: each side's experts split
    # over its own replica, never the sidebar's deployment's 32 GPUs
    from core.lab import compare
    from core.lab.inputs import LabInputs
    from core.lab.tradeoffs import _ab_configs, ab, tradeoffs
    inputs = LabInputs(model="deepseek-r1", gpu="h200", gpus=32, dtype="fp8", experts="ep_dp", rate=4,
                       prompt_tokens=2048, output_tokens=256, requests=200)
    for t in tradeoffs():
        try:
            sides = _ab_configs(inputs, t["id"])[:2]
        except ValueError:
            continue
        for cfg in sides:
            for width in {cfg.tp, cfg.decode_tp or cfg.tp}:
                assert cfg.ep == width and cfg.dp_attention, (t["id"], cfg.tp, cfg.ep)
    assert ab(inputs, "tensor_parallel").error is None
    split = ab(inputs, "disaggregation")
    assert split.error is None and "on 32 H200 GPUs" in split.note  # one replica a pool fits the sidebar's
    pinned = compare.config(dict(gpu="h200", model="deepseek-r1", gpus=32, tp=16, prefill_gpus=16, prefill_tp=8,
                                 dtype="fp8"), inputs)
    assert (pinned.ep, pinned.prefill_tp, pinned.decode_tp) == (16, 8, 16)


def test_eplb_brings_the_busiest_of_32_ranks_near_the_mean_as_tensorrt_llm_measured():
    # TensorRT-LLM's DeepSeek-R1 decode on 32 GPUs: without EPLB the hottest rank takes 2.56x the mean
    # routings, with it 1.11x (data/moe.json); perfectly even routing is the floor of both
    b200 = catalog.get_gpu("b200")
    def experts_ms(**kw):
        p = costmodel.build(b200, DSV3, 32, "fp8", ep=32, dp_attention=True, **kw)
        return costmodel.busiest_share(p, 4096.0)
    even, balanced, skewed = experts_ms(ep_load_cv=0.0), experts_ms(eplb=True, redundant_experts=32), experts_ms()
    assert 1.0 < even < balanced < 1.12 < 1.5 < skewed


def test_redundant_experts_split_256_experts_over_36_gpus_at_an_experts_memory_a_copy():
    wl = WorkloadSpec(n_requests=200, rate=5.0, prompt_mean=1024, output_mean=256, length_dist="fixed")
    rack = dict(gpu="gb200", model="deepseek-r1", dtype="fp4", kv_dtype="fp8", tp=36, ep=36, dp_attention=True,
                workload=wl)
    with pytest.raises(ValueError, match="add redundant experts"):
        simulate(SimConfig(**rack))
    s = simulate(SimConfig(**rack, eplb=True, redundant_experts=32)).summary  # 288 copies, 8 a GPU
    assert s["requests"] == 200 and s["stable"]
    # vLLM's guide: 'approximately 2.4 GB for one redundant expert per EP rank' of DeepSeek-V3 (fp8)
    plans = [plan_memory(H200, DSV3, 32, dtype="fp8", ep=32, dp_attention=True, redundant_experts=r) for r in (0, 32)]
    assert 2.2 < (plans[1].weights_bytes - plans[0].weights_bytes) / 2 ** 30 < 2.6
    assert plans[1].kv_blocks < plans[0].kv_blocks


@pytest.mark.parametrize("flags,fix", [
    (["--ep", "8", "--dp-attention", "--redundant-experts", "32"], "add --eplb"),
    (["--eplb"], "add --ep 2"),
    (["--ep", "8", "--eplb", "--redundant-experts", "30"], "choose ep among"),  # 286 copies over 8 GPUs
])
def test_eplb_without_what_it_needs_is_refused_in_one_sentence(flags, fix):
    r = subprocess.run([sys.executable, "-m", "core", "simulate", "--gpu", "h200", "--model", "deepseek-v3",
                        "--dtype", "fp8", "--requests", "50", *flags], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0 and fix in r.stderr and "Traceback" not in r.stderr


def test_an_eplb_deployment_ends_in_vllms_balancer_flags_and_reproduces_itself():
    from core.serving.command import simulate_command
    from core.serving.serve_command import pools
    cfg = SimConfig(gpu="h200", model="deepseek-v3", dtype="fp8", tp=16, ep=16, dp_attention=True, eplb=True,
                    redundant_experts=32, gpus=16, max_model_len=4096)
    args = pools(cfg)[0]["args"]
    assert "--enable-eplb" in args and args[args.index("--eplb-config") + 1] == '{"num_redundant_experts":32}'
    assert "--eplb --redundant-experts 32" in simulate_command(cfg)


def test_the_labs_balancer_puts_a_redundant_expert_on_every_gpu_of_the_split_and_speeds_its_experts():
    from core.lab.inputs import LabInputs, current, stage_config
    from core.lab.report import describe_config
    base = dict(model="deepseek-r1", gpu="h200", gpus=16, tensor_parallel=True, dtype="fp8", experts="ep_dp",
                rate=6, prompt_tokens=1024, output_tokens=512, requests=300)
    cfg, res = current(LabInputs(**base, eplb=True))
    assert cfg.eplb and cfg.redundant_experts == cfg.ep == cfg.tp  # 256 + 16 copies, 17 a GPU
    assert "balanced by EPLB with 16 redundant experts" in describe_config(cfg)
    _, plain = current(LabInputs(**base))
    assert res.summary["tpot_ms"]["p50"] < plain.summary["tpot_ms"]["p50"]
    split = stage_config(LabInputs(**{**base, "gpus": 24}, eplb=True), 5, (8, 8, 16))
    assert (split.ep, split.redundant_experts) == (16, 16)  # the prefill pool's 8 GPUs hold 272 / 8 = 34 each
    assert not current(LabInputs(**{**base, "experts": "tp"}, eplb=True))[0].eplb  # nothing split, nothing to balance


def test_a_planner_answer_keeps_its_expert_split_in_the_lab_and_in_compare():
    # the Planner's row of an expert-parallel shape opened in the Lab, or pinned, runs that shape, not the
    # sidebar's experts choice
    from core.lab import compare
    from core.lab.inputs import LabInputs, current_config
    from core.lab.recommend import lab_inputs_for
    from core.planner.space import Deployment
    sidebar = LabInputs(model="deepseek-v3", gpu="h200", gpus=8, dtype="fp8", rate=2, requests=200)  # sliced by tp
    d = Deployment("h200", 8, 1, "fp8", "sarathi", 2048, ep=8, dp_attention=True)
    cfg = current_config(LabInputs(**{**sidebar.to_dict(), **lab_inputs_for(d)}))
    assert (cfg.tp, cfg.ep, cfg.dp_attention) == (8, 8, True)
    row = dict(gpu="h200", tp=8, replicas=1, dtype="fp8", policy="sarathi", chunk=2048, prefill_tp=0,
               prefill_replicas=0, gpus=8, ep=8, dp_attention=True, deployment=d.label())
    pinned = compare.config(row, sidebar)
    assert (pinned.ep, pinned.dp_attention, pinned.eplb) == (8, True, False)
    sliced = compare.config(dict(row, ep=1, dp_attention=False), LabInputs(**{**sidebar.to_dict(), "experts": "ep_dp"}))
    assert sliced.ep == 1  # the Planner chose slicing: the sidebar's choice does not override it
    assert "experts split with DP attention" in compare.describe(compare.normalise(dict(row, label=None), sidebar))


def test_the_planner_tries_eplb_on_eight_ranks_and_more_and_prefers_no_balancer_at_equal_cost():
    from core.planner.bounds import bound, prompt_quantile
    from core.planner.space import Budget, Workload, shapes, to_config
    w = Workload("deepseek-r1", WorkloadSpec(n_requests=200, rate=4.0, prompt_mean=1024, output_mean=512))
    budget = Budget(gpu_types=("h200",), max_gpus=32, dtypes=("fp8",))
    found = shapes(w, budget)
    balanced = [d for d in found if d.eplb]
    assert balanced and all(d.ep >= 8 for d in balanced)
    assert {(d.tp, d.dp_attention, d.disagg) for d in balanced} == {(d.tp, d.dp_attention, d.disagg)
                                                                   for d in found if d.ep >= 8}
    d = next(d for d in balanced if d.disagg and (d.prefill_tp, d.tp) == (8, 16))
    assert d.label().endswith("with DP attention and EPLB, fp8, chunked prefill 2048")
    cfg = to_config(d, w)
    assert (cfg.eplb, cfg.redundant_experts) == (True, 16)  # a copy on each decode GPU; 272 split over 8 too
    assert bound(d, w, prompt_quantile(w, 0.99)).refused is None
    plain = next(x for x in found if x == dataclasses.replace(d, eplb=False))
    assert budget.preference(plain) < budget.preference(d)


def test_the_slot_gauge_counts_every_data_parallel_ranks_batch_and_a_replica_never_runs_past_it():
    # under DP attention each rank schedules its own max batch, so a busy replica runs more sequences
    # than one rank's limit: the gauge's limit is the replica's, and saturation cannot pass 100%
    from core.lab import gauges
    from core.lab.inputs import LabInputs, current_config, run
    inputs = LabInputs(model="deepseek-v3", gpu="h200", gpus=8, tensor_parallel=True, dtype="fp8",
                       experts="ep_dp", max_seqs=16, rate=20.0, requests=300)
    cfg = current_config(inputs)
    assert cfg.dp_attention and cfg.tp == 8
    result = run(cfg)
    g = next(g for g in gauges.gauges(cfg, result, inputs) if g.id == "slots")
    assert g.limit == 16 * 8
    assert result.trace["running"].max() > 16  # past one rank's limit: the ranks together run more
    assert g.value <= g.limit and g.ratio <= 1.0
