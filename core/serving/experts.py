"""A deployment's experts, replica by replica: how each pool's replica splits them and what EPLB
adds there. One rule for the simulator's pools, its step-time what-ifs, the command line's max
model length and a deployment's capacity (physics/expert.py holds the physics)."""
from __future__ import annotations

from ..physics import expert


def pool_experts(cfg, tp: int) -> tuple[int, bool]:
    """(ep, dp_attention) of a replica of `tp` GPUs in deployment `cfg` (a SimConfig). Under expert
    parallelism each pool's experts split over its own replica's GPUs, so a split's prefill and decode
    pools may run different widths, as DeepSeek's and SGLang's disaggregated deployments do; a replica
    of one GPU, or another tp than the deployment's (a page's what-if), slices them by tp."""
    widths = {cfg.tp} | ({cfg.prefill_tp or cfg.tp, cfg.decode_tp or cfg.tp} if cfg.disagg else set())
    return expert.replica_split(tp, cfg.ep > 1 and tp in widths, cfg.dp_attention)


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
