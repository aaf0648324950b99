"""Catalogs: ids, parameter counts against published figures, KV bytes, the parametric model."""
import json

import pytest

from core.physics import catalog

REQUIRED_GPUS = "a100-40gb a100-80gb h100 h100-pcie h200 b200 l40s l4 mi300x".split()
REQUIRED_MODELS = ("llama-2-7b llama-2-13b llama-2-70b llama-3.1-8b llama-3.1-70b llama-3.1-405b mistral-7b "
                   "mixtral-8x7b qwen2.5-7b qwen2.5-72b deepseek-v3").split()


def test_required_ids_resolve():
    for g in REQUIRED_GPUS:
        assert catalog.get_gpu(g).id == g
    for m in REQUIRED_MODELS:
        assert catalog.get_model(m).id == m


@pytest.mark.parametrize("repo, model_id, dtype", [
    ("nvidia/DeepSeek-R1-0528-FP4-v2", "deepseek-r1", "fp4"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "qwen3-235b-a22b", "fp8"),
    ("nvidia/Llama-3.3-70B-Instruct-FP8", "llama-3.1-70b", "fp8"),
    ("amd/Llama-3.1-405B-Instruct-FP8-KV", "llama-3.1-405b", "fp8"),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "qwen3-coder-480b-a35b", "fp8"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama-4-maverick", "fp8"),
    ("zai-org/GLM-4.6-FP8", "glm-4.6", "fp8"), ("Qwen/Qwen3-32B-FP8", "qwen3-32b", "fp8"),
    ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "llama-3.1-70b", "int4"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", None),
    ("openai/gpt-oss-120b", "gpt-oss-120b", None),
])
def test_a_quantised_checkpoint_is_its_models_shape_in_the_format_its_name_says(repo, model_id, dtype):
    assert catalog.get_model(repo).id == model_id
    assert catalog.checkpoint_format(repo) == dtype


@pytest.mark.parametrize("name, gpu_id", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("h100-sxm", "h100"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("h200-sxm", "h200"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA B200", "b200"), ("AMD Instinct MI300X", "mi300x"), ("NVIDIA L4", "l4"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA GB200", "gb200"),
    # boards the catalog lacks, and a chip sold in two memory sizes with none named, are no catalog GPU
    ("NVIDIA H100 NVL", None), ("NVIDIA A100 80GB PCIe", None), ("a100", None), ("NVIDIA GH200 480GB", None),
])
def test_a_gpu_resolves_by_the_name_nvidia_smi_or_a_benchmark_page_gives_it(name, gpu_id):
    if gpu_id is None:
        with pytest.raises(ValueError, match="choose one of"):
            catalog.get_gpu(name)
    else:
        assert catalog.get_gpu(name).id == gpu_id


def test_every_gpu_value_has_a_source_and_a_dated_price():
    raw = json.loads((catalog.DATA / "gpus.json").read_text())["gpus"]
    for g in raw:
        for key in ("datasheet", "sms", "link", "internode", "price"):
            assert g["source"][key], (g["id"], key)
        assert g["price_date"] and g["price_usd_per_gpu_hour"] > 0


@pytest.mark.parametrize("model_id,published_b", [
    ("llama-2-7b", 6.74), ("llama-2-70b", 68.98), ("llama-3.1-8b", 8.03), ("llama-3.1-405b", 405.85),
    ("mixtral-8x7b", 46.70), ("qwen2.5-7b", 7.61), ("qwen2.5-72b", 72.7), ("deepseek-v3", 671.0),
    ("qwen3-32b", 32.8), ("qwen3-coder-480b-a35b", 480.0), ("llama-4-maverick", 400.0)])
def test_parameter_counts_match_published_figures(model_id, published_b):
    # counted from the layer shapes, compared with the model cards' totals
    assert catalog.get_model(model_id).params() / 1e9 == pytest.approx(published_b, rel=0.005)


def test_moe_active_parameters():
    mixtral, ds = catalog.get_model("mixtral-8x7b"), catalog.get_model("deepseek-v3")
    assert mixtral.params(active=True) / 1e9 == pytest.approx(12.9, rel=0.01)  # "12.9B active" (Mistral)
    assert ds.params(active=True) / 1e9 == pytest.approx(37.5, rel=0.02)  # "37B activated" + embeddings


def test_kv_bytes_per_token():
    # 2 (K,V) x layers x kv_heads x head_dim x 2 bytes
    assert catalog.get_model("llama-3.1-8b").kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2
    assert catalog.get_model("llama-2-13b").kv_bytes_per_token() == 819_200  # vLLM paper: "800 KB"
    # DeepSeek-V3's MLA caches a 512-wide latent and a 64-wide RoPE key per layer: ~70 KB per token,
    # about 71x less than materialised per-head K and V
    ds = catalog.get_model("deepseek-v3")
    assert ds.kv_bytes_per_token() == 61 * (512 + 64) * 2
    assert 68_000 < ds.kv_bytes_per_token() < 72_000


def test_gqa_shrinks_the_kv_cache():
    l2, l3 = catalog.get_model("llama-2-70b"), catalog.get_model("llama-3.1-70b")
    l2_7 = catalog.get_model("llama-2-7b")
    assert l2_7.kv_bytes_per_token() / catalog.get_model("llama-3.1-8b").kv_bytes_per_token() == 4  # 32 vs 8 KV heads
    assert l2.kv_bytes_per_token() == l3.kv_bytes_per_token()


@pytest.mark.parametrize("n", [1e9, 3e9, 13e9, 34e9, 70e9, 175e9, 405e9, 1e12])
def test_parametric_model_hits_its_size_with_a_gqa_shape(n):
    m = catalog.parametric_model(n)
    assert m.params() == pytest.approx(n, rel=0.03)
    assert m.parametric and "interpolated" in m.label()
    assert m.kv_heads == 8 and m.heads % m.kv_heads == 0
    assert 2.0 <= m.ffn / m.hidden <= 5.0


def test_parametric_shape_grows_with_size():
    sizes = [catalog.parametric_model(n) for n in (2e9, 20e9, 200e9, 900e9)]
    assert [m.layers for m in sizes] == sorted(m.layers for m in sizes)
    assert [m.hidden for m in sizes] == sorted(m.hidden for m in sizes)


def test_parametric_model_by_id():
    assert catalog.get_model("dense-70b").params() == pytest.approx(70e9, rel=0.03)


@pytest.mark.parametrize("repo, model_id", [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"), ("deepseek-ai/DeepSeek-R1-0528", "deepseek-r1"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b"), ("openai/gpt-oss-120b", "gpt-oss-120b"),
    # DeepSeek's later releases keep V3's architecture; Kimi K2's 0905 update and GLM-4.7 keep their layers
    ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3"), ("deepseek-ai/DeepSeek-V3.1-Terminus", "deepseek-v3"),
    ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"), ("moonshotai/Kimi-K2-Instruct-0905", "kimi-k2"),
    ("zai-org/GLM-4.7", "glm-4.6"), ("MiniMaxAI/MiniMax-M2", "minimax-m2"), ("MiniMaxAI/MiniMax-M2.5", "minimax-m2"), ("Qwen/Qwen3-32B", "qwen3-32b"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "llama-4-maverick")])
def test_a_hugging_face_repo_of_a_catalog_model_or_its_instruction_tuned_release_names_it(repo, model_id):
    assert catalog.get_model(repo).id == model_id  # a fine-tune keeps its base model's shape


@pytest.mark.parametrize("bad", ["gpt-9", "dense-0.1b", "dense-5t", "dense-abc", "meta-llama/Llama-5-1T-Instruct",
                                 "../../etc/passwd"])
def test_unknown_models_raise_value_errors_that_say_what_to_do(bad):
    with pytest.raises(ValueError, match="choose|cannot read|range"):
        catalog.get_model(bad)


def test_unknown_gpu():
    with pytest.raises(ValueError, match="choose one of"):
        catalog.get_gpu("tpu-v5")
