"""A fuzz of every view with AppTest: N random sidebar input sets over each widget's full range (the
simulated requests included), trace uploads among them, every view at least once. Reports the
exceptions (uncaught, or caught by the last-resort guard), the runs that did not answer within the
timeout, and the slowest pages.

usage: python bench/fuzz_views.py [--sets 1000] [--seed 0] [--timeout 120] [--out bench/results/fuzz_views.json]
"""
from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import ui.jobs  # noqa: E402
from view_fuzz import fuzz  # noqa: E402

# every page's work in its own script run, as a timed page load: AppTest does not poll the worker
# pool's progress bar (ui/jobs.py runs heavy work there, at a lower priority)
ui.jobs.HEAVY_REQUEST_RUNS = 10**12


def arg(argv: list[str], name: str, default: str) -> str:
    return argv[argv.index(name) + 1] if name in argv else default


def main(argv: list[str]) -> None:
    sets, seed = int(arg(argv, "--sets", "1000")), int(arg(argv, "--seed", "0"))
    timeout = float(arg(argv, "--timeout", "120"))
    out = Path(arg(argv, "--out", str(ROOT / "bench" / "results" / "fuzz_views.json")))
    t0 = time.perf_counter()

    seen = dict(problems=0, slowest=0.0, over_10=0)

    def progress(i, o):
        seen["problems"] += bool(o.problem)
        seen["over_10"] += o.seconds > 10
        seen["slowest"] = max(seen["slowest"], o.seconds)
        if o.problem or o.seconds > 10 or i % 50 == 0:
            print(f"{i:5d} {o.page:24s} {o.seconds:7.2f} s {o.problem or ''}  [so far: {seen['problems']} problems, "
                  f"{seen['over_10']} over 10 s, slowest {seen['slowest']:.1f} s]", flush=True)

    outcomes = fuzz(sets, seed=seed, timeout_s=timeout, progress=progress)
    problems = [o for o in outcomes if o.problem]
    by_page = {}
    for o in outcomes:
        by_page.setdefault(o.page, []).append(o.seconds)
    slowest = sorted(outcomes, key=lambda o: -o.seconds)[:10]
    report = dict(
        sets=sets, seed=seed, timeout_s=timeout, wall_s=round(time.perf_counter() - t0, 1),
        exceptions=sum(1 for o in problems if not o.problem.startswith("no answer")),
        no_answer=sum(1 for o in problems if o.problem.startswith("no answer")),
        over_10_s=sum(1 for o in outcomes if o.seconds > 10),
        uploads=sum(1 for o in outcomes if o.upload is not None),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),  # the app runs in this process
        pages={p: dict(runs=len(s), median_s=round(statistics.median(s), 3), max_s=round(max(s), 2))
               for p, s in sorted(by_page.items())},
        slowest=[dict(page=o.page, seconds=round(o.seconds, 2), inputs=o.inputs, upload=o.upload) for o in slowest],
        problems=[dict(page=o.page, problem=o.problem, inputs=o.inputs, upload=o.upload) for o in problems],
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k not in ("slowest", "problems")}, indent=1))
    print("slowest:", [(o.page, round(o.seconds, 1)) for o in slowest[:5]])


if __name__ == "__main__":
    main(sys.argv[1:])
