"""Workloads: request arrival times and token lengths as numpy arrays, seeded; or a CSV trace.

Arrivals follow a rate that may change over time (a piecewise-constant schedule): a unit-rate
process (Poisson, gamma-distributed gaps with a chosen coefficient of variation, or fixed
spacing) is drawn in "operational time" and mapped through the inverse of the cumulative rate,
so every arrival process obeys every schedule.

Shared prefixes and conversations (what prefix caching reuses): a prompt may start with one of
`prefix_groups` system prompts of `prefix_tokens` tokens, and a conversation of `turns` turns sends
each turn's prompt with the earlier turns in it (system prompt, then each user message and answer),
as chat clients do. The prompt-length input is then the user's own message of each turn.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from .. import bounds
from ..bounds import DataError

ARRIVALS = ("poisson", "gamma", "fixed")
LENGTH_DISTS = ("fixed", "uniform", "exponential", "lognormal", "sharegpt", "longprompt")

# Presets: log-normal lengths with cited means; the spread (sigma of log length) from the
# median/mean ratio where the source gives both (sigma = sqrt(2 ln(mean / median))).
PRESETS = {
    # vLLM paper (Kwon et al., SOSP 2023), Fig. 11: ShareGPT mean input 161.31, mean output 337.99
    # tokens. The paper gives no medians; sigma 1.0 is the Lab's assumption (a long right tail).
    "sharegpt": dict(prompt_mean=161.31, output_mean=337.99, prompt_sigma=1.0, output_sigma=1.0,
                     source="vLLM paper Fig. 11 (ShareGPT means 161 / 338 tokens); spread assumed"),
    # Azure LLM inference trace 2023, code (Splitwise): prompt mean 2048 / median 1469, output mean
    # 27.9 / median 13 tokens (computed from AzureLLMInferenceTrace_code.csv).
    "longprompt": dict(prompt_mean=2048.0, output_mean=27.9, prompt_sigma=math.sqrt(2 * math.log(2048 / 1469)),
                       output_sigma=math.sqrt(2 * math.log(27.9 / 13)),
                       source="Azure LLM inference trace 2023 (code): means 2048 / 27.9, medians 1469 / 13"),
}


@dataclass(frozen=True)
class WorkloadSpec:
    n_requests: int = 1000
    rate: float = 5.0  # mean requests per second (scaled over time by rate_schedule)
    arrival: str = "poisson"
    cv: float = 1.0  # coefficient of variation of gaps, for gamma arrivals (> 1: bursts)
    prompt_mean: float | None = None  # None: the distribution's own mean (presets)
    output_mean: float | None = None
    length_dist: str = "fixed"
    spread: float = 0.5  # uniform: +-fraction of the mean; lognormal: sigma of the log length
    rate_schedule: tuple[tuple[float, float], ...] = ()  # ((t0, r0), (t1, r1), ...), t0 == 0
    max_total_tokens: int = 4096  # prompt + output of one request (the engine's max model length)
    seed: int = 0
    prefix_groups: int = 0  # distinct system prompts (0: prompts share no prefix)
    prefix_tokens: int = 0  # tokens of each system prompt, ahead of the user's message
    turns: int = 1  # turns per conversation: turn k's prompt holds turns 1..k-1 and their answers
    # seconds from one turn of a conversation to the next (open loop: a slow answer does not delay
    # the next turn); the Lab's assumption, not a measured figure
    turn_gap_s: float = 30.0
    # clients (core/engine/clients.py). 0: an open loop, requests arrive at `rate` whatever the server
    # does. N: a closed loop of N users, each sending its next request (a conversation's next turn,
    # or a new one) think_s after the last token of its previous one; with a finite rate as well,
    # requests fall due at `rate` and at most N are in flight (vLLM's --request-rate with
    # --max-concurrency). A closed loop's rate may be inf: users send as fast as they are answered.
    concurrency: int = 0
    think_s: float = 0.0
    think_dist: str = "fixed"  # or "exponential" (mean think_s)

    @property
    def closed_loop(self) -> bool:
        return self.concurrency > 0

    def message_means(self) -> tuple[float, float]:
        """Mean tokens of a user's own message and of an answer."""
        preset = PRESETS.get(self.length_dist, {})
        p = self.prompt_mean if self.prompt_mean is not None else preset.get("prompt_mean", 512.0)
        o = self.output_mean if self.output_mean is not None else preset.get("output_mean", 128.0)
        return float(p), float(o)

    def means(self) -> tuple[float, float]:
        """Mean prompt tokens (system prompt and earlier turns included) and output tokens."""
        p, o = self.message_means()
        T = max(1, self.turns)
        shared = self.prefix_tokens if self.prefix_groups > 0 else 0
        return float(shared + p * (T + 1) / 2 + o * (T - 1) / 2), o

    def longest_fixed(self) -> int:
        """Fixed lengths: the tokens of a conversation's last turn, prompt and answer."""
        p, o = self.message_means()
        T = max(1, self.turns)
        return int((self.prefix_tokens if self.prefix_groups > 0 else 0) + T * (round(p) + round(o)))


@dataclass(frozen=True)
class Workload:
    arrival_s: np.ndarray  # float64, sorted
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    clipped: int = 0  # requests shortened to fit max_total_tokens
    # what prefix caching can reuse (None: nothing): the system prompt a request starts with (-1:
    # none) and its length in tokens; the conversation whose token stream the request's tokens
    # are a prefix of (-1: none)
    prefix_id: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None
    conversation_id: np.ndarray | None = None
    # prompt tokens the server's cache already holds when the request arrives (None: none), as a
    # benchmark's warm-up request or an earlier run against the same server leaves them: its
    # prefill computes the rest, and its KV cache still holds (and decode still reads) them all
    cached_tokens: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.arrival_s)


# ---------------------------------------------------------------- validation

THINK_DISTS = ("fixed", "exponential")


def validate(spec: WorkloadSpec) -> None:
    bounds.check("requests", spec.n_requests)
    if spec.concurrency:
        bounds.check("concurrency", spec.concurrency)
        bounds.check("think_time", spec.think_s)
        if spec.think_dist not in THINK_DISTS:
            raise ValueError(f"unknown think-time distribution '{spec.think_dist}': choose {', '.join(THINK_DISTS)}")
    if spec.rate != math.inf:  # inf: every request due at once (an offline batch, or a closed loop's)
        bounds.check("rate", spec.rate)
    bounds.check("seed", spec.seed)
    if spec.arrival not in ARRIVALS:
        raise ValueError(f"unknown arrival process '{spec.arrival}': choose {', '.join(ARRIVALS)}")
    if spec.arrival == "gamma":
        bounds.check("cv", spec.cv)
    if spec.length_dist not in LENGTH_DISTS:
        raise ValueError(f"unknown length distribution '{spec.length_dist}': choose {', '.join(LENGTH_DISTS)}")
    bounds.check("system_prompts", spec.prefix_groups)
    bounds.check("system_prompt_tokens", spec.prefix_tokens)
    bounds.check("turns", spec.turns)
    if spec.prefix_groups > 0 and spec.prefix_tokens < 1:
        raise ValueError("shared system prompts need a length of at least 1 token (or set their number to 0)")
    if spec.turns > 1:
        bounds.check("turn_gap", spec.turn_gap_s)
    bounds.check("prompt", spec.message_means()[0])
    bounds.check("output", spec.message_means()[1])
    p, o = spec.means()
    bounds.check("max_model_len", spec.max_total_tokens)
    if spec.length_dist == "fixed" and spec.longest_fixed() > spec.max_total_tokens:
        raise ValueError(f"a request of {spec.longest_fixed() - round(o)} prompt + {round(o)} output tokens "
                         f"exceeds the maximum model length of {spec.max_total_tokens}: shorten it (or the system "
                         f"prompt, or the turns) or raise the max model length")
    if spec.length_dist != "fixed" and p + o > spec.max_total_tokens:
        raise ValueError(f"average prompt + output ({p:.0f} + {o:.0f} tokens) exceeds the maximum model length of "
                         f"{spec.max_total_tokens}: shorten them or raise the max model length")
    if spec.length_dist == "uniform" and not 0 <= spec.spread <= 1:
        raise ValueError(f"uniform spread {spec.spread} must be within 0..1 (a fraction of the mean)")
    if spec.length_dist == "lognormal" and not 0 < spec.spread <= 3:
        raise ValueError(f"log-normal spread {spec.spread} must be within 0..3 (sigma of the log length)")
    check_schedule(spec.rate_schedule)


def check_schedule(schedule) -> None:
    if not schedule:
        return
    for t, r in schedule:
        bounds.check("arrival_s", t, "a rate schedule's time")
        if r != 0:
            bounds.check("rate", r, "a rate schedule's rate")
    times = [t for t, _ in schedule]
    if times[0] != 0:
        raise ValueError("a rate schedule starts at time 0 (write it as '0:r0,t1:r1,...')")
    if any(b <= a for a, b in zip(times, times[1:])):
        raise ValueError("rate schedule times must increase")
    if any(not (r >= 0 and math.isfinite(r)) for _, r in schedule):
        raise ValueError("rate schedule rates must be >= 0 req/s")
    if schedule[-1][1] <= 0:
        raise ValueError("the last segment of a rate schedule must have a rate above 0 req/s (it lasts forever)")


def parse_schedule(text: str) -> tuple[tuple[float, float], ...]:
    """'0:2,60:10,120:4' -> ((0, 2), (60, 10), (120, 4)): seconds:req/s, each rate holding until the next."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            t, r = part.split(":")
            out.append((float(t), float(r)))
        except ValueError:
            raise ValueError(f"cannot read rate schedule segment '{part}': write 'seconds:rate', e.g. '0:2,60:10'") from None
    sched = tuple(out)
    check_schedule(sched)
    return sched


def diurnal_schedule(mean_rate: float, period_s: float, segments: int = 24, swing: float = 0.6):
    """A day compressed into period_s: the rate follows a cosine between (1-swing) and (1+swing)
    times the mean, lowest at the start ("night") and highest half-way ("afternoon")."""
    if not 0 <= swing < 1:
        raise ValueError("diurnal swing must be within 0..1")
    bounds.check("diurnal", period_s)
    return tuple((period_s * i / segments,
                  mean_rate * (1 - swing * math.cos(2 * math.pi * (i + 0.5) / segments))) for i in range(segments))


# ---------------------------------------------------------------- generation

def generate(spec: WorkloadSpec) -> Workload:
    wl = _generate(spec)
    if wl.arrival_s[-1] > bounds.TABLE["arrival_s"]["max"]:
        raise ValueError(f"{wl.n:,} requests at this rate arrive over {wl.arrival_s[-1]:,.0f} s, beyond the "
                         f"{bounds.TABLE['arrival_s']['max']:,} s the simulator's clock resolves to a microsecond: "
                         f"raise the request rate or lower the number of requests")
    return wl


def _generate(spec: WorkloadSpec) -> Workload:
    validate(spec)
    rng = np.random.default_rng(spec.seed)
    n = spec.n_requests
    if spec.prefix_groups == 0 and spec.turns == 1:
        arrivals = _arrivals(spec, rng, n)
        prompt, output, clipped = _lengths(spec, rng, n)
        return Workload(arrivals, prompt, output, clipped)
    return _conversations(spec, rng, n)


def _conversations(spec: WorkloadSpec, rng: np.random.Generator, n: int) -> Workload:
    """Conversations start at rate / turns (so that requests arrive at `rate`); turn k comes
    k * turn_gap_s after the first. Each picks one of the system prompts at random."""
    T = spec.turns
    n_conv = -(-n // T)
    starts = _arrivals(replace(spec, rate=spec.rate / T,
                               rate_schedule=tuple((t, r / T) for t, r in spec.rate_schedule)), rng, n_conv)
    own, output, _ = _lengths(replace(spec, max_total_tokens=1 << 62), rng, n_conv * T)
    own, output = own.reshape(n_conv, T), output.reshape(n_conv, T)
    shared = spec.prefix_tokens if spec.prefix_groups > 0 else 0
    history = np.cumsum(own + output, axis=1) - output  # a turn's prompt: the earlier turns, then its message
    prompt = shared + history
    group = rng.integers(0, spec.prefix_groups, n_conv) if spec.prefix_groups > 0 else np.full(n_conv, -1)
    arrival = starts[:, None] + spec.turn_gap_s * np.arange(T)[None, :]
    conv = np.repeat(np.arange(n_conv), T).reshape(n_conv, T)
    take = slice(0, n)
    arrival, prompt, output, conv = (a.reshape(-1)[take] for a in (arrival, prompt, output, conv))
    prompt, output, clipped = _clip(prompt.astype(np.int64), output.astype(np.int64), spec.max_total_tokens)
    order = np.argsort(arrival, kind="stable")
    group_of = group[conv]
    return Workload(arrival[order], prompt[order], output[order], clipped,
                    prefix_id=group_of[order].astype(np.int64),
                    prefix_tokens=np.where(group_of >= 0, min(shared, spec.max_total_tokens), 0)[order].astype(np.int64),
                    conversation_id=(conv[order] if T > 1 else np.full(n, -1)).astype(np.int64))


def think_times(spec: WorkloadSpec, n: int) -> np.ndarray:
    """Seconds each request's user waits after its last token before sending the next (a closed
    loop's think time; zeros in an open loop). Drawn from a stream of their own, so that the same
    seed gives the same lengths and due times with or without them."""
    if not spec.concurrency or spec.think_s == 0:
        return np.zeros(n)
    if spec.think_dist == "fixed":
        return np.full(n, float(spec.think_s))
    return np.random.default_rng((spec.seed, 0x7417)).exponential(spec.think_s, n)


def _arrivals(spec: WorkloadSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    if math.isinf(spec.rate) and not spec.rate_schedule:  # a closed loop's requests are all due at once
        return np.zeros(n)
    if spec.arrival == "poisson":
        gaps = rng.exponential(1.0, n)
    elif spec.arrival == "gamma":
        shape = 1.0 / spec.cv**2
        gaps = rng.gamma(shape, 1.0 / shape, n)
    else:
        gaps = np.ones(n)
    gaps[0] = 0.0 if spec.arrival == "fixed" else gaps[0]
    operational = np.cumsum(gaps)  # arrivals of a unit-rate process
    schedule = spec.rate_schedule or ((0.0, spec.rate),)
    if spec.rate_schedule:  # rates relative to the schedule itself
        return _through_schedule(operational, schedule)
    return operational / spec.rate


def _through_schedule(operational: np.ndarray, schedule) -> np.ndarray:
    """Map unit-rate arrival 'work' through the inverse of the cumulative rate Lambda(t)."""
    starts = np.array([t for t, _ in schedule], dtype=float)
    rates = np.array([r for _, r in schedule], dtype=float)
    seg_len = np.diff(starts)
    cum = np.concatenate([[0.0], np.cumsum(rates[:-1] * seg_len)])  # Lambda at each segment start
    seg = np.searchsorted(cum, operational, side="right") - 1
    # skip zero-rate segments: an arrival never lands inside one
    out = np.empty_like(operational)
    for i in range(len(starts)):
        m = seg == i
        if not m.any():
            continue
        if rates[i] > 0:
            out[m] = starts[i] + (operational[m] - cum[i]) / rates[i]
        else:  # work that lands exactly on a zero-rate segment starts at the next segment
            out[m] = starts[i + 1] if i + 1 < len(starts) else starts[i]
    return out


def _lengths(spec: WorkloadSpec, rng: np.random.Generator, n: int):
    p_mean, o_mean = spec.message_means()
    dist = spec.length_dist
    if dist == "fixed":
        prompt = np.full(n, round(p_mean), dtype=np.int64)
        output = np.full(n, round(o_mean), dtype=np.int64)
        return prompt, output, 0
    if dist == "uniform":
        prompt = rng.uniform(p_mean * (1 - spec.spread), p_mean * (1 + spec.spread), n)
        output = rng.uniform(o_mean * (1 - spec.spread), o_mean * (1 + spec.spread), n)
    elif dist == "exponential":
        prompt = rng.exponential(p_mean, n)
        output = rng.exponential(o_mean, n)
    else:
        if dist == "lognormal":
            sp = so = spec.spread
        else:
            sp, so = PRESETS[dist]["prompt_sigma"], PRESETS[dist]["output_sigma"]
        prompt = rng.lognormal(math.log(p_mean) - sp**2 / 2, sp, n)
        output = rng.lognormal(math.log(o_mean) - so**2 / 2, so, n)
    # the draw's own mean, taken to the mean asked for: a hundred log-normal lengths (sigma 1) miss their
    # mean by 13% at one standard deviation, and a benchmark replayed at its measured means must send the
    # tokens it measured
    prompt *= p_mean / prompt.mean()
    output *= o_mean / output.mean()
    prompt = np.maximum(1, np.rint(prompt)).astype(np.int64)
    output = np.maximum(1, np.rint(output)).astype(np.int64)
    return _clip(prompt, output, spec.max_total_tokens)


def _clip(prompt, output, max_total):
    """Fit every request into the maximum model length, as benchmark loaders filter ShareGPT."""
    too_long = prompt + output > max_total
    prompt = np.minimum(prompt, max_total - 1)
    output = np.minimum(output, max_total - prompt)
    return prompt, output, int(too_long.sum())


# ---------------------------------------------------------------- traces

TRACE_HEADER = ("arrival_s", "prompt_tokens", "output_tokens")
# optional columns, in any order after those: what prefix caching can reuse
TRACE_OPTIONAL = ("conversation_id", "prefix_id", "prefix_tokens")


# An uploaded trace is data from a stranger: bounded before it is read. 200,000 requests replay in a
# few seconds and are twice the sidebar's largest run; a line of three numbers is under 40 bytes,
# so 8 MB holds them (and the optional columns) with room for long decimals.
TRACE_MAX_ROWS = 200_000
TRACE_MAX_BYTES = 8 * 1024**2


def load_trace(text: str, max_total_tokens: int | None = None) -> Workload:
    """Read a CSV trace with columns arrival_s,prompt_tokens,output_tokens (header required), and
    optionally conversation_id (the rows of one conversation are its turns: each prompt holds the
    turns before it), prefix_id and prefix_tokens (the system prompt a prompt starts with, and its
    length); an empty id is none. Rows may come in any order; they are sorted by arrival. The parse
    streams line by line and stops at the first bad line, naming it; a trace over TRACE_MAX_BYTES or
    TRACE_MAX_ROWS is refused."""
    arr, pr, out, opt = _parse_trace(text)
    if max_total_tokens:
        over = np.flatnonzero(pr + out > max_total_tokens)
        if len(over):
            i = int(over[0])
            raise DataError(f"trace request {i + 1}: {pr[i]} + {out[i]} tokens exceed the maximum model length of "
                            f"{max_total_tokens}")
    order = np.argsort(arr, kind="stable")
    wl = Workload(arr[order], pr[order], out[order])
    if not opt:
        return wl
    cols = {c: v[order] for c, v in opt.items()}
    if "prefix_id" in cols:  # a row without a system prompt has no length for one
        cols["prefix_tokens"] = np.where(cols["prefix_id"] >= 0, cols["prefix_tokens"], 0)
    return replace(wl, prefix_id=cols.get("prefix_id"), prefix_tokens=cols.get("prefix_tokens"),
                   conversation_id=cols.get("conversation_id"))


@lru_cache(maxsize=4)  # the pages of one run read the same trace several times
def _parse_trace_cached(text: str):
    return _parse_trace_uncached(text)


def _parse_trace(text: str):
    arr, pr, out, opt = _parse_trace_cached(text)
    return arr.copy(), pr.copy(), out.copy(), {c: v.copy() for c, v in opt.items()}


def _lines(text: str):
    """(line number, line) of the text, one at a time (a bad line stops the parse where it is)."""
    start, line = 0, 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        raw = text[start:end]
        start, line = end + 1, line + 1
        yield line, raw[:-1] if raw.endswith("\r") else raw  # Windows line ends


def _parse_trace_uncached(text: str):
    need = ",".join(TRACE_HEADER)
    if not isinstance(text, str):
        raise DataError("a trace is text (CSV)")
    if len(text) > TRACE_MAX_BYTES:
        raise DataError(f"the trace is {len(text) / 1e6:.1f} MB, over the limit of {TRACE_MAX_BYTES / 1e6:.1f} MB "
                        f"({TRACE_MAX_ROWS:,} requests)")
    names = extra = None
    arr, pr, out, opt = [], [], [], {}
    for line, raw in _lines(text):
        if not raw.strip():
            continue
        cells = [c.strip().strip('"').strip() for c in raw.split(",")]
        if names is None:
            names = tuple(c.lower() for c in cells)
            extra = names[3:]
            if names[:3] != TRACE_HEADER or any(c not in TRACE_OPTIONAL for c in extra) or len(set(extra)) < len(extra):
                raise DataError(f"trace line {line}: the header must be '{need}', optionally followed by "
                                f"{', '.join(TRACE_OPTIONAL)}; not '{raw[:200]}'")
            if ("prefix_id" in extra) != ("prefix_tokens" in extra):
                raise DataError(f"trace line {line}: prefix_id and prefix_tokens come together (which system prompt, "
                                f"and how many tokens it has)")
            opt = {c: [] for c in extra}
            continue
        if len(cells) != len(names):
            raise DataError(f"trace line {line}: expected {len(names)} values ({','.join(names)}), got {len(cells)}")
        if len(arr) == TRACE_MAX_ROWS:
            raise DataError(f"trace line {line}: the trace has more than {TRACE_MAX_ROWS:,} requests, the limit")
        try:
            a = bounds.parse("arrival_s", cells[0], "the arrival time")
            p = bounds.parse("prompt_tokens", cells[1], "the prompt length")
            o = bounds.parse("output_tokens", cells[2], "the output length")
        except ValueError as e:
            raise DataError(f"trace line {line}: {e}") from None
        for c, v in zip(extra, cells[3:]):
            opt[c].append(_trace_int(v, c, line, p))
        arr.append(a)
        pr.append(p)
        out.append(o)
    if names is None:
        raise DataError(f"the trace is empty: it needs a header '{need}' and rows")
    if not arr:
        raise DataError("the trace has a header but no requests")
    return (np.array(arr, dtype=np.float64), np.array(pr, dtype=np.int64), np.array(out, dtype=np.int64),
            {c: np.array(v, dtype=np.int64) for c, v in opt.items()})


def _trace_int(v: str, column: str, line: int, prompt: int) -> int:
    """An id (empty: none, -1) or a system prompt's length (within the prompt)."""
    if v == "":
        return -1 if column != "prefix_tokens" else 0
    try:
        x = int(v)
    except ValueError:
        raise DataError(f"trace line {line}: {column} '{v[:40]}' is not a whole number") from None
    if column == "prefix_tokens" and not 0 <= x <= prompt:
        raise DataError(f"trace line {line}: prefix_tokens {x} must be within 0..{prompt} (the prompt's length)")
    if column != "prefix_tokens" and not 0 <= x < 2**62:
        raise DataError(f"trace line {line}: {column} {x} must be a whole number from 0 to 2^62 (or empty for none)")
    return x


def uncached_prompt_tokens(wl: Workload) -> np.ndarray:
    """Each prompt's tokens that no prefix cache could supply: the prompt less its system prompt and,
    for a later turn, less the earlier turn it continues (that turn's prompt and answer). A lower
    bound on the prefill a request needs, however much the cache holds."""
    known = np.zeros(wl.n, np.int64)
    if wl.prefix_id is not None:
        known = np.where(wl.prefix_id >= 0, wl.prefix_tokens, 0)
    if wl.conversation_id is not None:
        order = np.lexsort((wl.arrival_s, wl.conversation_id))
        conv = wl.conversation_id[order]
        before = (wl.prompt_tokens + wl.output_tokens)[order]
        later = np.zeros(wl.n, bool)
        later[1:] = (conv[1:] == conv[:-1]) & (conv[1:] >= 0)
        prev = np.zeros(wl.n, np.int64)
        prev[1:] = before[:-1]
        earlier = np.zeros(wl.n, np.int64)
        earlier[order] = np.where(later, prev, 0)
        known = np.maximum(known, earlier)
    return np.maximum(wl.prompt_tokens - known, 1)
