"""The five architecture stages on a workload, the one to recommend, and the component path it
lights. Stages 4 and 5 have a free choice (the tensor-parallel degree; the split into prefill and
decode pools): each tries a few and keeps the first that meets the targets."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..serving.metrics import growing, overload
from ..serving.simulate import SimConfig, SimResult, steptime
from ..text import change_size, count, fmt_ms, in_sentence, sentence
from .content import components
from .inputs import STAGES, LabInputs, auto_tp, check_page_work, disagg_splits, run, stage_config, target_slack


def misses(summary: dict, inputs: LabInputs) -> list[str]:
    """What a simulated deployment misses, in words; empty when it meets every target."""
    out = []
    if not summary["stable"]:
        out.append(overload(summary))
    if summary["ttft_ms"]["p99"] > inputs.ttft_p99_ms:
        out.append(f"p99 TTFT {fmt_ms(summary['ttft_ms']['p99'])} is above the {fmt_ms(inputs.ttft_p99_ms)} target")
    if summary["tpot_ms"]["p99"] > inputs.tpot_ms:
        out.append(f"p99 TPOT {summary['tpot_ms']['p99']:.1f} ms is above the {inputs.tpot_ms:g} ms target")
    return out


@dataclass
class StageOutcome:
    stage: int
    name: str
    config: SimConfig | None = None
    result: SimResult | None = None
    error: str | None = None
    misses: list = field(default_factory=list)

    @property
    def meets(self) -> bool:
        return self.result is not None and not self.misses

    @property
    def summary(self) -> dict | None:
        return self.result.summary if self.result else None


def run_stage(inputs: LabInputs, stage: int) -> StageOutcome:
    """One stage on the inputs' workload and GPUs, with its best settings: stage 4 at the
    tensor-parallel degree the planner picks, stage 5 at the split into prefill and decode pools
    with the most room under the targets."""
    out = StageOutcome(stage, STAGES[stage])
    try:
        if stage == 4:
            candidates = [stage_config(replace(inputs, tp=auto_tp(replace(inputs, tp=inputs.tp))), 4)]
        elif stage == 5:
            candidates = [stage_config(inputs, 5, split) for split in disagg_splits(inputs)]
        else:
            candidates = [stage_config(inputs, stage)]
        cfg = min(candidates, key=lambda c: target_slack(run(c).summary, inputs))
        out.config, out.result = cfg, run(cfg)
        out.misses = misses(out.result.summary, inputs)
    except ValueError as e:
        out.error = str(e)
    return out


def evaluate_stages(inputs: LabInputs, stop_when_met: bool = False) -> list[StageOutcome]:
    """Every stage simulated on the workload; with stop_when_met, only up to the first that meets
    the targets, and stage 1 settled by the utilisation law when it is plainly overloaded."""
    if not stop_when_met:
        configs = []
        for stage in STAGES:
            try:
                configs.append(stage_config(inputs, stage))
            except ValueError:
                continue
        if configs:
            check_page_work(configs, "Simulating the five stages")
    outcomes = []
    for stage in STAGES:
        o = serial_overload(inputs) if stage == 1 and stop_when_met else None
        o = o or run_stage(inputs, stage)
        outcomes.append(o)
        if stop_when_met and o.meets:
            break
    return outcomes


def serial_overload(inputs: LabInputs) -> StageOutcome | None:
    """Stage 1 without simulating it, when one request at a time cannot keep up on average: each
    request holds a GPU for its prefill and its decode steps, and utilisation = rate x that time /
    GPUs at or above 1 means the queue grows without bound. None when it is not that clear."""
    if inputs.trace_csv is not None or inputs.closed_loop:  # a closed loop cannot overload
        return None
    try:
        cfg = stage_config(inputs, 1)
    except ValueError:
        return None
    prefill = steptime(cfg, 1, prefill_tokens=inputs.prompt_tokens)["step_ms"]
    ctx = int(inputs.prompt_tokens + inputs.output_tokens / 2)
    decode = steptime(cfg, 1, decode_batch=1, context=ctx)["step_ms"]
    service_s = (prefill + (inputs.output_tokens - 1) * decode) / 1e3
    rho = inputs.rate * service_s / inputs.gpus
    if rho < 1:
        return None
    return StageOutcome(1, STAGES[1], config=cfg, misses=[
        f"the queue grows without bound: at most {inputs.gpus / service_s:.3g} of {inputs.rate:g} req/s served "
        f"(each request holds a GPU for {service_s:.2f} s, so {inputs.gpus} GPU(s) would be busy {rho:.0%} of the "
        f"time)"])


@dataclass
class StageChoice:
    stage: int
    name: str
    reason: str
    met: bool


def simplest_stage(outcomes: list[StageOutcome], inputs: LabInputs) -> StageChoice:
    """The simplest stage that meets the targets, and one sentence of why."""
    for i, o in enumerate(outcomes):
        if o.meets:
            if i == 0:
                s = o.summary
                reason = (f"at {inputs.load_label()} one request at a time keeps up: p99 TTFT "
                          f"{fmt_ms(s['ttft_ms']['p99'])} within the {fmt_ms(inputs.ttft_p99_ms)} target, so nothing "
                          f"more is needed yet.")
            else:
                prev = outcomes[i - 1]
                why_not = prev.error or "; ".join(prev.misses)
                reason = (f"{prev.name} falls short ({why_not}); {in_sentence(o.name)} meets the targets "
                          f"(p99 TTFT {fmt_ms(o.summary['ttft_ms']['p99'])}, p99 TPOT {o.summary['tpot_ms']['p99']:.1f} ms).")
            return StageChoice(o.stage, o.name, sentence(reason), True)
    # the most capable stage that ran here is the nearest: what it misses is what to fix
    ran = [o for o in outcomes if o.result is not None or o.misses]
    if not ran:
        return StageChoice(5, STAGES[5], f"No stage can run on {count(inputs.gpus, 'GPU')}: "
                                            f"{next((o.error for o in outcomes if o.stage == 4 and o.error), outcomes[-1].error)}. "
                                            f"Add GPUs or choose a smaller model.", False)  # sharding's error says how many
    near = ran[-1]
    why = near.error or "; ".join(near.misses)
    cannot = [o.stage for o in outcomes if o.error and o.stage > near.stage]
    more = (f"; {'stage' if len(cannot) == 1 else 'stages'} {' and '.join(map(str, cannot))} cannot run on "
            f"{count(inputs.gpus, 'GPU')}" if cannot and near is not outcomes[-1] else "")
    return StageChoice(5, STAGES[5], f"No stage meets the targets on {count(inputs.gpus, 'GPU')}: stage {near.stage}, "
                                        f"{in_sentence(near.name)}, comes nearest ({why}){more}. Add GPUs, relax the "
                                        f"targets or lower the load.", False)


def architecture_path(stage: int, gpus: int) -> list[dict]:
    """The seed's component path with the parts a stage-`stage` deployment on `gpus` GPUs needs
    switched on."""
    replicas_or_scale = gpus > 1 or stage >= 3
    needed = {
        "clients": True, "gateway": True, "scheduler": stage >= 2, "prefill_pool": stage >= 5,
        "gpu_workers": True, "paged_kv": stage >= 3, "model_shards": stage >= 4, "metrics": replicas_or_scale,
    }
    return [dict(c, on=needed[c["id"]]) for c in components()]


# ---------------------------------------------------------------- the walkthrough's figures

STAGE_METRICS = (  # label, value from a summary, how it reads, lower is better, a latency
    ("p99 TTFT", lambda s: s["ttft_ms"]["p99"], fmt_ms, True, True),
    ("p50 TPOT", lambda s: s["tpot_ms"]["p50"], lambda v: f"{v:.1f} ms", True, False),  # steady under overload
    ("Throughput", lambda s: s["throughput_tok_s"], lambda v: f"{v:,.0f} tok/s", False, False),
    ("Goodput", lambda s: s["goodput_req_s"], lambda v: f"{v:.2f} req/s", False, False),
)


def stage_metrics(o: StageOutcome, prev: StageOutcome | None) -> list[dict]:
    """A stage's four headline figures, each with its change against the stage before, in words
    ('440× faster', '12% lower'), an arrow and whether the change is for the better. On an
    overloaded stage the TTFT says that it grows with the run ('50.0 min and growing'), and no ratio
    is given against a growing figure ('no longer growing' on the stage whose queue stops growing)."""
    out = []
    p = prev.summary if prev is not None and prev.result is not None else None
    for label, get, show, lower_better, latency in STAGE_METRICS:
        v = get(o.summary)
        m = dict(label=label, value=growing(show(v), o.summary) if latency else show(v), delta=None, arrow="off",
                 color="off", description=f"vs stage {prev.stage}" if prev is not None else None)
        grows, grew = latency and not o.summary["stable"], latency and p is not None and not p["stable"]
        if grows:  # no steady figure: no ratio against it either
            m.update(delta="and growing" + (f", steady at stage {prev.stage}" if p is not None and not grew else ""),
                     arrow="up", color="red", description=None)
        elif grew:
            m.update(delta="no longer growing", arrow="down", color="green")
        elif p is not None:
            pv = get(p)
            words = ("faster", "slower") if lower_better else ("lower", "higher")
            if show(v) == show(pv):
                m.update(delta="unchanged", color="gray")
            else:
                better = (v < pv) == lower_better
                m.update(delta=change_size(v, pv, *words), arrow="down" if v < pv else "up",
                         color="green" if better else "red")
        out.append(m)
    return out


OVERLOADED = "misses, queue grows"  # its latency bar grows with the number of requests simulated


def stage_rows(outcomes: list[StageOutcome]) -> list[dict]:
    """Every stage's p99 TTFT (s) and throughput (tok/s), for the walkthrough's bar charts."""
    rows = []
    for x in outcomes:
        if x.result is None:
            rows.append(dict(stage=f"Stage {x.stage}", name=x.name, ttft=None, tok=None, meets="cannot run here"))
        else:
            rows.append(dict(stage=f"Stage {x.stage}", name=x.name, ttft=x.summary["ttft_ms"]["p99"] / 1e3,
                             tok=x.summary["throughput_tok_s"],
                             meets="meets" if x.meets else ("misses" if x.summary["stable"] else OVERLOADED)))
    return rows
