"""End to end: the real `streamlit run` in headless Chromium, as a person would use it."""
import pytest
from playwright.sync_api import expect, sync_playwright

from live_app import launch, streamlit_server, wait_idle

CAPTION = "[data-testid='stCaptionContainer']:has-text('engine steps')"
EXCEPTION = "[data-testid='stException']"
PAGES = ["Guided walkthrough", "Scenarios", "Bottlenecks", "Trade-offs", "Rules & sources", "Tutorial", "Lab"]


@pytest.fixture(scope="module")
def page():
    with streamlit_server() as url, sync_playwright() as p:
        browser = launch(p)
        pg = browser.new_page(viewport={"width": 1400, "height": 1600})
        pg.goto(url)
        pg.wait_for_selector(CAPTION, timeout=300_000)  # the first load may compile the simulator
        wait_idle(pg)
        yield pg
        browser.close()


def changed(page, selector: str, before: str, timeout_ms: float = 120_000) -> str:
    """Wait until the element's text differs from `before` and the script run is over."""
    expect(page.locator(selector).first).not_to_have_text(before, timeout=timeout_ms)
    wait_idle(page)
    return page.locator(selector).first.inner_text()


def test_the_lab_loads_and_a_slider_changes_the_metrics(page):
    assert page.locator(EXCEPTION).count() == 0
    assert "Recommended shape" in page.locator("h3").first.inner_text()
    metric = "[data-testid='stMetric']:has-text('Throughput') [data-testid='stMetricValue']"
    before = page.locator(metric).inner_text()
    rate = page.locator("[data-testid='stNumberInput']").filter(has_text="Request rate").locator("input")
    rate.focus()
    for _ in range(20):  # +2 req/s in 0.1 steps
        page.keyboard.press("ArrowUp")
    after = changed(page, metric, before)
    assert float(after.split()[0].replace(",", "")) > float(before.split()[0].replace(",", ""))
    assert page.locator(EXCEPTION).count() == 0


def test_every_page_opens_without_an_exception(page):
    for title in PAGES:
        page.locator("[data-testid='stSidebarNav'] a").filter(has_text=title).first.click()
        page.wait_for_selector(f"h1:has-text('{title.split()[0]}')", timeout=180_000)
        wait_idle(page)
        assert page.locator(EXCEPTION).count() == 0, title


def test_an_empty_trace_gives_a_message_not_a_traceback(page, tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    page.locator("[data-testid='stSidebar'] [data-testid='stExpander']").filter(has_text="Advanced").click()
    page.locator("[data-testid='stSidebar'] input[type='file']").first.set_input_files(str(empty))  # the trace's
    page.wait_for_selector("[data-testid='stAlertContentError']:has-text('empty')", timeout=120_000)
    wait_idle(page)
    assert page.locator(EXCEPTION).count() == 0
    # the rest of the app keeps working: another page still opens
    page.locator("[data-testid='stSidebarNav'] a").filter(has_text="Rules & sources").first.click()
    page.wait_for_selector("h1:has-text('Rules')", timeout=120_000)
    assert page.locator(EXCEPTION).count() == 0
