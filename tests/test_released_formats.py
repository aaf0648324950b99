"""The MoE models deployed most in 2026 are catalog models (DeepSeek-R1, Qwen3-235B-A22B and
Qwen3-30B-A3B, gpt-oss, Llama 4 Scout), and a model released only in a quantised format is planned
and served as released: gpt-oss's MXFP4 experts fit one 80 GB GPU, and no answer asks vLLM to
re-quantise a release it cannot."""
import shlex
from dataclasses import replace

import pytest

from core.lab.inputs import LabInputs, NeedsShape, current_config
from core.lab.recommend import recommend
from core.physics import catalog
from core.physics.memory import weight_bytes_per_gpu
from core.planner.plan import plan
from core.planner.space import Budget, Deployment, Targets, Workload, to_config
from core.serving import serve_command
from core.serving.workload import WorkloadSpec

GIB = 2**30


@pytest.mark.parametrize("model_id, total_b, active_b", [
    ("deepseek-r1", 671, 37), ("qwen3-235b-a22b", 235, 22), ("qwen3-30b-a3b", 30.5, 3.3), ("gpt-oss-120b", 117, 5.1),
    ("gpt-oss-20b", 21, 3.6), ("llama-4-scout", 109, 17), ("llama-4-maverick", 400, 17),
    ("qwen3-coder-480b-a35b", 480, 35), ("glm-4.6", 355, 32), ("kimi-k2", 1040, 32), ("minimax-m2", 230, 10)])
def test_the_2026_moe_models_carry_their_cards_sizes(model_id, total_b, active_b):
    m = catalog.get_model(model_id)
    assert m.is_moe
    # Scout's card counts its vision encoder (the catalog holds the text model); the cards' active counts
    # leave out the embeddings, which a decode step reads too
    assert m.params() / 1e9 == pytest.approx(total_b, rel=0.02)
    assert active_b <= m.params(active=True) / 1e9 <= active_b * 1.25


@pytest.mark.parametrize("model_id", ["kimi-k2", "minimax-m2"])
def test_a_model_released_only_in_block_fp8_is_served_and_planned_in_it(model_id):
    # neither publishes 16-bit weights: the release is the fp8 checkpoint itself, in 128 x 128 blocks
    m = catalog.get_model(model_id)
    assert serve_command.released_formats(model_id) == ("fp8",) and m.fp8_block_scales
    assert serve_command.release_dtype(serve_command.hf_repos()[model_id]) == "fp8"
    repo, flags, _ = serve_command.checkpoint(model_id, "fp8")
    assert repo == serve_command.hf_repos()[model_id] and "--quantization" not in flags


def test_deepseek_r1_is_deepseek_v3s_architecture_served_from_its_own_release():
    r1, v3 = catalog.get_model("deepseek-r1"), catalog.get_model("deepseek-v3")
    assert (r1.params(), r1.kv_bytes_per_token(), r1.fp8_block_scales) == (v3.params(), v3.kv_bytes_per_token(), True)
    assert serve_command.checkpoint("deepseek-r1", "fp8")[0] == "deepseek-ai/DeepSeek-R1"
    assert catalog.get_model("deepseek-r1-0528") is r1


def test_a_release_with_a_16_bit_original_is_not_a_released_format():
    assert serve_command.released_formats("gpt-oss-120b") == ("mxfp4",)
    assert serve_command.released_formats("deepseek-r1") == ("fp8",)
    # Qwen and Meta publish 16-bit weights beside their fp8 checkpoints: any format is a choice
    assert serve_command.released_formats("qwen3-235b-a22b") == serve_command.released_formats("llama-3.1-405b") == ()


def test_gpt_oss_120b_is_planned_on_one_h100_in_its_own_mxfp4_though_the_search_names_bf16_and_fp8():
    m = catalog.get_model("gpt-oss-120b")
    # the card's 'fits into a single 80GB GPU': in its MXFP4, not in fp8
    assert weight_bytes_per_gpu(m, 1, "mxfp4") < 80 * 1e9 < weight_bytes_per_gpu(m, 1, "fp8")
    w = Workload("gpt-oss-120b", WorkloadSpec(n_requests=200, rate=2, prompt_mean=1024, output_mean=256,
                                              length_dist="lognormal"), Targets(3000, 100))
    p = plan(w, Budget(gpu_types=("h100",), max_gpus=4, dtypes=("bf16", "fp8")), executor="inline")
    best = p.cheapest.deployment
    assert (best.gpus, best.dtype) == (1, "mxfp4")
    argv = shlex.split(p.row(p.cheapest)["serve"].split("vllm serve", 1)[1].splitlines()[0])
    assert argv[0] == "openai/gpt-oss-120b" and "--quantization" not in argv


def test_serving_a_quantised_release_in_another_format_says_it_needs_a_conversion():
    repo, flags, notes = serve_command.checkpoint("gpt-oss-120b", "mxfp4")
    assert (repo, flags, notes) == ("openai/gpt-oss-120b", [], [])
    for dtype in ("fp8", "bf16"):
        _, _, notes = serve_command.checkpoint("gpt-oss-120b", dtype)
        assert any("released in mxfp4" in n and "conversion" in n for n in notes), dtype
    cfg = to_config(Deployment("h200", 8, 1, "fp8"), Workload("qwen3-235b-a22b", WorkloadSpec(n_requests=50)))
    line = serve_command.commands(cfg)
    assert "vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 " in line and "--quantization" not in line


def test_the_lab_offers_a_quantised_release_before_more_gpus_and_recommends_it():
    x = LabInputs(model="gpt-oss-120b", gpu="h100", gpus=2)  # the sidebar's 16-bit weights: 234 GB
    with pytest.raises(NeedsShape) as e:
        current_config(x)
    assert e.value.settings == {"dtype": "mxfp4"} and "released in mxfp4" in str(e.value)
    fixed = current_config(replace(x, **e.value.settings))  # what the button sets
    assert (fixed.dtype, fixed.tp) == ("mxfp4", 1)
    rec = recommend(x)
    assert rec.met and rec.deployment.dtype == "mxfp4" and "the format the model is released in" in rec.reason
    # the sidebar says so under the model while other weights are chosen, and not once they are its own
    assert "MXFP4" in serve_command.release_note("gpt-oss-120b", "bf16")
    assert serve_command.release_note("gpt-oss-120b", "mxfp4") is None
    assert serve_command.release_note("llama-3.1-8b", "bf16") is None
