"""What a run's figures mean: the running batch, throughput, goodput, utilisation and the decode
gauge, each checked against what the physics of the run demands."""
import numpy as np
import pytest

from core.lab.gauges import gauges
from core.lab.inputs import LabInputs, current
from core.lab.readings import DEFINITIONS
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec


def test_the_running_batch_leaves_out_steps_that_only_prefill():
    # split deployment: the prefill pool's steps carry prompts only; the batch is the decode pool's
    cfg = SimConfig(gpu="h100", model="llama-3.1-8b", gpus=2, disagg=True, prefill_gpus=1, policy="vllm",
                    fast_forward=False, trace_cap=1 << 20,
                    workload=WorkloadSpec(n_requests=400, rate=6, prompt_mean=1024, output_mean=64, seed=1))
    r = simulate(cfg)
    decode = r.trace["decode_tokens"]
    assert r.trace["stride"] == 1 and len(decode) == r.summary["steps"]  # every step in the trace
    assert (r.trace["prefill_tokens"][decode > 0] == 0).all()  # decode steps carry no prompt here
    per_decode_step = decode[decode > 0].mean()
    assert decode.sum() / len(decode) < 0.96 * per_decode_step  # over every step it would read lower
    assert r.summary["mean_batch"] == pytest.approx(per_decode_step, rel=1e-9)


def test_throughput_is_what_the_steady_state_serves_not_diluted_by_the_drain():
    # few requests with long answers, evenly spaced: the drain after the last arrival is a large
    # share of the run, and in the steady state the tokens come out as fast as they are asked for
    wl = WorkloadSpec(n_requests=150, rate=1.5, prompt_mean=256, output_mean=2048, length_dist="fixed",
                      arrival="fixed", seed=2)
    s = simulate(SimConfig(gpu="h100", model="llama-3.1-8b", policy="sarathi", workload=wl)).summary
    assert s["stable"]
    offered_tok_s = 1.5 * 2048
    assert s["throughput_tok_s"] == pytest.approx(offered_tok_s, rel=0.02)
    assert s["completed_tok_s"] < 0.9 * offered_tok_s  # the whole run's average, drain included, is lower
    assert s["throughput_req_s"] == pytest.approx(s["served_req_s"], rel=1e-9)  # one window for every rate


@pytest.mark.parametrize("load", [0.9, 1.0, 1.1, 1.5])
def test_goodput_never_exceeds_throughput_or_what_is_served(load):
    inputs = LabInputs(rate=14.0 * load, prompt_tokens=2048, output_tokens=128, requests=1500)
    s = current(inputs)[1].summary
    assert s["goodput_req_s"] <= s["throughput_req_s"] <= s["offered_req_s"] * 1.05
    assert s["goodput_req_s"] <= s["served_req_s"]


@pytest.mark.parametrize("rate, prompt, output, chunked", [
    (64, 512, 256, True), (64, 512, 256, False), (64, 2048, 128, True), (64, 128, 1024, True), (40, 512, 256, True)])
def test_the_decode_gauge_never_reads_above_its_capacity(rate, prompt, output, chunked):
    inputs = LabInputs(rate=rate, prompt_tokens=prompt, output_tokens=output, chunked_prefill=chunked, requests=4000)
    cfg, res = current(inputs)
    g = next(x for x in gauges(cfg, res, inputs) if x.id == "decode")
    assert g.value <= g.limit and g.ratio <= 1.0
    # far past capacity the engine runs flat out: its throughput comes close to the roofline's
    s = res.summary
    assert not s["stable"] and 0.8 <= s["utilisation"] <= 1.0
    assert g.status == "bad"


def test_utilisation_is_low_when_a_batching_engine_has_room_left():
    # 'busy' read 1.0 here: a continuous-batching replica steps whenever it holds a request
    s = current(LabInputs(rate=2.0))[1].summary
    assert s["stable"] and s["utilisation"] < 0.2
    assert "busy_fraction" not in s["pools"]["serving"]
    assert s["pools"]["serving"]["utilisation"] == pytest.approx(s["utilisation"], rel=0.01)


def test_static_batching_overloaded_is_limiting_even_far_below_the_roofline():
    inputs = LabInputs(rate=32, prompt_tokens=128, output_tokens=1024, continuous_batching=False, requests=1000)
    cfg, res = current(inputs)
    g = next(x for x in gauges(cfg, res, inputs) if x.id == "decode")
    assert not res.summary["stable"] and g.ratio < 0.5 and g.status == "bad"
    assert "static" in g.why and "grows without bound" in g.why


def test_every_headline_figure_says_what_it_means_on_hover():
    from core.lab.gauges import headline
    cfg, res = current(LabInputs())
    cards = {m["label"]: m for m in headline(res, LabInputs())}
    assert DEFINITIONS["throughput"] in cards["Throughput"]["help"]
    assert DEFINITIONS["utilisation"] in cards["Throughput"]["help"]
    assert DEFINITIONS["goodput"] in cards["Goodput"]["help"]
    assert DEFINITIONS["running_batch"] in cards["GPUs / replicas"]["help"]
    assert all(m.get("help") for m in cards.values())


def test_the_readme_defines_the_metrics_as_the_pages_do():
    from pathlib import Path
    readme = " ".join((Path(__file__).parent.parent / "README.md").read_text().split())
    for key in ("throughput", "goodput", "running_batch", "utilisation"):
        assert DEFINITIONS[key] in readme, key


def test_an_offline_batch_measures_over_its_whole_run():
    # every request at t = 0: no arrival window, so the rates are over the run (as a benchmark client's)
    batch = "arrival_s,prompt_tokens,output_tokens\n" + "0,256,64\n" * 200
    s = simulate(SimConfig(gpu="h100", model="llama-3.1-8b", trace_csv=batch)).summary
    assert np.isfinite(s["throughput_tok_s"]) and s["throughput_tok_s"] > 0
    assert s["throughput_req_s"] <= s["completed_req_s"] * 1.01
