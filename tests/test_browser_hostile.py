"""Hostile links and uploads in a real browser: `streamlit run` in headless Chromium. A link with
`seed=inf` (and other values a person might hand-edit or a stranger might send) opens the Lab with a
notice, never a traceback or a server path; an uploaded CSV's Markdown is shown as text, and the
browser fetches nothing it names."""
import pytest
from playwright.sync_api import sync_playwright

from live_app import launch, streamlit_server, wait_idle

EXCEPTION = "[data-testid='stException']"
NOTICE = "[data-testid='stAlertContentWarning']:has-text('The link')"
HOSTILE_LINKS = [
    "?seed=inf", "?seed=-inf&rate=1e400", "?seed=Infinity&gpus=5000&model=gpt-9", "?rate=abc&prompt=%3Cscript%3E",
    "?model=%21%5Bx%5D%28http%3A%2F%2F127.0.0.1%3A9%2Fx.png%29", "?tp=99&dist=zipf&cb=maybe",
    "walkthrough?stage=inf", "bottlenecks?requests=1e300&max_seqs=-1",
]


@pytest.fixture(scope="module")
def browser_page():
    with streamlit_server() as url, sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        fetched = []
        page.on("request", lambda r: fetched.append(r.url))
        yield url, page, fetched
        browser.close()


@pytest.mark.parametrize("link", HOSTILE_LINKS)
def test_a_hostile_link_opens_with_a_notice_not_a_traceback(browser_page, link):
    url, page, _ = browser_page
    page.goto(f"{url}/{link}")
    page.wait_for_selector(NOTICE, timeout=300_000)  # the first load may compile the simulator
    wait_idle(page)
    assert page.locator(EXCEPTION).count() == 0
    text = page.locator("[data-testid='stMain']").inner_text()
    assert "Traceback" not in text and "/site-packages/" not in text and ".py" not in text
    assert "instead" in page.locator(NOTICE).first.inner_text()


def test_an_uploaded_csvs_markdown_is_text_and_nothing_is_fetched(browser_page, tmp_path):
    url, page, fetched = browser_page
    page.goto(url)
    wait_idle(page)
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens\n0,![x](http://127.0.0.1:9/x.png),5\n")
    page.locator("[data-testid='stSidebar'] [data-testid='stExpander']").filter(has_text="Advanced").click()
    page.locator("[data-testid='stSidebar'] input[type='file']").first.set_input_files(str(bad))
    page.wait_for_selector("[data-testid='stSidebar'] :text('cannot be replayed')", timeout=120_000)
    wait_idle(page)
    assert page.locator(EXCEPTION).count() == 0
    assert page.locator("img[src*='127.0.0.1:9']").count() == 0 and page.locator("a[href*='127.0.0.1:9']").count() == 0
    assert page.locator("[data-testid='stSidebar'] code:has-text('![x](http://127.0.0.1:9/x.png)')").count() >= 1
    assert not [u for u in fetched if "127.0.0.1:9/" in u]
