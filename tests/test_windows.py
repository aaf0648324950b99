"""Sliding-window attention (gpt-oss, Gemma 2 and 3): a window layer attends to its last `window`
tokens, so its decode reads and its prompt's attention stop growing there, and vLLM's hybrid KV
cache manager keeps only those tokens' blocks of it."""
from dataclasses import replace
from pathlib import Path

import pytest

from core.physics import catalog, hfconfig
from core.physics.costmodel import steptime
from core.physics.memory import plan_memory

CONFIGS = Path(__file__).resolve().parent / "fixtures" / "configs"
OSS = hfconfig.parse((CONFIGS / "gpt-oss-120b.json").read_text()).model  # 18 of 36 layers in 128-token windows
FLAT = replace(OSS, window=0, window_layers=0)  # the same model, every layer attending to every token
H200 = catalog.get_gpu("h200")


def attention(model, context, batch=64):
    return steptime(H200, model, 1, decode_batch=batch, context=context, dtype="mxfp4",
                    engine="vllm")["breakdown_ms"]["attn_decode"]


def test_a_window_layer_reads_no_more_than_its_window():
    # past the window only the 18 full layers read more: half the growth of the flat model's 36
    grown = {m.window: attention(m, 16384) - attention(m, 8192) for m in (OSS, FLAT)}
    assert grown[128] == pytest.approx(grown[0] / 2, rel=1e-6)
    # within the window every layer reads every token, as without one
    assert attention(OSS, 100) == pytest.approx(attention(FLAT, 100), rel=1e-9)
    step = {m.window: steptime(H200, m, 1, decode_batch=64, context=16384, dtype="mxfp4") for m in (OSS, FLAT)}
    assert step[128]["kv_bytes_read_per_gpu"] == pytest.approx(
        step[0]["kv_bytes_read_per_gpu"] * (18 * 16384 + 18 * 128) / (36 * 16384))


def test_a_long_prompts_window_layers_attend_to_their_window_only():
    prompt = {m.window: steptime(H200, m, 1, prefill_tokens=16384, dtype="mxfp4")["breakdown_ms"]["attn_prefill"]
              for m in (OSS, FLAT)}
    # 16,384 queries over 128 keys each is under 2% of their causal pairs: about the full layers' half
    assert 0.5 < prompt[128] / prompt[0] < 0.52
    short = {m.window: steptime(H200, m, 1, prefill_tokens=96, dtype="mxfp4")["breakdown_ms"]["attn_prefill"]
             for m in (OSS, FLAT)}
    assert short[128] == pytest.approx(short[0], rel=1e-9)


def test_the_kv_pool_holds_full_layers_and_sets_the_windows_aside():
    plans = {m.window: plan_memory(H200, m, 1, dtype="mxfp4", max_seqs=256) for m in (OSS, FLAT)}
    window_layer_bytes = 18 * 2 * 8 * 64 * 2  # K and V of 8 heads of 64, 16-bit, in 18 layers
    assert plans[128].window_bytes == pytest.approx(256 * (128 + 16) * window_layer_bytes)
    assert plans[128].kv_bytes_per_token == pytest.approx(plans[0].kv_bytes_per_token / 2)
    # the same memory, less the windows set aside, at half the bytes a token: nearly twice the tokens
    assert plans[128].kv_pool_bytes == pytest.approx(plans[0].kv_pool_bytes)
    assert 1.9 < plans[128].kv_tokens / plans[0].kv_tokens < 2.0
    assert plans[128].unused_bytes == pytest.approx(plans[0].unused_bytes, abs=plans[0].kv_bytes_per_token * 32)


def test_a_served_window_model_holds_more_sequences_and_serves_faster_for_it():
    # gpt-oss-120b on one H100: 65 GB of weights leave a few GB of cache; with half its layers keeping
    # a 128-token window the same memory holds nearly twice the 4,000-token sequences, so 32 users are
    # served in less time, and fewer of their requests are preempted for room
    from core.serving.simulate import SimConfig, simulate
    from core.serving.workload import WorkloadSpec
    spec = WorkloadSpec(n_requests=96, rate=float("inf"), concurrency=32, prompt_mean=4000, output_mean=200,
                        length_dist="fixed")
    runs = {m.window: simulate(SimConfig(gpu="h100", model=catalog.register_model(m).id, dtype="mxfp4",
                                         workload=spec)).summary for m in (OSS, FLAT)}
    assert runs[128]["makespan_s"] < runs[0]["makespan_s"]
    assert runs[128]["preemptions"] <= runs[0]["preemptions"]


def test_sglang_sizes_its_window_layers_pool_at_a_share_of_the_full_layers_tokens_and_sets_nothing_aside():
    # SGLang keeps a window layer's KV in a pool of its own at 0.8 of the full layers' tokens, sized at start
    # (swa_full_tokens_ratio): a token costs the full layers' bytes and 0.8 of a window layer's, and no sequence
    # sets its window aside. At SGLang's batch limit on an H100 (2,048 sequences) gpt-oss-120b on one H100 then
    # keeps a cache, where setting each sequence's window aside would take more than the pool
    from core.serving import engines
    h100 = catalog.get_gpu("h100")
    rules = engines.kv_memory("sglang", h100, 1)
    sglang = plan_memory(h100, OSS, 1, dtype="mxfp4", max_seqs=2048, **rules)
    full_layers = window_layers = 18 * 2 * 8 * 64 * 2  # K and V of 8 heads of 64, 16-bit, in 18 layers each
    assert sglang.kv_bytes_per_token == pytest.approx(full_layers + 0.8 * window_layers)
    assert sglang.window_bytes == 0 and sglang.kv_tokens > 50_000
    with pytest.raises(ValueError, match="--max-seqs") as refused:
        plan_memory(h100, OSS, 1, dtype="mxfp4", max_seqs=2048, **dict(rules, window_share=None))
    assert "window layers' KV of 2048 sequences" in str(refused.value)
