"""Overload is a property of the load against the capacity, not of how long the run is: judged by
requests served against requests offered in the steady state."""
import pytest

from core.lab.inputs import LabInputs
from core.lab.report import lab_view
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec


def serial(rate: float, n: int) -> dict:
    spec = WorkloadSpec(n_requests=n, rate=rate, prompt_mean=512, output_mean=128, length_dist="fixed", seed=4)
    return simulate(SimConfig(policy="serial", workload=spec)).summary


@pytest.fixture(scope="module")
def capacity() -> float:
    """One request at a time: the server's capacity is one over the (deterministic) service time,
    read from a run so light that nobody queues."""
    s = serial(0.01, 50)
    return 1.0 / s["e2e_s"]["mean"]


@pytest.mark.parametrize("n", [2000, 20000])
@pytest.mark.parametrize("load, stable", [(0.8, True), (0.95, True), (1.1, False), (2.0, False)])
def test_overload_is_judged_the_same_however_long_the_run(capacity, load, stable, n):
    s = serial(load * capacity, n)
    assert s["stable"] is stable, (load, n, s["served_req_s"], s["offered_req_s"])
    if not stable:  # it serves its capacity, whatever is offered
        assert s["served_req_s"] == pytest.approx(capacity, rel=0.05)


def test_an_overloaded_lab_says_what_is_served_and_that_latencies_grow():
    view = lab_view(LabInputs(rate=44, output_tokens=256))  # 8B on one H100: about 34 req/s of capacity
    miss = "; ".join(view["current_misses"])
    assert "the queue grows without bound" in miss and "req/s served" in miss
    cards = {m["label"]: m["value"] for m in view["headline"]}
    assert cards["p50 TTFT"].endswith("and growing") and cards["p99 TTFT"].endswith("and growing")
    assert not cards["p99 TPOT"].endswith("and growing")  # a saturated batch decodes at a steady pace


OVERLOADED = LabInputs(rate=44, output_tokens=256)  # 8B on one H100 serves about 34 req/s of these
SAID = "the queue grows without bound: "


def said(text: str) -> bool:
    """The words every view uses for an overloaded run, with what it served against what was offered."""
    return SAID in text.lower() and " req/s served" in text


def test_every_view_says_the_queue_grows_and_marks_latencies_as_growing():
    from core.lab import compare, gauges, tradeoffs, tutorial
    from core.lab.stages import evaluate_stages, stage_metrics

    # Walkthrough: an overloaded stage's card says so, and its latency figures grow
    outcomes = evaluate_stages(OVERLOADED)
    over = [o for o in outcomes if o.result is not None and not o.summary["stable"]]
    assert over, "at 44 req/s on one GPU the simple stages are overloaded"
    for o in over:
        assert said("; ".join(o.misses))
        cards = {m["label"]: m["value"] for m in stage_metrics(o, None)}
        assert cards["p99 TTFT"].endswith("and growing")
        assert not cards["p50 TPOT"].endswith("and growing") and not cards["Throughput"].endswith("and growing")
    # Bottlenecks: the TTFT gauge
    view = lab_view(OVERLOADED)
    ttft = next(g for g in gauges.gauges(view["config"], view["result"], OVERLOADED) if g.id == "ttft")
    assert "and growing" in ttft.reading and said(ttft.why)
    # Trade-offs A/B: request-level batching cannot keep up here
    ab = tradeoffs.ab(OVERLOADED, "continuous_batching")
    assert not ab.off.summary["stable"]
    table = dict(zip(tradeoffs.comparison(ab)["metric"], tradeoffs.comparison(ab)["off"]))
    assert table["p99 TTFT"].endswith("and growing") and table["p50 time to the whole answer"].endswith("and growing")
    assert not table["p50 TPOT"].endswith("and growing")
    # Compare: the queue row says what is served, the latency rows grow
    entries = compare.side_by_side([compare.from_lab(OVERLOADED)], OVERLOADED)
    rows = {r["metric"]: list(r.values())[1] for r in compare.table(entries, OVERLOADED)}
    assert said(rows["Queue"]) and rows["p99 TTFT"].endswith("and growing")
    # Tutorial: the simulated deployment's section
    text = tutorial.render(OVERLOADED)
    assert said(text) and "and growing" in text


def test_a_stable_run_reads_plainly():
    from core.lab import compare
    view = lab_view(LabInputs())
    assert view["result"].summary["stable"] and not view["current_misses"]
    assert not any(m["value"].endswith("and growing") for m in view["headline"])
    entries = compare.side_by_side([compare.from_lab(LabInputs())], LabInputs())
    rows = {r["metric"]: list(r.values())[1] for r in compare.table(entries, LabInputs())}
    assert rows["Queue"] == "Stable" and not rows["p99 TTFT"].endswith("and growing")


def test_one_request_at_a_time_settled_without_simulating_still_says_what_is_served():
    from core.lab.stages import serial_overload
    o = serial_overload(OVERLOADED)
    assert o is not None and said(o.misses[0])


def test_the_walkthroughs_stage_bars_mark_an_overloaded_stage():
    # a bar of 52 min p99 TTFT is only this run's length: its colour and legend say the queue grows
    from core.lab.stages import OVERLOADED as GROWS, evaluate_stages, stage_rows
    from ui import charts
    rows = {r["stage"]: r for r in stage_rows(evaluate_stages(OVERLOADED))}
    assert rows["Stage 1"]["meets"] == GROWS and rows["Stage 3"]["meets"] == GROWS
    spec = charts.stage_bars(list(rows.values()), "ttft", "p99 TTFT", "s", 1.0, log=True).to_dict()
    assert GROWS in str(spec)
    legend = spec["layer"][0]["encoding"]["color"]["legend"]
    assert legend.get("columns") == 2  # its four entries in one row ran off a phone's screen



def test_waits_grow_with_the_run_but_the_pace_of_decoding_does_not():
    # what 'and growing' marks must be true: on an overloaded run the TTFT grows with the number of
    # requests simulated, while a saturated batch decodes at a steady TPOT
    short, long = (lab_view(LabInputs(rate=44, output_tokens=256, requests=n))["result"].summary for n in (2000, 8000))
    assert not short["stable"] and not long["stable"]
    assert long["ttft_ms"]["p99"] > 3 * short["ttft_ms"]["p99"]
    assert long["tpot_ms"]["p50"] == pytest.approx(short["tpot_ms"]["p50"], rel=0.1)


@pytest.mark.parametrize("kw", [dict(rate=30, output_tokens=256, seed=1),  # 8B on one H100, ~85% of capacity
                                dict(model="mistral-7b", gpu="a100-80gb", rate=4.4, prompt_tokens=2048,
                                     output_tokens=256, seed=1)], ids=["8b-h100-30", "mistral-a100-4.4"])
def test_a_stable_queue_ending_on_a_swing_is_not_called_overloaded(kw):
    # near capacity a stable queue swings widely; this 2,000-request run ends on a swing, so ~10% fewer
    # requests finish than arrive in its second half. The queue's trend over the run shows no growth,
    # and the same load over 20,000 requests is stable: the verdict does not depend on the run's length
    from core.lab.inputs import current
    from core.serving.metrics import served_and_offered
    cfg, res = current(LabInputs(requests=2000, **kw))
    served, offered = served_and_offered(res.requests["arrival_s"], res.requests["finish_s"])
    assert served < 0.93 * offered  # the end-point count alone would say overloaded
    assert res.summary["stable"]
    assert current(LabInputs(requests=20000, **kw))[1].summary["stable"]


def test_the_rate_sweep_marks_the_rates_whose_queue_grows():
    # the knee chart's last point (13 s p99 TTFT at 42 req/s) is no steady value: it is red, and said
    from core.lab import sweeps
    from ui import charts
    inputs = LabInputs()
    rows = sweeps.SWEEPS["rate"](inputs)
    over = [r["rate"] for r in rows if not r["stable"]]
    assert over and min(over) > max(r["rate"] for r in rows if r["stable"])  # overload starts at the top
    assert f"from {min(over):.3g} req/s the queue grows without bound" in sweeps.rate_caption(rows, inputs)
    spec = charts.line(rows, "rate", "ttft_p99_ms", "rate", "p99 TTFT", "knee", log_y=True, mark_overload=True).to_dict()
    red = [layer for layer in spec["layer"] if layer.get("mark", {}).get("color") == charts.COLORS["bad"]
           and layer["mark"].get("type") == "point"]
    assert len(red) == 1 and len(spec["datasets"][red[0]["data"]["name"]]) == len(over)


def test_when_no_stage_meets_the_targets_the_nearest_that_runs_says_why():
    # it read 'Recommended: stage 5 ... (disaggregation needs a prefill and a decode replica ...)': the
    # stage that cannot run, not the overloaded one that comes nearest
    from core.lab.stages import evaluate_stages, simplest_stage
    rec = simplest_stage(evaluate_stages(OVERLOADED), OVERLOADED)
    assert not rec.met
    assert rec.reason.startswith("No stage meets the targets on 1 GPU: stage 3, continuous batching")
    assert said(rec.reason) and "stages 4 and 5 cannot run on 1 GPU" in rec.reason and "(s)" not in rec.reason


def test_a_trade_off_never_gives_a_ratio_against_a_growing_ttft():
    # '11.1 s, down from 55.0 s (5× faster)' compared two figures that only measure the run's length
    from core.lab import tradeoffs
    both = tradeoffs.verdict(tradeoffs.ab(OVERLOADED, "continuous_batching"))
    assert "both growing with the run" in both and "req/s served" in both and "faster" not in both.split(";")[0]
    one = tradeoffs.verdict(tradeoffs.ab(LabInputs(rate=30, output_tokens=256), "continuous_batching"))
    assert "and growing (its queue no longer grows)" in one and "×" not in one.split(";")[0]
    scaled = tradeoffs.verdict(tradeoffs.ab(OVERLOADED, "autoscaling"))
    assert "uses unchanged" not in scaled


def test_a_stage_card_gives_no_ratio_against_a_growing_ttft():
    # stage 3 against stage 2 read '199× faster' against a p99 TTFT that only measured the run's length
    from core.lab.stages import evaluate_stages, stage_metrics
    outcomes = evaluate_stages(LabInputs(rate=30, output_tokens=256))  # static batching overloads, stage 3 keeps up
    assert not outcomes[1].summary["stable"] and outcomes[2].summary["stable"]
    ttft2 = stage_metrics(outcomes[1], outcomes[0])[0]
    ttft3 = stage_metrics(outcomes[2], outcomes[1])[0]
    assert ttft2["delta"] == "and growing" and ttft3["delta"] == "no longer growing" and ttft3["color"] == "green"
