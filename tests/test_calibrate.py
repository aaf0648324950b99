"""Calibration: the fit recovers factors a simulated run was made with, improves the match to a
real published run, and its profile works on the command line; GPUs of one's own and prices."""
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from core.physics import catalog, costmodel, hardware
from core.serving import benchfile, calibrate, export, replay
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures" / "bench"
VLLM_4 = FIX / "vllm-0.8.3_llama-3.3-70b_tp8_a100-40g_sharegpt_qps04.json"
BASE = SimConfig(gpu="h100", model="llama-3.1-8b", policy="sarathi", max_batched_tokens=2048, chunk=512)


def test_fit_recovers_the_factors_a_simulated_run_was_made_with():
    true = replace(costmodel.fitted(), eta_bw=0.70, eta_gemm=0.45)
    # 800 requests: the replay draws its own requests, and the median TTFT, which moves with eta_gemm by a
    # fraction of its change (the API server and the decode steps around a prompt take the rest), must move
    # less with that draw than with the factor
    cfg = replace(BASE, workload=WorkloadSpec(n_requests=800, rate=6, prompt_mean=1024, output_mean=200,
                                              length_dist="lognormal"))
    made = export.vllm_result(simulate(cfg, true), 6.0, "meta-llama/Llama-3.1-8B-Instruct")
    run, = benchfile.parse(json.dumps(made), "simulated.json")
    cal = calibrate.fit(run, BASE)
    assert cal.before["eta_bw"] == pytest.approx(costmodel.fitted().eta_bw)
    assert cal.after["eta_bw"] == pytest.approx(0.70, rel=0.02)
    assert cal.after["eta_gemm"] == pytest.approx(0.45, rel=0.03)
    assert not cal.warnings
    after = {r["metric"]: r for r in cal.rows_after}
    for m in ("TTFT median", "TPOT median", "E2E mean"):  # E2E was not fitted
        assert abs(after[m]["error"]) < 0.02, m
    # p99 TTFT (not fitted) holds async scheduling's extra step, read from the engine's sampled trace
    assert abs(after["TTFT p99"]["error"]) < 0.05


@pytest.fixture(scope="module")
def real():
    run, = benchfile.parse(VLLM_4.read_bytes(), VLLM_4.name)
    base = SimConfig(gpu="a100-40gb", model=replay.guess_model(run.model_id), tp=8, policy="sarathi",
                     max_batched_tokens=2048)
    return run, base, calibrate.fit(run, base)


def test_the_published_run_is_replayed_as_recorded(real):
    run, base, cal = real
    assert base.model == "llama-3.1-70b"  # Llama-3.3-70B: the same shape
    arrival, prompt, output = replay.workload_arrays(run)
    assert len(arrival) == 200 and prompt.sum() == 42659 and output.sum() == 42449
    assert 3.0 < 200 / arrival[-1] < 5.0  # drawn at the file's 4 req/s


def test_calibration_on_a_published_run_brings_decode_onto_the_measurement(real):
    run, base, cal = real
    before = {r["metric"]: r for r in cal.rows_before}
    after = {r["metric"]: r for r in cal.rows_after}
    assert abs(after["TPOT median"]["error"]) < 0.02 < abs(before["TPOT median"]["error"])
    assert abs(after["E2E mean"]["error"]) < abs(before["E2E mean"]["error"])  # not a fitted metric
    assert cal.after["eta_bw"] < cal.before["eta_bw"]  # these A100s decode slower than the H200 fit says


def test_profile_round_trip_and_command_line(real, tmp_path):
    run, base, cal = real
    prof = calibrate.profile(cal, "A100 at my lab")
    gpu = hardware.load_profile(json.loads(export.to_json(prof)))
    assert catalog.get_gpu(gpu.id).name == "A100 at my lab"
    assert costmodel.efficiency_for(gpu).eta_bw == pytest.approx(cal.after["eta_bw"], rel=1e-5)
    out = tmp_path / "profile.json"
    cli = [sys.executable, "-m", "core"]
    r = subprocess.run(cli + ["calibrate", str(VLLM_4), "--gpu", "a100-40gb", "--tp", "8", "--out", str(out),
                              "--csv", str(tmp_path / "csv")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in (tmp_path / "csv").iterdir()} == {"comparison.csv", "requests.csv", "steps.csv", "run.json"}
    step = lambda *a: json.loads(subprocess.run(cli + ["steptime", "--model", "llama-3.1-70b", "--tp", "8",
                                                       "--decode-batch", "16", "--context", "1000", "--json", *a],
                                                cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    slow, fitted = step("--profile", str(out))["step_ms"], step("--gpu", "a100-40gb")["step_ms"]
    # the profile's bandwidth efficiency, lower still than the Ampere family's (data/gpu_families.json),
    # reaches the cost model: a decode step streams the weights that much slower
    assert cal.after["eta_bw"] < costmodel.efficiency_for(catalog.get_gpu("a100-40gb")).eta_bw
    assert slow > fitted * 1.05


def test_a_gpu_from_its_datasheet_and_its_errors():
    sheet = dict(name="My GPU", memory_gib=96, hbm_tbps=4.0, bf16_tflops=900, fp8_tflops=1800, link_gbps_per_dir=450,
                 price_usd_per_gpu_hour=2.0)
    g = hardware.register_datasheet(sheet)
    s = simulate(replace(BASE, gpu=g.id, workload=WorkloadSpec(n_requests=100))).summary
    assert s["price_usd_per_gpu_hour"] == 2.0
    faster = hardware.register_datasheet(dict(sheet, hbm_tbps=8.0))
    assert faster.id != g.id
    assert simulate(replace(BASE, gpu=faster.id, workload=WorkloadSpec(n_requests=100))).summary["tpot_ms"]["p50"] \
        < s["tpot_ms"]["p50"]
    for bad, words in ((dict(sheet, hbm_tbps=4000), "'hbm_tbps' = 4000 is outside"),
                       (dict(sheet, price_usd_per_gpu_hour=None), "'price_usd_per_gpu_hour'"),
                       (dict(sheet, fp8_tflops=100), "fp8 TFLOP/s"), (dict(sheet, hbm=4), "unknown field"),
                       (dict(sheet, name=""), "'name'")):
        with pytest.raises(ValueError, match=words):
            hardware.register_datasheet(bad)


def test_a_catalog_gpu_at_your_price_changes_only_the_cost():
    cfg = replace(BASE, workload=WorkloadSpec(n_requests=200))
    lst, mine = simulate(cfg).summary, simulate(replace(cfg, gpu=hardware.price_variant("h100", 1.0))).summary
    assert mine["ttft_ms"] == lst["ttft_ms"]
    assert mine["cost_per_1m_tokens_usd"] == pytest.approx(lst["cost_per_1m_tokens_usd"] / lst["price_usd_per_gpu_hour"])
    with pytest.raises(ValueError, match="price after '@'"):
        catalog.get_gpu("h100@free")


def summary_only(tmp_path, model_id: str, **changes) -> Path:
    """The published run as `vllm bench serve --save-result` writes it without --save-detailed:
    aggregates only, no per-request lengths (the common case)."""
    d = json.loads(VLLM_4.read_text())
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        d.pop(key)
    d.update(model_id=model_id, **changes)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(d))
    return path


def test_a_summary_only_run_on_a_4k_context_model_is_calibrated_not_refused(tmp_path):
    # 1,000 ShareGPT-like requests of 1,200 prompt and 400 output tokens on average: a long tail
    path = summary_only(tmp_path, "meta-llama/Llama-2-70b-hf", completed=1000, num_prompts=1000, duration=250.0,
                        total_input_tokens=1000 * 1200, total_output_tokens=1000 * 400)
    r = subprocess.run([sys.executable, "-m", "core", "calibrate", str(path), "--gpu", "a100-80gb", "--tp", "4",
                        "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr  # it said "a request of the run has 5282 tokens, beyond ... 4096"
    run, = benchfile.parse(path.read_bytes(), path.name)
    _, prompt, output = replay.workload_arrays(run, max_total=catalog.get_model("llama-2-70b").max_context)
    assert (prompt + output).max() <= 4096  # no drawn request longer than the server could have run
    assert len(prompt) == 1000


def test_a_summary_whose_mean_lengths_exceed_the_context_blames_the_file_for_its_means(tmp_path):
    path = summary_only(tmp_path, "meta-llama/Llama-2-70b-hf", total_input_tokens=200 * 5000)
    r = subprocess.run([sys.executable, "-m", "core", "calibrate", str(path), "--gpu", "a100-80gb", "--tp", "4"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "mean" in r.stderr and "5000 prompt" in r.stderr and "context of 4096" in r.stderr


def test_a_detailed_run_with_a_request_beyond_the_context_names_that_recorded_request():
    d = json.loads(VLLM_4.read_text())
    d["input_lens"][7] = 4100  # with its one output token: 4,101, beyond Llama-2's 4,096
    run, = benchfile.parse(json.dumps(d), VLLM_4.name)
    with pytest.raises(ValueError) as e:
        replay.config_for(run, replace(BASE, model="llama-2-7b"))
    assert "the file records a request of 4101 tokens" in str(e.value) and "context of 4096" in str(e.value)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "core", "calibrate", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_the_readmes_file_is_replayed_at_the_tp_and_scheduling_its_name_says():
    r = cli(VLLM_4, "--gpu", "a100-40gb", "--compare-only")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert "8 x NVIDIA A100 40GB" in first and "tp 8 (from 'tp8' in the file's name)" in first
    assert "synchronous scheduling (from 'vllm-0.8.3' in the file's name)" in first  # before vLLM 0.14's default
    said = cli(VLLM_4, "--gpu", "a100-40gb", "--tp", "4", "--async-scheduling", "--compare-only")
    first = said.stdout.splitlines()[0]
    assert "4 x NVIDIA A100 40GB" in first and "tp 4," in first and first.endswith("per step, async scheduling")


def test_a_fit_that_cannot_reach_the_measurement_says_which_bound_and_what_explains_the_gap():
    run, = benchfile.parse(VLLM_4.read_bytes(), VLLM_4.name)
    # the page's old default for this file: tp 4 (it ran on tp 8) and vLLM 0.14's async scheduling (it ran 0.8.3)
    cal = calibrate.fit(run, SimConfig(gpu="a100-40gb", model="llama-3.3-70b", tp=4, policy="sarathi",
                                       max_batched_tokens=2048))
    assert cal.bound == {"eta_bw": "upper", "eta_gemm": "upper"}
    decode, prefill = cal.warnings
    assert decode.startswith("eta_bw stopped at its upper bound, 1.000 (the datasheet's HBM bandwidth")
    assert "TPOT" in decode and "prefix caching" not in decode and "prefill" not in decode
    assert "higher tp" in decode and "'tp8' in the file's name says tp 8, not tp 4" in decode
    assert prefill.startswith("eta_gemm stopped at its upper bound, 1.000 (the datasheet's peak FLOP/s")
    assert "neither a faster GPU nor cached prompts" in prefill  # prefill compute is a small part of this TTFT
    assert "Async scheduling accounts for" in prefill and "says a vLLM before 0.14" in prefill
    # the simulated figure it reports is the one the table shows
    ttft = next(r for r in cal.rows_after if r["metric"] == "TTFT median")
    assert f"still {ttft['simulated']:.1f} ms against {ttft['measured']:.1f} ms measured" in prefill
