"""Everything the Lab's home page shows for one set of inputs, in one call, and the caption that
names a simulated deployment."""
from __future__ import annotations

from ..physics import catalog, speculative
from ..planner.space import stage_of
from ..serving import engines
from ..serving.simulate import SimConfig
from ..text import count
from .gauges import gauges, headline, mark_growing, memory_split
from .inputs import LabInputs, NeedsShape, current, placement_note, sharding_note
from .recommend import lab_inputs_for, recommend
from .stages import architecture_path, misses
from .trust import trust


def lab_view(inputs: LabInputs) -> dict:
    """Everything the home page shows, in one call. The recommendation stands on its own: when
    the toggles describe a deployment that cannot run (say, a model too big for one GPU without
    sharding), `current_error` says why and the current-architecture parts are None."""
    inputs.validate()
    rec = recommend(inputs)
    gpus = rec.shown.gpus if rec.shown else inputs.gpus
    view = dict(recommendation=rec, path=architecture_path(rec.light_stage, gpus),
                config=None, result=None, gauges=None, headline=None, trust=None, memory=None,
                current_misses=None, current_error=None, current_fix=None, differs=None, placement=None,
                sharding=None, current_path=None, current_path_note=None, adopt=None)
    try:
        cfg, res = current(inputs)
    except ValueError as e:
        view["current_error"] = str(e)
        if isinstance(e, NeedsShape):  # settings that make it run: the page offers them as a button
            view["current_fix"] = dict(settings=e.settings, action=e.action)
        return view
    view.update(config=cfg, result=res, gauges=gauges(cfg, res, inputs), headline=mark_growing(headline(res, inputs), res.summary),
                trust=trust(cfg, res.summary), memory=memory_split(res), current_misses=misses(res.summary, inputs),
                differs=differs(rec, cfg), placement=placement_note(cfg), sharding=sharding_note(inputs, cfg))
    own = architecture_path(stage_of(cfg.policy, cfg.tp * cfg.pp, cfg.disagg), cfg.gpus or cfg.tp * cfg.pp)
    if own != view["path"]:
        view["current_path"] = own  # the simulated deployment's own components
    elif view["differs"]:
        view["current_path_note"] = "Its components are those of the path above."
    if rec.shown is not None and not rec.shown.disagg and (view["differs"] or not rec.met):
        # the sidebar settings that simulate the deployment named above (a split has no toggle)
        view["adopt"] = dict(settings=lab_inputs_for(rec.shown), action=f"Simulate {rec.shown.label()} below")
    return view


def differs(rec, cfg: SimConfig) -> str | None:
    """When the toggles describe another deployment than the recommended one, the figures below the
    recommendation are not the ones it quotes: say so, and in what they differ, so that two p99
    TTFTs a line apart do not read as a contradiction. None when they are the same deployment (then
    they are the same run)."""
    d = rec.deployment
    if d is None:
        return None
    gpus = cfg.gpus or cfg.tp
    out = []  # what differs: the toggles' value here, the recommendation's there
    if d.disagg != bool(cfg.disagg):
        out.append("a prefill/decode split: none here (no toggle sets one), one there" if d.disagg else
                   "a prefill/decode split: one here, none there")
    if (d.gpus, d.tp) != (gpus, cfg.tp) and not d.disagg:
        out.append(f"GPUs: {gpus} at tp={cfg.tp} here, {d.gpus} at tp={d.tp} there")
    if d.dtype != cfg.dtype:
        out.append(f"weights: {cfg.dtype} here, {d.dtype} there")
    if d.policy != cfg.policy:
        out.append(f"scheduling: {POLICY_WORDS[cfg.policy]} here, {POLICY_WORDS[d.policy]} there")
    elif d.policy == "sarathi" and d.chunk != cfg.max_batched_tokens:
        out.append(f"token budget per step, in Advanced: {cfg.max_batched_tokens:,} here, {d.chunk:,} there")
    if not out:
        return None
    which = "recommended shape" if rec.met else "nearest deployment"
    return (f"Below: the architecture the toggles describe, not the {which} above, so its figures differ from "
            f"the ones quoted there ({'; '.join(out)}). The Guided walkthrough simulates each stage on its own.")


POLICY_WORDS = {"serial": "one request at a time", "static": "request-level (static) batching",
                "orca": "continuous batching, reserved KV", "vllm": "continuous batching + paged attention",
                "sarathi": "continuous batching + paged attention + chunked prefill",
                "sglang": "continuous batching + paged attention + chunked prefill in steps of their own (SGLang)",
                "inflight": "continuous batching + paged attention, whole prompts beside the decodes (TensorRT-LLM)"}


def describe_config(cfg: SimConfig) -> str:
    """A short description of a simulated deployment, for captions."""
    policy = POLICY_WORDS[cfg.policy]
    if cfg.engine_overhead in ("sglang", "trtllm") and engines.name(cfg.engine_overhead) not in policy:
        policy += f", served by {engines.name(cfg.engine_overhead)}"
    gpus = cfg.gpus or cfg.tp * cfg.pp
    model = catalog.get_model(cfg.model).label()
    spec = speculative.for_config(cfg, catalog.get_model(cfg.model))
    policy += f", speculative decoding ({spec.label()})" if spec else ""
    policy += f", a {cfg.kv_offload_gb:g} GiB host KV tier a replica" if cfg.kv_offload_gb > 0 else ""
    policy += ", prefix-aware routing" if cfg.router == "prefix" else ""
    dp = " with data-parallel attention" if cfg.dp_attention else ""
    dp += " and two-batch overlap" if cfg.micro_batch_overlap else ""
    dp += f", balanced by EPLB with {cfg.redundant_experts} redundant experts" if cfg.eplb else ""
    if cfg.disagg:
        experts = f"; each pool's experts split over its replica's GPUs{dp}" if cfg.ep > 1 else ""
        return (f"{model}, {policy}; {cfg.prefill_gpus} prefill GPUs (tp={cfg.prefill_tp or cfg.tp}) + "
                f"{gpus - cfg.prefill_gpus} decode GPUs (tp={cfg.decode_tp or cfg.tp}){experts}")
    stages = f" x pp={cfg.pp}" if cfg.pp > 1 else ""
    if cfg.ep > 1:  # the model shards are experts: whole experts a GPU, the busiest GPU's tokens set the pace
        stages += f", experts split over the {cfg.ep} GPUs{dp}"
    return (f"{model}, {policy}; {count(gpus // (cfg.tp * cfg.pp), 'replica')} x tp={cfg.tp}{stages} on {gpus} "
            f"{cfg.gpu.upper()}")
