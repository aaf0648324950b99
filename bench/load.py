"""Load: many people on one shared Lab. Each session is its own browser context (its own
Streamlit session) on one `streamlit run` server; each opens the Lab at its own request rate and
moves the rate slider a few times. Measured: the page time of every slider move (key press to the
re-rendered page), errors, whether any session ever showed another's inputs or results, and the
server's memory. A second scenario keeps the heaviest in-range work in flight in one session
(Bottlenecks on 100,000 requests; each time its page is done, its rate slider moves on and it all
runs again) while another session moves a slider and the health check is polled.

usage: python bench/load.py [--sessions 1,5,10,20] [--changes 4] [--heavy] [--no-load] [--out bench/results/load.json]
  --heavy: the heavy scenario, and the same light session and health probes without it (the baseline)

Results are checked, not only timed: after each move a session's URL, its slider and its
Throughput card must agree with each other, and the card must equal what core computes for that
session's rate (core.lab.report.lab_view), so a session that showed another's inputs or results
fails the check. Timings come from a shared 2-core VM with other work on it: they vary from run
to run by a third or more.
"""
from __future__ import annotations

import asyncio
import json
import multiprocessing
import queue
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from core.lab.inputs import LabInputs  # noqa: E402
from live_app import CHROME_ARGS, IDLE, chromium_executable, streamlit_process  # noqa: E402

THROUGHPUT = "[data-testid='stMetric']:has-text('Throughput') [data-testid='stMetricValue']"
EXCEPTION = "[data-testid='stException']"
CAPTION = "[data-testid='stCaptionContainer']:has-text('engine steps')"
RATE_SLIDER = "[data-testid='stNumberInput']:has-text('Request rate') input"  # the rate box (a slider stopped at 100)
RUNNING = "[data-testid='stApp'][data-test-script-state='running']"
BAR_TEXT = ("document.querySelector(\"[data-testid='stProgress']\")"  # what the heavy run is doing, in words
            "?.innerText.split(':')[0].replace(/[.]{3}$/, '') ?? null")
# the heaviest work a page admits: Bottlenecks' 100,000-request run (the largest the sidebar offers),
# then its two simulated sweeps' 18 workloads of 100,000 requests weighed against the page's budget of
# engine steps (over it here: refused with the knob to turn); each step of its rate slider asks for all of it again
HEAVY_URL = "bottlenecks?requests=100000&output=1024&rate=2"


def rss_mb(pid: int) -> dict:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


async def idle(page, timeout_ms: float) -> None:
    await page.wait_for_selector(f"{IDLE}[data-test-connection-state='CONNECTED']", timeout=timeout_ms)


# the rate box holds the URL's rate (4 req/s, the default, where the URL has none)
BOX_HOLDS_URL_RATE = f"""() => {{
    const box = [...document.querySelectorAll("[data-testid='stNumberInput']")]
        .find(e => e.innerText.includes('Request rate'))?.querySelector('input') ?? null;
    const rate = new URLSearchParams(location.search).get('rate') ?? '{LabInputs().rate}';
    return box !== null && parseFloat(box.value) === parseFloat(rate);
}}"""


async def settled(page, timeout_ms: float) -> None:
    """The script run is over and the sidebar shows the session's values. Streamlit's frontend mounts a
    widget at the value it was declared with and puts the session's in a render later; the sidebar
    declares the session's own (ui.state._start), where it once declared the default, and a loaded
    machine showed that default for 0.2 s after the run. A session that kept another's rate never
    settles, and the wait's timeout is reported as its error."""
    await idle(page, timeout_ms)
    await page.wait_for_function(BOX_HOLDS_URL_RATE, polling=100, timeout=timeout_ms)  # rAF polling stalls in unpainted pages


async def session(browser, url: str, rate: float, changes: int, timeout_ms: float) -> dict:
    """One person: open the Lab at `rate`, then move the rate slider `changes` times."""
    from playwright.async_api import expect
    ctx = await browser.new_context(viewport={"width": 1400, "height": 1200})
    page = await ctx.new_page()
    page.set_default_timeout(timeout_ms)  # 20 renderers on 2 cores answer slowly: the app is what is timed
    out = dict(rate=rate, times=[], seen=[], errors=[])
    try:
        t0 = time.perf_counter()
        await page.goto(f"{url}/?rate={rate}", timeout=timeout_ms)
        await page.wait_for_selector(THROUGHPUT, timeout=timeout_ms)
        await settled(page, timeout_ms)
        out["first_s"] = time.perf_counter() - t0
        out["seen"].append(await state(page))
        out["moves_from"] = time.monotonic()  # the system-wide clock the health probes are stamped with
        for _ in range(changes):
            before = await page.locator(CAPTION).first.inner_text()  # names the run's wall time: always new
            await page.locator(RATE_SLIDER).focus()
            t0 = time.perf_counter()
            await page.keyboard.press("ArrowUp")  # +0.1 req/s, one move of the rate
            await expect(page.locator(CAPTION).first).not_to_have_text(before, timeout=timeout_ms)
            await settled(page, timeout_ms)
            out["times"].append(time.perf_counter() - t0)
            out["seen"].append(await state(page))
        out["moves_to"] = time.monotonic()
        if await page.locator(EXCEPTION).count():
            out["errors"].append("exception on the page")
    except Exception as e:  # noqa: BLE001 (a failed session is a result, reported)
        out["errors"].append(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    finally:
        await ctx.close()
    return out


async def state(page) -> dict:
    query = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
    return dict(url_rate=float(query["rate"][0]) if "rate" in query else None,
                slider=float(await page.locator(RATE_SLIDER).input_value()),
                throughput=await page.locator(THROUGHPUT).inner_text())


def check(results: list[dict]) -> list[str]:
    """Every state a session showed is its own: URL, slider and Throughput agree with core."""
    from core.lab import report
    problems = []
    for r in results:
        for s in r["seen"]:
            if s["url_rate"] is not None and abs(s["url_rate"] - s["slider"]) > 1e-9:
                problems.append(f"session at {r['rate']}: URL rate {s['url_rate']} but slider {s['slider']}")
            view = report.lab_view(replace(LabInputs(), rate=s["slider"]))
            want = next(h["value"] for h in view["headline"] if h["label"] == "Throughput")
            if s["throughput"].split("\n")[0] != want:
                problems.append(f"session at {r['rate']}: rate {s['slider']} shows {s['throughput']!r}, core says {want!r}")
    return problems


async def sessions_level(url: str, n: int, changes: int, timeout_ms: float) -> list[dict]:
    from playwright.async_api import async_playwright
    async with async_playwright() as p:
        exe = chromium_executable()
        browser = await p.chromium.launch(executable_path=exe, args=CHROME_ARGS) if exe else \
            await p.chromium.launch(args=CHROME_ARGS)
        rates = [round(1.0 + 0.7 * i, 1) for i in range(n)]  # a distinct workload per session
        out = await asyncio.gather(*(session(browser, url, r, changes, timeout_ms) for r in rates))
        await browser.close()
    return list(out)


def run_load(levels: list[int], changes: int, timeout_ms: float = 300_000) -> dict:
    report = dict(levels=[])
    with streamlit_process() as (url, proc):
        for n in levels:
            results = asyncio.run(sessions_level(url, n, changes, timeout_ms))
            times = [t for r in results for t in r["times"]]
            errors = [e for r in results for e in r["errors"]]
            level = dict(sessions=n, changes=len(times), p50_s=percentile(times, 0.5), p90_s=percentile(times, 0.9),
                         max_s=max(times, default=float("nan")),
                         first_page_p90_s=percentile([r["first_s"] for r in results if "first_s" in r], 0.9),
                         errors=errors, leaks=check(results), server_mb=rss_mb(proc.pid))
            report["levels"].append(level)
            print(f"{n:>2} sessions: {len(times)} slider moves, page time p50 {level['p50_s']:.2f} s, "
                  f"p90 {level['p90_s']:.2f} s, max {level['max_s']:.2f} s; first page p90 "
                  f"{level['first_page_p90_s']:.2f} s; errors {len(errors)}, leaks {len(level['leaks'])}; server "
                  f"{level['server_mb']['VmRSS']:.0f} MB (peak {level['server_mb']['VmHWM']:.0f} MB)", flush=True)
    return report


# ---------------------------------------------------------------- one heavy session, one light one

def poll_health(url: str, stop, out) -> None:
    """Probe the health check every 50 ms until `stop`; runs in a process of its own, so that the
    benchmark's own browser driving (in this process) never delays a probe. Each probe: (when it
    was sent, on the system-wide monotonic clock; how long the answer took)."""
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=10).read()
            out.put((t0, time.monotonic() - t0))
        except OSError:
            out.put((t0, float("inf")))
        stop.wait(0.05)  # a health probe every 50 ms (the measurement's own pace, not synchronisation)


async def heavy_and_light(url: str, changes: int, timeout_ms: float, with_heavy: bool = True) -> dict:
    from playwright.async_api import TimeoutError as PlaywrightTimeout
    from playwright.async_api import async_playwright
    async with async_playwright() as p:
        exe = chromium_executable()
        browser = await p.chromium.launch(executable_path=exe, args=CHROME_ARGS) if exe else \
            await p.chromium.launch(args=CHROME_ARGS)
        bar_texts: list[str] = []
        heavy_runs = 0
        if with_heavy:  # a browser of its own: a second page in one headless browser is drawn only now and then
            heavy_browser = await p.chromium.launch(executable_path=exe, args=CHROME_ARGS) if exe else \
                await p.chromium.launch(args=CHROME_ARGS)
            heavy = await heavy_browser.new_page(viewport={"width": 1400, "height": 1200})
            await heavy.goto(f"{url}/{HEAVY_URL}", timeout=timeout_ms)
            # the heavy run is under way when its progress bar shows
            await heavy.wait_for_selector("[data-testid='stProgress']", timeout=timeout_ms)
        samples: list[tuple[float, bool]] = []  # (when, whether the heavy page's script was running)
        watching = asyncio.Event()

        async def keep_heavy():
            """The heavy session's person keeps asking for heavy work: each time their page is done,
            one more step of its rate slider (a new workload: every run and sweep again)."""
            nonlocal heavy_runs
            while with_heavy and not watching.is_set():
                running = await heavy.locator(RUNNING).count() > 0
                samples.append((time.perf_counter(), running))
                bar = await heavy.evaluate(BAR_TEXT)
                if bar and bar not in bar_texts:
                    bar_texts.append(bar)
                if not running:
                    await heavy.locator(RATE_SLIDER).focus()
                    await heavy.keyboard.press("ArrowUp")
                    heavy_runs += 1
                await asyncio.sleep(0.2)  # the sampling's own pace

        keeper = asyncio.create_task(keep_heavy())
        light_t0 = time.perf_counter()
        light = await session(browser, url, 3.0, changes, timeout_ms)
        watching.set()
        await keeper
        moving = [shown for t, shown in samples if t >= light_t0 + light.get("first_s", 0.0)]
        heavy_share = sum(moving) / len(moving) if moving else None  # of the slider moves' time, the heavy run's share
        stopped = None
        if with_heavy:  # Stop: one more heavy page, stopped while it runs; the run ends and the page says so
            await idle(heavy, timeout_ms)
            await heavy.locator(RATE_SLIDER).focus()
            await heavy.keyboard.press("ArrowUp")
            try:  # its runs may all end before the click
                await heavy.get_by_role("button", name="Stop this run").first.click(timeout=10_000)
                t0 = time.perf_counter()
                await heavy.wait_for_selector("[data-testid='stAlertContentInfo']:has-text('Stopped')", timeout=timeout_ms)
                stopped = time.perf_counter() - t0
            except PlaywrightTimeout:
                pass
        await browser.close()
        if with_heavy:
            await heavy_browser.close()
    return dict(light=light, heavy_bar_texts=bar_texts, heavy_pages=heavy_runs, stop_s=stopped,
                heavy_share_of_moves=heavy_share)


def run_heavy(changes: int, timeout_ms: float = 300_000, with_heavy: bool = True) -> dict:
    with streamlit_process() as (url, proc):
        stop, probes = multiprocessing.Event(), multiprocessing.Queue()
        poller = multiprocessing.Process(target=poll_health, args=(url, stop, probes), daemon=True)
        poller.start()
        got = asyncio.run(heavy_and_light(url, changes, timeout_ms, with_heavy))
        stop.set()
        health = []
        while poller.is_alive() or not probes.empty():
            try:
                health.append(probes.get(timeout=1))
            except queue.Empty:
                pass
        poller.join()
        # all probes, and those sent while the other session's slider moves were under way (its first
        # page, like every first page, has the server send about 140 files as well)
        light = got["light"]
        during = [d for t, d in health if light.get("moves_from", 0) <= t <= light.get("moves_to", 0)]
        health = [d for _, d in health]
        got.update(health_p50_s=percentile(health, 0.5), health_p99_s=percentile(health, 0.99),
                   health_max_s=max(health), health_probes=len(health), server_mb=rss_mb(proc.pid),
                   moves_health_p50_s=percentile(during, 0.5), moves_health_p99_s=percentile(during, 0.99),
                   moves_health_max_s=max(during, default=float("nan")), moves_health_probes=len(during),
                   light_p50_s=percentile(light["times"], 0.5), light_max_s=max(light["times"], default=None),
                   leaks=check([light]))
    heavy_what = f"heavy ({HEAVY_URL}, then {got['heavy_pages']} steps of its rate slider)"
    print(f"{heavy_what if with_heavy else 'no heavy session'} "
          f"running: {'; '.join(got['heavy_bar_texts'])}; another session's slider moves: "
          f"{', '.join(f'{t:.2f}' for t in got['light']['times'])} s; health check p50 "
          f"{got['health_p50_s'] * 1e3:.0f} ms, p99 {got['health_p99_s'] * 1e3:.0f} ms, max "
          f"{got['health_max_s'] * 1e3:.0f} ms over {got['health_probes']} probes (during the moves: p50 "
          f"{got['moves_health_p50_s'] * 1e3:.0f} ms, p99 {got['moves_health_p99_s'] * 1e3:.0f} ms, max "
          f"{got['moves_health_max_s'] * 1e3:.0f} ms over {got['moves_health_probes']}); Stop ended the run in "
          f"{got['stop_s'] if got['stop_s'] is None else round(got['stop_s'], 2)} s; heavy run in flight "
          f"{'-' if got['heavy_share_of_moves'] is None else format(got['heavy_share_of_moves'], '.0%')} of the slider "
          f"moves' time; errors {got['light']['errors']}",
          flush=True)
    return got


def main(argv: list[str]) -> None:
    levels = [int(x) for x in argv[argv.index("--sessions") + 1].split(",")] if "--sessions" in argv else [1, 5, 10, 20]
    changes = int(argv[argv.index("--changes") + 1]) if "--changes" in argv else 4
    out_path = Path(argv[argv.index("--out") + 1]) if "--out" in argv else ROOT / "bench" / "results" / "load.json"
    result = dict(when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cores=__import__("os").cpu_count())
    if "--heavy" in argv:
        result["without_heavy"] = run_heavy(changes, with_heavy=False)  # the same measurement, for comparison
        result["heavy"] = run_heavy(changes)
    if "--no-load" not in argv:
        result.update(run_load(levels, changes))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
