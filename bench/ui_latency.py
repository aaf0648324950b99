"""How fast the Lab answers a slider move, in a real browser against `streamlit run`.

usage: python bench/ui_latency.py [--moves 20] [--out bench/results/ui.json] [--screenshot docs/lab.png]

Loads the Lab (the first load compiles or loads the simulator and is reported apart), then moves
the request-rate slider one step at a time and times each move from the key press until the page
shows the new simulation (its "engine steps" caption changes) and the script run has finished.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from live_app import IDLE, launch, streamlit_server, wait_idle  # noqa: E402

CAPTION = "[data-testid='stCaptionContainer']:has-text('engine steps')"


def main(argv: list[str]) -> None:
    moves = int(argv[argv.index("--moves") + 1]) if "--moves" in argv else 20
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else ROOT / "bench" / "results" / "ui.json"
    shot = Path(argv[argv.index("--screenshot") + 1]) if "--screenshot" in argv else None
    with streamlit_server() as url, sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1440, "height": 900})  # a laptop screen
        t0 = time.perf_counter()
        page.goto(url)
        page.wait_for_selector(CAPTION, timeout=300_000)
        wait_idle(page)
        first_load = time.perf_counter() - t0
        if shot:
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot))
        slider = page.locator("[data-testid='stNumberInput']").filter(has_text="Request rate").locator("input")
        times = []
        for _ in range(moves):
            before = page.locator(CAPTION).inner_text()
            slider.focus()
            t = time.perf_counter()
            page.keyboard.press("ArrowUp")  # +0.1 req/s in the rate box
            page.wait_for_function(
                """([sel, before, idle]) => {
                    const el = [...document.querySelectorAll("[data-testid='stCaptionContainer']")]
                        .find(e => e.innerText.includes('engine steps'));
                    return el && el.innerText !== before && document.querySelector(idle);
                }""", arg=[CAPTION, before, IDLE], timeout=60_000, polling="raf")
            times.append(time.perf_counter() - t)
        browser.close()
    result = dict(first_load_s=first_load, moves=moves, median_ms=statistics.median(times) * 1e3,
                  p90_ms=sorted(times)[int(0.9 * (len(times) - 1))] * 1e3, max_ms=max(times) * 1e3,
                  all_ms=[round(x * 1e3, 1) for x in times])
    print(f"first load {first_load:.1f} s; slider move -> new page: median {result['median_ms']:.0f} ms, "
          f"p90 {result['p90_ms']:.0f} ms, max {result['max_ms']:.0f} ms over {moves} moves")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
