"""The step-time model: the physics it must obey and its error on real H200 measurements."""
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.physics import catalog, costmodel
from core.physics.costmodel import steptime

ROOT = Path(__file__).resolve().parent.parent
H200, H100 = catalog.get_gpu("h200"), catalog.get_gpu("h100")
L8, L70 = catalog.get_model("llama-3.1-8b"), catalog.get_model("llama-3.1-70b")


def ms(gpu=H200, model=L8, tp=1, **kw):
    return steptime(gpu, model, tp, **kw)["step_ms"]


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 512), c=st.integers(1, 16384), db=st.integers(1, 64), dc=st.integers(1, 4096))
def test_decode_time_grows_with_batch_and_context(b, c, db, dc):
    assert ms(decode_batch=b + db, context=c) >= ms(decode_batch=b, context=c)
    assert ms(decode_batch=b, context=c + dc) >= ms(decode_batch=b, context=c)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 32768), dp=st.integers(1, 8192), cached=st.integers(0, 32768))
def test_prefill_time_grows_with_tokens_and_cached_prefix(p, dp, cached):
    assert ms(prefill_tokens=p + dp, prefill_cached=cached) >= ms(prefill_tokens=p, prefill_cached=cached)
    assert ms(prefill_tokens=p, prefill_cached=cached + dp) >= ms(prefill_tokens=p, prefill_cached=cached)


@pytest.mark.parametrize("gpu_id", catalog.gpu_ids())
@pytest.mark.parametrize("model_id", ["llama-3.1-8b", "qwen2.5-7b", "mistral-7b"])
def test_decode_at_batch_one_is_no_faster_than_streaming_the_weights(gpu_id, model_id):
    # every weight byte of a dense model crosses HBM once per step (the embedding table aside:
    # only the step's rows are gathered)
    gpu, model = catalog.get_gpu(gpu_id), catalog.get_model(model_id)
    weight_bytes = (model.params() - model.embedding_params()) * 2
    floor_ms = weight_bytes / (gpu.hbm_tbps * 1e12) * 1e3
    assert ms(gpu, model, decode_batch=1, context=128) >= floor_ms


def test_prefill_is_no_faster_than_its_flops_at_datasheet_peak():
    for p in (512, 4096, 16384):
        flops = 2 * (L8.params() - 2 * L8.embedding_params()) * p
        assert ms(prefill_tokens=p) >= flops / (H200.bf16_tflops * 1e12) * 1e3


def test_tensor_parallelism_divides_weight_time_and_adds_communication():
    one = steptime(H100, L8, 1, decode_batch=1, context=512)
    two = steptime(H100, L8, 2, decode_batch=1, context=512)
    four = steptime(H100, L8, 4, decode_batch=1, context=512)
    assert one["comm_ms"] == 0 and two["comm_ms"] > 0 and four["comm_ms"] > two["comm_ms"]
    lin = [r["breakdown_ms"]["linear"] for r in (one, two, four)]
    assert lin[1] == pytest.approx(lin[0] / 2, rel=0.1) and lin[2] == pytest.approx(lin[0] / 4, rel=0.15)
    assert two["weight_bytes_read_per_gpu"] < 0.55 * one["weight_bytes_read_per_gpu"]


def test_communication_is_slower_across_pcie_and_across_nodes():
    nvlink = steptime(H100, L70, 8, prefill_tokens=2048)["comm_ms"]
    across_nodes = steptime(H100, L70, 16, prefill_tokens=2048)["comm_ms"]
    pcie = steptime(catalog.get_gpu("l40s"), L8, 4, prefill_tokens=2048)["comm_ms"]
    nvlink_8b = steptime(H100, L8, 4, prefill_tokens=2048)["comm_ms"]
    assert across_nodes > 3 * nvlink
    assert pcie > 5 * nvlink_8b


def test_moe_decode_at_large_batch_reads_more_than_its_active_weights():
    mixtral = catalog.get_model("mixtral-8x7b")
    small = steptime(H200, mixtral, 2, decode_batch=1, context=512)["weight_bytes_read_per_gpu"]
    large = steptime(H200, mixtral, 2, decode_batch=64, context=512)["weight_bytes_read_per_gpu"]
    active_per_gpu = mixtral.params(active=True) * 2 / 2
    total_per_gpu = mixtral.params() * 2 / 2
    assert small == pytest.approx(active_per_gpu, rel=0.1)
    assert large > 3 * active_per_gpu and large <= total_per_gpu


def test_cuda_graphs_save_launch_time_at_small_batch():
    assert ms(decode_batch=1, context=512, launch="eager") > 1.5 * ms(decode_batch=1, context=512, launch="graph")


def test_split_kv_attention_helps_long_contexts_at_small_batch():
    sdpa = ms(decode_batch=1, context=32768, attn_kernel="sdpa")
    paged = ms(decode_batch=1, context=32768, attn_kernel="paged")
    assert paged < 0.7 * sdpa
    # at a large batch the kernel already fills the GPU: the split changes little
    assert ms(decode_batch=256, context=2048, attn_kernel="paged") == pytest.approx(
        ms(decode_batch=256, context=2048, attn_kernel="sdpa"), rel=0.02)


def test_mixed_chunked_prefill_step_costs_more_than_either_part():
    both = ms(decode_batch=64, context=1024, prefill_tokens=512)
    assert both > ms(decode_batch=64, context=1024) and both > ms(prefill_tokens=512)


def test_mla_decode_reads_the_latent_cache():
    ds = catalog.get_model("deepseek-v3")
    r = steptime(catalog.get_gpu("b200"), ds, 8, decode_batch=32, context=4096, dtype="fp8")
    assert r["kv_bytes_read_per_gpu"] == pytest.approx(32 * 4096 * ds.kv_bytes_per_token(), rel=1e-9)


def test_calibration_points_are_matched():
    data = json.loads((ROOT / "calibration" / "h200_public.json").read_text())
    errors = []
    for r in data["runs"]:
        if r["phase"] == "decode":
            p = ms(decode_batch=r["batch"], context=r["ctx"], launch="graph" if r["cuda_graph"] else "eager")
        else:
            p = ms(prefill_tokens=r["tokens"], launch="eager")
        errors.append(abs(p / r["ms"] - 1))
    assert len(errors) == 23
    assert np.median(errors) <= 0.08 and max(errors) <= 0.25


def test_the_held_out_eager_mixed_step_is_within_the_target():
    # issue 14: an eager H200 step of a 128-token chunk with 32 decodes took 8.8 ms; the model once
    # gave 15.7 ms (it issued the whole decode path again). Held-out points must stay within 35%.
    pred = ms(decode_batch=32, context=1024, prefill_tokens=128, launch="eager")
    assert abs(pred / 8.8 - 1) <= 0.35
    # the same step at batch 128 is not host-bound any more: it costs more than at batch 32
    assert ms(decode_batch=128, context=1024, prefill_tokens=128, launch="eager") > pred


def test_a_deeper_model_pays_the_engine_s_per_layer_time_per_layer():
    # vLLM's small kernels cost time per layer (calibration/CAUSES.md section 6): at batch 1 and a
    # short context, where weights dominate, 80 layers pay 80 x t_layer_engine_us, not 32 x
    eff = costmodel.fitted()
    for model in (L8, L70):
        kw = dict(decode_batch=1, context=16, launch="graph", attn_kernel="paged", engine="vllm")
        without = steptime(H200, model, 1 if model is L8 else 4, eff=replace(eff, t_layer_engine_us=0.0),
                           **kw)["step_ms"]
        with_ = steptime(H200, model, 1 if model is L8 else 4, **kw)["step_ms"]
        assert with_ - without == pytest.approx(model.layers * eff.t_layer_engine_us / 1e3, rel=1e-6)


def test_stored_constants_are_what_the_fit_script_produces():
    # the constants in data/costmodel_fit.json come from calibration/fit_costmodel.py, not by hand
    import importlib.util
    spec = importlib.util.spec_from_file_location("fit", ROOT / "calibration" / "fit_costmodel.py")
    fit_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_mod)
    runs, _ = fit_mod.load_runs([ROOT / "calibration" / "h200_public.json"])
    stored = costmodel.fitted()
    refit = fit_mod.fit(stored, runs)
    for name, _, _ in fit_mod.FITTED:
        assert getattr(refit, name) == pytest.approx(getattr(stored, name), rel=0.02), name


@pytest.mark.parametrize("kw,match", [
    (dict(), "empty step"), (dict(decode_batch=4), "context"), (dict(decode_batch=-1, context=5), ">= 0"),
    (dict(decode_batch=1, context=200_000), "exceed"), (dict(prefill_cached=5), "prefill-tokens")])
def test_bad_step_mixes_raise_value_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        steptime(H200, L8, 1, **kw)


def test_tp_must_divide_the_heads():
    with pytest.raises(ValueError, match="choose tp among"):
        steptime(H200, L8, 3, decode_batch=1, context=10)
