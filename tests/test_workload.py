"""Workloads: arrival processes, length distributions, presets, rate schedules, traces."""
import numpy as np
import pytest

from core.serving.workload import PRESETS, WorkloadSpec, diurnal_schedule, generate, load_trace, parse_schedule


def gaps(spec):
    return np.diff(generate(spec).arrival_s)


def test_poisson_arrivals_have_the_rate_and_exponential_gaps():
    g = gaps(WorkloadSpec(n_requests=50_000, rate=8, seed=1))
    assert g.mean() == pytest.approx(1 / 8, rel=0.02)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.03)  # exponential: CV 1


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_arrivals_have_the_requested_burstiness(cv):
    g = gaps(WorkloadSpec(n_requests=50_000, rate=8, arrival="gamma", cv=cv, seed=2))
    assert g.mean() == pytest.approx(1 / 8, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.08)


def test_fixed_arrivals_are_evenly_spaced():
    g = gaps(WorkloadSpec(n_requests=100, rate=4, arrival="fixed"))
    np.testing.assert_allclose(g, 0.25)


@pytest.mark.parametrize("dist", ["fixed", "uniform", "exponential", "lognormal"])
def test_lengths_have_the_requested_means(dist):
    w = generate(WorkloadSpec(n_requests=50_000, prompt_mean=600, output_mean=150, length_dist=dist,
                              max_total_tokens=1 << 20, seed=3))
    assert w.prompt_tokens.mean() == pytest.approx(600, rel=0.03)
    assert w.output_tokens.mean() == pytest.approx(150, rel=0.03)
    assert w.prompt_tokens.min() >= 1 and w.output_tokens.min() >= 1


@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_follow_their_cited_statistics(preset):
    w = generate(WorkloadSpec(n_requests=50_000, length_dist=preset, max_total_tokens=1 << 20, seed=4))
    assert w.prompt_tokens.mean() == pytest.approx(PRESETS[preset]["prompt_mean"], rel=0.05)
    assert w.output_tokens.mean() == pytest.approx(PRESETS[preset]["output_mean"], rel=0.05)
    assert np.median(w.prompt_tokens) < w.prompt_tokens.mean()  # a long right tail


def test_long_requests_are_shortened_to_the_max_model_length():
    w = generate(WorkloadSpec(n_requests=5000, prompt_mean=1500, output_mean=800, length_dist="lognormal", spread=1.0,
                              max_total_tokens=4096, seed=5))
    assert (w.prompt_tokens + w.output_tokens).max() <= 4096
    assert w.clipped > 0


def test_same_seed_same_workload():
    a = generate(WorkloadSpec(n_requests=500, length_dist="sharegpt", seed=9))
    b = generate(WorkloadSpec(n_requests=500, length_dist="sharegpt", seed=9))
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.output_tokens, b.output_tokens)


def test_a_rate_schedule_sets_the_arrivals_in_each_segment():
    sched = parse_schedule("0:2,100:20,200:5")
    w = generate(WorkloadSpec(n_requests=4000, rate_schedule=sched, seed=6))
    a = w.arrival_s
    for lo, hi, rate in ((0, 100, 2), (100, 200, 20), (200, 300, 5)):
        assert ((a >= lo) & (a < hi)).sum() == pytest.approx(rate * 100, rel=0.15)


def test_the_diurnal_preset_peaks_mid_period_and_keeps_the_mean():
    sched = diurnal_schedule(10.0, 2400)
    rates = [r for _, r in sched]
    assert np.mean(rates) == pytest.approx(10.0, rel=0.01)
    assert rates.index(max(rates)) in (11, 12) and min(rates) < 0.5 * max(rates)


@pytest.mark.parametrize("kw,match", [
    (dict(rate=0), "request rate must be a number from 0.001"), (dict(n_requests=0), "number of simulated requests"), (dict(arrival="weekly"), "arrival process"),
    (dict(length_dist="zipf"), "length distribution"), (dict(prompt_mean=0), "prompt length"),
    (dict(prompt_mean=4000, output_mean=200, max_total_tokens=4096), "maximum model length"),
    (dict(arrival="gamma", cv=50), "coefficient of variation")])
def test_invalid_parameters_say_what_to_change(kw, match):
    with pytest.raises(ValueError, match=match):
        generate(WorkloadSpec(**kw))


@pytest.mark.parametrize("text,match", [
    ("", "empty"), ("arrival_s,prompt_tokens,output_tokens\n", "no requests"),
    ("time,prompt,output\n0,1,1\n", "line 1: the header"),
    ("arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,ten,5\n", "line 3"),
    ("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10\n", "line 3: expected 3 values"),
    ("arrival_s,prompt_tokens,output_tokens\n-1,10,5\n", "line 2"),
    ("arrival_s,prompt_tokens,output_tokens\n0,0,5\n", "line 2")])
def test_a_malformed_trace_names_the_bad_line(text, match):
    with pytest.raises(ValueError, match=match):
        load_trace(text)


def test_a_trace_is_replayed_in_arrival_order():
    w = load_trace("arrival_s,prompt_tokens,output_tokens\n2.0,30,3\n0.5,10,1\n1.0,20,2\n")
    np.testing.assert_array_equal(w.arrival_s, [0.5, 1.0, 2.0])
    np.testing.assert_array_equal(w.prompt_tokens, [10, 20, 30])


def test_a_replayed_trace_sets_the_max_model_length_from_its_own_requests():
    from core.lab.inputs import LabInputs, current_config
    from core.serving.simulate import simulate
    trace = "arrival_s,prompt_tokens,output_tokens\n0.0,2048,512\n0.5,100,20\n1.0,300,40\n"
    # the sidebar's averages (512 + 128) would have sized the model length below the first request
    s = simulate(current_config(LabInputs(prompt_tokens=512, output_tokens=128, trace_csv=trace))).summary
    assert s["requests"] == 3 and s["max_model_len"] >= 2560


def test_the_command_line_names_the_flag_that_fits_a_long_trace(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,3000,200\n")
    r = subprocess.run([sys.executable, "-m", "core", "simulate", "--gpu", "h100", "--model", "llama-3.1-8b",
                        "--trace", str(f), "--max-model-len", "2048"], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 2 and "--max-model-len" in r.stderr and "3,200" in r.stderr
