"""Screenshots of the views, for the README: python bench/screenshots.py [OUT_DIR]

Starts `streamlit run dashboard.py`, opens each view in headless Chromium at a laptop's width,
waits until its script run is over, and saves docs/<view>.png.
"""
from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from live_app import launch, streamlit_server, wait_idle  # noqa: E402

VIEWS = {"lab": ("", 2300), "walkthrough": ("walkthrough", 1500), "scenarios": ("scenarios", 1200)}


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else ROOT / "docs"
    out.mkdir(parents=True, exist_ok=True)
    with streamlit_server() as url, sync_playwright() as p:
        browser = launch(p)
        for name, (path, height) in VIEWS.items():
            page = browser.new_page(viewport={"width": 1440, "height": height})
            page.goto(f"{url}/{path}")
            page.wait_for_selector("h1", timeout=300_000)
            wait_idle(page)
            page.wait_for_timeout(1500)  # let the charts finish drawing after the run ends
            page.screenshot(path=str(out / f"{name}.png"))
            page.close()
            print("wrote", out / f"{name}.png")
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1:])
