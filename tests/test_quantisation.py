"""Quantised weights (fp8, int4 with group scales) and an fp8 KV cache: what they change in memory
and in step time, and the GPUs that cannot run fp8."""
from pathlib import Path

import pytest

from core.physics import catalog
from core.physics.costmodel import steptime
from core.physics.memory import plan_memory, weight_bytes_per_gpu
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec

H100, A100 = catalog.get_gpu("h100"), catalog.get_gpu("a100-80gb")
L8, L70 = catalog.get_model("llama-3.1-8b"), catalog.get_model("llama-3.1-70b")
MIX = catalog.get_model("mixtral-8x7b")
GB = 1e9


def test_fp8_kv_cache_holds_twice_the_blocks():
    # vLLM: an fp8 KV cache gives 'approximately double the amount of space for KV cache allocation'
    bf16 = plan_memory(H100, L8, kv_dtype="bf16")
    fp8 = plan_memory(H100, L8, kv_dtype="fp8")
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token / 2 == 2 * 32 * 8 * 128 * 1  # one byte a value
    assert fp8.kv_blocks in (2 * bf16.kv_blocks, 2 * bf16.kv_blocks + 1)
    assert fp8.weights_bytes == bf16.weights_bytes


def test_int4_weights_are_four_bits_plus_group_scales_and_zero_points():
    # AWQ/GPTQ at group size 128: 4 bits + one fp16 scale and one 4-bit zero point per 128 weights;
    # embedding and LM head stay 16-bit
    linear = L70.params() - 2 * L70.vocab * L70.hidden - L70.hidden * (2 * L70.layers + 1)
    by_hand = linear * (4 + (16 + 4) / 128) / 8 + (2 * 128256 * 8192 + 8192 * 161) * 2
    assert weight_bytes_per_gpu(L70, 1, "int4") == pytest.approx(by_hand, rel=1e-9)
    assert 39 * GB < by_hand < 41 * GB  # published 70B AWQ checkpoints are about 40 GB


def test_llama_70b_in_int4_fits_one_80gb_gpu_with_kv_room():
    with pytest.raises(ValueError, match="does not fit"):
        plan_memory(H100, L70, tp=1, dtype="bf16")
    plan = plan_memory(H100, L70, tp=1, dtype="int4")
    assert plan.weights_bytes < 41 * GB
    assert plan.kv_tokens > 100_000  # a hundred 1k-token requests, or one at the full 128k context almost
    fp8 = plan_memory(H100, L70, tp=1, dtype="fp8")  # fits too, but with little room for the cache
    assert plan.kv_tokens > 10 * fp8.kv_tokens


def _decode_ms(dtype, batch=1, model=L70, tp=4, **kw):
    return steptime(H100, model, tp, decode_batch=batch, context=1024, dtype=dtype, launch="graph",
                    attn_kernel="paged", engine="vllm", **kw)


def test_decode_at_small_batch_speeds_up_with_the_weight_bytes():
    bf16, fp8, int4 = (_decode_ms(d) for d in ("bf16", "fp8", "int4"))
    assert bf16["step_ms"] > fp8["step_ms"] > int4["step_ms"]
    # the projections and MLP stream their weights: their time follows the bytes a weight takes
    lin = {d: r["breakdown_ms"]["linear"] for d, r in (("bf16", bf16), ("fp8", fp8), ("int4", int4))}
    assert lin["bf16"] / lin["fp8"] == pytest.approx(2.0, rel=0.05)
    assert lin["bf16"] / lin["int4"] == pytest.approx(2 / catalog.DTYPE_BYTES["int4"], rel=0.05)
    assert bf16["weight_bytes_read_per_gpu"] > 3 * int4["weight_bytes_read_per_gpu"]


def test_int4_prefill_runs_at_16_bit_rate_plus_dequantisation():
    # compute bound: the dequantising kernel multiplies at the bf16 rate, a little below cuBLAS
    bf16 = steptime(H100, L8, 1, prefill_tokens=8192, dtype="bf16")["breakdown_ms"]["linear"]
    int4 = steptime(H100, L8, 1, prefill_tokens=8192, dtype="int4")["breakdown_ms"]["linear"]
    fp8 = steptime(H100, L8, 1, prefill_tokens=8192, dtype="fp8")["breakdown_ms"]["linear"]
    assert int4 > bf16 > 1.5 * fp8  # fp8 GEMMs run on FP8 tensor cores at twice the bf16 rate


def test_fp8_kv_cache_halves_the_bytes_decode_attention_reads():
    bf16, fp8 = _decode_ms("bf16", batch=64), _decode_ms("bf16", batch=64, kv_dtype="fp8")
    assert fp8["kv_bytes_read_per_gpu"] == bf16["kv_bytes_read_per_gpu"] / 2
    assert fp8["breakdown_ms"]["attn_decode"] < 0.6 * bf16["breakdown_ms"]["attn_decode"]


def test_a_gpu_without_fp8_is_refused_an_fp8_cache():
    assert not A100.supports_fp8 and H100.supports_fp8
    assert "no FP8" in A100.source["fp8"] and "compute capability" in H100.source["fp8"]
    with pytest.raises(ValueError, match="no FP8 support.*fp8 KV cache: choose a bf16 KV cache"):
        plan_memory(A100, L8, kv_dtype="fp8")
    with pytest.raises(ValueError, match="no FP8 support"):
        steptime(A100, L8, 1, decode_batch=1, context=16, kv_dtype="fp8")
    with pytest.raises(ValueError, match="no FP8 support"):
        simulate(SimConfig(gpu="a100-80gb", model="llama-3.1-8b", kv_dtype="fp8", workload=WorkloadSpec(n_requests=10)))
    assert plan_memory(A100, L8, dtype="int4").kv_blocks > 0  # int4 runs at 16-bit rate: no FP8 needed


def test_fp8_weights_on_an_a100_stream_one_byte_but_multiply_at_the_16_bit_rate():
    # vLLM's FP8 Marlin (W8A16) on a GPU without FP8 tensor cores: decode, bound by the weights' bytes,
    # speeds up as on an H100; a prompt, bound by the tensor cores, gets slower than 16-bit, not faster
    fp8, bf16 = plan_memory(A100, L70, tp=2, dtype="fp8"), plan_memory(A100, L70, tp=2)
    assert fp8.weights_bytes < 0.52 * bf16.weights_bytes  # the embedding and LM head stay 16-bit
    assert fp8.kv_tokens > 5 * bf16.kv_tokens  # two A100s hold 70B's 16-bit weights with little room to spare
    decode = {d: steptime(A100, L70, 2, decode_batch=8, context=1024, dtype=d, launch="graph", attn_kernel="paged",
                          engine="vllm")["breakdown_ms"]["linear"] for d in ("bf16", "fp8")}
    assert decode["bf16"] / decode["fp8"] == pytest.approx(2.0, rel=0.05)
    prefill = {(g.id, d): steptime(g, L8, 1, prefill_tokens=8192, dtype=d)["breakdown_ms"]["linear"]
               for g in (A100, H100) for d in ("bf16", "fp8")}
    assert prefill[("a100-80gb", "fp8")] > 1.4 * prefill[("a100-80gb", "bf16")]
    assert prefill[("h100", "fp8")] < 0.7 * prefill[("h100", "bf16")]
    # the activations stay 16-bit: no activation-quantising kernels, whatever the checkpoint's scales
    fp8 = catalog.weight_format("fp8")
    assert fp8.on(A100).block_quant_kernels == 0 < fp8.block_quant_kernels == fp8.on(H100).block_quant_kernels


def test_unknown_formats_are_named():
    with pytest.raises(ValueError, match="unknown weight dtype 'int3'.*int4"):
        plan_memory(H100, L8, dtype="int3")
    with pytest.raises(ValueError, match="unknown KV cache dtype 'int4'"):
        plan_memory(H100, L8, kv_dtype="int4")


def test_fp8_kv_cache_doubles_the_running_batch_when_the_cache_limits_it():
    # 8B on one L4 (24 GB), long prompts offered faster than it serves: the cache holds the batch
    spec = WorkloadSpec(rate=4, n_requests=200, prompt_mean=2048, output_mean=256, length_dist="fixed", seed=1)
    runs = {kv: simulate(SimConfig(gpu="l4", model="llama-3.1-8b", kv_dtype=kv, policy="sarathi", workload=spec))
            for kv in ("bf16", "fp8")}
    bf16, fp8 = runs["bf16"].summary, runs["fp8"].summary
    assert fp8["kv_blocks_total"] >= 2 * bf16["kv_blocks_total"]
    assert fp8["mean_batch"] > 1.8 * bf16["mean_batch"]
    assert fp8["throughput_tok_s"] > 1.3 * bf16["throughput_tok_s"]


def test_rules_and_sources_say_what_quantisation_does_and_leaves_out():
    from core.lab.assumptions import assumptions
    text = {a["id"]: a["text"] for a in assumptions()}
    assert "quantised KV cache" not in text["left_out"] and "accuracy cost" in text["left_out"]
    q = text["quantisation"]
    assert "4.16 bits" in q and "61%" in q and f"{L70.weight_bytes('int4') / 1e9:.1f} GB" in q
    assert "NVIDIA A100 80GB SXM4" in text["other_gpus"] and "NVIDIA H100" not in text["other_gpus"]


def test_the_planner_searches_the_formats_a_gpu_runs_and_puts_70b_in_int4_on_one_h100():
    from core.planner.plan import cheapest
    from core.planner.space import Budget, Targets, Workload, shapes
    w = Workload("llama-3.1-70b", WorkloadSpec(rate=0.5, n_requests=300, prompt_mean=512, output_mean=128,
                                               length_dist="fixed"), Targets(5000, 200))
    both = dict(dtypes=("bf16", "fp8", "int4"), kv_dtypes=("bf16", "fp8"))
    a100 = {(d.dtype, d.kv_dtype) for d in shapes(w, Budget(gpu_types=("a100-80gb",), **both))}
    h100 = {(d.dtype, d.kv_dtype) for d in shapes(w, Budget(gpu_types=("h100",), **both))}
    # no FP8 cache on Ampere; its fp8 weights run weight-only (FP8 Marlin)
    assert a100 == {("bf16", "bf16"), ("fp8", "bf16"), ("int4", "bf16")}
    assert h100 == {(d, k) for d in ("bf16", "fp8", "int4") for k in ("bf16", "fp8")}
    best, _ = cheapest(w, Budget(gpu_types=("h100",), max_gpus=1, dtypes=("bf16", "int4")))
    assert best is not None and best.deployment.gpus == 1 and best.deployment.dtype == "int4"


def lab_serves_then_refuses(choices: tuple, other_gpu: str, *words: str) -> None:
    """The Lab with `choices` set in its sidebar shows figures; on `other_gpu` it says why not, in `words`."""
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "navigation.py"), default_timeout=300)
    at.session_state["advanced"] = True  # the Advanced knobs are drawn only while their section is open
    at.run()
    for key, value in choices:
        at.sidebar.selectbox(key=key).set_value(value)
    at.run()
    assert not at.exception and not at.error
    assert any(m.value for m in at.main.metric)
    at.sidebar.selectbox(key="gpu").set_value(other_gpu)
    at.run()
    assert not at.exception
    assert any(all(w in e.value for w in words) for e in at.error)


def test_the_lab_serves_int4_weights_with_an_fp8_cache_and_refuses_the_cache_on_an_a100():
    lab_serves_then_refuses((("model", "llama-3.1-70b"), ("dtype", "int4"), ("kv_dtype", "fp8")), "a100-80gb",
                            "no FP8 support", "choose a bf16 KV cache")


# ---- FP4 weights on Blackwell: NVFP4 (4-bit values, an FP8 scale per 16) and MXFP4 (an 8-bit scale per 32)
B200, H200 = catalog.get_gpu("b200"), catalog.get_gpu("h200")


def test_fp4_formats_are_four_bits_plus_their_block_scales():
    # the linear layers shrink by what each format saves a weight; the embedding and LM head stay 16-bit
    saved = {d: L70.weight_bytes("bf16") - L70.weight_bytes(d) for d in ("fp8", "fp4")}
    assert saved["fp4"] / saved["fp8"] == pytest.approx((2 - (4 + 8 / 16) / 8) / 1)
    assert weight_bytes_per_gpu(L70, 1, "fp4") < weight_bytes_per_gpu(L70, 1, "int4") * 1.1
    # MXFP4 takes a mixture's routed experts alone: Mixtral's 32 layers x 8 experts x 3 matrices of 4096 x 14336
    routed = 32 * 8 * 3 * 4096 * 14336
    assert MIX.weight_bytes("bf16") - MIX.weight_bytes("mxfp4") == pytest.approx(routed * (2 - (4 + 8 / 32) / 8))


def test_fp4_reads_fewer_bytes_a_decode_step_and_multiplies_at_its_kernel_s_measured_rate():
    decode = {d: steptime(B200, L70, 1, decode_batch=1, context=512, dtype=d) for d in ("fp8", "fp4")}
    assert decode["fp4"]["step_ms"] < 0.75 * decode["fp8"]["step_ms"]  # memory bound: 0.56 bytes a weight, not 1
    prefill = {d: steptime(B200, L70, 1, prefill_tokens=8192, dtype=d)["breakdown_ms"]["linear"]
               for d in ("bf16", "fp8", "fp4")}
    # compute bound: the datasheet's FP4 rate is four times bf16's, but vLLM's NVFP4 GEMM, quantising its
    # activations, measures 2.1-2.2 times torch's bf16 GEMM on a B200 from 4,096 tokens up (PR #20646)
    assert 2.0 < prefill["bf16"] / prefill["fp4"] < 2.4
    assert prefill["fp4"] < prefill["fp8"]
    # MXFP4 experts: a decode step reads them at 0.53 bytes a weight, and a long prompt multiplies them against
    # 8-bit activations at the FP8 rate; attention stays 16-bit, at the 16-bit rate
    moe = {d: steptime(B200, MIX, 2, decode_batch=1, context=512, dtype=d) for d in ("fp8", "mxfp4")}
    assert moe["mxfp4"]["weight_bytes_read_per_gpu"] < moe["fp8"]["weight_bytes_read_per_gpu"]
    assert moe["mxfp4"]["breakdown_ms"]["experts"] < moe["fp8"]["breakdown_ms"]["experts"]
    long = {d: steptime(B200, MIX, 2, prefill_tokens=16384, dtype=d)["breakdown_ms"] for d in ("bf16", "fp8", "mxfp4")}
    assert long["mxfp4"]["experts"] == pytest.approx(long["fp8"]["experts"], rel=0.05)
    assert long["mxfp4"]["linear"] == pytest.approx(long["bf16"]["linear"], rel=0.01)


def test_mxfp4_on_a_dense_model_is_refused_in_one_sentence_naming_the_fix():
    for call in (lambda: plan_memory(B200, L70, dtype="mxfp4"),
                 lambda: steptime(B200, L70, 1, decode_batch=1, context=16, dtype="mxfp4")):
        with pytest.raises(ValueError, match="routed experts only.*is dense: choose fp4 or int4"):
            call()


@pytest.mark.parametrize("dtype", ["fp4"])
def test_a_gpu_without_fp4_tensor_cores_is_refused_fp4_in_one_sentence_naming_the_fix(dtype):
    assert B200.supports_fp4 and not H200.supports_fp4 and "FP4" in B200.source["fp4"]
    for call in (lambda: plan_memory(H200, L70, dtype=dtype),
                 lambda: steptime(H200, L70, 1, decode_batch=1, context=16, dtype=dtype),
                 lambda: simulate(SimConfig(gpu="h200", model="llama-3.1-8b", dtype=dtype,
                                            workload=WorkloadSpec(n_requests=10)))):
        with pytest.raises(ValueError, match=f"no FP4 tensor cores.*{dtype} weights: choose fp8, int4 or bf16"):
            call()
    assert plan_memory(B200, L70, dtype=dtype).kv_blocks > 0


def test_mxfp4_runs_weight_only_where_there_are_no_fp4_tensor_cores():
    # vLLM runs MXFP4 checkpoints (gpt-oss) on Hopper by dequantising the weights in the kernel: the
    # bytes streamed are MXFP4's, the multiplies 16-bit ones at a dequantising kernel's rate
    fmt = catalog.weight_format("mxfp4")
    assert fmt.on(B200) is fmt and fmt.on(H200).gemm == "bf16" and not fmt.on(H200).needs_fp4
    assert fmt.on(H200).bytes_per_weight == fmt.bytes_per_weight
    one = dict(decode_batch=1, context=512)
    decode = {d: steptime(H200, MIX, 2, dtype=d, **one) for d in ("bf16", "mxfp4")}
    assert decode["mxfp4"]["weight_bytes_read_per_gpu"] < 0.6 * decode["bf16"]["weight_bytes_read_per_gpu"]
    assert decode["mxfp4"]["step_ms"] < decode["bf16"]["step_ms"]
    long_prefill = dict(prefill_tokens=16384)
    rate = fmt.on(H200).gemm_rate
    gemms = {d: steptime(H200, MIX, 2, dtype=d, **long_prefill)["breakdown_ms"] for d in ("bf16", "mxfp4")}
    assert gemms["mxfp4"]["experts"] == pytest.approx(gemms["bf16"]["experts"] / rate, rel=0.05)  # the dequantising rate
    assert gemms["mxfp4"]["linear"] == pytest.approx(gemms["bf16"]["linear"], rel=0.01)  # 16-bit attention
    assert plan_memory(H200, MIX, 2, dtype="mxfp4").weights_bytes == plan_memory(B200, MIX, 2, dtype="mxfp4").weights_bytes


def test_the_planner_searches_fp4_only_where_the_gpu_runs_it():
    from core.planner.space import Budget, Targets, Workload, shapes
    w = Workload("llama-3.1-70b", WorkloadSpec(rate=0.5, n_requests=300, prompt_mean=512, output_mean=128,
                                               length_dist="fixed"), Targets(5000, 200))
    formats = dict(dtypes=("fp8", "fp4"))
    assert {d.dtype for d in shapes(w, Budget(gpu_types=("b200",), **formats))} == {"fp8", "fp4"}
    assert {d.dtype for d in shapes(w, Budget(gpu_types=("h200",), **formats))} == {"fp8"}
    # MXFP4 quantises routed experts: a dense model's search leaves it out, a mixture's takes it
    assert {d.dtype for d in shapes(w, Budget(gpu_types=("b200",), dtypes=("fp8", "mxfp4")))} == {"fp8"}
    moe = Workload("mixtral-8x7b", w.spec, w.targets)
    assert {d.dtype for d in shapes(moe, Budget(gpu_types=("b200",), dtypes=("fp8", "mxfp4")))} == {"fp8", "mxfp4"}


def test_the_lab_serves_fp4_weights_on_a_b200_and_refuses_them_on_an_h200():
    lab_serves_then_refuses((("gpu", "b200"), ("model", "llama-3.1-70b"), ("dtype", "fp4")), "h200",
                            "no FP4 tensor cores", "Blackwell")


def test_the_serve_command_says_when_the_gpu_runs_fp8_weights_weight_only():
    from core.serving import serve_command
    notes = {g: serve_command.commands(SimConfig(gpu=g, model="llama-3.1-70b", dtype="fp8", tp=2, gpus=2))
             for g in ("a100-80gb", "h100")}
    assert "--quantization fp8" in notes["a100-80gb"] and "--quantization fp8" in notes["h100"]
    assert "weight-only: FP8 Marlin" in notes["a100-80gb"] and "weight-only" not in notes["h100"]
