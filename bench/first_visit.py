"""First visit and restart, as a new user and a host see them: a fresh clone of the project (its
committed files, core/compiled/ included) in the environment the README's start command installs
(requirements.txt alone, in the clone's own .venv: installing it is not timed), with an empty
temporary folder; then the same server restarted, several times.

Reported, each from the moment the command starts: the health check answering (the server is up;
it answers once its warm-up is over, ui/prewarm.py), then the first Lab page showing simulated
figures (its Throughput card) in a browser opened at that moment, from opening the page and from
the command. The fresh clone is a new visitor's first visit (an empty browser cache). Each restart
is timed twice over: for a new visitor (a new browser, its cache empty) and for a returning one
(the browser that visited before, with the app's scripts in its cache). Timings come from a shared
2-core VM: they vary from run to run by a third or more, so each restart is repeated and its
median reported with every run.

usage: python bench/first_visit.py [--out bench/results/first_visit.json] [--restarts N] [--commit REV] [--cold]
  --restarts N: restarts to time (default 5)
  --commit REV: time that commit of the project instead of the checkout's HEAD (a before-and-after)
  --cold: also time the first visit with the shipped compiled engine ignored (LLM_LAB_SHIPPED_CACHE=0),
          i.e. what a fresh clone cost before it shipped
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from live_app import CHROME_ARGS, chromium_executable, launch, streamlit_process  # noqa: E402

VIEWPORT = {"width": 1400, "height": 1200}
THROUGHPUT = "[data-testid='stMetric']:has-text('Throughput') [data-testid='stMetricValue']"


def visit(project: Path, python: str, tmp: Path, extra_env: dict | None = None, profile: Path | None = None) -> dict:
    """One start of the server and one page; `profile`: the browser's folder, kept from visit to visit
    (a returning visitor, whose browser has the app's scripts cached), else a new browser each time."""
    from playwright.sync_api import sync_playwright
    # a user's Python keeps the bytecode it compiles (this VM's environment sets PYTHONDONTWRITEBYTECODE)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NUMBA_", "LLM_LAB_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(TMPDIR=str(tmp), **(extra_env or {}))
    with sync_playwright() as p:
        t0 = time.perf_counter()
        with streamlit_process(timeout_s=600, cwd=project, env=env, poll_s=0.05, python=python) as (url, _proc):
            up = time.perf_counter() - t0  # polled every 0.05 s: what is timed
            # not timed: a visitor's browser is already running
            if profile:
                browser = p.chromium.launch_persistent_context(str(profile), args=CHROME_ARGS, viewport=VIEWPORT,
                                                               executable_path=chromium_executable())
                page = browser.new_page()
            else:
                browser = launch(p)
                page = browser.new_page(viewport=VIEWPORT)
            t1 = time.perf_counter()
            page.goto(url)
            page.wait_for_selector(THROUGHPUT, timeout=600_000)
            first = time.perf_counter()
            browser.close()
    return dict(server_up_s=round(up, 2), first_page_s=round(first - t1, 2),
                command_to_first_page_s=round(up + first - t1, 2))


def medians(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main(argv: list[str]) -> None:
    out_path = Path(argv[argv.index("--out") + 1]) if "--out" in argv else ROOT / "bench" / "results" / "first_visit.json"
    restarts = int(argv[argv.index("--restarts") + 1]) if "--restarts" in argv else 5
    base = Path(tempfile.mkdtemp(prefix="llm-lab-first-"))
    try:
        clone, tmp = base / "clone", base / "tmp"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        if "--commit" in argv:
            subprocess.run(["git", "checkout", "-q", argv[argv.index("--commit") + 1]], cwd=clone, check=True)
        subprocess.run([sys.executable, "-m", "venv", str(clone / ".venv")], check=True)
        subprocess.run([str(clone / ".venv" / "bin" / "pip"), "install", "-q", "-r", "requirements.txt"], cwd=clone,
                       check=True)
        python = str(clone / ".venv" / "bin" / "python")
        tmp.mkdir()
        result = dict(when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cores=os.cpu_count(),
                      load_before=round(os.getloadavg()[0], 2),
                      commit=subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True,
                                            text=True).stdout.strip(),
                      environment="requirements.txt in the clone's .venv")
        profile = base / "browser"  # one visitor's browser, kept across the restarts
        result["fresh_clone"] = visit(clone, python, tmp, profile=profile)
        print(f"fresh clone, a new visitor: {result['fresh_clone']}", flush=True)
        for who, kept in (("new_visitor", None), ("returning_visitor", profile)):
            runs = []
            for _ in range(restarts):
                runs.append(visit(clone, python, tmp, profile=kept))
                print(f"restart, {who.replace('_', ' ')}: {runs[-1]}", flush=True)
            result[f"restart_{who}_median"], result[f"restart_{who}"] = medians(runs), runs
        if "--cold" in argv:
            cold_tmp = base / "cold"
            cold_tmp.mkdir()
            result["fresh_clone_without_shipped_engine"] = visit(clone, python, cold_tmp, {"LLM_LAB_SHIPPED_CACHE": "0"})
            print(f"fresh clone, compiling: {result['fresh_clone_without_shipped_engine']}", flush=True)
        for who in ("new_visitor", "returning_visitor"):
            print(f"restart, {who.replace('_', ' ')}, median of {restarts}: {result[f'restart_{who}_median']}", flush=True)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(result, indent=1) + "\n")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
