"""First visit and restart, as a new user and a host see them: a fresh clone of the project (its
committed files, core/compiled/ included) with an empty temporary folder, started with the
README's command (the virtual environment is this one: installing packages is not the visit);
then the same server restarted.

Reported, each from the moment the command starts: the health check answering (the server is
up), and the first Lab page showing simulated figures (its Throughput card) in a browser opened at
once; and the first visit alone (from opening the page). Timings come from a shared 2-core VM:
they vary from run to run by a third or more.

usage: python bench/first_visit.py [--out bench/results/first_visit.json] [--cold]
  --cold: also time the first visit with the shipped compiled engine ignored (LLM_LAB_SHIPPED_CACHE=0),
          i.e. what a fresh clone cost before it shipped
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from live_app import launch, streamlit_process  # noqa: E402

THROUGHPUT = "[data-testid='stMetric']:has-text('Throughput') [data-testid='stMetricValue']"


def visit(project: Path, tmp: Path, extra_env: dict | None = None) -> dict:
    from playwright.sync_api import sync_playwright
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "LLM_LAB_"))}
    env.update(TMPDIR=str(tmp), **(extra_env or {}))
    t0 = time.perf_counter()
    with streamlit_process(timeout_s=600, cwd=project, env=env, poll_s=0.05) as (url, _proc):  # 0.05 s: what is timed
        up = time.perf_counter() - t0
        with sync_playwright() as p:
            browser = launch(p)
            page = browser.new_page(viewport={"width": 1400, "height": 1200})
            t1 = time.perf_counter()
            page.goto(url)
            page.wait_for_selector(THROUGHPUT, timeout=600_000)
            first = time.perf_counter()
            browser.close()
        return dict(server_up_s=up, first_page_s=first - t1, command_to_first_page_s=first - t0)


def main(argv: list[str]) -> None:
    out_path = Path(argv[argv.index("--out") + 1]) if "--out" in argv else ROOT / "bench" / "results" / "first_visit.json"
    base = Path(tempfile.mkdtemp(prefix="llm-lab-first-"))
    try:
        clone, tmp = base / "clone", base / "tmp"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        tmp.mkdir()
        result = dict(when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cores=os.cpu_count(),
                      commit=subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True,
                                            text=True).stdout.strip())
        result["fresh_clone"] = visit(clone, tmp)
        result["restart"] = visit(clone, tmp)
        if "--cold" in argv:
            cold_tmp = base / "cold"
            cold_tmp.mkdir()
            result["fresh_clone_without_shipped_engine"] = visit(clone, cold_tmp, {"LLM_LAB_SHIPPED_CACHE": "0"})
        for k, v in result.items():
            if isinstance(v, dict):
                print(f"{k}: server up {v['server_up_s']:.1f} s, first page {v['first_page_s']:.1f} s, "
                      f"command to first page {v['command_to_first_page_s']:.1f} s", flush=True)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(result, indent=1) + "\n")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
