"""Any model from its Hugging Face config.json: real configs of every family yield the catalog's
shapes and their model cards' parameter counts; bad files say which field is wrong."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.physics import catalog, hfconfig
from core.physics.memory import plan_memory
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "fixtures" / "configs"
FIXTURES = sorted(p.name for p in CONFIGS.glob("*.json"))


def parsed(name: str) -> hfconfig.Parsed:
    return hfconfig.parse((CONFIGS / name).read_text(), name)


def raw(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text())


@pytest.mark.parametrize("model_id", catalog.model_ids())
def test_each_catalog_models_config_yields_the_catalogs_figures(model_id):
    cat = catalog.get_model(model_id)
    m = parsed(f"{model_id}.json").model
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.vocab) == \
        (cat.layers, cat.hidden, cat.heads, cat.kv_heads, cat.head_dim, cat.vocab)
    assert (m.experts, m.experts_per_token, m.shared_experts, m.dense_layers) == \
        (cat.experts, cat.experts_per_token, cat.shared_experts, cat.dense_layers)
    assert m.fp8_block_scales == cat.fp8_block_scales  # the config's quantization_config, read
    assert m.qk_norm_allreduce == cat.qk_norm_allreduce  # MiniMax-M2's norms over all the heads
    assert m.params() == pytest.approx(cat.params(), rel=0.02)
    assert m.params(active=True) == pytest.approx(cat.params(active=True), rel=0.02)
    assert m.kv_bytes_per_token() == cat.kv_bytes_per_token()


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_counts_its_model_cards_parameters_within_2_percent(name):
    p = parsed(name)
    assert p.card is not None, f"no model card figure on file for {name}"
    assert p.model.params() == pytest.approx(p.card["params"], rel=0.02)
    assert p.card["name"] in p.params_line() and "computed" in p.params_line()
    assert not re.search(r"[-+]\d+(\.\d+)?%", p.params_line())  # "(+0.3%)" reads as nothing: say it in words


def test_the_families_structures_are_read():
    # Llama-3.2-1B ties its LM head to the embedding: one vocabulary matrix, 1.24 B in all
    tied = parsed("llama-3.2-1b.json").model
    assert tied.tied_embeddings and tied.params() == pytest.approx(1.236e9, rel=0.001)
    assert parsed("gemma-2b.json").model.tied_embeddings  # Gemma's default, absent from its file
    # Qwen-MoE: 60 routed experts of 1,408, top-4, and one shared expert four experts wide
    qmoe = parsed("qwen1.5-moe-a2.7b.json").model
    assert (qmoe.experts, qmoe.experts_per_token, qmoe.moe_ffn, qmoe.shared_experts) == (60, 4, 1408, 4)
    assert qmoe.qkv_bias
    # DeepSeek-V2-Lite: MLA with no query compression, one leading dense layer, two shared experts
    lite = parsed("deepseek-v2-lite.json").model
    assert lite.is_mla and lite.mla_q_lora_rank == 0 and lite.dense_layers == 1 and lite.shared_experts == 2
    assert lite.kv_bytes_per_token() == 27 * (512 + 64) * 2  # latent + RoPE key per layer
    assert not lite.router_bias
    v3 = parsed("deepseek-v3.json")
    assert v3.model.router_bias and v3.suggested_dtype == "fp8"  # noaux_tc; its checkpoint is fp8
    assert any("multi-token" in n and "spec method mtp" in n for n in v3.notes)
    assert v3.model.mtp_layers == 1  # num_nextn_predict_layers: the MTP proposer's module
    assert any("sliding-window" in n for n in parsed("mistral-7b.json").notes)
    assert parsed("qwen3-1.7b.json").model.head_dim == 128  # explicit head_dim, not hidden / heads
    assert parsed("phi-3.5-mini-instruct.json").model.kv_heads == 32


@pytest.mark.parametrize("change,field", [
    ({"hidden_size": None}, "hidden_size"), ({"num_hidden_layers": "32"}, "num_hidden_layers"),
    ({"num_key_value_heads": 5}, "num_key_value_heads"), ({"vocab_size": -1}, "vocab_size"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"), ({"intermediate_size": 1.5}, "intermediate_size"),
    ({"model_type": "gpt2"}, "model_type 'gpt2'"), ({"model_type": None}, "model_type"),
])
def test_a_missing_or_wrong_field_is_named(change, field):
    cfg = {**raw("llama-3.1-8b.json"), **change}
    cfg = {k: v for k, v in cfg.items() if not (v is None and k in change)}
    with pytest.raises(ValueError, match=field):
        hfconfig.parse(json.dumps(cfg))


@pytest.mark.parametrize("name,drop", [("mixtral-8x7b.json", "num_local_experts"),
                                       ("qwen1.5-moe-a2.7b.json", "moe_intermediate_size"),
                                       ("deepseek-v3.json", "kv_lora_rank")])
def test_a_moe_or_mla_config_without_its_fields_is_named(name, drop):
    cfg = {k: v for k, v in raw(name).items() if k != drop}
    with pytest.raises(ValueError, match=drop):
        hfconfig.parse(json.dumps(cfg))


@pytest.mark.parametrize("text,match", [
    ("not json", "not JSON"), ("[1, 2]", "JSON object"), ('{"model_type": "llama", "hidden_size": NaN}', "NaN"),
    ("import os\nos.system('echo hi')", "not JSON"), (b"{" + b" " * (300 * 1024) + b"}", "KB"),
])
def test_the_file_is_read_as_json_data_and_size_limited(text, match):
    with pytest.raises(ValueError, match=match):
        hfconfig.parse(text)


def test_a_registered_config_serves_like_a_catalog_model_in_this_and_other_processes():
    model = catalog.register_model(parsed("qwen3-1.7b.json").model)
    assert model.id.startswith("cfg-") and catalog.get_model(model.id) == model
    assert plan_memory(catalog.get_gpu("l4"), model, kv_dtype="fp8").kv_blocks > 0
    r = simulate(SimConfig(gpu="l4", model=model.id, workload=WorkloadSpec(rate=2, n_requests=50)))
    assert r.summary["requests"] == 50
    # a planner worker is another process: it resolves the id from the registry on disk
    out = subprocess.run([sys.executable, "-c", f"from core.physics import catalog; "
                          f"print(catalog.get_model('{model.id}').params())"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == str(model.params())


def test_the_command_line_takes_a_config_file(tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "core", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
    ok = cli("memory", "--gpu", "h100", "--model-config", str(CONFIGS / "deepseek-v2-lite.json"), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["kv_bytes_per_token"] == 27 * (512 + 64) * 2
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 1024}))
    err = cli("memory", "--gpu", "h100", "--model-config", str(bad))
    assert err.returncode == 2 and "num_hidden_layers" in err.stderr and "Traceback" not in err.stderr


def test_the_lab_takes_a_pasted_config_and_says_what_it_counts():
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=180)
    at.session_state["model_paste_open"] = True  # the popover's form is drawn only while it is open
    at.run()
    at.text_area(key="model_paste").input("{\"model_type\": \"llama\"}")
    next(b for b in at.button if b.label == "Use this model").click().run()
    assert not at.exception
    assert any("hidden_size" in e.value for e in at.sidebar.error)  # the field, not a traceback
    at.text_area(key="model_paste").input((CONFIGS / "qwen1.5-moe-a2.7b.json").read_text())
    next(b for b in at.button if b.label == "Use this model").click().run()
    assert not at.exception and not at.sidebar.error
    assert at.session_state["model"].startswith("cfg-")
    said = " ".join(c.value for c in at.sidebar.caption)
    assert "14.32B parameters computed" in said and "Qwen1.5-MoE-A2.7B says 14.3B" in said
    assert any(m.value for m in at.main.metric)  # the Lab simulated it


def test_rules_and_sources_list_what_a_config_can_name_but_the_simulator_leaves_out():
    from core.lab.assumptions import assumptions
    left_out = next(a["text"] for a in assumptions() if a["id"] == "left_out")
    assert "sliding-window attention" in left_out
    # a config's multi-token-prediction module is what speculative decoding's MTP proposer runs
    spec = next(a["text"] for a in assumptions() if a["id"] == "speculative")
    assert "MTP" in spec and "multi-token-prediction" not in left_out


def test_gpt_oss_reads_as_a_mixture_served_in_mxfp4():
    # gpt-oss-120b: 128 experts of 2,880, top-4, 64-wide heads (not hidden / heads), biased attention;
    # its experts ship in MXFP4, which the Lab suggests, and half its layers attend within a 128-token window
    p = parsed("gpt-oss-120b.json")
    m = p.model
    assert (m.experts, m.experts_per_token, m.moe_ffn, m.head_dim, m.qkv_bias) == (128, 4, 2880, 64, True)
    # the card's '5.1B active parameters' leave out the input embedding, which no token computes through
    assert m.params(active=True) - m.vocab * m.hidden == pytest.approx(5.1e9, rel=0.03)
    assert p.suggested_dtype == "mxfp4"
    assert (m.window, m.window_layers) == (128, 18)


def _ct(bits: int, kind: str, strategy: str = "channel") -> dict:
    """A compressed-tensors quantization_config as llm-compressor writes it, one weight scheme."""
    return {"quant_method": "compressed-tensors", "format": "float-quantized" if kind == "float" else "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": bits, "type": kind,
                                                                               "strategy": strategy}}}}


@pytest.mark.parametrize("quantization, dtype, blocks", [
    (_ct(8, "float"), "fp8", False),  # RedHatAI's FP8-dynamic: a scale a channel
    (_ct(8, "float", "block"), "fp8", True),  # llm-compressor's FP8_BLOCK: DeepSeek's 128 x 128 blocks
    (_ct(4, "int", "group"), "int4", False),  # W4A16
    (_ct(4, "float", "tensor_group"), "fp4", False),  # NVFP4
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "fp4", False),  # NVIDIA's ModelOpt checkpoints
])
def test_a_quantised_checkpoint_says_the_format_it_is_stored_in(quantization, dtype, blocks):
    p = hfconfig.from_dict({**raw("llama-3.1-8b.json"), "quantization_config": quantization}, "q")
    assert (p.suggested_dtype, p.model.fp8_block_scales) == (dtype, blocks)


# Kimi K2's language model, written from its published values: the Kimi-K2 README's table (61 layers of
# which 1 dense, attention hidden 7,168, experts of 2,048, 64 heads, 384 experts with 8 a token and 1
# shared, vocabulary 160K, MLA) and DeepSeek-V3's latent ranks its config.json carries
KIMI_K2 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
           "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
           "num_attention_heads": 64, "num_key_value_heads": 64, "kv_lora_rank": 512, "q_lora_rank": 1536,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 384,
           "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1, "topk_method": "noaux_tc",
           "num_nextn_predict_layers": 0, "vocab_size": 163840, "max_position_embeddings": 131072,
           "tie_word_embeddings": False,
           "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}


def test_kimi_k2_and_its_k2_6_wrapper_read_as_deepseek_v3s_layers():
    # the README: '1T' total, '32B' activated (rounded: the shape counts 1.03T)
    k2 = hfconfig.from_dict(KIMI_K2, "kimi-k2")
    m = k2.model
    assert (m.experts, m.experts_per_token, m.shared_experts, m.dense_layers, m.is_mla) == (384, 8, 1, 1, True)
    assert m.params() == pytest.approx(1e12, rel=0.03) and m.params(active=True) == pytest.approx(32e9, rel=0.03)
    assert (k2.suggested_dtype, m.fp8_block_scales) == ("fp8", True)  # released in block fp8
    # Kimi K2.6 wraps the same language model (model_type kimi_k25, text_config) and ships it in int4
    text = {**KIMI_K2, "max_position_embeddings": 262144, "quantization_config": _ct(4, "int", "group")}
    k26 = hfconfig.from_dict({"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
                              "text_config": text}, "kimi-k2.6")
    assert k26.model.params() == m.params() and k26.suggested_dtype == "int4"


GLM = ROOT / "calibration" / "configs" / "glm-4.6.json"  # zai-org/GLM-4.6's config.json (its _source)


def test_glm_4_reads_as_deepseek_experts_behind_grouped_query_attention():
    # the GLM-4.5 report: 355B total, 32B active (GLM-4.6 and 4.7 keep the layers)
    glm = hfconfig.parse(GLM.read_bytes(), GLM.name)
    m = glm.model
    assert (m.experts, m.experts_per_token, m.shared_experts, m.dense_layers) == (160, 8, 1, 3)
    assert not m.is_mla and m.qkv_bias and m.router_bias
    # 8 KV heads of 128 a layer, keys and values in 16 bits: the cache is the GQA one, not a latent
    assert m.kv_bytes_per_token() == 92 * 2 * 8 * 128 * 2
    assert m.params() == pytest.approx(355e9, rel=0.02) and m.params(active=True) == pytest.approx(32e9, rel=0.07)
    assert m.mtp_layers == 1 and any("query and key norms" in n for n in glm.notes)
    assert glm.card is not None and "GLM" in glm.card["name"]
    # its 160 experts split over eight GPUs; over six they do not, and the error says which ep to choose
    model = catalog.register_model(m).id
    r = simulate(SimConfig(gpu="h200", model=model, tp=8, ep=8, workload=WorkloadSpec(rate=1, n_requests=20)))
    assert r.summary["requests"] == 20
    with pytest.raises(ValueError, match="ep"):
        simulate(SimConfig(gpu="h200", model=model, tp=6, ep=6, workload=WorkloadSpec(rate=1, n_requests=20)))


def test_minimax_m2_reads_as_experts_without_a_shared_one_and_ships_block_fp8():
    # its card: 230B total, 10B active (the 1.2B of embedding and head it leaves out are counted here)
    p = parsed("minimax-m2.json")
    m = p.model
    assert (m.experts, m.experts_per_token, m.shared_experts, m.moe_ffn) == (256, 8, 0, 1536)
    assert m.router_bias and not m.is_mla and m.kv_heads == 8
    assert m.params(active=True) - 2 * m.vocab * m.hidden == pytest.approx(10e9, rel=0.03)
    assert (p.suggested_dtype, m.fp8_block_scales) == ("fp8", True)
    assert any("query and key norms" in n for n in p.notes)


SCOUT = CONFIGS / "llama-4-scout.json"  # its text_config, transcribed (the catalog's llama-4-scout)


def test_llama_4_reads_as_one_routed_and_one_shared_expert_a_token():
    # Meta's cards: Scout '17B activated parameters, 109B total' (the vision encoder, about 1B, among them);
    # Maverick, the same layers with 128 experts on every other one, '17B active, 400B total'
    scout = hfconfig.parse(SCOUT.read_bytes(), SCOUT.name)
    m = scout.model
    assert (m.experts, m.experts_per_token, m.shared_experts, m.dense_layers) == (16, 1, 1, 0)
    assert m.params() == pytest.approx(109e9, rel=0.02) and m.params(active=True) == pytest.approx(17e9, rel=0.03)
    assert any("chunked local attention" in n for n in scout.notes)
    config = json.loads(SCOUT.read_text())
    # a multimodal wrapper's quantization_config sits beside its text_config, not in it
    assert hfconfig.from_dict({**config, "quantization_config": _ct(8, "float")}, "fp8").suggested_dtype == "fp8"
    config["text_config"].update(num_local_experts=128, interleave_moe_layer_step=2)
    maverick = hfconfig.from_dict(config, "maverick").model
    assert (maverick.dense_layers, maverick.ffn) == (24, 16384)  # the dense layers' MLP: intermediate_size_mlp
    assert maverick.params() == pytest.approx(400e9, rel=0.02)
    assert maverick.params(active=True) == pytest.approx(17e9, rel=0.03)


@pytest.mark.parametrize("name, window, sliding", [
    ("gpt-oss-120b.json", 128, 18),  # transformers' GptOssConfig: the even layers of 36
    ("gemma-2-9b.json", 4096, 21),  # Gemma 2: the even layers of 42
    ("gemma-3-1b-it.json", 512, 22),  # Gemma 3: all but every 6th of 26
])
def test_sliding_windows_are_read_by_layer(name, window, sliding):
    p = parsed(name)
    assert (p.model.window, p.model.window_layers) == (window, sliding)
    assert any(f"{sliding} of {p.model.layers} layers attend to the last {window} tokens" in n for n in p.modelled)
    assert not any("sliding" in n for n in p.notes)  # said as modelled, not as left out
    # a file that lists its layers' types is read from the list, whatever the family
    types = ["full_attention"] * (p.model.layers - 3) + ["sliding_attention"] * 3
    listed = hfconfig.from_dict({**raw(name).get("text_config", raw(name)), "layer_types": types,
                                 "model_type": p.model_type})
    assert (listed.model.window, listed.model.window_layers) == (window, 3)


def test_a_window_on_every_layer_or_past_the_context_is_not_a_window():
    # Mistral-7B v0.1 slides on every layer: the pool (blocks of full-attention layers) cannot hold that,
    # and the Lab says it caches every token; Qwen2.5's window is off and as long as its context
    mistral = parsed("mistral-7b.json")
    assert mistral.model.window_layers == 0 and any("not modelled" in n for n in mistral.notes)
    assert parsed("qwen2.5-7b.json").model.window_layers == 0
