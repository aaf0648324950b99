"""GPU families (core/data/gpu_families.json, costmodel.family_scaled and allreduce_latency_us): what
each family is measured to reach against the fitted Hopper fractions, and which all-reduce runs
where vLLM's own turns itself off."""
from dataclasses import replace

import pytest

from core.physics import catalog, costmodel
from core.physics.costmodel import steptime

A100, H100, H200 = catalog.get_gpu("a100-80gb"), catalog.get_gpu("h100"), catalog.get_gpu("h200")
L40S, MI300X = catalog.get_gpu("l40s"), catalog.get_gpu("mi300x")
L8, L70 = catalog.get_model("llama-3.1-8b"), catalog.get_model("llama-3.1-70b")


def test_the_fitted_family_carries_the_fitted_constants_unchanged():
    assert costmodel.families()["fitted_family"] == H200.arch == H100.arch
    assert costmodel.efficiency_for(H200) == costmodel.fitted() == costmodel.efficiency_for(H100)


def test_every_factor_is_a_sourced_measurement_of_a_constant_the_model_has():
    names = set(costmodel.Efficiency.__dataclass_fields__)
    for arch, entry in costmodel.families()["families"].items():
        assert any(g.arch == arch for g in map(catalog.get_gpu, catalog.gpu_ids())), arch
        if "same_as" in entry:  # another family's kernels: its factors, and why
            assert entry["how"] and costmodel.family_factors(arch) == costmodel.family_factors(entry["same_as"])
            continue
        for name, f in entry.items():
            assert name in names and 0.3 < f["value"] < 2.0 and f["how"], (arch, name)


def test_an_a100_never_streams_its_weights_faster_than_measured():
    # gpt-fast's A100 80GB: 'Empirically, seems like peak bandwidth is about 1700 GB/s'; a batch-1
    # decode step reads every weight once, so it takes at least the weights' bytes at that rate
    r = steptime(A100, L8, 1, decode_batch=1, context=128, engine="vllm")
    weight_bytes = (L8.params() - 2 * L8.vocab * L8.hidden) * 2  # the projections' and MLP's, 16-bit
    assert r["breakdown_ms"]["linear"] * 1e-3 >= weight_bytes / 1700e9
    # and the same step on a Hopper GPU keeps the fitted fraction of its own datasheet
    h = steptime(H100, L8, 1, decode_batch=1, context=128, engine="vllm")
    assert h["breakdown_ms"]["linear"] < weight_bytes / (0.9 * H100.hbm_tbps * 1e12) * 1e3


def test_an_mi300x_computes_no_faster_than_its_best_measured_matmul():
    # AMD measures 708 TFLOP/s of BF16 at the clock a long GEMM holds (1,207 of 2,100 MHz): a prefill
    # long enough to be compute-bound cannot beat it
    tokens = 16384
    r = steptime(MI300X, L70, 8, prefill_tokens=tokens, engine="vllm")
    linear_flops = 2 * (L70.params() - 2 * L70.vocab * L70.hidden) / 8 * tokens  # projections and MLP, a GPU
    assert linear_flops / (r["breakdown_ms"]["linear"] * 1e-3) <= 708e12


@pytest.mark.parametrize("tp", [4, 8])
def test_more_than_two_pcie_gpus_all_reduce_through_nccl_and_pay_its_floor(tp):
    floor = costmodel.families()["collectives"]["nccl_pcie_latency_us"]["value"]
    one_token = dict(decode_batch=1, context=128, engine="vllm")
    per_allreduce = steptime(L40S, L70, tp, **one_token)["comm_ms"] * 1e3 / (2 * L70.layers)
    assert per_allreduce >= floor
    # two PCIe GPUs and NVLink nodes keep vLLM's own all-reduce, well under NCCL's floor
    assert steptime(L40S, L8, 2, **one_token)["comm_ms"] * 1e3 / (2 * L8.layers) < floor
    assert steptime(H100, L70, tp, **one_token)["comm_ms"] * 1e3 / (2 * L70.layers) < floor


# vLLM's one-stage all-reduce on H100s under CUDA graphs, 32 x 8192 bf16 values (0.5 MB): 7 µs at tp 2
# and 13 µs at tp 6 (vllm-project/vllm PR #24111, ca_1stage), 10 µs at tp 4 (PR #24532)
MEASURED_HALF_MB_US = {2: 7.0, 4: 10.0, 6: 13.0}


@pytest.mark.parametrize("tp", sorted(MEASURED_HALF_MB_US))
def test_an_nvlink_all_reduce_takes_what_vllms_benchmark_of_it_measures(tp):
    # a decode step of 32 sequences all-reduces 32 x hidden values twice a layer: at hidden 8192 the
    # benchmark's message; no layer's compute is in comm_ms
    model = replace(L70, heads=48, kv_heads=6) if tp == 6 else L70  # tp must divide the heads
    r = steptime(H100, model, tp, decode_batch=32, context=128, engine="vllm")
    per_allreduce_us = r["comm_ms"] * 1e3 / (2 * model.layers)
    assert per_allreduce_us == pytest.approx(MEASURED_HALF_MB_US[tp], rel=0.1)


def test_an_nvlink_all_reduce_grows_with_the_peers_each_gpu_reads():
    one_token = dict(decode_batch=1, context=128, engine="vllm")
    per = [steptime(H100, L70, tp, **one_token)["comm_ms"] / (2 * L70.layers) for tp in (2, 4, 8)]
    assert per[0] < per[1] < per[2]


def test_a_calibrated_profile_keeps_its_own_constants_whatever_its_family():
    # a hardware profile fitted to one's own A100 runs already holds what that A100 reaches
    profile = replace(A100, id="my-a100", efficiency=(("eta_bw", 0.9),))
    assert costmodel.efficiency_for(profile).eta_bw == 0.9
    assert costmodel.efficiency_for(A100).eta_bw < costmodel.fitted().eta_bw


def _family_check():
    """calibration/family_check.py, a script beside the public runs it replays."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "calibration" / "family_check.py"
    spec = importlib.util.spec_from_file_location("family_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_amd_s_public_mi300x_runs_replayed_from_their_commands_are_within_a_quarter():
    # nothing is fitted to these runs (the CDNA 3 factors come from microbenchmarks): latency of
    # batches of 1 to 32 of Llama-3.1-70B and 405B fp8 on eight MI300X, and a served Qwen3-8B
    rows = _family_check().replays()
    assert {r["gpu"] for r in rows} == {"MI300X"} and len(rows) >= 10
    assert {"E2E mean ms", "TTFT mean ms", "TPOT mean ms"} <= {r["metric"] for r in rows}
    worst = max(rows, key=lambda r: abs(r["error"]))
    assert abs(worst["error"]) < 0.25, worst
    # a batch of 32 takes longer than a batch of one on the same build, as measured
    e2e = {(r["id"], r["label"]): r["simulated"] for r in rows if r["metric"] == "E2E mean ms"}
    assert e2e[("mi300x-llama31-70b-fp8-tp8-bs32-in128-out2048-rocmblog", "")] > \
        e2e[("mi300x-llama31-70b-fp8-tp8-bs1-in128-out2048-rocmblog", "")]
