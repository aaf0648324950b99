"""Benchmark result files, read strictly as data: `vllm bench serve --save-result` JSON (and the
older benchmarks/benchmark_serving.py, one object per line with --append-result) and SGLang's
`bench_serving` JSON lines.

Keys and units (tests/fixtures/bench/FORMAT.md): per-request values are seconds, aggregates `*_ms`
are milliseconds. The file is parsed with the standard JSON parser (nothing is evaluated), within
a size cap; every error names the line and the field. A run may carry per-request arrays
(`--save-detailed`, SGLang `--output-details`, and every vLLM 0.8-era file): lengths, TTFTs and
the gaps between streamed chunks; without them only the summary and the dataset's settings remain.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

import numpy as np

MAX_BYTES = 64 * 1024**2  # a detailed vLLM file of 10,000 requests with texts is ~50 MB
MAX_REQUESTS = 500_000
METRICS = ("ttft", "tpot", "itl", "e2e")  # each in ms: mean, p50, p99
STATS = ("mean", "p50", "p99")
# summary key stems per tool: e2e is "e2el" in vLLM, "e2e_latency" in SGLang
_STEMS = {"ttft": ("ttft",), "tpot": ("tpot",), "itl": ("itl",), "e2e": ("e2el", "e2e_latency")}
_STAT_KEYS = {"mean": "mean", "p50": "median", "p99": "p99"}


@dataclass
class BenchRun:
    """One benchmark run. Per-request arrays hold the successful requests in submission order."""
    tool: str  # "vllm" or "sglang"
    line: int  # 1-based line of the file the run was read from
    model_id: str | None
    request_rate: float  # requests/s; inf: every request sent at once
    burstiness: float  # gamma shape of the gaps (1: Poisson)
    max_concurrency: int | None
    duration_s: float
    completed: int
    failed: int
    dataset: str | None
    total_input_tokens: int
    total_output_tokens: int
    measured: dict  # {"ttft": {"mean": ms, "p50": ms, "p99": ms}, ..., "throughput": {...}}
    input_lens: np.ndarray | None = None
    output_lens: np.ndarray | None = None
    ttfts_s: np.ndarray | None = None
    latencies_s: np.ndarray | None = None
    start_times_s: np.ndarray | None = None
    itls_s: list | None = None
    length_hints: dict = field(default_factory=dict)  # SGLang's dataset settings (random_input_len, ...)
    # the deployment as the file says it: {"tp": (8, "'tp8' in the file's name"), "vllm": ((0, 8, 3), ...)}
    said: dict = field(default_factory=dict)

    @property
    def detailed(self) -> bool:
        return self.input_lens is not None and self.output_lens is not None

    def label(self) -> str:
        rate = "all at once" if math.isinf(self.request_rate) else f"{self.request_rate:g} req/s"
        if self.max_concurrency:
            rate += f", at most {self.max_concurrency} in flight"
        what = f"{self.dataset} dataset, " if self.dataset else ""
        return f"line {self.line}: {self.tool}, {what}{rate}, {self.completed} requests"


def parse(data: bytes | str, name: str = "the file") -> list[BenchRun]:
    """Every run in a result file (one JSON object, or one per line). Raises ValueError naming
    the line and field of the first problem."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_BYTES:
        raise ValueError(f"{name} is {len(raw) / 1e6:.0f} MB, above the {MAX_BYTES / 1e6:.0f} MB limit for a "
                         f"result file: save it without generated texts, or split its runs")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{name} is not UTF-8 text (byte {e.start}): a benchmark result is a JSON file") from None
    if not text.strip():
        raise ValueError(f"{name} is empty: expected the JSON of `vllm bench serve --save-result` or SGLang "
                         f"bench_serving's JSON lines")
    objects = _objects(text, name)
    runs = [_run(obj, line, name) for line, obj in objects]
    for run, (_, obj) in zip(runs, objects):
        run.said = deployment_said(obj, name)
    return runs


# `vllm bench serve --metadata KEY=VALUE` writes its pairs into the result, values as text
_TP_KEYS = ("tensor_parallel_size", "tensor-parallel-size", "tp_size", "tp")
_VERSION_KEYS = ("vllm_version", "vllm-version", "version")
_TP_IN_NAME = re.compile(r"(?<![a-z0-9])tp[-_=]?(\d{1,2})(?!\d)")
_VLLM_IN_TEXT = re.compile(r"vllm[-_ =]?v?(\d+)\.(\d+)(?:\.(\d+))?")


def deployment_said(obj: dict, name: str) -> dict:
    """What the run's metadata, else its file's name, says of the deployment the results come from:
    its tensor-parallel degree ('..._tp8_...', metadata tensor_parallel_size=8) and vLLM's version
    ('vllm-0.8.3_...', metadata vllm_version=0.8.3). The files record neither on their own."""
    out = {}
    for key in _TP_KEYS:
        v = obj.get(key)
        if isinstance(v, (int, str)) and not isinstance(v, bool) and str(v).strip().isdigit() \
                and 1 <= int(v) <= 64:
            out["tp"] = (int(v), f"'{key}={int(v)}' in the file's metadata")
            break
    m = _TP_IN_NAME.search(str(name).lower())
    if "tp" not in out and m and 1 <= int(m.group(1)) <= 64:
        out["tp"] = (int(m.group(1)), f"'{m.group(0)}' in the file's name")
    for key in _VERSION_KEYS:
        v = obj.get(key)
        hit = _VLLM_IN_TEXT.search(f"vllm-{v}".lower()) if isinstance(v, str) else None
        if hit:
            version = tuple(int(x or 0) for x in hit.groups())
            out["vllm"] = (version, f"'{key}={'.'.join(map(str, version))}' in the file's metadata")
            break
    m = _VLLM_IN_TEXT.search(str(name).lower())
    if "vllm" not in out and m:
        out["vllm"] = (tuple(int(x or 0) for x in m.groups()), f"'{m.group(0)}' in the file's name")
    return out


def _constant(token: str) -> float:
    # bare Infinity / NaN: Python's json.dumps writes them (SGLang's request_rate for "inf")
    return {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}[token]


def _loads(text: str):
    return json.loads(text, parse_constant=_constant)


def _objects(text: str, name: str) -> list[tuple[int, dict]]:
    """(line, object) pairs: the whole text as one JSON value, else one value per line."""
    try:
        whole = _loads(text)
        out = [(1, whole)]
    except json.JSONDecodeError as e:
        if e.msg != "Extra data":  # one broken JSON document
            raise ValueError(f"{name}, line {e.lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
        whole, out = None, []  # JSON lines: one run per line
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append((i, _loads(line)))
            except json.JSONDecodeError as e:
                raise ValueError(f"{name}, line {i}: not valid JSON ({e.msg} at column {e.colno})") from None
            except RecursionError:
                raise ValueError(f"{name}, line {i}: JSON nested too deeply for a result file") from None
    except RecursionError:
        raise ValueError(f"{name}: JSON nested too deeply for a result file") from None
    if isinstance(whole, list):  # a list of runs (vLLM's nightly-benchmark tables are lists too)
        out = [(1, o) for o in whole]
    for line, obj in out:
        if not isinstance(obj, dict):
            raise ValueError(f"{name}, line {line}: expected a JSON object of one benchmark run, found "
                             f"{type(obj).__name__}")
    if not out:
        raise ValueError(f"{name} holds no benchmark run")
    return out


class _FieldError(ValueError):
    """One field's problem, in the field's words: "'completed' is "ten", not a whole number of requests"."""


class _Fields:
    """Typed, range-checked reads of one run's keys; errors name the line and the key."""

    def __init__(self, obj: dict, line: int, name: str):
        self.obj, self.where = obj, f"{name}, line {line}"

    def fail(self, key: str, what: str):
        raise ValueError(f"{self.where}: field '{key}' {what}")

    def wrong(self, key: str, why: str):
        """The value of `key` and why it cannot be used."""
        raise _FieldError(f"'{key}' is {_shown(self.obj.get(key))}{why}")

    def num(self, key: str, required: bool = False, allow_inf: bool = False, lo: float = 0.0):
        v = self.obj.get(key)
        if v is None:
            if required:
                raise _FieldError(f"'{key}' is missing")
            return None
        if isinstance(v, str) and v.strip().lower() in ("inf", "infinity") and allow_inf:
            return math.inf
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.wrong(key, ", not a number")
        v = float(v)
        if math.isnan(v) or (math.isinf(v) and not allow_inf) or v < lo:
            self.wrong(key, f": it must be a number >= {lo:g}")
        return v

    def int(self, key: str, required: bool = False, what: str = "whole number"):
        v = self.obj.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or v < 0 or v != int(v)):
            self.wrong(key, f", not a {what}")
        v = self.num(key, required)
        return None if v is None else int(v)

    def text(self, key: str):
        v = self.obj.get(key)
        if v is not None and not isinstance(v, str):
            self.fail(key, f"must be text, not {type(v).__name__}")
        return v

    def array(self, key: str, n: int | None, integer: bool = False):
        v = self.obj.get(key)
        if v is None:
            return None
        if not isinstance(v, list):
            self.fail(key, f"must be a list (one value per request), not {type(v).__name__}")
        if len(v) > MAX_REQUESTS:
            self.fail(key, f"has {len(v):,} entries, above the limit of {MAX_REQUESTS:,} requests")
        if n is not None and len(v) != n:
            self.fail(key, f"has {len(v)} entries but the run has {n} requests")
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
                self.fail(key, f"entry {i} must be a number >= 0, not {json.dumps(x)[:40]}")
            if integer and x != int(x):
                self.fail(key, f"entry {i} must be a whole number of tokens, not {x}")
        return np.asarray(v, dtype=np.int64 if integer else np.float64)

    def gaps(self, key: str, n: int):
        v = self.obj.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or len(v) != n:
            self.fail(key, f"must be a list of {n} lists (the gaps between streamed chunks of each request)")
        out = []
        for i, row in enumerate(v):
            if not isinstance(row, list) or any(isinstance(x, bool) or not isinstance(x, (int, float))
                                                or not math.isfinite(x) or x < 0 for x in row):
                self.fail(key, f"entry {i} must be a list of gaps in seconds >= 0")
            out.append(np.asarray(row, dtype=np.float64))
        return out


def _shown(v) -> str:
    """A field's value as the file wrote it, shortened."""
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:40] + "..."


def _tool(obj: dict) -> str:
    if "dataset_name" in obj or "total_output_tokens_retokenized" in obj or "random_input_len" in obj:
        return "sglang"
    if "model_id" in obj or "request_goodput:" in obj or "request_goodput" in obj or "endpoint_type" in obj:
        return "vllm"
    return "vllm" if obj.get("backend") == "vllm" else ("sglang" if obj.get("backend") else "")


# keys every result holds, whichever tool wrote it: a file with them is a result, whatever else it lacks
_RESULT_KEYS = ("completed", "duration", "request_rate", "total_output_tokens")


def _run(obj: dict, line: int, name: str) -> BenchRun:
    f = _Fields(obj, line, name)
    tool = _tool(obj) or ("vllm" if any(k in obj for k in _RESULT_KEYS) else "")
    if not tool:
        keys = ", ".join(list(obj)[:6])
        raise ValueError(f"{name}, line {line}: not a benchmark result (no 'completed' or tool keys; found {keys}): "
                         f"expected `vllm bench serve --save-result` JSON or SGLang bench_serving JSON lines")
    problems, missing = [], []

    def read(fn, key, *args, check=None, **kw):
        """The field's value, or None with its problem kept: every wrong field is named at once."""
        try:
            v = fn(key, *args, **kw)
            if v is not None and check is not None:
                check(v)
            return v
        except _FieldError as e:
            (missing if str(e).endswith("is missing") else problems).append(str(e))
            return None

    def at_least_one(v):
        if v < 1:
            f.wrong("completed", ": no request of this run succeeded, so there is nothing to compare")

    def above_zero(key, why):
        def check(v):
            if v <= 0:
                f.wrong(key, why)
        return check

    completed = read(f.int, "completed", required=True, what="whole number of requests", check=at_least_one)
    # lo=-inf: a negative rate or duration gets its own reason, not the general ">= 0"
    duration = read(f.num, "duration", required=True, lo=-math.inf, check=above_zero("duration", ": it must be above 0 s"))
    rate = read(f.num, "request_rate", required=True, allow_inf=True, lo=-math.inf,
                check=above_zero("request_rate", ": it must be above 0 req/s, or inf"))
    burst = read(f.num, "burstiness", lo=-math.inf, check=above_zero("burstiness", ": it must be above 0 (1: Poisson arrivals)"))
    concurrency = read(f.int, "max_concurrency", what="whole number of requests")
    failed = read(f.int, "failed", what="whole number of requests")
    tokens_in = read(f.int, "total_input_tokens", required=True, what="whole number of tokens")
    tokens_out = read(f.int, "total_output_tokens", required=True, what="whole number of tokens")
    if missing:
        keys = [m.split("'")[1] for m in missing]
        problems.append(f"{', '.join(repr(k) for k in keys)} {'is' if len(keys) == 1 else 'are'} missing")
    if problems:
        raise ValueError(f"{name}, line {line}: " + "; ".join(problems))
    run = BenchRun(tool=tool, line=line, model_id=f.text("model_id"), request_rate=rate, burstiness=burst or 1.0,
                   max_concurrency=concurrency, duration_s=duration, completed=completed,
                   failed=failed or 0, dataset=f.text("dataset_name"),
                   total_input_tokens=tokens_in, total_output_tokens=tokens_out, measured={})
    try:
        for key in ("random_input_len", "random_output_len", "sharegpt_output_len"):
            if f.num(key) is not None:
                run.length_hints[key] = f.int(key, what="whole number of tokens")
        if f.num("random_range_ratio") is not None:
            run.length_hints["random_range_ratio"] = f.num("random_range_ratio")
        _per_request(run, f)
        run.measured = _measured(run, f)
    except _FieldError as e:
        raise ValueError(f"{f.where}: {e}") from None
    return run


def _per_request(run: BenchRun, f: _Fields) -> None:
    outs = f.array("output_lens", None, integer=True)
    if outs is None:
        return
    n = len(outs)
    ins = f.array("input_lens", n, integer=True)
    ttfts = f.array("ttfts", n)
    itls = f.gaps("itls", n)
    starts = f.array("start_times", n)
    lats = f.array("latencies", n)
    errors = f.obj.get("errors")
    ok = outs > 0  # failed requests stay in place with an output length of 0
    if isinstance(errors, list) and len(errors) == n:
        ok &= np.array([not e for e in errors])
    if ins is None or not ok.any():
        return
    idx = np.flatnonzero(ok)
    run.input_lens, run.output_lens = ins[idx], outs[idx]
    if (run.input_lens < 1).any():
        f.fail("input_lens", "has a successful request with a prompt of 0 tokens")
    run.ttfts_s = ttfts[idx] if ttfts is not None else None
    run.itls_s = [itls[i] for i in idx] if itls is not None else None
    run.start_times_s = starts[idx] if starts is not None else None
    run.latencies_s = lats[idx] if lats is not None else None
    if run.latencies_s is None and run.ttfts_s is not None and run.itls_s is not None:
        run.latencies_s = run.ttfts_s + np.array([g.sum() for g in run.itls_s])


def _pick(stats: dict, x: np.ndarray | None, scale: float) -> dict:
    """Summary statistics, each from the file's key where there is one, else from the per-request values."""
    out = {}
    for s in STATS:
        if stats.get(s) is not None:
            out[s] = stats[s]
        elif x is not None and len(x):
            out[s] = float(np.mean(x) if s == "mean" else np.percentile(x, 50 if s == "p50" else 99)) * scale
    return out


def _measured(run: BenchRun, f: _Fields) -> dict:
    keyed = {}
    for m, stems in _STEMS.items():
        keyed[m] = {}
        for s, word in _STAT_KEYS.items():
            for stem in stems:
                v = f.num(f"{word}_{stem}_ms")
                if v is not None:
                    keyed[m][s] = v
    tpot = itl = None
    if run.detailed and run.latencies_s is not None and run.ttfts_s is not None:
        multi = run.output_lens > 1
        tpot = (run.latencies_s[multi] - run.ttfts_s[multi]) / (run.output_lens[multi] - 1)
    if run.itls_s is not None:
        itl = np.concatenate(run.itls_s) if run.itls_s else np.zeros(0)
    out = {"ttft": _pick(keyed["ttft"], run.ttfts_s, 1e3), "tpot": _pick(keyed["tpot"], tpot, 1e3),
           "itl": _pick(keyed["itl"], itl, 1e3), "e2e": _pick(keyed["e2e"], run.latencies_s, 1e3)}
    req_s = f.num("request_throughput")
    out["throughput"] = {"req_s": req_s if req_s is not None else run.completed / run.duration_s,
                         "output_tok_s": f.num("output_throughput") or run.total_output_tokens / run.duration_s}
    return out
