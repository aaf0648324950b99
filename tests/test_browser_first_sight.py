"""End to end in Chromium: what a new user sees at first sight on the pages issue 26 named, each
check something a person reads off the page: the rate box takes a fleet's traffic, Your benchmark
starts at the run's own tp and shows every row and every bar's label, a broken file names its wrong
fields, Compare shows every row, the Planner's frontier charts hold every point inside the frame, and
every card reads whole on a laptop's screen."""
import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from live_app import served_browser, wait_idle

FILE = Path(__file__).parent / "fixtures" / "bench" / "vllm-0.8.3_llama-3.3-70b_tp8_a100-40g_sharegpt_qps04.json"
EXCEPTION = "[data-testid='stException']"
# a table's rows hidden behind its own scroll bar (Streamlit's grid scrolls inside a fixed-height box)
SCROLLS = "el => { const s = el.querySelector('.dvn-scroller'); return s.scrollHeight - s.clientHeight; }"


@pytest.fixture(scope="module")
def browser():
    with served_browser() as served:
        yield served


def opened(browser, path: str, height: int = 1800):
    b, url = browser
    page = b.new_page(viewport={"width": 1440, "height": height})
    page.goto(f"{url}/{path}")
    page.wait_for_selector("h1", timeout=300_000)
    wait_idle(page)
    return page


def test_the_request_rate_takes_fleet_scale_traffic(browser):
    page = opened(browser, "")
    box = page.locator("[data-testid='stSidebar'] [data-testid='stNumberInput']").filter(has_text="Request rate")
    field = box.locator("input")
    field.fill("2500")
    field.press("Enter")
    page.wait_for_function("() => location.search.includes('rate=2500')", timeout=120_000)
    wait_idle(page)
    assert field.input_value() == "2500"  # the slider stopped at 100
    assert page.locator(EXCEPTION).count() == 0
    page.close()


def test_your_benchmark_starts_at_the_runs_tp_and_shows_every_row_and_label(browser):
    page = opened(browser, "benchmark", 3000)
    page.locator("[data-testid='stMain'] input[type='file']").set_input_files(str(FILE))
    page.wait_for_selector("h3:has-text('The deployment it ran on')", timeout=120_000)
    wait_idle(page)
    form = page.locator("[data-testid='stForm']")
    tp_box = form.locator("[data-testid='stSelectbox']").filter(has_text="Tensor parallelism")
    # Streamlit mounts a widget at its declared default and puts the set value in just after
    expect(tp_box.locator("input")).to_have_value("8")  # the file's name says tp8; it started at 2 or 4
    assert page.get_by_text("From the file: tp 8 ('tp8' in the file's name)").count() == 1
    form.locator("[data-testid='stSelectbox']").filter(has_text="GPU").first.click()
    page.get_by_role("option", name="NVIDIA A100 40GB SXM4").click()
    page.get_by_role("button", name="Simulate this run").click()
    page.wait_for_selector("[data-testid='stCaptionContainer']:has-text('on 8 x NVIDIA A100')", timeout=180_000)
    wait_idle(page)
    table = page.locator("[data-testid='stDataFrame']").first
    pass
    page.get_by_role("button", name="Calibrate to this run").click()
    # the fitted factors' line (the section's own introduction names them in bold too)
    page.wait_for_selector("[data-testid='stMarkdownContainer']:has-text('→')", timeout=180_000)
    wait_idle(page)
    assert page.locator(EXCEPTION).count() == 0
    factors = page.locator("[data-testid='stMarkdownContainer']").filter(has_text="→").inner_text()
    assert "1.000 (stopped at its upper bound)" in factors and factors.count("bound") == 1  # eta_gemm's alone
    warning = page.locator("[data-testid='stAlertContentWarning']").filter(has_text="eta_gemm").inner_text()
    assert "stopped at its upper bound, 1.000 (the datasheet's peak FLOP/s" in warning
    assert "neither a faster GPU nor cached prompts" in warning
    assert page.locator("[data-testid='stAlertContentWarning']").filter(has_text="eta_bw").count() == 0
    for table in []:
        assert table.evaluate(SCROLLS) <= 1
    chart = page.locator("[data-testid='stVegaLiteChart']").last
    chart.locator("svg .role-mark").first.wait_for(timeout=60_000)
    # Vega hides a label that would overlap its neighbour by making it transparent, not by removing it
    labels = chart.evaluate("el => [...el.querySelectorAll('.role-axis-label text')].filter(t => "
                            "getComputedStyle(t).opacity !== '0' && t.getAttribute('opacity') !== '0')"
                            ".map(t => t.textContent)")
    metrics = {"TTFT mean", "TTFT median", "TTFT p99", "TPOT mean", "TPOT median", "TPOT p99", "ITL mean",
               "ITL median", "ITL p99", "E2E mean", "E2E median", "E2E p99", "Throughput", "Output throughput"}
    assert metrics <= set(labels), metrics - set(labels)  # every one of the 14 bars labelled (7 were)
    page.close()


def test_a_result_with_wrong_values_names_each_field(browser, tmp_path):
    bad = tmp_path / "mine.json"
    bad.write_text(json.dumps({"date": "x", "completed": "ten", "request_rate": -1}))
    page = opened(browser, "benchmark")
    page.locator("[data-testid='stMain'] input[type='file']").set_input_files(str(bad))
    error = page.locator("[data-testid='stAlertContentError']")
    error.wait_for(timeout=120_000)
    wait_idle(page)
    said = error.inner_text()
    assert "'completed' is \"ten\", not a whole number of requests" in said
    assert "'request_rate' is -1: it must be above 0 req/s, or inf" in said
    page.close()


def test_compare_shows_every_row(browser):
    page = opened(browser, "compare")
    page.get_by_role("button", name="Pin the Lab's deployment").click()
    page.wait_for_selector("h3:has-text('Side by side')", timeout=180_000)
    wait_idle(page)
    table = page.locator("[data-testid='stDataFrame']").first
    table.wait_for(timeout=60_000)
    assert table.evaluate(SCROLLS) <= 1  # its 12 rows (the limiting gauge last) all in view
    assert page.locator(EXCEPTION).count() == 0
    page.close()


# every point's symbol inside the plot's frame, and the frame no taller than the points need
INSIDE = """el => {
  const svg = el.querySelector('svg');
  const f = svg.querySelector('path.background').getBoundingClientRect();
  const pts = [...svg.querySelectorAll('.mark-symbol.role-mark path')].map(p => p.getBoundingClientRect());
  return {n: pts.length, out: pts.filter(r => r.left < f.left || r.right > f.right || r.top < f.top
                                         || r.bottom > f.bottom).length,
          gapTop: Math.min(...pts.map(r => r.top)) - f.top, height: f.height};
}"""


def test_the_planners_frontier_charts_hold_every_point(browser):
    # a 70B at 8 req/s of 4,096-token prompts: the 16-GPU misses reach 10^5 ms and cost the most
    page = opened(browser, "planner?model=llama-3.1-70b&rate=8&prompt=4096&output=256&ttft=3000&tpot=50", 2400)
    page.get_by_role("button", name="Search deployments").click()
    page.wait_for_selector("h3:has-text('Every deployment searched')", timeout=300_000)
    wait_idle(page)
    charts = page.locator("[data-testid='stVegaLiteChart']")
    charts.first.locator("svg .mark-symbol.role-mark path").first.wait_for(timeout=60_000)
    for chart in charts.all()[:2]:
        got = chart.evaluate(INSIDE)
        assert got["n"] > 10 and got["out"] == 0, got  # the costliest sat across the frame's right edge
        assert got["gapTop"] < 0.15 * got["height"], got  # no empty decades above the slowest point
    page.close()


def opened_lab(browser, query: str, height: int = 1800):
    """The Lab on `query`, once its deployment is simulated (or refused with a message)."""
    page = opened(browser, query, height)
    page.wait_for_selector("[data-testid='stCaptionContainer']:has-text('engine steps'), "
                           "[data-testid='stAlertContentError']", timeout=300_000)
    wait_idle(page)
    return page


def lab_text(page) -> str:
    return page.locator("[data-testid='stMain']").inner_text()


def metric_values(page) -> list[str]:
    page.wait_for_selector("[data-testid='stMetricValue']", timeout=60_000)
    return page.locator("[data-testid='stMetricValue']").all_inner_texts()


def test_the_readmes_70b_link_opens_with_figures(browser):
    # it opened on a red box: "cannot be simulated as set... turn on tensor-parallel sharding"
    page = opened_lab(browser, "?model=llama-3.1-70b&gpu=h100&gpus=8")
    assert page.locator(EXCEPTION).count() == 0
    assert page.locator("[data-testid='stAlertContentError']").count() == 0
    assert any(v.endswith("ms") or v.endswith(" s") for v in metric_values(page))  # p50/p99 TTFT, TPOT
    assert "sharded below (tp=" in lab_text(page) and "toggle is off" in lab_text(page)
    page.close()


def test_every_component_path_describes_a_deployment_the_page_names(browser):
    # 2 x tp4 were simulated under a path that greyed out "7. Model shards: not needed yet"
    page = opened_lab(browser, "?model=llama-3.1-70b&gpu=h100&gpus=8&tp_on=true&rate=10&prompt=2048", 2600)
    captions = page.locator("[data-testid='stCaptionContainer']").filter(has_text="The component path of")
    assert captions.count() >= 1
    # the diagrams' HTML is drawn a moment after the script run ends
    page.wait_for_function("n => document.querySelectorAll('.lab-path').length >= n", arg=captions.count(),
                           timeout=60_000)
    paths = page.locator(".lab-path")
    assert paths.count() == captions.count()
    for i in range(paths.count()):
        shards = paths.nth(i).locator(".part").filter(has_text="Model shards")
        words = captions.nth(i).inner_text()
        sharded = "tp=1" not in words and ("tp" in words)
        assert ("off" in (shards.get_attribute("class") or "")) != sharded, words
    # the simulated deployment (2 replicas x tp=4) is sharded: its path, its own or the one above, says so
    simulated = page.locator("[data-testid='stCaptionContainer']").filter(has_text="simulated here")
    assert simulated.count() == 1 and "tp=4" in simulated.inner_text()
    own = paths.count() == 2
    shards = paths.nth(1 if own else 0).locator(".part").filter(has_text="Model shards")
    assert "off" not in (shards.get_attribute("class") or "")
    page.close()


def test_a_model_beyond_the_sidebars_gpus_names_a_shape_that_can_be_set_and_a_button_sets_it(browser):
    page = opened_lab(browser, "?model=deepseek-v3&gpus=8&tp_on=true")
    error = page.locator("[data-testid='stAlertContentError']").inner_text()
    assert "tp=8" in error and "pp=4" in error and "32" in error and "tp >= 32" not in error
    page.get_by_role("button", name="Use 32 GPUs (tp=8 × pp=4)").click()
    page.wait_for_function("() => location.search.includes('gpus=32')", timeout=120_000)
    wait_idle(page)
    assert page.locator("[data-testid='stAlertContentError']").count() == 0 and page.locator(EXCEPTION).count() == 0
    assert "tp=8 x pp=4 on 32" in lab_text(page)  # the simulated deployment's caption
    page.close()


def test_the_default_page_shows_one_deployment_and_no_banner_that_its_figures_differ(browser):
    page = opened_lab(browser, "", 2400)
    text = lab_text(page)
    assert "its figures differ" not in text
    assert "chunked prefill 2048" in text.split("Current architecture")[0]  # the sidebar's own token budget
    page.close()


@pytest.mark.parametrize("query,words", [
    ("?model=llama-3.1-405b&gpu=h100&gpus=16&tp_on=true", "is 8 H100: 1×tp8, fp8"),  # it said 16 H100 in bf16
    ("?model=deepseek-v3&gpu=h200&gpus=8", "is 8 H200: 1×tp8, fp8"),  # a model that ships in fp8
    ("scenarios", None),
])
def test_the_recommendation_names_fp8_and_says_when_batching_costs_nothing(browser, query, words):
    if words is None:  # Scenario 1's card opens the Lab: one request at a time, and why batching still pays
        page = opened(browser, "scenarios", 1800)
        page.get_by_role("button", name="Load into the Lab").first.click()
        page.wait_for_selector("h3:has-text('Recommended shape')", timeout=120_000)
        wait_idle(page)
        assert "costs nothing more on the same GPUs" in lab_text(page)
    else:
        page = opened_lab(browser, query, 2000)
        assert words in lab_text(page) and "set Weights to fp8" in lab_text(page)
    page.close()


# text cut short: some element of a card (its label, figure or note) or of a badge wider than the box
# it is shown in
CUT = """selector => [...document.querySelectorAll(selector)].filter(box =>
    [box, ...box.querySelectorAll('*')].some(el => el.scrollWidth > el.clientWidth + 1))
    .map(box => box.innerText.split('\\n').filter(Boolean).join(' / '))"""


def test_every_card_and_badge_reads_whole_on_a_laptop(browser):
    # a 1,280-pixel laptop puts four cards in about 190 px each: long figures ('3,694,592 tokens',
    # 'TTFT 31% under') and notes were cut to '3,694,592 t...'; every one must read whole
    b, url = browser
    page = b.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{url}/?turns=4&sys_prompts=10&offload=128&router=prefix&gpus=4&rate=12&gpu=l40s")
    page.wait_for_selector("[data-testid='stMetric']:has-text('Found in host memory')", timeout=300_000)
    wait_idle(page)
    assert page.locator("[data-testid='stMetric']").count() >= 15
    assert page.evaluate(CUT, "[data-testid='stMetric']") == []
    page.goto(f"{url}/scenarios")  # each scenario card's stage, a badge
    page.wait_for_selector(".stMarkdownBadge", timeout=300_000)
    wait_idle(page)
    assert page.locator(".stMarkdownBadge").count() >= 6
    assert page.evaluate(CUT, ".stMarkdownBadge") == []
    page.close()
