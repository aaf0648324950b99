"""How far to trust a figure: the band on p99 TTFT and TPOT from the step-time model's error spread,
and the error of the validated real run nearest the user's setting."""
import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.lab import trust
from core.lab.inputs import LabInputs, current
from core.physics import catalog

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def loaded():
    # 8B on one H100 at about two thirds of its capacity: queueing shapes the tail, the queue is bounded
    cfg, res = current(LabInputs(rate=20.0, requests=1000))
    assert res.summary["stable"]
    return cfg, res.summary


def width(b, key):
    return b[key][1] - b[key][0]


def test_band_contains_the_simulated_figure_and_widens_with_the_spread(loaded):
    cfg, s = loaded
    narrow = trust.band(cfg, s, (0.97, 1.03))
    wide = trust.band(cfg, s, (0.85, 1.15))
    for b in (narrow, wide):
        assert b["ttft"][0] <= s["ttft_ms"]["p99"] <= b["ttft"][1]
        assert b["tpot"][0] <= s["tpot_ms"]["p99"] <= b["tpot"][1]
    assert width(wide, "ttft") > width(narrow, "ttft") > 0
    assert width(wide, "tpot") > width(narrow, "tpot") > 0


def test_a_wider_error_spread_gives_wider_step_scales():
    assert trust.step_scales([-0.02, 0.0, 0.02]) == pytest.approx((1 / 1.016, 1 / 0.984), rel=1e-3)
    fast, slow = trust.step_scales([-0.2, 0.0, 0.2])
    assert fast < 1 / 1.016 and slow > 1 / 0.984


def test_every_step_scaled_scales_the_time_per_token_at_light_load():
    # no queue at 1 req/s: each token waits one step, so steps 20% longer give a 20% longer TPOT
    cfg, res = current(LabInputs(rate=1.0, requests=300))
    slow = trust.rerun(cfg, 1.2)
    assert slow["tpot"] == pytest.approx(1.2 * res.summary["tpot_ms"]["p99"], rel=0.03)


def test_steps_slow_enough_tip_a_loaded_deployment_into_overload(loaded):
    cfg, s = loaded
    b = trust.band(cfg, s, (0.9, 2.0))
    assert b["overload_scale"] == 2.0
    cards = trust.trust(cfg, s, dict(trust.validation(), step_time_errors={"h200_leave_one_out": [-0.5, -0.5], "decode_ms_per_token": [0.1]}))
    assert cards[0]["value"].endswith("growing") and "queue grows if steps are 100.0% slower" in cards[0]["note"]
    # the TPOT band stays a band: a saturated batch decodes at a steady pace however long the queue
    assert "growing" not in cards[1]["value"] and " – " in cards[1]["value"]


RUNS = [dict(id=i, arch=a, params_b=p, moe=False, load=l, engine=e) for i, a, p, l, e in
        (("hopper-7b-light", "Hopper", 7.0, 0.2, "vLLM"), ("hopper-7b-heavy", "Hopper", 7.0, 0.9, "vLLM"),
         ("hopper-70b", "Hopper", 70.0, 0.5, "vLLM"), ("ampere-8b", "Ampere", 8.0, 0.5, "vLLM"),
         ("ada-70b-sglang", "Ada Lovelace", 70.0, 0.5, "SGLang"), ("ada-13b", "Ada Lovelace", 13.0, 0.5, "vLLM (offline)"),
         ("cdna3-405b", "CDNA 3", 405.0, 0.5, "vLLM"))]


@pytest.mark.parametrize("gpu,model,load,want", [
    ("h100", "llama-3.1-70b", 0.5, "hopper-70b"),  # same family and size class
    ("h200", "llama-3.1-8b", 0.8, "hopper-7b-heavy"),  # same family and size: the nearer load
    ("h100", "llama-3.1-8b", 0.5, "hopper-7b-light"),  # a 10x size gap counts more than a load gap
    ("a100-80gb", "llama-3.1-70b", 0.5, "ampere-8b"),  # the GPU family first
    ("l40s", "llama-3.1-70b", 0.5, "ada-13b"),  # the engine the Lab simulates before a nearer size
    ("mi355x", "llama-3.1-70b", 0.5, "cdna3-405b"),  # no run of its own: the family whose factors it carries
    ("mi355x", "llama-3.1-8b", 0.5, "ampere-8b"),  # ... but not across nearly two decades of size
])
def test_the_nearest_validated_run_is_same_family_then_size_then_load(gpu, model, load, want):
    assert trust.nearest(catalog.get_gpu(gpu), catalog.get_model(model), load, RUNS)["id"] == want


def test_validation_file_matches_the_report_and_names_its_sources():
    data = json.loads((ROOT / "core" / "data" / "validation_errors.json").read_text())
    report = (ROOT / "calibration" / "VALIDATION.md").read_text()
    assert data["runs"] and all(len(v) for v in data["step_time_errors"].values())
    for r in data["runs"]:
        assert r["source"] and r["engine_version"] and r["arch"]
        for metric, e in r["errors"].items():
            assert re.search(rf"\| {re.escape(r['id'])} \| {re.escape(metric)} \|[^\n]*\| {re.escape(f'{e:+.1%}')} \|", report), \
                (r["id"], metric)


def test_the_lab_shows_the_bands_and_the_nearest_run_with_units():
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    at.run()
    assert not at.exception
    cards = {m.label: m for m in at.metric}
    for label in ("p99 TTFT band", "p99 TPOT band"):
        assert re.fullmatch(r"[\d.]+( (ms|s))?( – [\d.]+ (ms|s))?", cards[label].value), cards[label].value
        assert "10th and 90th percentiles" in cards[label].proto.help
    near = cards["Nearest validated run"]
    assert re.fullmatch(r"(E2E|TTFT|TPOT) \d+(\.\d)?% (under|over)", near.value) and "source" in near.proto.help


@pytest.mark.parametrize("rate", [4.0, 20.0, 44.0])  # light, loaded, overloaded: 8B on one H100
def test_the_trust_cards_figures_fit_a_card_and_the_nearest_run_shows_its_largest_error(rate):
    # a three-card row at 1440 px shows about 16 characters of a figure: 'E2E 1.7% under, ...' was cut off,
    # and about 40 of its note
    cfg, res = current(LabInputs(rate=rate, requests=500))
    cards = trust.trust(cfg, res.summary)
    assert all(len(c["value"]) <= 16 for c in cards), [c["value"] for c in cards]
    near = cards[-1]
    run = trust.nearest(catalog.get_gpu(cfg.gpu), catalog.get_model(cfg.model), float(res.summary["utilisation"]))
    errors = {trust.METRIC_WORDS[m].split()[-1]: run["errors"][m] for m in trust.METRIC_WORDS if m in run["errors"]}
    shown = near["value"].split()[0]
    assert abs(errors[shown]) == max(abs(e) for e in list(errors.values())[:2])  # the worst, not the first
    assert all(f"{name} " in near["help"] for name in errors)  # every error, on hover
    assert len(near["note"]) <= 40, near["note"]  # the note under it holds about 40 characters


@pytest.mark.parametrize("gpu", ["l40s", "l4"])  # Ada Lovelace: no validated run
def test_the_band_widens_on_a_gpu_family_no_validated_run_covers_and_says_why(gpu):
    runs = trust.validation()["runs"]
    assert trust.family_margin(catalog.get_gpu("h100"), runs)[0] == 0  # Hopper runs are validated
    assert trust.family_margin(catalog.get_gpu("a100-80gb"), runs)[0] == 0  # so are Ampere ones
    margin, seen = trust.family_margin(catalog.get_gpu(gpu), runs)
    # the widening is an error measured on a family the step times were not fitted on, not a guess
    # ... predicted with the fitted fractions carried unchanged, before that family's own factor
    carried = [abs(r["errors_family_carried"]["E2E mean ms"]) for r in runs
               if r["arch"] == seen and "E2E mean ms" in r.get("errors_family_carried", {})]
    assert seen != catalog.get_gpu("h200").arch and margin == max(carried) > 0

    def relative_width(g):
        cfg, res = current(LabInputs(gpu=g, rate=1.0, requests=300))  # no queue: TPOT scales with the step
        lo, hi = trust.band(cfg, res.summary, trust.step_scales(trust.step_errors(trust.validation())))["tpot"]
        cards = trust.trust(cfg, res.summary)
        shown = [float(x) for x in re.findall(r"[\d.]+", cards[1]["value"])]
        return (shown[1] - shown[0]) / res.summary["tpot_ms"]["p99"], (hi - lo) / res.summary["tpot_ms"]["p99"], cards

    seen_width, fitted_width, cards = relative_width(gpu)
    assert seen_width > fitted_width * 1.5  # wider than the fitted spread alone on the same GPU
    arch = catalog.get_gpu(gpu).arch
    assert all(f"no {arch} run" in c["note"] and len(c["note"]) <= 40 for c in cards[:2]), [c["note"] for c in cards]
    assert f"no {arch} GPU has a validated run" in cards[1]["help"]
    cfg, res = current(LabInputs(gpu="h100", rate=1.0, requests=300))
    assert "no " not in trust.trust(cfg, res.summary)[1]["note"]


@pytest.mark.parametrize("gpu, gpus", [("mi300x", 8), ("b200", 4)])  # AMD's runs; vLLM's B200 runs at tp 4
def test_a_setting_on_a_family_only_public_runs_cover_is_widened_by_their_worst_error(gpu, gpus):
    runs = trust.validation()["runs"]
    arch = catalog.get_gpu(gpu).arch
    # the public runs it is checked against (a mixture's fixed-concurrency checks test the MoE layer, not the family)
    mine = [r for r in runs if r["arch"] == arch and not r.get("moe_check")]
    assert mine and all(r.get("family_check") for r in mine)
    margin, seen = trust.family_margin(catalog.get_gpu(gpu), runs)
    # their worst error of any metric, TPOT too: a family whose first tokens come out right and whose
    # decode does not is not to be trusted by its first tokens
    assert seen == arch and margin == max(abs(e) for r in mine for e in r["errors"].values()) > 0
    # they never stand in for the carry onto a family with no run at all
    assert trust.family_margin(catalog.get_gpu("l40s"), runs)[1] != arch
    cfg, res = current(LabInputs(gpu=gpu, model="llama-3.1-70b", tensor_parallel=True, gpus=gpus, rate=1.0,
                                 requests=300))
    cards = trust.trust(cfg, res.summary)
    assert f"{arch} public runs" in cards[0]["note"] and f"{margin:.1%}" in cards[0]["help"]
    assert gpu.upper() in cards[-1]["note"] and f"same GPU family ({arch})" in cards[-1]["help"]


def test_a_mixture_is_told_the_error_of_the_nearest_mixture_run_not_a_dense_model_or_a_smaller_mixture():
    # DeepSeek-R1 on 8 H200s: GPUStack's vLLM run of DeepSeek-R1 at 4 clients on 8 H200s (calibration/moe_runs.json),
    # not Llama 4 Scout on two H100s, which the card named before mixtures at a fixed concurrency were validated runs
    runs = trust.validation()["runs"]
    r = trust.nearest(catalog.get_gpu("h200"), catalog.get_model("deepseek-r1"), 0.3, runs)
    assert r["moe_check"] and r["model_name"].startswith("DeepSeek-R1") and r["gpu"] == "h200"
    assert set(r["errors"]) == {"TPOT mean ms", "TTFT mean ms"}
    # SGLang's cookbook runs are judged by their median TTFT (their first clients wait for the warm-up)
    cookbook = [x for x in runs if x["id"].startswith("sglang-cookbook")]
    assert cookbook and all("TTFT mean ms" not in x["errors"] and "TTFT median ms" in x["errors"] for x in cookbook)
    # a mixture's checks leave the family margin as it was: Blackwell's is still its public dense runs' worst error
    dense = [x for x in runs if x["arch"] == "Blackwell" and not x.get("moe_check")]
    assert trust.family_margin(catalog.get_gpu("b200"), runs)[0] == max(abs(e) for x in dense for e in x["errors"].values())
    cfg, res = current(LabInputs(model="deepseek-r1", gpu="h200", gpus=8, tensor_parallel=True, dtype="fp8", rate=1.0,
                                 requests=200))
    near = trust.trust(cfg, res.summary)[-1]
    assert "DeepSeek-R1" in near["note"] and "H200" in near["note"] and len(near["note"]) <= 40, near["note"]
