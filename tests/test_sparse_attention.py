"""DeepSeek-V3.2's sparse attention (DSA): an fp8 indexer scores every cached token for each query and the
attention reads only the 2,048 it picks. The physics a user would notice: long contexts stop costing the
attention what they cost dense MLA, the indexer's own keys take cache room, and short contexts cost the same."""
import pytest

from core.physics import catalog, costmodel
from core.physics.memory import plan_memory
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec

H200 = catalog.get_gpu("h200")
V3, V32 = catalog.get_model("deepseek-v3"), catalog.get_model("deepseek-v3.2")


def attention_ms(model, context, batch=32):
    return costmodel.steptime(H200, model, tp=8, decode_batch=batch, context=context, dtype="fp8",
                              engine="vllm")["breakdown_ms"]["attn_decode"]


def test_v3_2_is_v3s_layers_with_an_indexer_that_caches_a_key_a_token():
    assert (V32.layers, V32.hidden, V32.experts, V32.mla_kv_lora_rank) == (V3.layers, V3.hidden, V3.experts, V3.mla_kv_lora_rank)
    assert (V32.index_topk, V32.index_heads, V32.index_head_dim) == (2048, 64, 128)
    # each layer caches the indexer's 128 fp8 values and a 4-byte scale beside MLA's latent and RoPE key
    assert V32.kv_bytes_per_token() - V3.kv_bytes_per_token() == V3.layers * (128 + 4)
    assert catalog.get_model("deepseek-ai/DeepSeek-V3.2-Exp") is V32


def test_decode_attention_stops_growing_with_the_context_past_the_tokens_a_query_attends():
    # below 2,048 tokens a query attends everything: the same reads as dense MLA, plus the indexer's
    short = attention_ms(V32, 1024) / attention_ms(V3, 1024)
    assert 1.0 < short < 1.15
    # past it the latent read stops at 2,048 tokens; only the indexer's 132-byte keys keep growing: at 64K
    # tokens (2,048 x 1,152 + 65,536 x 132) bytes a layer against dense MLA's 65,536 x 1,152 (bf16), at most
    # 15% of them; and no less than the indexer's keys streamed at the HBM's datasheet rate
    dense, sparse = attention_ms(V3, 65536), attention_ms(V32, 65536)
    assert sparse < (2048 * 1152 + 65536 * 132) / (65536 * 1152) * dense
    index_keys_ms = 32 * 65536 * V32.layers * 132 / (H200.hbm_tbps * 1e12) * 1e3
    assert sparse > index_keys_ms
    # and from 16K to 64K tokens the sparse attention's time grows by the indexer's keys alone
    assert attention_ms(V32, 65536) - attention_ms(V32, 16384) < 0.2 * (attention_ms(V3, 65536) - attention_ms(V3, 16384))


def test_a_long_prompts_prefill_attends_its_pick_but_its_indexer_scores_every_pair():
    def prefill(model, dp):
        p = costmodel.build(H200, model, 8, "fp8", engine="vllm", ep=8 if dp else 1, dp_attention=dp)
        return costmodel.prefill_attention_time(p, 8192.0, 57344.0)
    # under data-parallel attention a GPU scores its own sequences only: the indexer's FLOPs are a fraction of
    # dense MLA's over the same pairs, so the long prompt's attention is several times cheaper
    assert prefill(V32, True) < 0.5 * prefill(V3, True)
    # under tensor parallelism MLA's heads split over the 8 GPUs and the (replicated) indexer's do not
    assert prefill(V32, False) < prefill(V3, False)


def test_the_indexers_keys_take_their_share_of_the_cache():
    dense = plan_memory(H200, V3, tp=8, dtype="fp8")
    sparse = plan_memory(H200, V32, tp=8, dtype="fp8")
    assert sparse.kv_bytes_per_token == pytest.approx(dense.kv_bytes_per_token * V32.kv_bytes_per_token()
                                                      / V3.kv_bytes_per_token())
    assert sparse.kv_tokens < dense.kv_tokens


def test_a_long_context_run_serves_faster_with_sparse_attention():
    spec = WorkloadSpec(n_requests=40, rate=0.5, prompt_mean=60000, output_mean=256, length_dist="fixed")
    tpot = {m: simulate(SimConfig(gpu="h200", model=m, tp=8, dtype="fp8", workload=spec)).summary["tpot_ms"]["p50"]
            for m in ("deepseek-v3", "deepseek-v3.2")}
    assert tpot["deepseek-v3.2"] < 0.9 * tpot["deepseek-v3"]
