"""Several people on one server at once (the load benchmark, bench/load.py, at 5 sessions), and a
long run a person watches and stops."""
import asyncio
import sys
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import load  # noqa: E402
from live_app import launch, streamlit_process  # noqa: E402


@pytest.fixture(scope="module")
def url():
    with streamlit_process() as (address, _proc):
        yield address


def test_five_sessions_at_once_each_see_only_their_own_inputs_and_results(url):
    # each opens the Lab at its own request rate and moves the slider; every state a session shows
    # (URL, slider, Throughput card) is its own, as core computes it for that session's inputs
    results = asyncio.run(load.sessions_level(url, 5, changes=1, timeout_ms=240_000))
    assert [r["errors"] for r in results] == [[]] * 5
    assert all(len(r["seen"]) == 2 for r in results)  # the first page and one slider move each
    assert len({r["seen"][-1]["slider"] for r in results}) == 5
    assert load.check(results) == []


# a run long enough on any machine to be stopped before it ends: 100,000 conversations of four turns
# with long lognormal outputs, about half a minute on one fast core (the Bottlenecks page's deployment run)
LONG_URL = "bottlenecks?requests=100000&output=4096&dist=lognormal&rate=5&turns=4"


def test_a_long_run_shows_what_it_does_and_stops_when_asked(url):
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        page.goto(f"{url}/{LONG_URL}")
        # the page's runs follow one another (the deployment, then each sweep): read whichever shows
        text = page.locator("[data-testid='stProgress']").first.text_content(timeout=240_000)
        assert text.startswith(("Simulating the deployment (100,000 requests per run)",
                                "Sweeping the request rate (100,000 requests per run)",
                                "Sweeping the output length (100,000 requests per run)")), text
        page.get_by_role("button", name="Stop this run").first.click(timeout=240_000)
        page.wait_for_selector("[data-testid='stAlertContentInfo']:has-text('Stopped: ')", timeout=120_000)
        assert page.locator("[data-testid='stProgress']").count() == 0
        assert page.get_by_role("button", name="Run it again").count() == 1
        browser.close()
