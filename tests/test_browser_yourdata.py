"""End to end in Chromium: a first-time user imports a published vLLM result file on Your benchmark,
reads the simulation beside it, and downloads the comparison and the replayed requests as CSV."""
import csv
import io
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from live_app import launch, streamlit_server, wait_idle

FILE = Path(__file__).parent / "fixtures" / "bench" / "vllm-0.8.3_llama-3.3-70b_tp8_a100-40g_sharegpt_qps04.json"
EXCEPTION = "[data-testid='stException']"


@pytest.fixture(scope="module")
def page():
    with streamlit_server() as url, sync_playwright() as p:
        browser = launch(p)
        pg = browser.new_page(viewport={"width": 1400, "height": 1800}, accept_downloads=True)
        pg.goto(f"{url}/benchmark")
        pg.wait_for_selector("h1:has-text('Your benchmark')", timeout=300_000)
        wait_idle(pg)
        yield pg
        browser.close()


def download(page, label: str) -> str:
    with page.expect_download(timeout=120_000) as d:
        page.get_by_role("button", name=label).click()
    return Path(d.value.path()).read_text()


def test_import_a_result_file_and_download_csv(page):
    page.locator("[data-testid='stMain'] input[type='file']").set_input_files(str(FILE))
    page.wait_for_selector("h3:has-text('The deployment it ran on')", timeout=120_000)
    wait_idle(page)
    # the model is read from the file; the user confirms the GPU and tp the run used
    form = page.locator("[data-testid='stForm']")
    # the file does not record tp, but its name does ('_tp8_'): the form starts there, not at a refusal
    tp_box = form.locator("[data-testid='stSelectbox']").filter(has_text="Tensor parallelism")
    # Streamlit mounts a widget at its declared default and puts the set value in just after
    expect(tp_box.locator("input")).to_have_value("8")
    assert page.locator("[data-testid='stAlertContentError']").count() == 0
    form.locator("[data-testid='stSelectbox']").filter(has_text="GPU").first.click()
    page.get_by_role("option", name="NVIDIA A100 40GB SXM4").click()
    form.locator("[data-testid='stSelectbox']").filter(has_text="Tensor parallelism").click()
    page.get_by_role("option", name="8", exact=True).click()
    page.get_by_role("button", name="Simulate this run").click()
    page.wait_for_selector("[data-testid='stCaptionContainer']:has-text('on 8 x NVIDIA A100')", timeout=180_000)
    wait_idle(page)
    assert page.locator(EXCEPTION).count() == 0
    rows = list(csv.DictReader(line for line in io.StringIO(download(page, "Comparison (CSV)")) if not line.startswith("#")))
    tpot = next(r for r in rows if r["metric"] == "TPOT median")
    assert float(tpot["measured"]) == pytest.approx(27.348, abs=0.01)  # the file's own figure
    requests = download(page, "Requests (CSV)")
    assert "results version" in requests.splitlines()[1]  # provenance travels with the data
    body = [r for r in csv.DictReader(line for line in io.StringIO(requests) if not line.startswith("#"))]
    assert len(body) == 200 and sum(int(r["prompt_tokens"]) for r in body) == 42659
    page.get_by_role("button", name="Calibrate to this run").click()
    page.wait_for_selector("[data-testid='stMarkdownContainer']:has-text('eta_bw') strong", timeout=180_000)
    wait_idle(page)
    assert page.locator(EXCEPTION).count() == 0
    shots = Path(__file__).parent.parent / "test-results"  # ignored by git: a run leaves the checkout clean
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / "benchmark_import.png"), full_page=True)
