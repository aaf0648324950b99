"""The Lab at a laptop's width and at a phone's, in headless Chromium: the component diagram's text
stays readable and turns into a vertical list on a phone; the metric cards keep their order."""
import pytest

from live_app import served_browser, wait_idle

CAPTION = "[data-testid='stCaptionContainer']:has-text('engine steps')"
PARTS = ".lab-path > .part"
ORDER = ["p50 TTFT", "p99 TTFT", "p50 TPOT", "p99 TPOT", "Throughput", "Goodput", "GPUs / replicas",
         "Cost per 1M output tokens"]


@pytest.fixture(scope="module")
def browser():
    with served_browser() as served:
        yield served


def open_lab(browser, width: int, height: int):
    b, url = browser
    page = b.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    page.wait_for_selector(CAPTION, timeout=300_000)  # the first load may compile the simulator
    page.wait_for_selector(PARTS, timeout=60_000)
    wait_idle(page)
    return page


def boxes(page, selector: str) -> list[dict]:
    return [page.locator(selector).nth(i).bounding_box() for i in range(page.locator(selector).count())]


def test_the_diagram_reads_at_12_px_or_more_on_a_laptop(browser):
    page = open_lab(browser, 1440, 900)
    sizes = page.eval_on_selector_all(f"{PARTS}, {PARTS} b",
                                      "els => els.map(e => parseFloat(getComputedStyle(e).fontSize))")
    assert len(sizes) == 16 and min(sizes) >= 12
    parts = boxes(page, PARTS)
    assert len({round(p["y"]) for p in parts[:4]}) == 1  # four parts side by side in a row
    page.screenshot(path="test-results/lab-1440.png", full_page=True)
    page.close()


def test_on_a_phone_the_diagram_is_a_vertical_list_and_the_cards_keep_their_order(browser):
    page = open_lab(browser, 390, 844)
    parts = boxes(page, PARTS)
    assert len(parts) == 8
    assert len({round(p["x"]) for p in parts}) == 1  # one under another
    assert all(a["y"] + a["height"] <= b["y"] for a, b in zip(parts, parts[1:]))
    assert all(p["x"] + p["width"] <= 390 for p in parts)  # nothing off the screen's edge
    tops = []
    for label in ORDER:
        card = page.locator("[data-testid='stMetric']").filter(has_text=label).first
        tops.append(card.bounding_box()["y"])
    assert tops == sorted(tops), dict(zip(ORDER, tops))
    page.screenshot(path="test-results/lab-390.png", full_page=True)
    page.close()
