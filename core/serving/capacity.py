"""The roofline capacity of a deployment on a workload: the most output tokens/s its decode side
could sustain, and the prompt tokens/s a prefill pool could. Utilisation is measured throughput
against these; under continuous batching a replica is never idle once loaded, so the share of
time it is stepping (its "busy" time) says nothing about how much more it could serve."""
from __future__ import annotations

from dataclasses import dataclass

from ..physics import catalog, costmodel, expert, pipeline, speculative
from .experts import balancer

# policies priced as if a step carried decodes and prompt tokens together: a ceiling for vLLM's
# prefill-first steps, which run whole prompts in steps of their own
MIXING = ("orca", "vllm", "sarathi", "inflight")


@dataclass(frozen=True)
class Capacity:
    output_tok_s: float  # the decode side, all replicas
    batch: int  # sequences per decode replica at that rate
    prompt_tok_s: float  # a prefill pool, all replicas (0 without one)


def step_ms(cfg, pool, gpu=None, **mix) -> float:
    """One step of a pool's replica on this deployment's GPU (or the pool's own, `gpu`), model and engine,
    its experts split as the pool's are, in ms (the cost model)."""
    model = catalog.get_model(cfg.model)
    spec = speculative.for_config(cfg, model) if mix.get("decode_batch") else None
    ep, dp = getattr(pool, "ep", 1), getattr(pool, "dp_attention", False)
    return costmodel.steptime(gpu or catalog.get_gpu(cfg.gpu), model, pool.tp, launch=cfg.launch,
                              dtype=cfg.dtype, attn_kernel=cfg.attn_kernel, engine=cfg.engine_overhead,
                              kv_dtype=cfg.kv_dtype, spec=spec, ep=ep, dp_attention=dp, **balancer(cfg, ep),
                              **mix)["step_ms"]


def capacity(cfg, pools: list, prompt: float, output: float, budget: int, cached: float = 0.0) -> Capacity:
    """Every decode replica at the largest batch its sequence slots, KV blocks and token budget
    allow at the workload's mean lengths, in the steady state where a new request starts as each
    one finishes. A mixing engine (vLLM V1, Sarathi-Serve) folds the new requests' prompt tokens
    into the decode steps (batch x prompt / output tokens a step); a static or serial engine
    prefills each request in a step of its own; a prefill pool takes prefill off the decode side.
    `cached`: prompt tokens per request the prefix cache held (read from the cache, not computed).
    Under speculative decoding a decode step gains the acceptance model's tokens a sequence, and
    takes its drafts' share of the token budget."""
    model = catalog.get_model(cfg.model)
    spec = speculative.for_config(cfg, model)
    gained = spec.tokens_per_step if spec else 1.0  # output tokens a sequence gains a decode step
    width = 1 + (spec.tokens if spec else 0)  # its tokens in the step's budget
    pool = pools[-1]
    pp = getattr(pool, "pp", 1)
    prompt, output = max(prompt, 1.0), max(output, 1.0)
    ctx = int(min(prompt + output / 2, model.max_context))
    # each attention rank batches max_seqs of its own (a pool's own ranks; the tutorial passes bare pools)
    ranks = getattr(pool, "ranks", expert.attention_ranks(cfg.tp, cfg.dp_attention))
    slots = 1 if cfg.policy == "serial" else cfg.max_seqs * ranks
    budget = budget * ranks
    batch = max(1, min(slots, int(pool.plan.kv_tokens // max(ctx, 1))))
    if cfg.disagg:
        per_step = step_ms(cfg, pool, decode_batch=batch, context=ctx)
        req_s = batch * gained / output / (per_step / 1e3)
    elif cfg.policy in MIXING and pp > 1:
        # pp batches in flight share the running sequences; each takes a full pass through the
        # stages plus the hand-offs, while the other batches fill the other stages
        lane = max(1, min(batch, pp * int(budget * output / (prompt + output))) // pp)
        new_tokens = int(min(lane * max(prompt - cached, 1.0) / output, budget - lane, model.max_context))
        per_step = (step_ms(cfg, pool, decode_batch=lane, context=ctx, prefill_tokens=max(new_tokens, 0))
                    + 1e3 * pipeline.handoffs_s(catalog.get_gpu(cfg.gpu), model, pool.tp, pp, lane + new_tokens))
        batch = lane * pp
        req_s = batch / output / (per_step / 1e3)
    elif cfg.policy == "sglang":
        # prompts in steps of their own, a chunk of the budget at a time, between the batch's decode steps
        chunk = int(min(budget, model.max_context))
        prefill_ms_per_token = step_ms(cfg, pool, prefill_tokens=chunk) / chunk
        decode = step_ms(cfg, pool, decode_batch=batch, context=ctx)
        req_s = 1.0 / ((max(prompt - cached, 1.0) * prefill_ms_per_token + output * decode / batch) / 1e3)
    elif cfg.policy in MIXING:
        batch = max(1, min(batch, int(budget * output / (prompt * gained + output * width))))
        new_tokens = int(min(batch * gained * max(prompt - cached, 1.0) / output, budget - batch * width,
                             model.max_context))
        per_step = step_ms(cfg, pool, decode_batch=batch, context=ctx, prefill_tokens=max(new_tokens, 0))
        req_s = batch * gained / output / (per_step / 1e3)
    else:
        decode = step_ms(cfg, pool, decode_batch=batch, context=ctx)
        prefill = step_ms(cfg, pool, prefill_tokens=int(min(max(prompt - cached, 1.0), model.max_context)))
        req_s = 1.0 / ((prefill + output * decode / batch) / 1e3)
    prompt_tok_s = 0.0
    if cfg.disagg:
        pre = pools[0]
        chunk = int(min(budget, model.max_context))
        prompt_tok_s = chunk / (step_ms(cfg, pre, getattr(pre, "gpu", None), prefill_tokens=chunk) / 1e3) * pre.replicas
    return Capacity(req_s * output * pool.replicas, batch, prompt_tok_s)
