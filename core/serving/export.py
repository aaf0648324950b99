"""A simulation's results as files: per-request and per-step CSV, the run as JSON (inputs,
deployment, summary, with the project's version so that it can be reproduced), any table as CSV,
and the run in the result format of `vllm bench serve --save-result --save-detailed`, so that the
tools that read those files read the simulator's too."""
from __future__ import annotations

import csv
import io
import json
import math
import subprocess
from dataclasses import asdict
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import numpy as np

from .. import CORE_VERSION
from .command import simulate_command
from .simulate import SimResult

PROJECT = "LLM Serving Design Lab"
ROOT = Path(__file__).resolve().parents[2]
TRACE_INLINE_MAX = 2_000_000  # characters of a replayed trace kept inside the JSON


@lru_cache(maxsize=1)
def project_version() -> dict:
    """The results' version (bumped when results change) and, in a git checkout, the commit."""
    commit = None
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=5)
        commit = out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"project": PROJECT, "results_version": CORE_VERSION, "commit": commit}


def _csv(header: list[str], columns: list, header_lines: list[str] = ()) -> str:
    buf = io.StringIO()
    for line in header_lines:  # provenance as comment lines, which pandas reads with comment="#"
        buf.write(f"# {line}\n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in zip(*columns):
        w.writerow([_cell(v) for v in row])
    return buf.getvalue()


def _cell(v):
    if isinstance(v, (float, np.floating)):
        return "" if not math.isfinite(v) else f"{float(v):.6g}"
    if isinstance(v, np.integer):
        return int(v)
    return v


def provenance(what: str) -> list[str]:
    v = project_version()
    return [f"{v['project']}: {what}", f"results version {v['results_version']}, commit {v['commit'] or 'unknown'}, "
            f"written {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}"]


def requests_csv(result: SimResult) -> str:
    """One row per simulated request, times in ms from its arrival (TTFT, TPOT, E2E, queueing); its
    prompt tokens the prefix cache held when it was first admitted."""
    r = result.requests
    arrival, first, finish = r["arrival_s"], r["first_token_s"], r["finish_s"]
    out = r["output_tokens"]
    tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1) * 1e3, np.nan)
    cols = {"request": np.arange(len(arrival)), "arrival_s": arrival, "prompt_tokens": r["prompt_tokens"],
            "cached_prompt_tokens": r["cached_tokens"], "output_tokens": out, "queue_ms": (r["scheduled_s"] - arrival) * 1e3, "ttft_ms": (first - arrival) * 1e3,
            "tpot_ms": tpot, "e2e_ms": (finish - arrival) * 1e3, "preemptions": r["preemptions"],
            "replica": r["replica"]}
    return _csv(list(cols), list(cols.values()), provenance(f"per-request results of {_describe(result)}"))


def steps_csv(result: SimResult) -> str:
    """The engine's per-step timeline (every `stride`-th step when the run was longer than the trace holds)."""
    t = {k: v for k, v in result.trace.items() if k != "stride"}
    lines = provenance(f"per-step timeline of {_describe(result)}")
    lines.append(f"one row every {result.trace.get('stride', 1)} engine step(s); times in s")
    return _csv(list(t), list(t.values()), lines)


def table_csv(rows: list[dict], what: str) -> str:
    """Any list of flat dicts (a comparison, the planner's deployments) as CSV, with provenance."""
    if not rows:
        return "\n".join(f"# {x}" for x in provenance(what)) + "\n"
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return _csv(keys, [[r.get(k, "") for r in rows] for k in keys], provenance(what))


def _describe(result: SimResult) -> str:
    c = result.config
    return f"{c.model} on {result.summary['gpus']} x {c.gpu} (tp {c.tp}, policy {c.policy})"


def run_dict(result: SimResult, inputs: dict | None = None, extra: dict | None = None) -> dict:
    """Inputs, deployment and summary of a run, with the version that made it and the command line
    that reproduces its figures ("reproduce": `python -m core simulate ...`, serving/command.py)."""
    deployment = asdict(result.config)
    trace = deployment.pop("trace_csv")
    note = None
    if trace is not None:
        inline = len(trace) <= TRACE_INLINE_MAX
        deployment["trace_csv"] = trace if inline else \
            f"(a trace of {result.workload.n} requests, {len(trace):,} characters: too long to keep here)"
        # the trace travels in this file (up to TRACE_INLINE_MAX), so the command names the file to write it to
        note = ("write this file's deployment.trace_csv into it" if inline else
                "the trace this run replayed (too long to keep in this file)")
    out = {"version": project_version(), "written_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "reproduce": simulate_command(result.config, note),
           "inputs": inputs or {}, "deployment": deployment, "summary": result.summary}
    if extra:
        out.update(extra)
    return out


def to_json(d) -> str:
    return json.dumps(finite(d), indent=1, default=_jsonable, allow_nan=False)


def finite(o):
    """JSON has no infinity: an infinite figure (a closed loop's request rate, every request due at
    once) is written "inf", as vLLM's result files write their request rate; NaN is null."""
    if isinstance(o, float) and not math.isfinite(o):
        return None if math.isnan(o) else ("inf" if o > 0 else "-inf")
    if isinstance(o, dict):
        return {k: finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite(v) for v in o]
    return o


def _jsonable(o):
    if isinstance(o, (np.floating, float)):
        return float(o) if math.isfinite(o) else None
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"cannot write {type(o).__name__} as JSON")


def vllm_result(result: SimResult, rate: float | str, model_id: str, burstiness: float = 1.0) -> dict:
    """The run as `vllm bench serve --save-result --save-detailed` writes one (keys and units of
    tests/fixtures/bench/FORMAT.md). Inter-token gaps are per token, evenly spread over each
    request's decode (the engine records each request's first and last token times)."""
    r = result.requests
    arrival, first, finish = r["arrival_s"], r["first_token_s"], r["finish_s"]
    ins, outs = r["prompt_tokens"], r["output_tokens"]
    ttft, lat = first - arrival, finish - arrival
    itls = [[float(g)] * int(o - 1) for g, o in zip(np.where(outs > 1, (finish - first) / np.maximum(outs - 1, 1), 0),
                                                    outs)]
    duration = float(finish.max() - arrival.min())
    multi = outs > 1
    tpot = (lat[multi] - ttft[multi]) / (outs[multi] - 1)
    flat = np.concatenate([np.asarray(x) for x in itls]) if any(itls) else np.zeros(1)
    out = {"date": datetime.now().strftime("%Y%m%d-%H%M%S"), "endpoint_type": "vllm", "backend": "vllm",
           "label": "simulated", "model_id": model_id, "tokenizer_id": model_id, "num_prompts": len(arrival),
           "request_rate": rate, "burstiness": burstiness, "max_concurrency": None, "duration": duration,
           "completed": len(arrival), "failed": 0, "total_input_tokens": int(ins.sum()),
           "total_output_tokens": int(outs.sum()), "request_throughput": len(arrival) / duration,
           "request_goodput": None, "output_throughput": float(outs.sum()) / duration,
           "total_token_throughput": float(ins.sum() + outs.sum()) / duration,
           "input_lens": ins.tolist(), "output_lens": outs.tolist(), "start_times": arrival.tolist(),
           "ttfts": ttft.tolist(), "itls": itls, "latencies": lat.tolist(), "errors": [""] * len(arrival)}
    for name, x in (("ttft", ttft), ("tpot", tpot), ("itl", flat), ("e2el", lat)):
        out[f"mean_{name}_ms"] = float(np.mean(x)) * 1e3
        out[f"median_{name}_ms"] = float(np.median(x)) * 1e3
        out[f"std_{name}_ms"] = float(np.std(x)) * 1e3
        out[f"p99_{name}_ms"] = float(np.percentile(x, 99)) * 1e3
    return out


def write_dir(folder: str | Path, files: dict[str, str]) -> list[Path]:
    """Write name -> text into `folder` (created); the paths written."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, text in files.items():
            (folder / name).write_text(text)
            paths.append(folder / name)
    except OSError as e:
        raise ValueError(f"cannot write into '{folder}': {e.strerror}") from None
    return paths
