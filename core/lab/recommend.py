"""The Lab's recommended shape: the planner's cheapest deployment on the sidebar's GPUs that meets
the targets, the stage it amounts to, and one sentence of why. When nothing there meets them, the
nearest deployment and the smallest changes that would (more GPUs, fp8 weights, another GPU type,
a looser target)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..physics import catalog
from ..planner.plan import StepMeter, cheapest
from ..planner.search import ShapeResult, closeness, outcome
from ..planner.space import HEADROOM, Budget, Deployment, Engine, Targets, Workload, to_config
from ..serving import engines, serve_command
from ..serving.metrics import GROWING
from ..serving.simulate import estimate, simulate
from ..text import count, fmt_ms
from .inputs import PAGE_STEPS, STAGES, LabInputs, _base, continuous_policy, min_tp, workload

MAX_GPUS_SUGGESTED = 64  # how far "more GPUs" looks


@dataclass
class Recommendation:
    stage: int
    name: str
    reason: str
    met: bool
    deployment: Deployment | None = None  # the answer, or the nearest miss
    changes: list[str] = field(default_factory=list)  # when nothing meets: what would
    searched: int = 0  # deployment shapes the planner searched
    simulated: int = 0  # simulations it ran
    light_stage: int = 1  # the stage whose components the diagram lights
    shown: Deployment | None = None  # the deployment the diagram describes
    shown_as: str = ""  # which one that is, in words
    serve: str = ""  # the vllm serve lines that run the recommended deployment (serve_command.commands)
    manifest: str = ""  # its Kubernetes manifest
    headroom: float = 0.0  # the load margin every answer keeps (Targets.headroom), which a miss may be short of

    @property
    def path_caption(self) -> str:
        """What the component path below the recommendation describes."""
        if self.shown is None:
            return "No deployment of this model runs on these GPUs: the path shows one GPU's."
        return f"The component path of {self.shown.label()}: {self.shown_as}."

    @property
    def heading(self) -> str:
        if self.met:
            return f"Recommended shape: stage {self.stage}, {self.name}"
        if self.headroom:
            return f"No deployment on these GPUs meets the targets with {self.headroom:.0%} headroom"
        return "No deployment on these GPUs meets the targets"


# The recommendation runs dozens of simulations: each may take SEARCH_STEPS engine steps (a tenth
# of a second to a second; the sidebar's default 2,000 requests stay whole), the searches PAGE_STEPS in all
SEARCH_STEPS = 1_000_000


def search_requests(inputs: LabInputs) -> int:
    """Requests per simulation of the recommendation's search: the sidebar's, or fewer (at least 20)
    when one simulation of them would take more than SEARCH_STEPS engine steps (estimated first)."""
    if inputs.trace_csv is not None:
        return inputs.requests
    try:
        steps = estimate(_base(inputs, tp=max(1, min_tp(inputs) or 1), policy=continuous_policy(inputs)))
    except ValueError:
        return inputs.requests
    if steps <= SEARCH_STEPS:
        return inputs.requests
    return max(20, int(inputs.requests * SEARCH_STEPS / steps))


def planner_workload(inputs: LabInputs, requests: int | None = None, attainment: float = 0.99,
                     headroom: float = HEADROOM) -> Workload:
    """The sidebar's workload and targets as the planner takes them (optionally with another number
    of requests per simulation, another share of requests that must meet both targets, or another
    headroom: the Planner page's inputs)."""
    spec = replace(workload(inputs), n_requests=search_requests(inputs) if requests is None else requests)
    return Workload(inputs.model, spec, Targets(inputs.ttft_p99_ms, inputs.tpot_ms, attainment, headroom),
                    Engine(max_seqs=inputs.batch_limits()[1], name=inputs.engine, block_size=inputs.block_size,
                           router=inputs.router,
                           prefix_caching=inputs.prefix_caching, max_steps=PAGE_STEPS,
                           spec_tokens=inputs.spec_tokens or None,
                           spec_acceptance=inputs.spec_acceptance if inputs.spec_acceptance >= 0 else None),
                    inputs.trace_csv)


def lab_dtypes(inputs: LabInputs) -> tuple[str, ...]:
    """Weight dtypes the recommendation searches: the sidebar's, and fp8 beside 16-bit weights, as
    deployments run large models (vLLM's recipes serve Llama-3.1-405B in fp8 on 8 H100s; DeepSeek-V3
    ships in fp8). At equal cost 16-bit wins (planner.space.preference); GPUs without FP8 support
    are searched in the sidebar's dtype alone (an A100 runs fp8 weight-only, at the 16-bit rate: another
    deployment, not the same one cheaper)."""
    fp8 = catalog.get_gpu(inputs.gpu).supports_fp8
    return (inputs.dtype, "fp8") if inputs.dtype == "bf16" and fp8 else (inputs.dtype,)


def lab_budget(inputs: LabInputs, **changes) -> Budget:
    """The sidebar's GPUs: its type, at most its count, its KV cache dtype, the weight dtypes of
    lab_dtypes, and its own schedule preferred at equal cost (so that on the default page the
    recommendation is the deployment the sidebar simulates, not its twin at another token budget);
    with speculative decoding on, its proposer beside plain decoding; with a host KV tier, that tier
    where prompts share prefixes."""
    own = (continuous_policy(inputs), inputs.max_batched_tokens) if inputs.continuous_batching else None
    own = own if inputs.engine == "vllm" else None  # another engine runs one schedule: its own
    spec = (inputs.spec_method,) if inputs.spec_method != "off" and inputs.continuous_batching else ()
    return replace(Budget(gpu_types=(inputs.gpu,), max_gpus=inputs.gpus, dtypes=lab_dtypes(inputs),
                          kv_dtypes=(inputs.kv_dtype,), own_schedule=own, speculative=spec,
                          kv_offload_gb=inputs.caching()["kv_offload_gb"]), **changes)


def _describe(r: ShapeResult, w: Workload) -> str:
    o = r.best
    grows = "" if o.stable else GROWING  # an overloaded run's percentiles grow with its length
    return f"{o.deployment.label()} (p99 TTFT {fmt_ms(o.ttft_p99_ms)}{grows}, p99 TPOT {o.tpot_p99_ms:.1f} ms)"


def _at_load(d: Deployment, w: Workload, summary: dict | None = None) -> str:
    """The deployment and its p99s at the offered load with the cost model's own step times: the
    figures the Lab shows below for the same deployment (the check's own are at the headroom's load)."""
    s = summary or simulate(to_config(d, w)).summary
    grows = "" if s["stable"] else GROWING
    return f"{d.label()} (p99 TTFT {fmt_ms(s['ttft_ms']['p99'])}{grows}, p99 TPOT {s['tpot_ms']['p99']:.1f} ms)"


def _nearest_text(near: ShapeResult, w: Workload, load: str) -> str:
    """The nearest miss at the offered load (the figures the Lab shows for it) and under the check's
    margin (the figures the search judged), so that a deployment that meets the targets at the load
    itself, and misses only the margin, reads as such rather than as one that misses them."""
    o = near.best
    if not w.targets.has_margin:  # judged at the offered load: the search's own figures are those
        return f" The nearest is {_describe(near, w)}: {'; '.join(o.misses)}."
    s = simulate(to_config(o.deployment, w)).summary
    meets_at_load = s["stable"] and s["slo_attainment"] >= w.targets.attainment
    within = ("it meets the targets there, not with the margin" if meets_at_load else
              f"{s['slo_attainment']:.1%} of requests meet both targets there")
    grows = "" if o.stable else GROWING
    return (f" The nearest is {_at_load(o.deployment, w, s)} at {load}: {within}. With the margin, p99 TTFT "
            f"{fmt_ms(o.ttft_p99_ms)}{grows} and p99 TPOT {o.tpot_p99_ms:.1f} ms: {'; '.join(o.misses)}.")


def recommend(inputs: LabInputs) -> Recommendation:
    inputs.validate()
    w, budget = planner_workload(inputs), lab_budget(inputs)
    meter = StepMeter(PAGE_STEPS)  # the searches below share a page's budget
    best, searched = cheapest(w, budget, meter)
    sims = sum(r.simulated for r in searched)
    gpu = catalog.get_gpu(inputs.gpu).name
    if best is not None:
        d = best.deployment
        spare = (f"; it needs {d.gpus} of the {inputs.gpus} GPUs" if d.gpus < inputs.gpus else "")
        reason = (f"The cheapest deployment on up to {inputs.gpus} {gpu} that meets the targets at {inputs.load_label()} "
                  f"is {_at_load(d, w)}{spare}; it still meets them {w.targets.rule()}, as the Planner checks "
                  f"every answer.{engines.unvalidated_note(inputs.engine)}{_weights_note(d, inputs)}"
                  f"{_batching_note(best, budget, w)} "
                  f"{count(len(searched), 'deployment shape')} searched, {count(sims, 'simulation')}.")
        cfg = to_config(d, w)
        return Recommendation(d.stage, STAGES[d.stage], reason, True, d, searched=len(searched), simulated=sims,
                              light_stage=d.stage, shown=d, shown_as="the recommended shape",
                              serve=serve_command.commands(cfg), manifest=serve_command.manifest(cfg))
    near = nearest(w, budget, searched)
    changes = smallest_changes(inputs, w, near, meter)
    searched_in = " or ".join(lab_dtypes(inputs)) if catalog.get_gpu(inputs.gpu).supports_fp8 else inputs.dtype
    if near and near.best.error is None:
        near_text = _nearest_text(near, w, inputs.load_label())
    elif near:
        near_text = f" The nearest is {_describe(near, w)}: {'; '.join(near.best.misses)}."
    else:
        near_text = f" {catalog.get_model(inputs.model).label()} does not fit {inputs.gpus} {gpu} in {searched_in}."
    reason = (f"Nothing on up to {inputs.gpus} {gpu} in {searched_in} meets the targets at {inputs.load_label()} "
              f"with the margin every answer keeps ({w.targets.margin()})."
              + near_text + (" It would take " + ", or ".join(c for c, _ in changes) + "." if changes else
                             " No change within reach meets them: lower the request rate."))
    shown, shown_as = ((changes[0][1], "what the first change above would deploy") if changes else
                       (near.deployment, "the nearest deployment") if near else (None, ""))
    light = shown.stage if shown else 1
    return Recommendation(light, STAGES[light], reason, False, near.deployment if near else None,
                          [c for c, _ in changes], len(searched), sims, light_stage=light, shown=shown,
                          shown_as=shown_as, headroom=w.targets.headroom)


def _weights_note(d: Deployment, inputs: LabInputs) -> str:
    """An answer in other weights than the sidebar's says so, and how to simulate it below."""
    if d.dtype == inputs.dtype:
        return ""
    fmt = catalog.weight_format(d.dtype).on(catalog.get_gpu(d.gpu))
    cores = f", on the GPU's {fmt.gemm.upper()} tensor cores" if fmt.gemm != "bf16" else ""
    released = (", the format the model is released in"
                if d.dtype in serve_command.released_formats(inputs.model) else "")
    return (f" It runs {d.dtype} weights ({fmt.bytes_read}{cores}{released}), which no "
            f"{inputs.dtype} deployment here matches at its cost: set Weights to {d.dtype} (Advanced) to simulate it.")


def _batching_note(best: ShapeResult, budget: Budget, w: Workload) -> str:
    """One request at a time or static batching wins only on a tie (the simpler stage at equal cost):
    say that continuous batching costs nothing more there, and what it gains."""
    d = best.deployment
    if d.stage > 2:
        return ""
    policy, chunk = budget.own_schedule or ("sarathi", 2048)
    o = outcome(replace(d, policy=policy, chunk=chunk), w.judged())
    if not o.meets:
        return ""
    return (f" Continuous batching with paged attention (stage 3) costs nothing more on the same GPUs and meets the "
            f"targets too (p99 TTFT {fmt_ms(o.ttft_p99_ms)}); the simpler stage is named because at this load "
            f"requests rarely overlap, and continuous batching is what keeps the targets as traffic grows.")


def nearest(w: Workload, budget: Budget, searched: list[ShapeResult]) -> ShapeResult | None:
    """The deployment that came closest; when the roofline ruled every size out unsimulated, the
    largest size of the shape with the most capacity, simulated now."""
    tried = [r for r in searched if r.best is not None]
    if tried:
        return max(tried, key=lambda r: closeness(r.best))
    for r in searched:
        if r.pruned_by == "roofline" and not r.shape.disagg:
            d = replace(r.shape, replicas=budget.max_gpus // r.shape.replica_gpus)
            o = outcome(d, w.judged())  # judged as the search judges: at the headroom's load
            cand = ShapeResult(r.shape, r.enumerated, best=o)
            if not tried or closeness(o) > closeness(tried[0].best):
                tried = [cand]
    return tried[0] if tried else None


def smallest_changes(inputs: LabInputs, w: Workload, near: ShapeResult | None,
                     meter: StepMeter | None = None) -> list[tuple[str, Deployment]]:
    """What would meet the targets, each the cheapest of its kind: more GPUs of this type, fp8
    weights on these GPUs, another GPU type at this count, a looser target."""
    out = []
    gpus = inputs.gpus * 2
    while gpus <= MAX_GPUS_SUGGESTED:
        best, _ = cheapest(w, lab_budget(inputs, max_gpus=gpus), meter)
        if best is not None:
            out.append((f"{best.deployment.gpus} {inputs.gpu.upper()} ({best.deployment.label().split(': ', 1)[1]})",
                        best.deployment))
            break
        gpus *= 2
    gpu = catalog.get_gpu(inputs.gpu)
    if "fp8" not in lab_dtypes(inputs) and inputs.dtype != "int4" and gpu.supports_fp8:
        best, _ = cheapest(w, lab_budget(inputs, dtypes=("fp8",)), meter)
        if best is not None:
            out.append((f"fp8 weights on these GPUs ({best.deployment.label()})", best.deployment))
    others = []
    for g in catalog.gpu_ids():
        if g == inputs.gpu or not engines.runs_on(inputs.engine, catalog.get_gpu(g)):  # TensorRT-LLM: NVIDIA's only
            continue
        best, _ = cheapest(w, lab_budget(inputs, gpu_types=(g,)), meter)
        if best is not None:
            others.append((best.deployment.gpus * catalog.get_gpu(g).price_usd_per_gpu_hour, best.deployment))
    if others:
        d = min(others, key=lambda x: x[0])[1]
        out.append((f"{catalog.get_gpu(d.gpu).name} GPUs ({d.label()})", d))
    out.sort(key=lambda c: c[1].gpus * catalog.get_gpu(c[1].gpu).price_usd_per_gpu_hour)
    if near is not None and near.best.stable and near.best.error is None:
        o = near.best
        looser = []
        if o.ttft_p99_ms > inputs.ttft_p99_ms:
            looser.append(f"a p99 TTFT target above {fmt_ms(o.ttft_p99_ms)}")
        if o.tpot_p99_ms > inputs.tpot_ms:
            looser.append(f"a p99 TPOT target above {o.tpot_p99_ms:.0f} ms")
        if looser:
            margin = " with the margin" if w.targets.has_margin else ""
            out.append((" and ".join(looser) + f" (what {o.deployment.label()} reaches{margin})", o.deployment))
    return out


def lab_inputs_for(d: Deployment) -> dict:
    """The sidebar's settings that describe deployment `d` (LabInputs fields). A prefill/decode split
    has no toggle: the Lab then shows its GPUs, and its recommendation finds the split itself."""
    # vLLM's schedule knobs; another engine's own schedule sets none of them
    schedule = dict(chunked_prefill=d.policy == "sarathi", max_batched_tokens=d.chunk) if d.policy in ("vllm", "sarathi") else {}
    return dict(gpus=d.gpus, gpu=d.gpu, dtype=d.dtype, kv_dtype=d.kv_dtype,
                continuous_batching=d.policy not in ("serial", "static"), **schedule,
                tensor_parallel=d.tp > 1 and not d.disagg, tp=d.tp if d.tp > 1 and not d.disagg else 0,
                pp=d.pp if not d.disagg else 0, spec_method=d.spec or "off", experts=experts_of(d.ep, d.dp_attention),
                eplb=d.eplb)


def experts_of(ep: int, dp_attention: bool) -> str:
    """The sidebar's experts choice (LabInputs.experts) of a deployment whose experts split over ep GPUs."""
    return "ep_dp" if dp_attention else "ep" if ep > 1 else "tp"
