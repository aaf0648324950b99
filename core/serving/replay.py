"""A measured benchmark run, replayed: its workload rebuilt, the deployment the user confirms
simulated on it, and the two compared metric by metric.

The workload: per-request prompt and output lengths when the file has them (in submission
order), else lengths drawn around the run's mean lengths in the shape of its dataset (SGLang's
random dataset draws uniformly between range_ratio x len and len; ShareGPT has a long tail).
Arrivals: the recorded send times when there are any; else the benchmark client's own process,
gaps drawn from a gamma distribution of shape `burstiness` (1: Poisson) at the run's request
rate, as vLLM's and SGLang's clients draw them; a rate of inf sends every request at once.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import numpy as np

from ..physics import catalog, costmodel
from .benchfile import METRICS, STATS, BenchRun
from .simulate import SimConfig, SimResult, model_len_for, simulate
from .workload import WorkloadSpec, generate

UNITS = {"ttft": "ms", "tpot": "ms", "itl": "ms", "e2e": "ms", "req_s": "req/s", "output_tok_s": "tok/s"}
NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E", "req_s": "Throughput",
         "output_tok_s": "Output throughput"}


def guess_model(model_id: str | None) -> str | None:
    """The catalog model a result file's model id names ('meta-llama/Llama-3.3-70B-Instruct' ->
    llama-3.3-70b, an alias of llama-3.1-70b), or None."""
    if not model_id:
        return None
    stem = model_id.rsplit("/", 1)[-1].lower().replace("meta-llama-", "").replace("meta-", "")
    stem = re.sub(r"-(instruct|chat|hf|it|base)(-.*)?$", "", stem)
    for key in (stem, stem.replace("_", "-")):
        try:
            return catalog.get_model(key).id
        except ValueError:
            continue
    return None


def workload_arrays(run: BenchRun, seed: int = 0, max_total: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival_s, prompt_tokens, output_tokens) of the run's successful requests; lengths drawn for a
    summary-only file stay within `max_total` tokens (the model's context)."""
    rng = np.random.default_rng(seed)
    if run.detailed:
        prompt, output = run.input_lens.astype(np.int64), np.maximum(run.output_lens, 1).astype(np.int64)
    else:
        prompt, output = _drawn_lengths(run, seed, max_total)
    n = len(prompt)
    if run.start_times_s is not None:
        arrival = run.start_times_s - run.start_times_s.min()
    elif math.isinf(run.request_rate):
        arrival = np.zeros(n)
    else:
        k = run.burstiness
        gaps = rng.gamma(k, 1.0 / (run.request_rate * k), n)
        gaps[0] = 0.0  # the client sends its first request at once, then waits a gap after each
        arrival = np.cumsum(gaps)
    return arrival, prompt, output


def _drawn_lengths(run: BenchRun, seed: int, max_total: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    n = run.completed
    p_mean = max(run.total_input_tokens / n, 1.0)
    o_mean = max(run.total_output_tokens / n, 1.0)
    ratio = run.length_hints.get("random_range_ratio")
    if run.dataset == "random" and ratio is not None:
        dist, spread = "uniform", (1 - ratio) / (1 + ratio)  # [r x len, len] around its mean
    elif run.dataset == "sharegpt":
        dist, spread = "sharegpt", 0.5
    else:
        dist, spread = "lognormal", 0.5
    longest = (p_mean + o_mean) * (2 if dist == "uniform" else 16)
    if max_total:  # the server refused longer requests, so the run held none: clip the tail's draws to it
        longest = min(longest, max_total - 2)
    spec = WorkloadSpec(n_requests=n, rate=1.0, prompt_mean=p_mean, output_mean=o_mean, length_dist=dist,
                        spread=spread, max_total_tokens=int(longest) + 2, seed=seed)
    wl = generate(spec)
    return wl.prompt_tokens, wl.output_tokens


def trace_csv(arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> str:
    order = np.argsort(arrival, kind="stable")
    rows = [f"{arrival[i]:.6f},{prompt[i]},{output[i]}" for i in order]
    return "arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n"


def config_for(run: BenchRun, base: SimConfig, seed: int = 0) -> SimConfig:
    """`base` (the user's deployment: GPU, model, tp, engine limits) serving the run's workload."""
    model = catalog.get_model(base.model)
    if not run.detailed and (run.total_input_tokens + run.total_output_tokens) / run.completed > model.max_context:
        raise ValueError(f"the file's mean lengths ({run.total_input_tokens / run.completed:.0f} prompt + "
                         f"{run.total_output_tokens / run.completed:.0f} output tokens) exceed {model.name}'s "
                         f"context of {model.max_context}: is the model right?")
    arrival, prompt, output = workload_arrays(run, seed, model.max_context)
    longest = int((prompt + output).max())
    if longest > model.max_context:  # only a recorded length can: drawn ones are clipped to the context
        raise ValueError(f"the file records a request of {longest} tokens (prompt + output), beyond {model.name}'s "
                         f"context of {model.max_context}: is the model right?")
    max_len = max(base.max_model_len or 0, model_len_for(longest, model))
    # the client's cap on requests in flight, as the file records it (or as the caller sets it)
    users = base.workload.concurrency or run.max_concurrency or 0
    return replace(base, trace_csv=trace_csv(arrival, prompt, output), max_model_len=max_len,
                   workload=replace(base.workload, n_requests=len(arrival), seed=seed, concurrency=users))


def simulated_metrics(summary: dict) -> dict:
    """A simulation's summary in the measurement's layout (ms; throughput per second)."""
    out = {m: {s: summary[f"{m}_ms"][s] for s in STATS} for m in ("ttft", "tpot", "itl")}
    out["e2e"] = {s: summary["e2e_s"][s] * 1e3 for s in STATS}
    # a benchmark client divides what completed by the whole run, drain included
    out["throughput"] = {"req_s": summary["completed_req_s"], "output_tok_s": summary["completed_tok_s"]}
    return out


def comparison_rows(measured: dict, simulated: dict) -> list[dict]:
    """One row per metric and statistic the measurement has: measured, simulated, relative error."""
    rows = []
    for m in METRICS:
        for s in STATS:
            if s in measured.get(m, {}):
                rows.append(_row(f"{NAMES[m]} {'median' if s == 'p50' else s}", UNITS[m], measured[m][s],
                                 simulated[m][s], m, s))
    for k in ("req_s", "output_tok_s"):
        rows.append(_row(NAMES[k], UNITS[k], measured["throughput"][k], simulated["throughput"][k], "throughput", k))
    return rows


def _row(label, unit, meas, sim, metric, stat) -> dict:
    err = (sim - meas) / meas if meas else math.nan
    return dict(metric=label, unit=unit, measured=float(meas), simulated=float(sim), error=float(err),
                key=metric, stat=stat)


@dataclass
class Comparison:
    run: BenchRun
    config: SimConfig
    result: SimResult
    rows: list[dict]
    notes: list[str]

    @property
    def median_abs_error(self) -> float:
        errs = [abs(r["error"]) for r in self.rows if math.isfinite(r["error"])]
        return float(np.median(errs)) if errs else math.nan


def compare(run: BenchRun, base: SimConfig, eff: costmodel.Efficiency | None = None, seed: int = 0) -> Comparison:
    cfg = config_for(run, base, seed)
    result = simulate(cfg, eff)
    return Comparison(run, cfg, result, comparison_rows(run.measured, simulated_metrics(result.summary)),
                      notes(run))


def notes(run: BenchRun) -> list[str]:
    """What the replay could not take from the file, in words."""
    out = []
    if not run.detailed:
        out.append(f"The file has no per-request lengths: {run.completed} requests were drawn around its mean "
                   f"lengths ({run.total_input_tokens / run.completed:.0f} prompt, "
                   f"{run.total_output_tokens / run.completed:.0f} output tokens).")
    if run.start_times_s is None and not math.isinf(run.request_rate):
        out.append(f"Send times were not recorded: arrivals are drawn as the client drew them ({run.request_rate:g} "
                   f"req/s, burstiness {run.burstiness:g}), so the replay matches the run's statistics, not its "
                   f"exact request order in time.")
    if run.max_concurrency:
        out.append(f"The client capped requests in flight at {run.max_concurrency}, and so does the replay: a request "
                   f"due while {run.max_concurrency} are in flight is sent when one finishes, and its TTFT counts from "
                   f"then, as the client times it.")
    if run.itls_s is not None and run.output_lens is not None:
        chunked = sum(len(g) < o - 1 for g, o in zip(run.itls_s, run.output_lens))
        if chunked:
            out.append(f"{chunked} of {len(run.itls_s)} requests streamed several tokens in one chunk: the measured "
                       f"ITL is per chunk, the simulated one per token.")
    if run.failed:
        out.append(f"{run.failed} requests failed and are left out.")
    return out




# SchedulerConfig.async_scheduling is on by default since vLLM 0.14 (physics/vllm_host.py)
ASYNC_SINCE = (0, 14)


def said_deployment(run: BenchRun) -> dict:
    """The tp and scheduling the file says its run had (its metadata or name), with where it says so:
    {"tp": (8, "'tp8' in the file's name"), "async_scheduling": (False, "'vllm-0.8.3' in the file's name")}."""
    out = {}
    if "tp" in run.said:
        out["tp"] = run.said["tp"]
    if "vllm" in run.said:
        version, where = run.said["vllm"]
        out["async_scheduling"] = (version >= ASYNC_SINCE, where)
    return out
