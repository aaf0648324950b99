"""Linear attention (Qwen3-Next's and Qwen3.5's Gated DeltaNet): three layers in four mix tokens through a
state each sequence holds, of a fixed size however long its context, in place of attention. Those layers
cache no token and read no cached token; a decode reads and writes the state instead."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from core.physics import catalog, costmodel, hfconfig
from core.physics.costmodel import steptime
from core.physics.memory import plan_memory

CONFIGS = Path(__file__).resolve().parent / "fixtures" / "configs"
RAW = json.loads((CONFIGS / "qwen3-next-80b-a3b.json").read_text())
NEXT = hfconfig.parse(json.dumps(RAW)).model  # 36 of 48 layers Gated DeltaNet
FLAT = replace(NEXT, linear_layers=0)  # every layer attending: the same shape otherwise
H200 = catalog.get_gpu("h200")


def decode_attention(model, context, batch=32):
    return steptime(H200, model, 2, decode_batch=batch, context=context, engine="vllm")["breakdown_ms"]["attn_decode"]


def test_the_config_reads_which_layers_are_linear_and_their_state():
    assert (NEXT.linear_layers, NEXT.attention_layers) == (36, 12)
    # a linear layer caches no token: the KV cache a token is the 12 attending layers' K and V
    assert NEXT.kv_bytes_per_token() == FLAT.kv_bytes_per_token() * 12 // 48
    # the state a sequence: 32 value heads of 128 x 128 16-bit values and the convolution's last 3 inputs
    # of 8,192 channels, in each of the 36 linear layers; split by tp as vLLM splits the heads
    assert NEXT.linear_state_bytes(1) == 36 * (32 * 128 * 128 * 2 + 8192 * 3 * 2)
    assert NEXT.linear_state_bytes(4) == pytest.approx(NEXT.linear_state_bytes(1) / 4)
    # the layer list, where a file gives one, says the same as the interval
    listed = dict(RAW, layer_types=["linear_attention"] * 3 + ["full_attention"], num_hidden_layers=4)
    listed.pop("full_attention_interval")
    assert hfconfig.parse(json.dumps(listed)).model.linear_layers == 3


def test_qwen3_5s_wrapper_reads_its_text_model_and_its_fp32_state():
    text = dict(RAW, model_type="qwen3_5_moe_text", mamba_ssm_dtype="float32")
    wrapped = hfconfig.parse(json.dumps({"model_type": "qwen3_5_moe", "text_config": text,
                                         "vision_config": {"depth": 27}}))
    m = wrapped.model
    assert (m.linear_layers, m.experts, m.shared_experts) == (36, 512, 1)
    # the delta rule's matrices in fp32 (the config's mamba_ssm_dtype, which vLLM takes), the convolution 16-bit
    assert m.linear_state_bytes(1) == 36 * (32 * 128 * 128 * 4 + 8192 * 3 * 2)
    assert any("vision encoder" in n for n in wrapped.notes)


def test_a_linear_layer_reads_no_cached_token():
    # past the first tokens only the 12 attending layers read more: a quarter of the all-attending model's growth
    grown = {m.linear_layers: decode_attention(m, 32768) - decode_attention(m, 1024) for m in (NEXT, FLAT)}
    assert grown[36] == pytest.approx(grown[0] / 4, rel=1e-6)
    step = {m.linear_layers: steptime(H200, m, 2, decode_batch=32, context=32768) for m in (NEXT, FLAT)}
    assert step[36]["kv_bytes_read_per_gpu"] == pytest.approx(step[0]["kv_bytes_read_per_gpu"] / 4)


def test_a_decode_reads_and_writes_each_sequences_state():
    # the state's traffic grows with the batch, not the context: 256 sequences' fp32 state (twice the 16-bit
    # one's bytes) costs its extra bytes, read and written, at the GPU's streaming rate
    fp32 = replace(NEXT, linear_state_value_bytes=4)
    extra = {m.linear_state_value_bytes: decode_attention(m, 1024, batch=256) for m in (NEXT, fp32)}
    extra_bytes = 256 * 2 * (fp32.linear_state_bytes(2) - NEXT.linear_state_bytes(2))
    rate = H200.hbm_tbps * 1e12 * costmodel.fitted().eta_bw
    assert (extra[4] - extra[2]) * 1e-3 == pytest.approx(extra_bytes / rate, rel=0.01)
    assert decode_attention(NEXT, 30000, batch=256) - decode_attention(NEXT, 1000, batch=256) < \
        decode_attention(FLAT, 30000, batch=256) - decode_attention(FLAT, 1000, batch=256)


def test_a_long_prompts_linear_layers_grow_with_its_length_not_its_square():
    prompt = {m.linear_layers: steptime(H200, m, 2, prefill_tokens=32768)["breakdown_ms"]["attn_prefill"]
              for m in (NEXT, FLAT)}
    # 32K queries over their causal prefix in 12 layers, against 48: about a quarter, the linear layers' chunked
    # form (a 64-token chunk and the state a token) a few percent of it
    assert 0.25 < prompt[36] / prompt[0] < 0.3


def test_the_pool_sets_the_states_aside_and_holds_four_times_the_tokens():
    plans = {m.linear_layers: plan_memory(H200, m, 2, max_seqs=256) for m in (NEXT, FLAT)}
    assert plans[36].state_bytes == pytest.approx(256 * NEXT.linear_state_bytes(2))
    assert plans[36].kv_bytes_per_token == pytest.approx(plans[0].kv_bytes_per_token / 4)
    held = plans[36].kv_tokens * plans[36].kv_bytes_per_token + plans[36].state_bytes
    assert held == pytest.approx(plans[0].kv_tokens * plans[0].kv_bytes_per_token, rel=0.01)
    assert plans[36].kv_tokens > 3 * plans[0].kv_tokens
    assert plans[36].unused_bytes == pytest.approx(plans[0].unused_bytes, abs=plans[0].kv_bytes_per_token * 32)


def test_tensor_parallelism_splits_the_linear_heads_evenly():
    assert NEXT.tp_choices(32) == [1, 2, 4, 8, 16]  # 16 key heads and 32 value heads, as the 16 query heads
    odd = replace(NEXT, linear_k_heads=12)
    assert not odd.splits_over(8) and odd.splits_over(4)


def test_the_catalogs_qwen3_next_serves_long_prompts_without_running_out_of_cache():
    # 16 users of 32K-token prompts on two H200s: the hybrid's cache holds them all at once, the same shape
    # attending in every layer runs out of room and preempts
    from core.serving.simulate import SimConfig, simulate
    from core.serving.workload import WorkloadSpec
    spec = WorkloadSpec(n_requests=32, rate=float("inf"), concurrency=16, prompt_mean=32000, output_mean=256,
                        length_dist="fixed")
    runs = {m.linear_layers: simulate(SimConfig(gpu="h200", tp=2, model=catalog.register_model(m).id,
                                                workload=spec)).summary for m in (NEXT, FLAT)}
    assert runs[36]["preemptions"] == 0
    assert runs[36]["makespan_s"] < runs[0]["makespan_s"]
    assert catalog.get_model("qwen3-next-80b-a3b").linear_layers == 36
