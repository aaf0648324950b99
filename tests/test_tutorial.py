"""The Tutorial: its numbers follow the inputs and agree with the physics they describe."""
import re
from dataclasses import replace
from pathlib import Path

import pytest

from core.lab import tutorial
from core.lab.inputs import LabInputs

ROOT = Path(__file__).resolve().parent.parent
PAGE = "views/tutorial.py"
BASE = LabInputs()

VARIED = [
    BASE,
    LabInputs(model="llama-3.1-70b", tensor_parallel=True, gpus=4),
    LabInputs(model="deepseek-v3", gpu="h200", gpus=16, tensor_parallel=True),
    LabInputs(model="llama-2-7b", continuous_batching=False, gpu="a100-80gb"),
    LabInputs(model="mixtral-8x7b", gpu="mi300x", dtype="fp8", chunked_prefill=False),
    LabInputs(model="qwen2.5-7b", gpu="l4", prompt_tokens=4096, output_tokens=64, max_batched_tokens=512),
    LabInputs(rate=0.2, prompt_tokens=64, output_tokens=1024, gpus=3),
    LabInputs(model="llama-3.1-70b", dtype="int4", kv_dtype="fp8"),
    LabInputs(model="deepseek-v3", gpu="h200", gpus=8, tensor_parallel=True, experts="ep_dp", dtype="fp8"),
    LabInputs(model="qwen3-30b-a3b", gpu="h100", gpus=2, tensor_parallel=True, experts="ep_dp_overlap",
              spec_method="eagle3"),
]


def value(text: str) -> float:
    """The first number in a formatted value ("1,234.5 tokens/s" -> 1234.5)."""
    return float(re.search(r"-?[\d,]*\.?\d+", text).group().replace(",", ""))


def millis(text: str) -> float:
    return value(text) * (1e3 if text.endswith(" s") else 1)


@pytest.mark.parametrize("inputs", VARIED, ids=lambda i: f"{i.model}-{i.gpu}-{i.gpus}")
def test_every_placeholder_is_filled_with_a_computed_number(inputs):
    md = tutorial.render(inputs)
    assert "{" not in md and "}" not in md
    assert "n/a" not in md  # every one of these deployments runs, so nothing is left uncomputed
    assert tutorial.numbers(inputs)["model_name"] in md


def test_every_part_of_a_step_the_cost_model_reports_has_words():
    from core.physics import costmodel
    assert set(tutorial.STEP_PARTS) == set(costmodel.BREAKDOWN_NAMES)


def test_a_data_parallel_attention_step_names_its_dispatch_and_combine():
    inputs = LabInputs(model="deepseek-v3", gpu="h200", gpus=8, tensor_parallel=True, experts="ep_dp", dtype="fp8")
    md = tutorial.render(inputs)
    assert tutorial.STEP_PARTS["all_to_all"] in md
    assert "fits no replica" not in md  # DeepSeek's fp8 release fits eight H200s in every shape


def test_weights_are_two_bytes_per_parameter_and_grow_with_the_model():
    # published parameter counts (config.json arithmetic): Llama-3.1-8B 8.03 B, 70B 70.55 B
    small = value(tutorial.numbers(BASE)["weights_gb"])
    big = value(tutorial.numbers(replace(BASE, model="llama-3.1-70b"))["weights_gb"])
    assert small == pytest.approx(8.03 * 2, abs=0.1)
    assert big == pytest.approx(70.55 * 2, abs=0.2)
    # fp8 halves the linear layers; the embedding and LM head (2 x 128,256 x 4,096) stay 16-bit
    embeddings_gb = 2 * 128256 * 4096 * 2 / 1e9
    fp8 = value(tutorial.numbers(replace(BASE, dtype="fp8"))["weights_gb"])
    assert fp8 == pytest.approx((small - embeddings_gb) / 2 + embeddings_gb, abs=0.1)


def test_grouped_query_attention_caches_fewer_bytes_per_token_than_multi_head():
    gqa = tutorial.numbers(BASE)  # Llama-3.1-8B: 32 layers, 8 KV heads of 128
    mha = tutorial.numbers(replace(BASE, model="llama-2-7b"))  # 32 layers, 32 KV heads of 128
    assert value(gqa["kv_bytes_per_token"]) == 2 * 32 * 8 * 128 * 2
    assert value(mha["kv_bytes_per_token"]) == 2 * 32 * 32 * 128 * 2
    assert "grouped-query" in gqa["attention_sentence"] and "multi-head attention" in mha["attention_sentence"]
    mla = tutorial.numbers(replace(BASE, model="deepseek-v3", gpu="h200", gpus=16, tensor_parallel=True))
    assert value(mla["kv_bytes_per_token"]) == 61 * (512 + 64) * 2  # a latent and a rotary key per layer


def test_one_requests_cache_is_its_tokens_times_the_bytes_per_token():
    for p, o in ((512, 256), (4096, 1024)):
        n = tutorial.numbers(replace(BASE, prompt_tokens=p, output_tokens=o))
        assert value(n["kv_mb_per_request"]) == pytest.approx((p + o) * 131072 / 1e6, rel=1e-3)


def test_the_cache_gets_what_the_weights_leave_and_holds_whole_requests():
    n = tutorial.numbers(BASE)
    budget, weights, pool = value(n["budget_gb"]), value(n["weights_gb_per_gpu"]), value(n["kv_pool_gb"])
    assert pool < budget - weights  # the workspace takes its share too
    tokens = value(n["kv_tokens_fit"])
    assert tokens * 131072 / 1e9 == pytest.approx(pool, rel=0.01)
    assert value(n["requests_fit"]) == tokens // (512 + 256)
    bigger = tutorial.numbers(replace(BASE, gpu="h200"))  # 141 GB against 80 GB: more room for the cache
    assert value(bigger["kv_tokens_fit"]) > 1.5 * tokens


def test_ridge_point_is_flops_over_bandwidth_and_decode_is_bounded_by_streaming_the_weights():
    n = tutorial.numbers(BASE)
    assert value(n["ridge_flops_per_byte"]) == pytest.approx(989 / 3.35, abs=1)  # H100 SXM datasheet
    assert value(tutorial.numbers(replace(BASE, gpu="h200"))["ridge_flops_per_byte"]) == pytest.approx(989 / 4.8, abs=1)
    step = millis(n["decode_ms_batch1"])
    assert step >= 15.0e9 / 3.35e12 * 1e3  # 15 GB of layer weights at 3.35 TB/s, the floor of a decode step
    assert value(n["decode_tok_s_batch1"]) == pytest.approx(1e3 / step, rel=0.01)
    faster = tutorial.numbers(replace(BASE, gpu="h200"))  # same FLOP/s, 1.43x the bandwidth
    assert millis(faster["decode_ms_batch1"]) < step


def test_a_batch_shares_the_weight_reads():
    n = tutorial.numbers(BASE)
    one, full = millis(n["decode_ms_batch1"]), millis(n["decode_ms_batch_max"])
    batch = value(n["batch_max"])
    assert batch > 1 and one < full < batch * one
    assert value(n["decode_tok_s_batch_max"]) > 10 * value(n["decode_tok_s_batch1"])


def test_longer_prompts_take_longer_to_prefill_and_to_move():
    short = tutorial.numbers(replace(BASE, prompt_tokens=512))
    long = tutorial.numbers(replace(BASE, prompt_tokens=4096))
    # prefill is compute-bound: 8x the tokens costs several times the time
    assert millis(long["prefill_ms"]) > 4 * millis(short["prefill_ms"])
    assert value(long["kv_transfer_mb"]) == pytest.approx(8 * value(short["kv_transfer_mb"]), rel=1e-3)
    assert millis(long["kv_transfer_ms"]) > 4 * millis(short["kv_transfer_ms"])


def test_one_at_a_time_utilisation_is_rate_times_service_time():
    n = tutorial.numbers(replace(BASE, rate=0.2))
    service = millis(n["serial_service_s"]) / 1e3
    assert service == pytest.approx((millis(n["prefill_ms"]) + 256 * millis(n["decode_ms_batch1"])) / 1e3, rel=0.01)
    assert value(n["serial_utilisation"]) == pytest.approx(0.2 * service * 100, abs=1)
    assert "grows without bound" in tutorial.numbers(replace(BASE, rate=20))["serial_verdict"]


def test_sharding_divides_the_weights_and_adds_all_reduces():
    n = tutorial.numbers(LabInputs(model="llama-3.1-70b", tensor_parallel=True, gpus=4))
    # auto tp is the planner's: on 4 H100 the 70B's tp=2 leaves little KV room, so it takes tp=4
    assert n["tp_example"] == "tp=4"
    assert value(n["weights_gb_per_gpu_tp"]) == pytest.approx(141.1 / 4, abs=0.3)
    assert millis(n["allreduce_ms_per_step"]) > 0
    assert value(n["allreduces_per_step"]) == 2 * 80  # two per layer


def test_a_model_that_does_not_fit_one_gpu_says_which_tp_it_needs():
    inputs = replace(BASE, model="llama-3.1-70b")  # 141 GB of weights against an 80 GB H100
    md = tutorial.render(inputs)
    assert "{" not in md
    assert "does not fit one NVIDIA H100" in md and "tp=2" in md
    assert "n/a" not in md  # described on the two GPUs it needs


def test_a_model_that_fits_nowhere_still_renders_what_can_be_and_says_so():
    md = tutorial.render(LabInputs(model="dense-1000b", gpu="l4"))  # 2 TB of weights over 64 x 24 GB
    assert "{" not in md and "does not fit" in md and "even sharded over 64 GPUs" in md
    assert "n/a" not in md  # paragraphs that need a step time are left out, not filled with blanks
    assert "## 2. The KV cache" in md and "651,264 bytes" in md  # 2 x 159 layers x 8 KV heads x 128 x 2 bytes


def test_inputs_no_deployment_can_take_raise_a_clear_error():
    with pytest.raises(ValueError, match="request rate"):
        tutorial.render(replace(BASE, rate=0.0))


# ---------------------------------------------------------------- the page

@pytest.fixture(scope="module")
def app():
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=120)
    at.run()
    at.switch_page(PAGE).run()
    return at


def page_text(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_page_renders_the_tutorial_for_the_sidebar(app):
    assert not app.exception
    md = page_text(app)
    assert "Llama-3.1-8B" in md and "## 11. How this Lab computes all of it" in md
    assert "{" not in md
    assert any("follows the sidebar" in i.value for i in app.info)
    assert len(app.get("vega_lite_chart")) == 2  # throughput against batch; memory against tp


def test_page_numbers_change_with_the_sidebar(app):
    before = page_text(app)
    app.sidebar.selectbox(key="model").set_value("llama-3.1-70b").run()
    assert not app.exception
    assert "Llama-3.1-70B" in page_text(app)
    warning = " ".join(w.value for w in app.warning)
    assert "does not fit one" in warning and "tp=2" in warning  # 141 GB of weights, 80 GB GPUs
    app.sidebar.toggle(key="tp_on").set_value(True)
    app.sidebar.select_slider(key="gpus").set_value(4)
    app.run()
    assert not app.exception
    sharded = page_text(app)
    assert not app.warning  # the sidebar's own deployment runs now
    assert "141.1 GB" in sharded and "141.1 GB" not in before  # the 70B's weights, 2 bytes x 70.6 B
    assert "4 NVIDIA H100 SXM5 80GB GPUs as one replica of tp=4" in sharded  # auto tp: the planner's choice


def test_page_shows_an_error_not_a_traceback_for_bad_inputs(app):
    app.sidebar.number_input(key="rate").set_value(0.0).run()
    assert not app.exception
    assert any("request rate" in e.value for e in app.error)
    app.sidebar.number_input(key="rate").set_value(4.0).run()


def test_the_write_up_names_the_datasheet_ridge_and_the_measured_ridge_with_the_batch_at_each():
    # intensity of a decode batch of B is 2B FLOPs per weight's bytes: B FLOP/byte at 2 bytes, 2B at 1 byte
    for inputs, flop_per_seq in ((BASE, 1.0), (replace(BASE, dtype="fp8"), 2.0)):
        n = tutorial.numbers(inputs)
        datasheet, measured = value(n["ridge_batch"]), value(n["ridge_effective_batch"])
        assert datasheet == pytest.approx(value(n["ridge_flops_per_byte"]) / flop_per_seq, abs=1)
        assert measured == pytest.approx(value(n["ridge_effective"]) / flop_per_seq, abs=1)
        assert measured < datasheet  # GEMMs reach a smaller share of their peak than weight reads do of theirs
    paragraph = next(p for p in tutorial.render(BASE).split("\n\n") if "memory-bound until" in p)
    text = " ".join(paragraph.split())
    assert "about **295 sequences**" in text and "about **215 sequences**" in text  # 989/3.35; × 0.69 / 0.94
    assert "215 FLOP/byte" in text


def test_the_batch_chart_marks_the_two_ridges_the_text_names(app):
    import pyarrow as pa
    chart = app.get("vega_lite_chart")[0].proto
    labels = {t for d in chart.datasets for t in pa.ipc.open_stream(d.data.data).read_all().to_pydict().get("text", [])}
    text = " ".join(page_text(app).split())
    for name, key in (("datasheet ridge", "ridge_batch"), ("measured ridge", "ridge_effective_batch")):
        batch = f"{value(tutorial.numbers(BASE)[key]):,.0f}"
        assert f"{name}: {batch}" in labels and f"about **{batch} sequences**" in text


def test_under_tensorrt_llm_the_cache_gets_its_share_of_what_the_weights_and_workspace_leave():
    # TensorRT-LLM's free_gpu_memory_fraction is a share of the memory left free, not of the whole GPU:
    # for a model whose weights fill most of the GPU its pool is the larger, and the page says which rule
    big = replace(BASE, model="qwen3-32b", dtype="fp8")
    vllm, trt = tutorial.numbers(big), tutorial.numbers(replace(big, engine="trtllm"))
    assert value(trt["kv_pool_gb"]) > value(vllm["kv_pool_gb"])
    left = value(trt["usable_gb"]) - value(trt["weights_gb_per_gpu"]) - value(trt["workspace_gb"])
    assert value(trt["kv_pool_gb"]) == pytest.approx(0.9 * left, rel=0.02)
    assert "TensorRT-LLM gives the KV cache 90% of the rest" in trt["memory_rule_sentence"]
    assert "vLLM takes 90%" in vllm["memory_rule_sentence"]
    # and it admits a request only while the pool holds it whole: the engine's paragraph says so
    assert "GUARANTEED_NO_EVICT" in trt["admission_words"] and "GUARANTEED" not in vllm["admission_words"]
