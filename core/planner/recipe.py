"""The conventional deployment beside the planner's cheapest: the shape a vendor recipe gives
(data/recipes.json: tensor parallel within a node, with half of each GPU's memory for the weights;
the format the model ships in where it ships MXFP4 or fp8 weights), sized by the same rule as every
answer, and one sentence on why the cheapest beats it (or that it is the cheapest)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..physics import catalog
from ..physics.memory import weight_bytes_per_gpu
from ..serving.serve_command import recipes
from .search import ShapeResult, search_shape
from .space import Budget, Deployment, Workload, engine_schedules, runs

GIB = 2**30


def conventional_shape(w: Workload, gpu: str) -> Deployment:
    """The recipe's replica on `gpu` (replicas left at 1): the smallest power-of-two tp within a
    node whose weights take at most the recipe's share of each GPU's memory (a node's GPUs when none
    does, pipeline stages across nodes beyond that), in the model's shipped MXFP4 or fp8 where it
    has one."""
    g, model = catalog.get_gpu(gpu), catalog.get_model(w.model)
    rule = recipes()["conventional"]
    shipped = [d for d in ("mxfp4", "fp8") if model.id in recipes()[f"{d}_checkpoints"] and runs(g, d, "bf16")]
    dtype = shipped[0] if shipped else "bf16"
    limit = rule["weights_share_of_memory"] * g.memory_gib * GIB
    tp = 1
    while tp < g.gpus_per_node and (weight_bytes_per_gpu(model, tp, dtype) > limit or not model.splits_over(tp)):
        tp *= 2
    pp = 1
    while pp < 8 and weight_bytes_per_gpu(model, tp, dtype, pp) > 0.9 * g.memory_gib * GIB and model.layers >= 2 * pp:
        pp *= 2  # beyond one node: pipeline stages across nodes, tp within each
    return Deployment(gpu, tp, 1, dtype, *engine_schedules(w, Budget(), g)[0], pp=pp)


@dataclass
class Comparison:
    shape: Deployment  # the recipe's replica
    result: ShapeResult  # the recipe's search (its cheapest size meeting the targets, or nearest miss)
    is_cheapest: bool  # the cheapest answer is the recipe's shape itself
    sentence: str


def _same_shape(a: Deployment, b: Deployment) -> bool:
    keep = dict(replicas=1, prefill_replicas=0 if not a.disagg else 1, spare=0)
    return replace(a, **keep) == replace(b, **{**keep, "prefill_replicas": 0 if not b.disagg else 1})


def compare(w: Workload, budget: Budget, cheapest: ShapeResult, searched: list[ShapeResult], prompt_q: int) -> Comparison:
    """The recipe's shape on the cheapest answer's (decode) GPU type, searched by the same rule (or
    found among the shapes already searched), and why the cheapest beats it."""
    shape = conventional_shape(w, cheapest.deployment.gpu)
    found = next((r for r in searched if _same_shape(r.shape, shape)), None)
    # a shape the search already finished is reused; one the cheapest-only search cut short (by
    # cost, or without its highest rate) is searched in full
    usable = found is not None and found.pruned_by != "cost" and (not found.meets or found.max_rate_req_s is not None)
    r = found if usable else search_shape(shape, w, budget, prompt_q)
    c = cheapest.deployment
    if r.meets and _same_shape(c, r.deployment):
        return Comparison(shape, r, True, f"The cheapest answer is the vendor recipe's own shape ({shape.label().split(': ', 1)[1]}).")
    return Comparison(shape, r, False, why(c, r, budget))


def why(c: Deployment, r: ShapeResult, budget: Budget) -> str:
    """One sentence: what the cheapest deployment `c` does that the recipe's does not, and what it saves."""
    reasons = []
    conv = r.deployment if r.best is not None else r.shape
    if c.dtype != conv.dtype:
        fmt = catalog.weight_format(c.dtype).on(catalog.get_gpu(c.gpu))
        reasons.append("16-bit weights avoid the quantisation the recipe needs" if fmt.bytes_per_weight >= 2 else
                       f"{c.dtype} weights read {fmt.bytes_read} each step"
                       + (" and multiply at the FP4 rate" if fmt.gemm == "fp4" else ""))
    if c.kv_dtype == "fp8" and conv.kv_dtype != "fp8":
        reasons.append("an fp8 KV cache holds twice the tokens, so batches grow larger")
    if c.disagg:
        reasons.append("a prefill pool keeps long prompts out of the decode batches, so the TPOT target holds at a "
                       "higher rate" + (f", and runs them on {c.prefill_gpu.upper()} GPUs" if c.prefill_gpu else ""))
    elif c.tp * c.pp < conv.tp * conv.pp:
        reasons.append(f"narrower replicas (tp{c.tp}{f'×pp{c.pp}' if c.pp > 1 else ''} against "
                       f"tp{conv.tp}{f'×pp{conv.pp}' if conv.pp > 1 else ''}) put every GPU to work on its own "
                       f"requests instead of waiting on all-reduces")
    elif c.tp * c.pp > conv.tp * conv.pp:
        reasons.append(f"wider replicas (tp{c.tp}) make each step short enough for the latency targets")
    if c.policy != conv.policy or c.chunk != conv.chunk:
        reasons.append(f"a {c.chunk:,}-token prefill chunk keeps decode steps short" if c.policy == "sarathi"
                       else "its simpler schedule is enough at this load")
    because = "; ".join(reasons) or "its replicas are sized to the load"
    if not r.meets:
        miss = f" ({r.reason or '; '.join(r.best.misses)})" if (r.reason or r.best) else ""
        return (f"The recipe's shape ({r.shape.label().split(': ', 1)[1]}) does not meet the targets by the same rule "
                f"within the {budget.max_gpus}-GPU budget{miss}; the cheapest does because {because}.")
    cost_c, cost_r = budget.cost(c), budget.cost(conv)
    if cost_c >= cost_r - 1e-9:
        return (f"The recipe's shape costs the same (${cost_r:,.2f}/h); the cheapest is preferred at equal cost "
                f"for its simpler stage or its lighter quantisation (or the model's own released format).")
    gpus = f"{c.gpus} GPU{'s' if c.gpus > 1 else ''}"
    return (f"The cheapest costs ${cost_c:,.2f}/h against the recipe's ${cost_r:,.2f}/h ({gpus} against "
            f"{conv.gpus}) because {because}.")
