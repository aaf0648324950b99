"""What a deployment cannot do, known without simulating it: the memory planner refuses it, or the
cost model's roofline says it cannot carry the rate or reach the latency targets.

Every bound here errs on the generous side (it may let through a deployment that then fails in
simulation, never discard one that would pass), because a bound that is too tight would hide the
cheapest answer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..physics import catalog, costmodel, expert, speculative
from ..physics.memory import plan_memory
from ..serving import engines
from ..serving.simulate import model_len_for
from ..serving.workload import generate, load_trace, uncached_prompt_tokens
from .space import Deployment, Workload, shares

GENEROUS = 1.15  # capacity credited beyond the roofline estimate, so that no feasible deployment is cut


@dataclass(frozen=True)
class Bound:
    refused: str | None = None  # why the memory planner or a latency floor rules the shape out
    pruned_by: str = ""  # "memory" or "roofline"
    serving_req_s: float = math.inf  # most requests/s one (decode-side) replica could carry
    prefill_req_s: float = math.inf  # most requests/s one prefill replica could carry

    def min_replicas(self, rate: float) -> int:
        return max(1, math.ceil(rate / self.serving_req_s - 1e-9))

    def min_prefill_replicas(self, rate: float) -> int:
        return max(1, math.ceil(rate / self.prefill_req_s - 1e-9))


def _step_s(gpu, model, tp, dtype, kv_dtype="bf16", engine="vllm", **mix) -> float:
    return costmodel.steptime(gpu, model, tp, launch="graph", dtype=dtype, attn_kernel="paged", engine=engine,
                              kv_dtype=kv_dtype, **mix)["step_ms"] / 1e3


def _requests(w: Workload):
    if w.trace_csv is not None:
        return load_trace(w.trace_csv)
    p, o = w.spec.means()
    longest = w.spec.longest_fixed() if w.spec.length_dist == "fixed" else 2 * (p + o)
    return generate(replace(w.spec, max_total_tokens=model_len_for(longest, catalog.get_model(w.model))))


@lru_cache(maxsize=16)
def mean_prefill(w: Workload) -> float:
    return float(prefill_tokens(w).mean())


def prefill_tokens(w: Workload) -> np.ndarray:
    """The prompt tokens each request must prefill at least: with prefix caching, none of what a
    system prompt or an earlier turn could supply (generous: as if the cache held all of it)."""
    wl = _requests(w)
    return uncached_prompt_tokens(wl) if w.engine.prefix_caching else wl.prompt_tokens


def prompt_quantile(w: Workload, q: float) -> int:
    """The prefill length (prefill_tokens) that a share 1 - q of the requests reach or exceed."""
    return max(1, int(np.quantile(prefill_tokens(w), q, method="lower")))


def bound(shape: Deployment, w: Workload, prompt_q: int) -> Bound:
    """The bounds of one deployment shape (replica counts aside) on workload `w`; `prompt_q` is the
    prompt length at the attainment quantile (prompt_quantile)."""
    gpu, model = catalog.get_gpu(shape.gpu), catalog.get_model(w.model)
    pre_gpu = catalog.get_gpu(shape.prefill_gpu or shape.gpu)  # a split's prefill pool may run another type
    P, O = w.spec.means()
    # a prefix cache supplies some prompt tokens: the prefill bound counts only what it cannot
    P_new = mean_prefill(w) if w.engine.prefix_caching and shares(w) else P
    budget = max(shape.chunk, w.engine.max_seqs)
    pools = [(pre_gpu, shape.prefill_tp, "prefill"), (gpu, shape.tp, "decode")] if shape.disagg else [(gpu, shape.tp, "serving")]
    # speculative decoding: its proposer in the decoding GPUs' memory, its tokens a step in the decode bounds
    spec = (speculative.speculation(shape.spec, w.engine.spec_tokens, w.engine.spec_acceptance,
                                    w.engine.draft_model if shape.spec == "draft" else None, model)
            if shape.spec else None)
    gained = spec.tokens_per_step if spec else 1.0
    # expert parallelism: each pool's experts over its own replica's GPUs, whose attention ranks each
    # batch max_seqs of their own
    plans = {}
    for g, tp, name in pools:
        try:
            pp, experts = 1 if shape.disagg else shape.pp, shape.pool_experts(tp)
            plans[name] = plan_memory(g, model, tp, w.engine.block_size, max_batched_tokens=budget,
                                      max_seqs=w.engine.max_seqs, dtype=shape.dtype, pp=pp, kv_dtype=shape.kv_dtype,
                                      spec=spec if name != "prefill" else None, **experts,
                                      **engines.kv_memory(w.engine.name, g, tp, pp, experts["dp_attention"],
                                                          role=name))
        except ValueError as e:
            return Bound(refused=str(e), pruned_by="memory")

    t = w.targets
    # Latency floors: a decode step alone at batch 1 and the shortest context; the prefill of a
    # prompt at the attainment quantile alone on an idle replica.
    decode_tp = shape.tp
    experts = {**shape.pool_experts(decode_tp), **shape.balance()}  # the cost model's: EPLB's balance too
    ranks = expert.attention_ranks(decode_tp, experts["dp_attention"])
    tpot_floor = _step_s(gpu, model, decode_tp, shape.dtype, shape.kv_dtype, w.engine.name, decode_batch=1, context=1,
                         spec=spec, **experts) * 1e3 / gained
    if tpot_floor > t.tpot_p99_ms:
        return Bound(refused=f"a decode step alone takes {tpot_floor:.1f} ms, above the {t.tpot_p99_ms:g} ms "
                             f"TPOT target", pruned_by="roofline")
    pre_tp = shape.prefill_tp if shape.disagg else shape.tp
    pre_experts = {**shape.pool_experts(pre_tp), **shape.balance()}
    pre_ranks = expert.attention_ranks(pre_tp, pre_experts["dp_attention"])
    ttft_floor = _step_s(pre_gpu, model, pre_tp, shape.dtype, shape.kv_dtype, w.engine.name,
                         prefill_tokens=min(prompt_q, model.max_context), **pre_experts) * 1e3
    if ttft_floor > t.ttft_p99_ms:
        return Bound(refused=f"prefilling a {prompt_q:,}-token prompt alone takes {ttft_floor:.0f} ms, above the "
                             f"{t.ttft_p99_ms:g} ms TTFT target", pruned_by="roofline")

    # Capacity: each request costs its prefill tokens at a full chunk's rate and its output tokens
    # at the largest batch the slots and KV blocks hold.
    serial = shape.policy == "serial"
    chunk = min(budget, max(int(P_new), 1))
    prefill_s_per_token = (_step_s(pre_gpu, model, pre_tp, shape.dtype, shape.kv_dtype, w.engine.name,
                                   prefill_tokens=chunk * pre_ranks, **pre_experts) / (chunk * pre_ranks))
    kv_plan = plans["decode" if shape.disagg else "serving"]
    ctx = max(1, int(P + O / 2))
    batch = 1 if serial else max(1, min(w.engine.max_seqs * ranks, kv_plan.kv_tokens // ctx))
    decode_s_per_token = _step_s(gpu, model, decode_tp, shape.dtype, shape.kv_dtype, w.engine.name, decode_batch=batch,
                                 context=max(1, int(P)), spec=spec, **experts) / (batch * gained)
    if shape.disagg:
        return Bound(serving_req_s=GENEROUS / (O * decode_s_per_token),
                     prefill_req_s=GENEROUS / (P_new * prefill_s_per_token))
    # pp batches in flight: at most pp passes' worth of tokens at once (core/physics/pipeline.py)
    return Bound(serving_req_s=GENEROUS * shape.pp / (P_new * prefill_s_per_token + O * decode_s_per_token))
