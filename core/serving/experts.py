"""A deployment's experts, replica by replica: how each pool's replica splits them and what EPLB
adds there. One rule for the simulator's pools, its step-time what-ifs, the command line's max
model length and a deployment's capacity (physics/expert.py holds the physics)."""
from __future__ import annotations

from .. import bounds
from ..physics import catalog, expert


def pool_experts(cfg, tp: int) -> tuple[int, bool]:
    """(ep, dp_attention) of a replica of `tp` GPUs in deployment `cfg` (a SimConfig). Under expert
    parallelism each pool's experts split over its own replica's GPUs, so a split's prefill and decode
    pools may run different widths, as DeepSeek's and SGLang's disaggregated deployments do; a replica
    of one GPU, or another tp than the deployment's (a page's what-if), slices them by tp."""
    widths = {cfg.tp} | ({cfg.prefill_tp or cfg.tp, cfg.decode_tp or cfg.tp} if cfg.disagg else set())
    return expert.replica_split(tp, cfg.ep > 1 and tp in widths, cfg.dp_attention)


def replica_slots(cfg) -> int:
    """Sequences one decoding replica may run in a step: max batch on each of its attention ranks (under
    data-parallel attention every rank schedules its own batch, as vLLM's and SGLang's DP ranks do),
    one under serial serving."""
    if cfg.policy == "serial":
        return 1
    tp = (cfg.decode_tp or cfg.tp) if cfg.disagg else cfg.tp
    return cfg.max_seqs * expert.attention_ranks(tp, pool_experts(cfg, tp)[1])


def copies(cfg, ep: int) -> int:
    """EPLB's redundant experts a replica whose experts split over `ep` GPUs holds (none where sliced)."""
    return cfg.redundant_experts if ep > 1 else 0


def balancer(cfg, ep: int) -> dict:
    """The cost model's load fields for such a replica: the routings' spread, EPLB and its copies, and
    whether its micro-batches overlap their all-to-alls."""
    if ep <= 1:
        return {}
    return dict(ep_load_cv=cfg.ep_load_cv, eplb=cfg.eplb, redundant_experts=copies(cfg, ep),
                micro_batch_overlap=cfg.micro_batch_overlap)


def check_experts(cfg) -> None:
    """One sentence naming the fix for expert fields of `cfg` (a SimConfig) that no engine runs."""
    bounds.check("ep", cfg.ep)
    if cfg.ep_load_cv is not None:
        bounds.check("ep_load_cv", cfg.ep_load_cv)
    bounds.check("redundant_experts", cfg.redundant_experts)
    if cfg.redundant_experts and not cfg.eplb:
        raise ValueError("redundant experts are EPLB's copies of the most popular experts: add --eplb, or drop "
                         "--redundant-experts")
    if cfg.eplb and cfg.ep == 1:
        raise ValueError("EPLB balances experts split over expert-parallel ranks: add --ep "
                         f"{max(cfg.tp, 2)} or drop --eplb")
    expert.check(catalog.get_model(cfg.model), cfg.tp, cfg.ep, cfg.dp_attention, cfg.redundant_experts,
                 cfg.micro_batch_overlap)
    if cfg.ep > 1 and cfg.pp > 1:
        raise ValueError("expert parallelism is simulated with pp=1 (its all-to-all joins one stage's GPUs): set pp=1 "
                         "or drop --ep")
    if cfg.ep > 1 and cfg.disagg:  # each pool's experts over its own replica's GPUs
        for width in {cfg.prefill_tp or cfg.tp, cfg.decode_tp or cfg.tp} - {1}:
            expert.check(catalog.get_model(cfg.model), width, width, cfg.dp_attention, cfg.redundant_experts)
