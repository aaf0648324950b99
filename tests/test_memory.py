"""Memory planner against hand computations."""
import pytest

from core.physics import catalog
from core.physics.memory import DRIVER_RESERVED_GIB, plan_memory, weight_bytes_per_gpu

GIB = 1024**3
H100 = catalog.get_gpu("h100")
L70 = catalog.get_model("llama-3.1-70b")


def test_llama_70b_weighs_about_141_gb_in_bf16():
    assert weight_bytes_per_gpu(L70, 1) / 1e9 == pytest.approx(141.1, abs=0.2)
    assert weight_bytes_per_gpu(L70, 4) / 1e9 == pytest.approx(141.1 / 4, abs=0.1)


def test_llama_70b_does_not_fit_one_h100_and_the_error_names_the_fix():
    with pytest.raises(ValueError, match=r"tp=2"):
        plan_memory(H100, L70, tp=1)


def test_llama_70b_fits_four_h100_with_kv_room():
    plan = plan_memory(H100, L70, tp=4)
    # by hand: (80 - 0.8) GiB x 0.9 = 76.5 GB budget; 35.3 GB of weights; ~1.5 GB workspace
    budget = (80 - DRIVER_RESERVED_GIB) * GIB * 0.9
    assert plan.budget_bytes == pytest.approx(budget)
    kv_per_token = 2 * 80 * (8 / 4) * 128 * 2  # 2 of 8 KV heads per GPU
    assert plan.kv_bytes_per_token == kv_per_token
    expected_blocks = (budget - 35.28e9 - plan.workspace_bytes) // (16 * kv_per_token)
    assert plan.kv_blocks == pytest.approx(expected_blocks, abs=2)
    assert plan.kv_tokens > 400_000  # room for hundreds of 1k-token requests


def test_kv_heads_replicate_when_tp_exceeds_them():
    l8 = catalog.get_model("llama-3.1-8b")  # 8 KV heads
    per_head = 2 * 32 * 128 * 2
    assert plan_memory(H100, l8, tp=8).kv_bytes_per_token == per_head
    assert plan_memory(H100, l8, tp=16).kv_bytes_per_token == per_head  # not half a head


def test_blocks_scale_with_utilisation_and_block_size():
    l8 = catalog.get_model("llama-3.1-8b")
    a = plan_memory(H100, l8, mem_util=0.9)
    b = plan_memory(H100, l8, mem_util=0.5)
    c = plan_memory(H100, l8, block_size=32)
    assert b.kv_blocks < a.kv_blocks
    assert (a.kv_pool_bytes - b.kv_pool_bytes) == pytest.approx(0.4 * a.usable_bytes)
    assert c.kv_blocks == pytest.approx(a.kv_blocks / 2, abs=1)


def test_memory_split_adds_up():
    p = plan_memory(catalog.get_gpu("a100-40gb"), catalog.get_model("llama-2-13b"))
    kv_used = p.kv_blocks * p.block_size * p.kv_bytes_per_token
    assert p.weights_bytes + p.workspace_bytes + kv_used + p.unused_bytes == pytest.approx(p.usable_bytes)
    # vLLM paper, Fig. 1: a 13B model on an A100-40GB spends ~65% of memory on weights, ~30% on KV
    assert 0.6 < p.weights_bytes / p.usable_bytes < 0.7


@pytest.mark.parametrize("kw,match", [(dict(mem_util=1.5), "utilisation"), (dict(block_size=0), "block size"),
                                      (dict(tp=5), "choose tp")])
def test_bad_settings_raise(kw, match):
    with pytest.raises(ValueError, match=match):
        plan_memory(H100, catalog.get_model("llama-3.1-8b"), **kw)


def test_deepseek_v3_needs_many_gpus_in_bf16():
    ds = catalog.get_model("deepseek-v3")
    with pytest.raises(ValueError, match=r"tp=16"):
        plan_memory(catalog.get_gpu("h200"), ds, tp=8)
    assert plan_memory(catalog.get_gpu("h200"), ds, tp=8, dtype="fp8").kv_blocks > 0
