"""Design trade-offs: each choice simulated off and on, on the current workload, and one sentence
on what it buys there. The gains, costs and sources of each are data (data/tradeoffs.json)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..physics import catalog
from ..serving import engines, offload
from ..serving.simulate import CHUNKING
from ..serving.metrics import growing
from ..serving.simulate import SimConfig, SimResult
from ..serving.workload import diurnal_schedule
from ..text import change, count, factor, fmt_ms, secs
from . import readings
from .content import tradeoffs
from .inputs import LabInputs, at_tp, auto_tp, check_page_work, current_config, min_tp, run
from .stages import run_stage


@dataclass
class ABResult:
    id: str
    off_label: str
    on_label: str
    off: SimResult | None
    on: SimResult | None
    note: str
    error: str | None = None


def ab(inputs: LabInputs, tradeoff_id: str) -> ABResult:
    """The trade-off switched off and on, on the current workload."""
    t = next(x for x in tradeoffs() if x["id"] == tradeoff_id)
    try:
        off, on, note = _ab_configs(inputs, tradeoff_id)
        if tradeoff_id == "streaming":  # one run, two views of it
            res = run(on)
            return ABResult(tradeoff_id, t["off"], t["on"], res, res, note)
        off_label, on_label = t["off"], t["on"]
        if tradeoff_id == "tensor_parallel" and off.tp > 1:  # no unsharded side: two degrees that fit
            off_label = f"Each replica splits every layer across {off.tp} GPUs, the fewest that hold the model"
            on_label = f"Each replica splits every layer across {on.tp} GPUs"
        return ABResult(tradeoff_id, off_label, on_label, run(off), run(on), note)
    except ValueError as e:
        return ABResult(tradeoff_id, t["off"], t["on"], None, None, "", str(e))


def _gpus(n: int, inputs: LabInputs) -> str:
    """'4 H100 GPUs': a count of the sidebar's GPU type."""
    return f"{n} {inputs.gpu.split('@')[0].upper()} GPU" + ("" if n == 1 else "s")


def check_work(inputs: LabInputs) -> None:
    """Refuse, before any runs, trade-offs whose simulations together exceed a page's budget."""
    configs = []
    for t in tradeoffs():
        try:
            off, on, _ = _ab_configs(inputs, t["id"])
        except ValueError:
            continue
        configs += [on] if t["id"] == "streaming" else [off, on]
    if configs:
        check_page_work(configs, "Simulating the trade-offs")


def _fits_one_gpu(inputs: LabInputs) -> bool:
    return (min_tp(inputs) or 99) == 1


def _ab_configs(inputs: LabInputs, tid: str) -> tuple[SimConfig, SimConfig, str]:
    tp = 1 if _fits_one_gpu(inputs) else auto_tp(replace(inputs, gpus=max(inputs.gpus, min_tp(inputs) or 2)))
    gpus = max(inputs.gpus, tp)
    here = replace(inputs, gpus=gpus)
    base = current_config(replace(here, tensor_parallel=tp > 1, tp=tp if tp > 1 else 0, continuous_batching=True))
    # which GPUs both sides use, and why when they are not the sidebar's: the note's first sentence
    shape = f"{count(gpus // tp, 'replica')} of tp={tp}" if tp > 1 else count(gpus, "single-GPU replica")
    note = (f"Both sides run on the sidebar's {_gpus(gpus, inputs)} ({shape})." if gpus == inputs.gpus else
            f"Both sides run on {_gpus(gpus, inputs)}, not the sidebar's {inputs.gpus}: the fewest that hold the "
            f"model ({shape}).")
    if tid == "kv_cache":
        on = replace(base, policy="vllm")
        if base.policy in CHUNKING:  # say why its figures are not the Lab's (p50 TTFT 19 ms here, 36 ms there)
            note += (" Chunked prefill is off on both sides (it needs paged blocks), so that only the cache's "
                     "layout differs: the Lab, with it on, shows other latencies.")
        if inputs.engine != "vllm":  # the layouts are the field's, the host and graphs the engine's
            note += (f" Both sides take {engines.name(inputs.engine)}'s host and CUDA graphs and run whole prompts; "
                     f"its own cache is paged too, so the paged side is the layout it runs.")
        return replace(on, policy="orca"), on, note
    if tid == "continuous_batching":
        return replace(base, policy="static"), base, note
    if tid == "tensor_parallel":
        if _fits_one_gpu(inputs):
            g = max(inputs.gpus, 2)
            t2 = auto_tp(replace(inputs, gpus=g, tp=0))
            where = (f"Both sides run on the sidebar's {_gpus(g, inputs)}" if g == inputs.gpus else
                     f"The sidebar's {inputs.gpus} GPU cannot compare tensor parallelism, so both sides run on "
                     f"{_gpus(g, inputs)}")
            return at_tp(replace(base, gpus=g), inputs, 1), at_tp(replace(base, gpus=g), inputs, t2), (
                f"{where}: {count(g, 'single-GPU replica')} against {count(g // t2, 'replica')} of tp={t2}.")
        # the model needs sharding: compare the degrees that fit, the smallest against twice it
        need = min_tp(inputs)
        if need is None:
            raise ValueError("the model does not fit these GPUs at any tensor-parallel degree")
        g = max(inputs.gpus, 2 * need)
        why = "" if g == inputs.gpus else f" (the sidebar's {inputs.gpus} cannot hold two degrees that fit)"
        off, on = at_tp(replace(base, gpus=g), inputs, need), at_tp(replace(base, gpus=g), inputs, 2 * need)
        return off, on, (f"The model needs tp >= {need}, so there is no unsharded side: both run on "
                         f"{_gpus(g, inputs)}{why}, {count(g // need, 'replica')} of tp={need} against "
                         f"{g // (2 * need)} of tp={2 * need}.")
    if tid == "disaggregation":  # a pool needs one replica of the smallest width that holds the model
        g = max(gpus, 2 * (min_tp(inputs) or tp))
        wide = replace(here, gpus=g)
        stage5 = run_stage(wide, 5)
        if stage5.config is None:
            raise ValueError(stage5.error)
        on = stage5.config
        why = "" if g == inputs.gpus else f", not the sidebar's {inputs.gpus}: a split needs a replica in each pool"
        return replace(base, gpus=g), on, (f"Both sides run on {_gpus(g, inputs)}{why}; the prefill pool has {on.prefill_gpus} of "
                                           f"them (tp={on.prefill_tp}), the decode pool {g - on.prefill_gpus} "
                                           f"(tp={on.decode_tp}).")
    if tid == "autoscaling":
        replicas = max(2, gpus // tp)
        g = replicas * tp
        if inputs.closed_loop:
            raise ValueError("the autoscaling A/B compresses a day of load around a request rate, and a closed loop "
                             "has none: choose 'request rate' as the load to see it")
        if not inputs.rate > 0:  # a replayed trace leaves the rate slider free, even at 0
            raise ValueError("the autoscaling A/B compresses a day of load around the sidebar's request rate: set a "
                             "rate above 0 req/s")
        period = inputs.requests / inputs.rate  # the run spans one compressed day
        day = replace(base.workload, rate_schedule=diurnal_schedule(inputs.rate, period))
        fixed = replace(base, gpus=g, workload=day)
        where = (f"Both sides run on the sidebar's {_gpus(g, inputs)}" if g == inputs.gpus else
                 f"Both sides run on {_gpus(g, inputs)}, not the sidebar's {inputs.gpus}: scaling needs two replicas")
        return fixed, replace(fixed, autoscale=True, min_replicas=1, scale_target=max(8.0, inputs.max_seqs / 4)), \
            (f"{where}. A day of load compressed into {period:.0f} s around {inputs.rate:g} req/s, on up to "
             f"{replicas} replicas of tp={tp}.")
    if tid == "streaming":
        return base, base, note.replace("Both sides run on", "One run, seen two ways, on", 1)
    if tid == "speculative":
        method = spec_method(inputs)
        on = replace(base, **replace(inputs, spec_method=method).speculation(base.policy))
        off = replace(base, spec_method=None, spec_tokens=None, spec_acceptance=None, draft_model=None)
        chosen = (f"the sidebar's, {SPEC_NAMES[method]}" if inputs.spec_method != "off" else
                  "DeepSeek's MTP module (the model ships one)" if method == "mtp" else
                  "an EAGLE head (speculative decoding is off in the sidebar)")
        return off, on, note + f" The proposer: {chosen}."
    if tid == "prefix_reuse":
        return reuse_configs(inputs, base, gpus, tp)
    raise ValueError(f"unknown trade-off '{tid}'")


REUSE_TURNS = 4  # the chat the A/B runs when the sidebar's prompts share nothing


def reuse_configs(inputs: LabInputs, base: SimConfig, gpus: int, tp: int) -> tuple[SimConfig, SimConfig, str]:
    """Prefix-aware routing and a host tier off (the sidebar's router, or least outstanding requests,
    and no tier) and on, on the sidebar's workload, or a chat of REUSE_TURNS turns when its prompts
    share nothing; two replicas at least, so that routing has a choice."""
    g = max(gpus, 2 * tp)
    notes = [f"Both sides run on {_gpus(g, inputs)} ({count(g // tp, 'replica')} of tp={tp})"
             + ("" if g == inputs.gpus else f", not the sidebar's {inputs.gpus}: routing needs two replicas to choose from")
             + "."]
    wl = base.workload
    if wl.prefix_groups == 0 and wl.turns <= 1 and base.trace_csv is None:
        wl = replace(wl, turns=REUSE_TURNS)
        notes.append(f"The sidebar's prompts share nothing, so both sides serve a chat of {REUSE_TURNS} turns a "
                     f"conversation (each turn's prompt holds the earlier ones).")
    gb = inputs.kv_offload_gb or offload.TEACHING_TIER_GIB
    notes.append(f"The host tier: {gb:g} GiB per replica" + ("" if inputs.kv_offload_gb else " (none in the sidebar)") + ".")
    off_router = base.router if base.router != "prefix" else "lor"
    off = replace(base, gpus=g, workload=wl, router=off_router, kv_offload_gb=0.0, prefix_caching=True)
    return off, replace(off, router="prefix", kv_offload_gb=gb), " ".join(notes)


def spec_method(inputs: LabInputs) -> str:
    """The proposer the speculative A/B runs: the sidebar's, else the one the model would use."""
    if inputs.spec_method != "off":
        return inputs.spec_method
    return "mtp" if catalog.get_model(inputs.model).mtp_layers else "eagle"


def verdict(r: ABResult) -> str:
    """One sentence on what the trade-off buys on this workload."""
    if r.error:
        return r.error
    a, b = r.off.summary, r.on.summary
    tid = r.id
    if tid == "kv_cache":
        filled = (f"Paged blocks keep {b['kv_utilization']:.0%} of allocated KV slots filled against "
                  f"{a['kv_utilization']:.0%} with maximum-length reservation")
        if abs(b["throughput_tok_s"] / max(a["throughput_tok_s"], 1e-9) - 1) < 0.05 and a["preemptions"] == 0 \
                and abs(b["mean_batch"] - a["mean_batch"]) < 1:
            return (f"{filled}; but here memory does not limit the batch ({b['mean_batch']:.0f} sequences either way), "
                    f"so paging changes little. It pays when reservations would fill the cache: raise the request "
                    f"rate or the output length.")
        return (f"{filled}, so batches average {b['mean_batch']:.0f} sequences instead of {a['mean_batch']:.0f} and "
                f"throughput is {change(b['throughput_tok_s'], a['throughput_tok_s'], tok_s)}.")
    if tid == "continuous_batching":
        return (f"Admitting requests every step: p99 TTFT {wait_change(b, a)}; "
                f"goodput {change(b['goodput_req_s'], a['goodput_req_s'], req_s)}.")
    if tid == "tensor_parallel":
        what = "Sharding" if r.off.config.tp == 1 else f"Sharding over {r.on.config.tp} GPUs instead of {r.off.config.tp}"
        return (f"{what}: p50 TPOT {change(b['tpot_ms']['p50'], a['tpot_ms']['p50'], ms1, *FASTER)}; p99 TTFT "
                f"{wait_change(b, a)}; cost per 1M output tokens "
                f"{change(b['cost_per_1m_tokens_usd'], a['cost_per_1m_tokens_usd'], usd2, *CHEAPER)}.")
    if tid == "disaggregation":
        return (f"Splitting prefill from decode: p99 TPOT {change(b['tpot_ms']['p99'], a['tpot_ms']['p99'], ms1, *FASTER)}; "
                f"goodput {change(b['goodput_req_s'], a['goodput_req_s'], req_s)}; p99 TTFT "
                f"{wait_change(b, a)}.")
    if tid == "autoscaling":
        used = change(b['gpu_hours'], a['gpu_hours'], hours, 'fewer', 'more')
        used = f"the same {used[len('unchanged at '):]}" if used.startswith("unchanged at ") else used
        return (f"Over the day, autoscaling uses {used}; "
                f"cost per 1M output tokens {change(b['cost_per_1m_tokens_usd'], a['cost_per_1m_tokens_usd'], usd2, *CHEAPER)}; "
                f"p99 TTFT {wait_change(b, a)}.")
    if tid == "speculative":
        sp = b["speculative"]
        gain = (f"Each sequence gains {sp['tokens_per_step']:.2f} tokens a step ({sp['acceptance_rate']:.0%} of "
                f"{sp['spec_tokens']} drafts accepted): p50 TPOT "
                f"{change(b['tpot_ms']['p50'], a['tpot_ms']['p50'], ms1, *FASTER)}")
        if b["tpot_ms"]["p50"] >= a["tpot_ms"]["p50"]:
            return (f"{gain}: at a batch of {a['mean_batch']:.0f} the wider steps and the proposer cost more than the "
                    f"drafts save. It pays at lower load, smaller batches, or with a proposer the model agrees with "
                    f"more often.")
        return (f"{gain}; p99 TTFT {wait_change(b, a)}; throughput "
                f"{change(b['throughput_tok_s'], a['throughput_tok_s'], tok_s)}.")
    if tid == "prefix_reuse":
        host = b["kv_offload"]["hit_tokens_host"] if b["kv_offload"] else 0
        return (f"Prompt tokens found cached: {b['prefix_hit_rate']:.0%} against {a['prefix_hit_rate']:.0%} "
                f"({host:,} of them loaded from host memory); p99 TTFT {wait_change(b, a)}; throughput "
                f"{change(b['throughput_tok_s'], a['throughput_tok_s'], tok_s)}.")
    if tid == "streaming":
        return (f"Streaming shows the first token after {growing(fmt_ms(b['ttft_ms']['p50']), b)} (p50); waiting for the whole "
                f"answer takes {growing(secs(b['e2e_s']['p50']), b)}, "
                f"{factor(b['e2e_s']['p50'] * 1e3 / max(b['ttft_ms']['p50'], 1e-9))} as long.")
    return ""


FASTER, CHEAPER = ("faster", "slower"), ("cheaper", "dearer")
SPEC_NAMES = {"draft": "a draft model", "eagle": "an EAGLE head", "eagle3": "an EAGLE-3 head",
              "mtp": "DeepSeek's MTP module", "ngram": "n-gram prompt lookup"}


def wait_change(on: dict, off: dict) -> str:
    """The p99 TTFT of the 'on' side against the 'off' side's, as a person says it. A side whose queue
    grows without bound has no steady TTFT (it measures how long the run was), so no ratio is given
    against it: '66 ms, down from 7.30 s and growing (its queue no longer grows)'."""
    b, a = on["ttft_ms"]["p99"], off["ttft_ms"]["p99"]
    if on["stable"] and off["stable"]:
        return change(b, a, fmt_ms, *FASTER)
    way = "down" if b < a else "up"
    if on["stable"]:
        return f"{fmt_ms(b)}, {way} from {fmt_ms(a)} and growing (its queue no longer grows)"
    if off["stable"]:
        return f"{fmt_ms(b)} and growing, {way} from {fmt_ms(a)} (its queue now grows without bound)"
    return (f"{fmt_ms(b)} against {fmt_ms(a)}, both growing with the run: {on['served_req_s']:.3g} against "
            f"{off['served_req_s']:.3g} req/s served of {on['offered_req_s']:.3g}")


def ms1(x: float) -> str:
    return f"{x:.1f} ms"


def req_s(x: float) -> str:
    return f"{x:.2f} req/s"


def tok_s(x: float) -> str:
    return f"{x:,.0f} tok/s"


def usd2(x: float) -> str:
    return f"${x:.2f}"


def hours(x: float) -> str:
    return f"{x:.3g} GPU-hours"


# what the A/B table shows of each side
COMPARED = readings.rows((
    ("p50 TTFT", "ttft_p50"), ("p99 TTFT", "ttft_p99"), ("p50 TPOT", "tpot_p50"), ("p99 TPOT", "tpot_p99"),
    ("p50 time to the whole answer", "e2e_p50"), ("throughput", "throughput"), ("goodput", "goodput"),
    ("mean batch", "mean_batch"), ("KV utilisation", "kv_utilization"), ("preemptions", "preemptions"),
    ("GPU-hours", "gpu_hours"), ("cost per 1M output tokens", "cost_per_1m"),
))


def comparison(r: ABResult) -> dict[str, list[str]]:
    """The A/B table: a column of labels, then one column per side. Streaming is one run seen two
    ways (what a streaming client sees against one that waits for the whole answer)."""
    if r.id == "streaming":
        s = r.on.summary
        return {"what the client sees": ["first token (p50)", "first token (p99)", "whole answer (p50)",
                                         "whole answer (p99)"],
                "streaming": [fmt_ms(s["ttft_ms"]["p50"]), fmt_ms(s["ttft_ms"]["p99"]), "", ""],
                "waiting for the whole answer": ["", "", f"{s['e2e_s']['p50']:.2f} s", f"{s['e2e_s']['p99']:.2f} s"]}
    rows = COMPARED + EXTRA_ROWS.get(r.id, ())
    return {"metric": [label for label, _ in rows], "off": [f(r.off.summary) for _, f in rows],
            "on": [f(r.on.summary) for _, f in rows]}


EXTRA_ROWS = {
    "speculative": readings.rows((("draft acceptance", "spec_acceptance"), ("tokens a step", "spec_tokens_per_step"))),
    "prefix_reuse": readings.rows((("prefix cache hit rate", "prefix_hit_rate"), ("found in host memory", "offload_hits"),
                                   ("moved over the host link", "offload_moved"))),
}
