"""A fuzz of every view with Streamlit's AppTest: random sidebar input sets over each widget's full
range (the values the one table of ranges offers, core/data/bounds.json), random pages, and random
uploads (valid traces, malformed ones, hostile ones). Used by tests/test_view_fuzz.py (a small
fixed-seed run in the suite) and bench/fuzz_views.py (1,000 sets, timed).

A failure is an uncaught exception, the last-resort guard's "unexpected error" (an exception no
view caught) or a script run that did not finish within the timeout.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from streamlit.testing.v1 import AppTest

from core import bounds
from core.physics import catalog
from core.serving.workload import LENGTH_DISTS

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["views/lab.py", "views/planner.py", "views/walkthrough.py", "views/scenarios.py", "views/bottlenecks.py",
         "views/tradeoffs.py", "views/rules.py", "views/tutorial.py", "views/compare.py", "views/benchmark.py"]
CUSTOM = "Custom size (slider)"
HEADER = "arrival_s,prompt_tokens,output_tokens\n"


def random_trace(rng: random.Random) -> bytes:
    """A trace upload: mostly valid (of any length the parser takes), sometimes malformed or hostile."""
    kind = rng.choice(["valid", "valid", "long", "crlf", "stray_cr", "huge_field", "int64", "far", "markdown",
                       "empty", "header_only", "binary", "negative"])
    n = rng.randint(1, 300)
    rows = [f"{i * rng.uniform(0.01, 2):.3f},{rng.randint(1, 4096)},{rng.randint(1, 1024)}" for i in range(n)]
    text = HEADER + "\n".join(rows) + "\n"
    if kind == "long":  # lengths beyond most models' context
        text = HEADER + f"0,{rng.randint(100_000, 1_048_576)},{rng.randint(1, 100_000)}\n"
    elif kind == "crlf":
        text = text.replace("\n", "\r\n")
    elif kind == "stray_cr":
        text = HEADER + "0,1\r2,3\n"
    elif kind == "huge_field":
        text = HEADER + "0,10," + "9" * 140_000 + "\n"
    elif kind == "int64":
        text = HEADER + f"0,{2**63},5\n"
    elif kind == "far":
        text = HEADER + "0,10,5\n1e300,10,5\n"
    elif kind == "markdown":
        text = HEADER + "0,![x](http://127.0.0.1:9/x.png),5\n<img src=x onerror=alert(1)>,1,1\n"
    elif kind == "empty":
        text = ""
    elif kind == "header_only":
        text = HEADER
    elif kind == "negative":
        text = HEADER + "-1,10,5\n"
    if kind == "binary":
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 2000)))
    return text.encode()


def random_inputs(rng: random.Random, max_requests: int | None = None) -> dict:
    """One input set: every sidebar widget at a random value of its full range."""
    opts = bounds.sidebar_options
    model = rng.choice(catalog.model_ids() + [CUSTOM])
    requests = opts("requests")
    if max_requests:
        requests = [r for r in requests if r <= max_requests]
    def length(name):  # the whole range, most often the lengths a model's context holds (else most sets stop there)
        return rng.choice(opts(name) if rng.random() < 0.2 else [t for t in opts(name) if t <= 4096])

    edge = rng.random()
    values = dict(
        rate=0.0 if edge < 0.05 else 100.0 if edge < 0.1 else round(10 ** rng.uniform(-1, 2), 1),
        prompt=length("prompt"), output=length("output"), model=model,
        gpus=rng.choice(opts("gpus")), gpu=rng.choice(catalog.gpu_ids()), ttft=rng.choice(opts("ttft")),
        cb=rng.random() < 0.7, tp_on=rng.random() < 0.5, chunked=rng.random() < 0.6,
        budget=rng.choice(opts("budget")), max_seqs=rng.choice(opts("max_seqs")), block=rng.choice(opts("block")),
        tp=rng.choice([0, 2, 4, 8, 16]), pp=rng.choice(opts("pp_choice")), dist=rng.choice(LENGTH_DISTS),
        tpot=rng.choice(opts("tpot")),
        requests=rng.choice(requests), seed=rng.randint(0, 10_000), router=rng.choice(["lor", "rr", "kv"]),
        dtype=rng.choice(["bf16", "fp8", "int4"]), kv_dtype=rng.choice(list(catalog.KV_DTYPES)), prefix_cache=rng.random() < 0.8,
        sys_prompts=rng.choice(opts("system_prompts")), sys_tokens=length("system_prompt_tokens"),
        turns=rng.choice(opts("turns")), turn_gap=rng.choice(opts("turn_gap")), price=rng.choice([0.0, 0.0, round(rng.uniform(0, 1000), 2)]),
        experts=rng.choice(["tp", "ep", "ep_dp"]), eplb=rng.random() < 0.3,
    )
    if model == CUSTOM:
        values["size_b"] = rng.choice(opts("size_b"))
    values.update(load="users" if rng.random() < 0.3 else "rate", users=rng.choice(opts("concurrency")),
                  think=rng.choice(opts("think_time")))
    values["engine"] = rng.choice(["vllm", "vllm", "sglang", "trtllm"])
    return values


@dataclass
class Outcome:
    page: str
    seconds: float
    problem: str | None  # None: the page answered (a result or a message saying what to change)
    inputs: dict = field(default_factory=dict)
    upload: str | None = None


def new_app(timeout_s: float) -> AppTest:
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=timeout_s)
    at.run()
    return at


def run_set(at: AppTest, rng: random.Random, page: str, values: dict, upload: bytes | None) -> Outcome:
    """Set the sidebar, switch to `page` (with or without a trace upload), run it once, judge it."""
    for key, v in values.items():
        at.session_state[key] = v
    at.switch_page(page)
    uploader = [u for u in at.sidebar.file_uploader if "trace" in (u.key or "")] if upload is not None else []
    if uploader:
        uploader[0].set_value(("trace.csv", upload, "text/csv"))
    t0 = time.perf_counter()
    try:
        at.run()
        problem = None
    except RuntimeError as e:  # AppTest's timeout
        problem = f"no answer: {e}"
    seconds = time.perf_counter() - t0
    if problem is None and at.exception:
        problem = "exception: " + at.exception[0].value[:300]
    if problem is None:
        guarded = [e.value for e in at.error if "unexpected error" in e.value]
        if guarded:
            problem = "guarded: " + guarded[0][:300]
    if uploader:  # put the upload down, so the next set starts without it
        uploader[0].set_value(None)
    return Outcome(page, seconds, problem, values, None if upload is None else upload[:80].decode(errors="replace"))


def fuzz(sets: int, seed: int = 0, max_requests: int | None = None, timeout_s: float = 120,
         upload_share: float = 0.2, progress=None) -> list[Outcome]:
    rng = random.Random(seed)
    at = new_app(timeout_s)
    out = []
    for i in range(sets):
        page = PAGES[i % len(PAGES)] if i < len(PAGES) else rng.choice(PAGES)  # every view at least once
        values = random_inputs(rng, max_requests)
        upload = random_trace(rng) if rng.random() < upload_share else None
        o = run_set(at, rng, page, values, upload)
        out.append(o)
        if progress:
            progress(i, o)
        if o.problem and o.problem.startswith("no answer"):
            at = new_app(timeout_s)  # a run that timed out leaves the app mid-script: start over
    return out
