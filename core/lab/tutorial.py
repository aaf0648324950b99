"""The Tutorial: the write-up in data/tutorial.md, with every number in it computed for the
current inputs.

`facts` gathers raw values from the catalog, the memory planner, the step-time model and one
(memoised) simulation; `numbers` formats them with units; `render` fills the write-up. A model
that does not fit the sidebar's deployment is described on the fewest GPUs that hold it, and the
write-up says so at the top; only inputs that no deployment can take (a zero request rate, lengths
beyond the model's context) raise ValueError.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from functools import lru_cache, partial
from types import SimpleNamespace

from .. import DATA
from ..engine.layout import PAGED_POLICIES
from ..physics import catalog, costmodel, expert, pipeline, speculative
from ..physics.catalog import DTYPE_BYTES
from ..physics.memory import MEM_UTIL, usable_bytes, weight_bytes_per_gpu
from ..serving import engines, offload
from ..serving.metrics import growing, overload
from ..serving.simulate import kv_link, startup_seconds, steptime
from ..text import gb, mb, ms, per_token, secs, times, tok_s, toks, usd
from .inputs import LabInputs, current_config, memory_plan, min_tp, run

TEXT = DATA / "tutorial.md"
PLACEHOLDER = re.compile(r"\{([a-z0-9_]+)\}")
NA = "n/a"
WAIT_RHOS = (0.5, 0.8, 0.9, 0.95, 0.99)


def _linear_clause(model) -> str:
    """What a model's linear-attention layers hold in place of a KV cache (nothing for a model that only attends)."""
    if not model.linear_layers:
        return ""
    return (f" (its attending layers; its other {model.linear_layers} layers are linear attention, which cache no token "
            f"but hold a state of {model.linear_state_bytes() / 1e6:.1f} MB a sequence however long its context)")


def _shown(inputs: LabInputs):
    """The deployment the step-time and simulation numbers describe: the sidebar's own, or where
    it cannot run, the fewest GPUs that hold the model. Returns (config, inputs, why not)."""
    try:
        cfg = current_config(inputs)
        gpus = cfg.gpus or cfg.tp
        if gpus < cfg.tp or gpus % cfg.tp:
            raise ValueError(f"replicas of tp={cfg.tp} need a GPU count that is a multiple of {cfg.tp}, not {gpus}")
        # a tensor-parallel degree chosen by hand may still leave no room for the cache
        memory_plan(inputs, catalog.get_gpu(inputs.gpu), catalog.get_model(inputs.model), cfg.tp)
        return cfg, inputs, ""
    except ValueError as e:
        why = str(e)
    need = min_tp(inputs)
    if need is None:
        return None, None, why
    gpus = need * max(1, inputs.gpus // need)  # a multiple of tp, so the replicas divide the GPUs
    alt = replace(inputs, gpus=gpus, tensor_parallel=need > 1, tp=need if need > 1 else 0)
    try:
        return current_config(alt), alt, why
    except ValueError:
        return None, None, why


def _tp_above(model, floor: int) -> int | None:
    """The smallest tp above floor that splits the model's attention (Model.splits_over), up to 64."""
    return next((tp for tp in model.tp_choices() if tp > floor), None)


@lru_cache(maxsize=32)
def facts(inputs: LabInputs) -> dict:
    """Raw values (floats, ints, short strings) behind every number of the write-up. Memoised:
    callers must not modify the dict."""
    inputs.validate()
    gpu, model = catalog.get_gpu(inputs.gpu), catalog.get_model(inputs.model)
    P, O = inputs.prompt_tokens, inputs.output_tokens
    f = dict(model=model, gpu=gpu, wb=DTYPE_BYTES[inputs.dtype], P=P, O=O,
             ctx=min(P + O // 2, model.max_context))  # a request's mean context over its decode
    f["kv_value_bytes"] = catalog.kv_format(inputs.kv_dtype).bytes_per_value
    f["kv_token"] = model.kv_bytes_per_token(f["kv_value_bytes"])
    if model.is_mla:  # per-head K (nope + rope) and V, had the heads not shared a latent
        f["mha_kv_token"] = model.layers * model.heads * (model.mla_qk_nope_dim + model.mla_rope_dim
                                                          + model.mla_v_dim) * 2
    else:
        f["mha_kv_token"] = 2 * model.attention_layers * model.heads * model.head_dim * 2
    f["flops"] = gpu.peak_flops(inputs.dtype)
    f["bw"] = gpu.hbm_tbps * 1e12
    f["ridge"] = f["flops"] / f["bw"]
    f["ridge_batch"] = f["ridge"] * f["wb"] / 2  # 2 FLOPs per weight per sequence
    eff = costmodel.fitted()
    f["ridge_eff"] = f["flops"] * eff.eta_gemm / (f["bw"] * eff.eta_bw)
    # the batch at which the weights stop being the limit with the kernels' measured efficiencies
    f["ridge_eff_batch"] = f["ridge_eff"] * f["wb"] / 2
    f["eff"] = eff
    f["weights_total"] = model.weight_bytes(inputs.dtype)
    f["weights_tp1"] = weight_bytes_per_gpu(model, 1, inputs.dtype)
    f["usable"] = usable_bytes(gpu)
    share = engines.kv_memory(inputs.engine, gpu, 1)  # what one GPU gives weights and cache under the engine
    f["budget"] = f["usable"] * (share["mem_util"] if share["share"] != "free" else 1.0)
    f["min_tp"] = min_tp(inputs)

    cfg, shown, why = _shown(inputs)
    f.update(cfg=cfg, shown=shown, why_not=why)
    if cfg is None:
        return f
    tp = cfg.tp
    f["tp"] = tp
    f["replicas"] = (cfg.gpus or tp) // tp
    f["result"], f["sim_error"] = None, ""
    try:
        f["result"] = run(cfg)
    except (ValueError, RuntimeError) as e:
        f["sim_error"] = str(e)
    plan = (f["result"].pools[0].plan if f["result"] else
            memory_plan(inputs, gpu, model, tp))
    f["plan"] = plan
    f["batch_max"] = max(1, min(inputs.batch_limits()[1], plan.kv_tokens // f["ctx"]))

    step = partial(steptime, cfg)  # this deployment's step, at its own tp unless given

    ctx, B = f["ctx"], f["batch_max"]
    f["d1"] = step(decode_batch=1, context=ctx)
    f["dmax"] = step(decode_batch=B, context=ctx)
    f["pre"] = step(prefill_tokens=P)
    f["mixed"] = step(decode_batch=B, context=ctx, prefill_tokens=P)
    budget = cfg.max_batched_tokens if cfg.policy == "sarathi" else None
    f["chunk"] = min(P, max(budget - B, 1)) if budget else P
    f["mixed_chunk"] = step(decode_batch=B, context=ctx, prefill_tokens=f["chunk"])

    # one request at a time on each replica
    f["serial_s"] = (f["pre"]["step_ms"] + O * f["d1"]["step_ms"]) / 1e3
    # a closed loop offers what its users send: each one request per answer and think time
    f["rate"] = inputs.users / (f["serial_s"] + inputs.think_s) if inputs.closed_loop else inputs.rate
    f["rho"] = f["rate"] * f["serial_s"] / f["replicas"]

    # tensor parallelism: the shown degree, or 2 to show what sharding would do; its experts sliced (the
    # expert-parallel shapes have their own figures: _expert_numbers)
    tp_ex = tp if tp > 1 else (2 if model.splits_over(2) else None)
    f["tp_ex"] = tp_ex
    tp_step = partial(steptime, replace(cfg, ep=1, dp_attention=False))
    f["tp1_d1"] = tp_step(1, decode_batch=1, context=ctx)  # priced even where one GPU cannot hold it
    if tp_ex:
        f["tp_d1"] = tp_step(tp_ex, decode_batch=1, context=ctx)
        f["tp_dmax"] = tp_step(tp_ex, decode_batch=B, context=ctx)
        f["tp_weights"] = weight_bytes_per_gpu(model, tp_ex, inputs.dtype)
        try:
            f["tp_kv_tokens"] = memory_plan(inputs, gpu, model, tp_ex).kv_tokens
        except ValueError:
            f["tp_kv_tokens"] = 0
    # the other side of the node boundary: across nodes if the example fits in one, else inside one
    if (tp_ex or 1) <= gpu.gpus_per_node:
        tp_x = _tp_above(model, gpu.gpus_per_node)
    else:
        tp_x = max((d for d in model.tp_choices(gpu.gpus_per_node) if d > 1), default=None)
    f["tp_x"] = tp_x
    if tp_x:
        f["tp_x_dmax"] = tp_step(tp_x, decode_batch=B, context=ctx)

    # the prompt's KV moving from a prefill replica to a decode replica of the same tp
    one = SimpleNamespace(tp=tp, replicas=1)
    far = SimpleNamespace(tp=tp, replicas=gpu.gpus_per_node)
    f["kv_in_node"] = kv_link(gpu, cfg, [one, one]) if 2 * tp <= gpu.gpus_per_node else None
    f["kv_across"] = kv_link(gpu, cfg, [far, far])
    f["kv_prompt"] = P * f["kv_token"]
    f["startup_s"] = startup_seconds(cfg, model, tp)
    f["fit"] = json.loads(costmodel.FIT_FILE.read_text())["fit"]
    return f


def _verdicts(f: dict, inputs: LabInputs) -> dict[str, str]:
    """Sentences whose wording, not only whose numbers, depends on the inputs."""
    model, gpu = f["model"], f["gpu"]
    v = {}
    if model.is_mla:
        v["attention_sentence"] = (
            f"{model.name} uses multi-head latent attention (MLA): instead of a key and a value per head, each "
            f"layer caches one {model.mla_kv_lora_rank}-wide latent plus a {model.mla_rope_dim}-wide rotary key, "
            f"shared by all {model.heads} heads. Had every head kept its own K and V, the cache would take "
            f"{per_token(f['mha_kv_token'])} per token, {times(f['mha_kv_token'] / f['kv_token'])} more.")
    elif model.kv_heads < model.heads:
        v["attention_sentence"] = (
            f"{model.name} uses grouped-query attention (GQA): its {model.heads} query heads share "
            f"{model.kv_heads} KV heads, {model.heads // model.kv_heads} queries per KV head, so it caches "
            f"{times(model.heads / model.kv_heads)} less than multi-head attention would "
            f"({per_token(f['mha_kv_token'])} per token).")
    else:
        v["attention_sentence"] = (
            f"{model.name} uses multi-head attention (MHA): each of its {model.heads} query heads keeps its own "
            f"key and value. Grouped-query attention (Llama-3.1: 32 query heads sharing 8 KV heads) would cache "
            f"4× less for the same width.")
    tp1_fits = f["min_tp"] == 1
    budget = gb(f["budget"])
    if tp1_fits:
        v["fit_one_gpu_sentence"] = (f"That fits the {budget} budget of one {gpu.name} with room for the cache: "
                                     f"sharding is a choice here, not a need.")
    elif f["min_tp"]:
        v["fit_one_gpu_sentence"] = (f"That leaves no room for a cache in the {budget} budget of one {gpu.name}: "
                                     f"sharding is a need here, not a choice.")
    else:
        v["fit_one_gpu_sentence"] = (f"Even split over 64 {gpu.name} GPUs it leaves no room for a cache.")
    wb = f["wb"]
    v["intensity_batch_b"] = (f"2 × B FLOPs per {wb} bytes, that is about B FLOP per byte" if wb == 2 else
                              f"2 × B FLOPs per {wb:.2f} bytes, that is about {2 / wb:.3g} × B FLOP per byte")
    return v


def _bytes(b: float) -> str:
    """A weight's or a cached value's size: '2 bytes', '1 byte', or a 4-bit format's '0.52 bytes (4 bits
    plus its share of its group's scale)'."""
    if float(b).is_integer():
        return f"{b:g} byte{'s' * (b > 1)}"
    return f"{b:.2f} bytes ({b * 8:.3g} bits: 4 bits plus its share of its group's scale)"


def _quant_sentence(f: dict, inputs: LabInputs) -> str:
    """What smaller weight and cache formats would change here: the whole model's weights in each
    format, and the cache's tokens at half the bytes a value."""
    model, gpu = f["model"], f["gpu"]
    formats = [d for d in ("bf16", "fp8", "fp4", "int4") if gpu.runs(catalog.weight_format(d))]
    sizes = ", ".join(f"{gb(model.weight_bytes(d))} in {d}" for d in formats)
    fp4 = (f"fp4 weights (NVFP4: 4 bits and an 8-bit scale per 16) multiply on {gpu.name}'s FP4 tensor cores at "
           f"{gpu.peak_flops('fp4') / gpu.peak_flops('fp8'):.0f} times the FP8 rate; " if gpu.supports_fp4 else "")
    text = (f"Quantised checkpoints store the linear layers' weights in fewer bits: {model.name} takes {sizes} "
            f"(the embedding and LM head stay 16-bit). fp8 weights multiply on FP8 tensor cores; {fp4}int4 weights "
            f"(AWQ, GPTQ: 4 bits and a scale per 128) are dequantised inside the kernel and multiply at the 16-bit "
            f"rate, so they speed up memory-bound decode by the bytes saved but not a compute-bound prefill. ")
    if not gpu.supports_fp8:
        w8 = catalog.weight_format("fp8").on(gpu)
        weights = (f"fp8 weights run on it weight-only, as vLLM's FP8 Marlin kernel runs them (one byte a weight "
                   f"streamed, multiplied at {w8.gemm_rate:.0%} of the 16-bit rate), and an fp8 cache does not"
                   if not w8.needs_fp8 else "neither fp8 weights nor an fp8 cache run on it")
        return text + f"{gpu.name} has no FP8 support, so {weights}."
    if inputs.kv_dtype == "fp8":
        return text + ("The cache here is fp8: one byte a value, so the pool above holds twice the tokens a 16-bit "
                       "cache would.")
    if "plan" not in f:  # nothing fits: no pool to double
        return text + "An fp8 KV cache would store one byte a value instead of two: twice the tokens in the same pool."
    return text + (f"An fp8 KV cache would store one byte a value instead of two: the same pool would hold "
                   f"{toks(2 * f['plan'].kv_tokens)} instead of {toks(f['plan'].kv_tokens)}.")


def _note(f: dict, inputs: LabInputs) -> str:
    """A warning at the top when the numbers describe another deployment than the sidebar's."""
    model, gpu = f["model"], f["gpu"]
    if f["cfg"] is None:
        return (f"> **{model.label()} does not fit on {gpu.name}**, even sharded over 64 GPUs: its weights take "
                f"{gb(f['weights_tp1'])} in all. The parts of this write-up that need a step time or a simulation are "
                f"left out; choose a smaller model, fp8 or int4 weights or a GPU with more memory.")
    parts = []
    if f["why_not"]:
        need = f["min_tp"]
        if need and need > 1:
            parts.append(f"**{model.label()} does not fit one {gpu.name}**: its weights take "
                         f"{gb(f['weights_tp1'])} of the {gb(f['budget'])} budget per GPU. It needs tensor "
                         f"parallelism over at least **{need} GPUs (tp={need})**, so the numbers below describe "
                         f"{deployment(f['cfg'], gpu)}.")
        else:
            parts.append(f"The sidebar's deployment cannot run as set ({f['why_not']}); the numbers below describe "
                         f"{deployment(f['cfg'], gpu)}.")
    if f["sim_error"]:
        parts.append(f"The simulation of this deployment did not run ({f['sim_error']}), so the paragraphs that "
                     f"quote it are left out.")
    return "> " + " ".join(parts) if parts else ""


def numbers(inputs: LabInputs) -> dict[str, str]:
    """Every placeholder of the write-up, formatted with its unit."""
    f = facts(inputs)
    model, gpu = f["model"], f["gpu"]
    P, O, ctx = f["P"], f["O"], f["ctx"]
    n = dict(
        model_name=model.label(), params_b=f"{model.params() / 1e9:,.1f} billion",
        dtype=inputs.dtype, dtype_bytes=_bytes(f["wb"]),
        gpu_name=gpu.name, gpu_memory_gb=f"{gpu.memory_gib:g} GiB ({gpu.memory_gib * catalog.GIB / 1e9:.1f} GB)",
        hbm_tbps=f"{gpu.hbm_tbps:g} TB/s",
        gpu_tflops=f"{f['flops'] / 1e12:,.0f} TFLOP/s", prompt_tokens=toks(P), output_tokens=toks(O),
        context_tokens=toks(ctx), rate=f"{inputs.rate:g} requests/s",
        gpus=toks(inputs.gpus, "GPU" + "s" * (inputs.gpus > 1)),
        ttft_target=ms(inputs.ttft_p99_ms), max_seqs=toks(inputs.batch_limits()[1], "sequences"),
        block_size=toks(inputs.block_size), max_batched_tokens=toks(inputs.batch_limits()[0]),
        weights_gb=gb(f["weights_total"]),
        intensity_batch1=f"{2 / f['wb']:.3g} FLOP per byte",
        ridge_flops_per_byte=f"{f['ridge']:,.0f} FLOP/byte", ridge_batch=toks(f["ridge_batch"], "sequences"),
        ridge_effective=f"{f['ridge_eff']:,.0f} FLOP/byte",
        ridge_effective_batch=toks(f["ridge_eff_batch"], "sequences"),
        prefill_intensity=f"{2 * P / f['wb']:,.0f} FLOP/byte",
        prefill_regime=_prefill_regime(2 * P / f["wb"], f),
        kv_bytes_per_token=per_token(f["kv_token"]),
        kv_value_text=("2 bytes (16-bit values)" if f["kv_value_bytes"] == 2 else
                       f"{_bytes(f['kv_value_bytes'])} (an fp8 cache)"),
        quant_sentence=_quant_sentence(f, inputs),
        kv_formula=(f"{model.layers} layers × ({model.mla_kv_lora_rank} latent + {model.mla_rope_dim} rotary) values "
                    f"× {_bytes(f['kv_value_bytes'])} = {per_token(f['kv_token'])} (MLA caches a latent, not K and V per head)"
                    if model.is_mla else
                    f"2 × {model.attention_layers} layers × {model.kv_heads} KV heads × {model.head_dim} values per head × "
                    f"{_bytes(f['kv_value_bytes'])} = {per_token(f['kv_token'])}" + _linear_clause(model)),
        kv_mb_per_request=mb((P + O) * f["kv_token"]),
        kv_batch_gb=gb(inputs.batch_limits()[1] * (P + O) * f["kv_token"]),
        usable_gb=gb(f["usable"]), mem_util=f"{MEM_UTIL:.0%}", budget_gb=gb(f["budget"]),
        weights_gb_tp1=gb(f["weights_tp1"]),
        min_tp=("tp=1 (one GPU)" if f["min_tp"] == 1 else
                f"tp={f['min_tp']} ({f['min_tp']} GPUs)" if f["min_tp"] else "beyond tp=64"),
        settings_note=_note(f, inputs),
    )
    n.update(_verdicts(f, inputs))
    if f["cfg"] is None:
        n["deployment"] = "none, since no tensor-parallel degree makes room for the cache"
        return _fill_missing(n)
    n.update(_step_numbers(f, inputs))
    n.update(_sim_numbers(f, inputs))
    n.update(_spec_numbers(f, inputs))
    n.update(_offload_numbers(f, inputs))
    n.update(_expert_numbers(f, inputs))
    return _fill_missing(n)


OFFLOAD_TURNS = 4  # the conversation the host-tier figures follow: its fifth turn's prompt holds four


def _offload_numbers(f: dict, inputs: LabInputs) -> dict[str, str]:
    """A conversation's next turn: its earlier turns' KV loaded from a host tier against prefilled
    again, on the deployment shown, and how many such conversations the GPU cache and a host tier hold."""
    cfg, plan, gpu = f["cfg"], f["plan"], f["gpu"]
    ctx = min(OFFLOAD_TURNS * (f["P"] + f["O"]), f["model"].max_context - f["P"])
    link = offload.host_link_gbps(gpu)
    load_s = ctx * f["kv_token"] / (link * 1e9 * cfg.tp)
    prefill = steptime(cfg, prefill_tokens=ctx + f["P"])["step_ms"]
    rest = steptime(cfg, prefill_tokens=f["P"], prefill_cached=ctx)["step_ms"]
    tier_gib = inputs.kv_offload_gb or offload.TEACHING_TIER_GIB
    conv_bytes = ctx * f["kv_token"]
    return dict(
        offload_context=toks(ctx), offload_kv=mb(conv_bytes), offload_link=f"{link:g} GB/s a GPU",
        offload_load_ms=ms(load_s * 1e3), offload_rest_ms=ms(rest), offload_prefill_ms=ms(prefill),
        offload_verdict=(f"loading it is {times(prefill / max(load_s * 1e3 + rest, 1e-9))} as fast as computing "
                         f"it again" if load_s * 1e3 + rest < prefill else
                         "here the link is slow enough that computing it again is as fast"),
        offload_gpu_conversations=toks(plan.kv_tokens // max(ctx, 1), "conversations"),
        offload_tier=f"{tier_gib:g} GiB",
        offload_tier_conversations=toks(int(tier_gib * catalog.GIB // max(conv_bytes, 1)), "conversations"),
        router_weights=offload.router_weights(),
    )


EP_BATCH = 64  # the decode batch the expert-parallel comparison follows (a loaded replica's, at most max_seqs)


def _expert_numbers(f: dict, inputs: LabInputs) -> dict[str, str]:
    """A mixture of experts' three shapes on one replica: experts sliced by tensor parallelism,
    expert parallel, and expert parallel with data-parallel attention. The model shown if it is
    one, else Mixtral-8x7B; on the smallest replica of the sidebar's GPU type whose weights fit
    under all three (data-parallel attention holds attention whole on every GPU)."""
    model = f["model"] if f["model"].is_moe else catalog.get_model("mixtral-8x7b")
    gpu, dtype, kv = f["gpu"], inputs.dtype, inputs.kv_dtype
    fits = None
    for tp in (2, 4, 8, 16, 32, 64):
        if model.experts % tp or not model.splits_over(tp) or tp > max(gpu.gpus_per_node, 1):
            continue
        try:
            plans = [memory_plan(inputs, gpu, model, tp, dtype=dtype, kv_dtype=kv, ep=ep, dp_attention=dp)
                     for ep, dp in ((1, False), (tp, False), (tp, True))]
        except ValueError:
            continue
        fits = tp, plans
        break
    if fits is None:
        return dict(ep_sentence=f"{model.name} fits no replica of {gpu.name} GPUs within one node in all three "
                                f"shapes, so the figures are left out here.")
    tp, (p_tp, p_ep, p_dp) = fits
    ctx, batch = f["ctx"], min(EP_BATCH, inputs.batch_limits()[1])

    def step(ep, dp, **mix):
        return costmodel.steptime(gpu, model, tp, launch="graph", dtype=dtype, attn_kernel="paged",
                                  engine=inputs.engine, kv_dtype=kv, ep=ep, dp_attention=dp, **mix)
    dec = [step(ep, dp, decode_batch=batch, context=ctx) for ep, dp in ((1, False), (tp, False), (tp, True))]
    p = costmodel.build(gpu, model, tp, dtype, kv_dtype=kv, ep=tp)
    busiest = costmodel.busiest_share(p, float(batch))
    a2a = expert.dispatch_combine_bytes(model, tp) * batch / tp
    return dict(ep_sentence=(
        f"For {model.name} on {tp} {gpu.name.replace('NVIDIA ', '')} GPUs, a decode step of {batch} sequences at "
        f"{toks(ctx)} of context takes **{ms(dec[0]['step_ms'])}** with the experts sliced, "
        f"**{ms(dec[1]['step_ms'])}** expert-parallel (the busiest GPU computes {busiest:.2f}× the mean GPU's "
        f"routed tokens) and **{ms(dec[2]['step_ms'])}** with data-parallel attention as well, whose dispatch and "
        f"combine move {mb(a2a)} a GPU each MoE layer. A replica's KV cache holds {toks(p_tp.kv_tokens)} sliced, "
        f"{toks(p_ep.kv_tokens)} expert-parallel and **{toks(p_dp.kv_tokens)}** with data-parallel attention, "
        f"whose GPUs hold attention whole ({gb(p_dp.weights_bytes)} of weights a GPU against "
        f"{gb(p_tp.weights_bytes)}) but only their own sequences' KV."))


def _spec_numbers(f: dict, inputs: LabInputs) -> dict[str, str]:
    """Speculative decoding at batch 1 and at the full batch: the sidebar's method, or where it is
    off the one this model would use (DeepSeek's MTP module where it ships one, else an EAGLE head)."""
    model, cfg = f["model"], f["cfg"]
    method = inputs.spec_method if inputs.spec_method != "off" else ("mtp" if model.mtp_layers else "eagle")
    chosen = replace(inputs, spec_method=method).speculation()
    spec = speculative.speculation(method, chosen["spec_tokens"], chosen["spec_acceptance"], None, model)
    ctx, B = f["ctx"], f["batch_max"]
    d1, dmax = f["d1"]["step_ms"], f["dmax"]["step_ms"]
    v1 = steptime(cfg, spec=spec, decode_batch=1, context=ctx)
    vmax = steptime(cfg, spec=spec, decode_batch=B, context=ctx)
    gained = spec.tokens_per_step
    s1, smax = d1 * gained / v1["step_ms"], dmax * gained / vmax["step_ms"]

    def speed(x):
        return f"{times(x)} as fast" if x >= 1.005 else f"{times(x)}: slower" if x < 0.995 else "no faster"

    a = spec.acceptance
    rate = f"{a[0]:.0%}" if len(set(a)) == 1 else ", ".join(f"{x:.0%}" for x in a) + " (by position)"
    return dict(
        spec_method_name=spec.label().split(",")[0], spec_k=toks(spec.tokens, "draft token" + "s" * (spec.tokens > 1)),
        spec_a=rate, spec_tokens_per_step=f"{gained:.2f} tokens",
        spec_verify_ms_batch1=ms(v1["step_ms"]), spec_proposer_ms_batch1=ms(v1["breakdown_ms"]["proposer"]),
        spec_tpot_batch1=ms(v1["step_ms"] / gained), spec_speedup_batch1=speed(s1),
        spec_verify_ms_batch_max=ms(vmax["step_ms"]), spec_tpot_batch_max=ms(vmax["step_ms"] / gained),
        spec_speedup_batch_max=speed(smax),
        spec_verdict=("the full batch's steps are compute-bound, so verifying the drafts costs about what they save."
                      if abs(smax - 1) < 0.1 else
                      "the gain shrinks as the batch grows: the wider steps turn compute-bound." if 1 < smax < s1 else
                      "at this batch the verification and the proposer cost more than the drafts save: speculate "
                      "only while batches are small." if smax < 1 else
                      "even the full batch's steps stay memory-bound here, so the drafts still pay."))


def _step_numbers(f: dict, inputs: LabInputs) -> dict[str, str]:
    model, gpu, cfg, plan = f["model"], f["gpu"], f["cfg"], f["plan"]
    P, O, ctx, B, tp = f["P"], f["O"], f["ctx"], f["batch_max"], f["tp"]
    d1, dmax, pre = f["d1"]["step_ms"], f["dmax"]["step_ms"], f["pre"]["step_ms"]
    per_gpu_weights = plan.weights_bytes
    n = dict(
        deployment=deployment(cfg, gpu),
        weights_read_batch1=gb(f["d1"]["weight_bytes_read_per_gpu"]),
        moe_sentence=_moe_sentence(f),
        replicas_serve=("one replica serves" if f["replicas"] == 1 else f"{f['replicas']} replicas serve"),
        tp_phrase=(f"one {gpu.name}" if tp == 1 else f"a replica of {tp} {gpu.name} GPUs (tp={tp})"),
        batch_cap_reason=("the max batch setting" if B == inputs.batch_limits()[1] else
                          f"what the cache holds at {ctx:,} tokens each"),
        chunk_sentence=_chunk_sentence(f, cfg, inputs),
        weights_gb_per_gpu=gb(per_gpu_weights),
        weight_stream_ms=ms(f["d1"]["weight_bytes_read_per_gpu"] / f["bw"] * 1e3),
        decode_ms_batch1=ms(d1), decode_tok_s_batch1=tok_s(1e3 / d1),
        decode_total_s_batch1=secs(O * d1 / 1e3),
        mfu_batch1=f"{2 * f['d1']['weight_bytes_read_per_gpu'] / f['wb'] / (d1 / 1e3) / f['flops']:.2%}",
        prefill_ms=ms(pre), prefill_tok_s=tok_s(P / (pre / 1e3)),
        workspace_gb=gb(plan.workspace_bytes), kv_pool_gb=gb(plan.kv_pool_bytes),
        **_memory_rule(plan, inputs.engine, gb(per_gpu_weights)),
        admission_words=("while the token budget, the sequence slots and the free blocks allow" if not cfg.no_evict
                         else f"while the token budget and the sequence slots allow and the pool holds every admitted "
                              f"request at its whole length ({engines.name(inputs.engine)}'s GUARANTEED_NO_EVICT: "
                              f"so none is ever preempted)"),
        kv_tokens_fit=toks(plan.kv_tokens), kv_blocks=toks(plan.kv_blocks, "blocks"),
        requests_fit=toks(plan.kv_tokens // (P + O), "requests"),
        batch_max=toks(B, "sequences"), decode_ms_batch_max=ms(dmax), decode_tok_s_batch_max=tok_s(B * 1e3 / dmax),
        batch_speedup=times(B * d1 / dmax),
        serial_service_s=secs(f["serial_s"]), serial_capacity=f"{f['replicas'] / f['serial_s']:.3g} requests/s",
        serial_utilisation=f"{f['rho']:.0%}",
        serial_verdict=(f"{inputs.users:,} users would keep one-at-a-time replicas {f['rho']:.0%} busy: a closed "
                        f"loop cannot overload them (its users wait for their answers), so the replicas serve all "
                        f"they can and the users queue for them, each waiting longer the more users there are."
                        if inputs.closed_loop and f["rho"] >= 1 else
                        f"At {f['rho']:.0%} the queue grows without bound: requests arrive "
                        f"{times(f['rho'])} faster than one-at-a-time replicas finish them, and every wait is "
                        f"longer than the last." if f["rho"] >= 1 else
                        "Below 100% the replicas keep up on average; the question is how long requests wait."),
        max_model_len=toks(cfg.max_model_len),
        reserved_utilisation=f"{ctx / cfg.max_model_len:.0%}",
        static_batch_fit=toks(plan.kv_tokens // cfg.max_model_len, "requests"),
        paged_batch_fit=toks(plan.kv_tokens // ctx, "requests"),
        paged_utilisation=f"{ctx / (ctx + (inputs.block_size - 1) / 2):.1%}",
        decode_with_prefill_ms=ms(f["mixed"]["step_ms"]),
        startup_s=secs(f["startup_s"]), weights_load_s=secs(f["startup_s"] - cfg.startup_fixed_s),
        startup_fixed_s=secs(cfg.startup_fixed_s), load_gbps=f"{cfg.load_gbps:g} GB/s",
        gpu_price=f"{usd(gpu.price_usd_per_gpu_hour)} per GPU-hour",
        price_source=f"{gpu.price_provider} on {gpu.price_date}",
        cost_floor_per_1m=usd(gpu.price_usd_per_gpu_hour * tp / 3600 / (B * 1e3 / dmax) * 1e6),
        cost_batch1_per_1m=usd(gpu.price_usd_per_gpu_hour * tp / 3600 / (1e3 / d1) * 1e6),
        allreduce_bytes=mb(B * model.hidden * 2), allreduces_per_step=toks(2 * model.layers, "all-reduces"),
        gpus_per_node=toks(gpu.gpus_per_node, "GPUs"),
        tp_link=_tp_link(gpu, f["tp_ex"] or 2),
        kv_transfer_mb=mb(f["kv_prompt"]),
        decode_breakdown=_breakdown(f["dmax"]["breakdown_ms"]),
        fit_points=toks(f["fit"]["points"], "measured step times"),
        fit_median_error=f"{f['fit']['median_abs_error']:.1%}",
        fit_loo_error=f"{f['fit']['leave_one_out_median_abs_error']:.1%}",
        eta_bw=f"{f['eff'].eta_bw:.0%}", eta_gemm=f"{f['eff'].eta_gemm:.0%}",
    )
    for rho in WAIT_RHOS:
        n[f"wait_{round(rho * 100)}"] = secs(rho / (2 * (1 - rho)) * f["serial_s"])
    if f["tp_ex"]:
        te = f["tp_ex"]
        n.update(tp_example=f"tp={te}", weights_gb_per_gpu_tp=gb(f["tp_weights"]),
                 decode_ms_tp1_batch1=ms(f["tp1_d1"]["step_ms"]),
                 tp1_hypothetical="" if f["min_tp"] == 1 else " (were there room for it)",
                 kv_tokens_fit_tp=toks(f["tp_kv_tokens"]) if f["tp_kv_tokens"] else "no tokens (it does not fit)",
                 allreduce_ms_per_step=ms(f["tp_dmax"]["comm_ms"]), allreduce_ms_batch1=ms(f["tp_d1"]["comm_ms"]),
                 decode_ms_tp_batch1=ms(f["tp_d1"]["step_ms"]),
                 comm_share=f"{f['tp_dmax']['comm_ms'] / f['tp_dmax']['step_ms']:.0%}")
    tx = f["tp_x"]
    if tx and tx > gpu.gpus_per_node:
        n["internode_sentence"] = (
            f"Past one node the all-reduces cross the network at {gpu.internode_gbps_per_dir:g} GB/s per GPU: at "
            f"tp={tx} (more than one node of {gpu.gpus_per_node}) they take {ms(f['tp_x_dmax']['comm_ms'])} of a "
            f"{ms(f['tp_x_dmax']['step_ms'])} step of {B:,} sequences.")
    elif tx:
        n["internode_sentence"] = (
            f"Kept inside one node, at tp={tx} over {gpu.tp_link_gbps(tx):g} GB/s links, they would take "
            f"{ms(f['tp_x_dmax']['comm_ms'])} of a {ms(f['tp_x_dmax']['step_ms'])} step of {B:,} sequences.")
    else:
        n["internode_sentence"] = (f"{model.name}'s {model.heads} heads do not split evenly over more than one node "
                                   f"of {gpu.gpus_per_node} GPUs, so its tensor parallelism stays inside one.")
    n.update(_kv_transfer(f, pre))
    n["pipeline_sentence"] = _pipeline_sentence(f, inputs)
    return n


def _prefill_regime(intensity: float, f: dict) -> str:
    if intensity >= f["ridge"]:
        return "past both ridges: prefill is compute-bound"
    if intensity >= f["ridge_eff"]:
        return "past the measured ridge though below the datasheet's: in practice prefill is compute-bound"
    return "still below both ridges: a prompt this short is memory-bound too"


def _pipeline_sentence(f: dict, inputs: LabInputs) -> str:
    """Pipeline stages of a node's GPUs each, across two nodes, for this model: what a GPU holds and
    what a hand-off between the nodes costs (core/physics/pipeline.py)."""
    model, gpu = f["model"], f["gpu"]
    tp = gpu.gpus_per_node
    if not model.splits_over(tp) or model.layers < 2:
        return ""
    weights = weight_bytes_per_gpu(model, tp, inputs.dtype, 2)
    one = pipeline.handoff_s(gpu, model, tp, 1, True) * 1e6
    chunk = pipeline.handoff_s(gpu, model, tp, inputs.batch_limits()[0], True) * 1e3
    return (f"For {model.name} on two nodes of {tp} {gpu.name} GPUs, tp={tp} x pp=2 puts "
            f"{gb(weights)} of weights on each GPU; a decoding token's activations "
            f"({pipeline.bytes_per_token(model) / 1024:.0f} KiB) cross the network in {one:.0f} µs and a "
            f"{inputs.batch_limits()[0]:,}-token step's in {chunk:.2f} ms, once per step instead of twice per layer.")


def _tp_link(gpu, tp: int) -> str:
    if tp > gpu.gpus_per_node:
        return (f"the network between nodes ({gpu.tp_link_gbps(tp):g} GB/s per GPU per direction), since tp={tp} "
                f"spans more than one node of {gpu.gpus_per_node} GPUs")
    return f"the node's GPU links ({gpu.tp_link_gbps(tp):g} GB/s per direction per GPU)"


def _kv_transfer(f: dict, prefill_ms: float) -> dict[str, str]:
    def took(link):
        bw, lat = link
        return f["kv_prompt"] / bw * 1e3 + lat * 1e3

    link = f["kv_in_node"] or f["kv_across"]
    t = took(link)
    share = f"{t / prefill_ms:.0%}" if t >= 0.01 * prefill_ms else "under 1%"
    n = dict(kv_transfer_ms=ms(t), kv_link_gbps=f"{link[0] / 1e9:,.0f} GB/s",
             kv_link_name=("the node's GPU links" if f["kv_in_node"] else
                           f"the network between nodes (two replicas of tp={f['tp']} do not fit one node)"),
             kv_transfer_verdict=(f"{share} of the prefill time, small enough to hide" if t < 0.2 * prefill_ms else
                                  f"{share} of the prefill time: the transfer is a real cost here"),
             kv_transfer_ms_internode=ms(took(f["kv_across"])))
    n["kv_internode_sentence"] = (
        f"Between nodes ({f['kv_across'][0] / 1e9:,.0f} GB/s over the replica's network links) it takes "
        f"{n['kv_transfer_ms_internode']}." if f["kv_in_node"] else "")
    return n


def _moe_sentence(f: dict) -> str:
    m = f["model"]
    if not m.is_moe:
        return ""
    return (f" {m.name} is a mixture of experts: each token goes to {m.experts_per_token} of the {m.experts} experts "
            f"of each MoE layer ({m.params(active=True) / 1e9:,.1f} of its {m.params() / 1e9:,.1f} billion "
            f"parameters), so a step reads only the experts its tokens route to, and a bigger batch touches more "
            f"of them.")


POLICY_WORDS = {"serial": "one request at a time", "static": "request-level (static) batching",
                "orca": "continuous batching with reserved KV", "vllm": "continuous batching and paged attention",
                "sarathi": "continuous batching, paged attention and chunked prefill",
                "sglang": "continuous batching, paged attention and prompt chunks in steps of their own (SGLang)",
                "inflight": "continuous batching and paged attention, whole prompts beside the decodes (TensorRT-LLM)"}


def deployment(cfg, gpu) -> str:
    """The simulated deployment in words: its GPUs, replicas and scheduling policy."""
    gpus = cfg.gpus or cfg.tp * cfg.pp
    replicas = gpus // (cfg.tp * cfg.pp)
    if cfg.pp > 1:
        shape = (f"{gpus} {gpu.name} GPUs as " + ("one replica" if replicas == 1 else f"{replicas} replicas")
                 + f" of tp={cfg.tp} x pp={cfg.pp} ({cfg.pp} pipeline stages)")
    elif gpus == 1:
        shape = f"one {gpu.name}"
    elif cfg.tp == 1:
        shape = f"{gpus} {gpu.name} GPUs, each its own replica"
    else:
        shape = (f"{gpus} {gpu.name} GPUs as " + ("one replica" if replicas == 1 else f"{replicas} replicas")
                 + f" of tp={cfg.tp}")
    served = engines.served_by(cfg)
    return f"{shape}, with {POLICY_WORDS[cfg.policy]}" + (f", served by {engines.name(served)}" if served != "vllm" else "")


def _chunk_sentence(f: dict, cfg, inputs: LabInputs) -> str:
    P, B, chunk = f["P"], f["batch_max"], f["chunk"]
    if cfg.policy == "sglang":
        return (f"SGLang runs prompts in steps of their own, in chunks of up to {cfg.chunk:,} tokens (its "
                f"chunked_prefill_size), while the decodes wait: no decode step carries a prompt, but every decode "
                f"pauses while one runs.")
    if inputs.engine == "trtllm":
        return "TensorRT-LLM runs each prompt whole (its chunked prefill is off unless asked for)."
    if cfg.policy != "sarathi":
        return ("Chunked prefill is off in the sidebar's Advanced settings, so each prompt runs whole, in a step "
                "of its own.")
    if chunk >= P:
        return (f"Beside {B:,} decodes, a step of {cfg.max_batched_tokens:,} tokens still has room for "
                f"{cfg.max_batched_tokens - B:,} prompt tokens, so a prompt of {P:,} tokens runs whole and chunking "
                f"changes nothing for prompts this short; longer ones are split.")
    k = math.ceil(P / chunk)
    return (f"Beside {B:,} decodes, a prompt of {P:,} tokens is split into chunks of up to {chunk:,} tokens over "
            f"{k:,} steps, and each shared step takes {ms(f['mixed_chunk']['step_ms'])} instead of "
            f"{ms(f['mixed']['step_ms'])}.")


STEP_PARTS = {  # a step's parts (costmodel.BREAKDOWN_NAMES) in words
    "linear": "projections and MLP", "experts": "routed experts", "elementwise": "norms and activations",
    "attn_decode": "attention over the KV cache", "attn_prefill": "prefill attention", "lm_head": "LM head",
    "comm": "all-reduces", "layer_overhead": "per-layer kernel overhead",
    "host_issue_wait": "waiting for the CPU to issue kernels", "scheduler": "the engine's per-step host work",
    "proposer": "the speculative proposer", "all_to_all": "the experts' dispatch and combine (all-to-all) the step waits for"}


def _breakdown(parts: dict[str, float]) -> str:
    top = sorted(((v, k) for k, v in parts.items() if v > 0), reverse=True)
    return "; ".join(f"{STEP_PARTS[k]} {ms(v)}" for v, k in top)


def _sim_numbers(f: dict, inputs: LabInputs) -> dict[str, str]:
    res = f["result"]
    if res is None:
        return {}
    s = res.summary
    e2e_ms = s["e2e_s"]["p50"] * 1e3
    tpot = s["tpot_ms"]["p50"]
    return dict(
        sim_requests=toks(s["requests"], "requests"), sim_steps=toks(s["steps"], "engine steps"),
        sim_wall_ms=ms(s["sim_wall_s"] * 1e3),
        sim_mean_batch=toks(s["mean_batch"], "sequences"), sim_kv_utilisation=f"{s['kv_utilization']:.1%}",
        sim_preemptions=toks(s["preemptions"], "preemptions"),
        sim_peak_kv=f"{s['peak_kv_blocks_used'] / max(s['kv_blocks_total'], 1):.0%}",
        sim_ttft_p50=growing(ms(s["ttft_ms"]["p50"]), s), sim_ttft_p99=growing(ms(s["ttft_ms"]["p99"]), s),
        sim_tpot_p50=ms(tpot), sim_user_tok_s=tok_s(1e3 / tpot) if tpot > 0 else NA,
        sim_e2e_p50=growing(ms(e2e_ms), s), streaming_ratio=times(e2e_ms / max(s["ttft_ms"]["p50"], 1e-9)),
        sim_throughput=tok_s(s["throughput_tok_s"]), sim_cost_per_1m=usd(s["cost_per_1m_tokens_usd"]),
        sim_ttft_verdict=("within" if s["ttft_ms"]["p99"] <= inputs.ttft_p99_ms else "over"),
        sim_stable=("keeps up with the arrivals" if s["stable"] else f"does not keep up: {overload(s)}"),
        prefix_sentence=_prefix_sentence(f, inputs, s),
    )


def _prefix_sentence(f: dict, inputs: LabInputs, s: dict) -> str:
    """What prefix caching did in the simulation, or would do, with its prefill times."""
    cfg, bs = f["cfg"], inputs.block_size
    if not inputs.shares_prefixes():
        shared = 1024
        cached = shared // bs * bs
        whole = steptime(cfg, prefill_tokens=shared + f["P"])["step_ms"]
        rest = steptime(cfg, prefill_tokens=shared + f["P"] - cached, prefill_cached=cached)["step_ms"]
        return (f"The sidebar's workload shares no prefix, so the cache finds nothing (Advanced: shared system "
                f"prompts, turns per conversation). Were every prompt to start with one system prompt of "
                f"{toks(shared)}, its {toks(cached // bs, 'full blocks')} would be found, and a prompt of "
                f"{toks(shared + f['P'])} would prefill in {ms(rest)} instead of {ms(whole)}.")
    if not cfg.prefix_caching or cfg.policy not in PAGED_POLICIES:
        why = ("prefix caching is off (Advanced)" if not cfg.prefix_caching else
               "prefix caching needs paged KV blocks (continuous batching)")
        return f"In the simulation of {deployment(cfg, f['gpu'])}, {why}: every prompt is prefilled whole."
    per_request = s["prefill_tokens_saved"] / max(s["requests"], 1)
    prompt = float(f["result"].workload.prompt_tokens.mean())
    cached = min(per_request, prompt - 1)
    whole = steptime(cfg, prefill_tokens=int(prompt))["step_ms"]
    rest = steptime(cfg, prefill_tokens=max(1, int(prompt - cached)), prefill_cached=int(cached))["step_ms"]
    return (f"In the simulation of {deployment(cfg, f['gpu'])}, {s['prefix_hit_rate']:.1%} of the prompt tokens "
            f"were found cached: {toks(s['prefill_tokens_saved'], 'prefill tokens')} saved, "
            f"{toks(per_request)} a request, and {toks(s['prefix_cache_evictions'], 'cached blocks')} evicted to "
            f"make room. A prompt of the average {toks(prompt)} prefills in {ms(rest)} with that much of it "
            f"cached, against {ms(whole)} whole.")


def placeholders() -> list[str]:
    return sorted(set(PLACEHOLDER.findall(TEXT.read_text())))


def _fill_missing(n: dict[str, str]) -> dict[str, str]:
    """Placeholders a deployment that could not be computed leaves empty read n/a; sentences that
    would only say so are left out."""
    for key in placeholders():
        n.setdefault(key, "" if key.endswith(("_sentence", "_verdict", "_reason")) else NA)
    return n


def roofline(inputs: LabInputs, batches: list[int]) -> list[dict]:
    """Decode tokens/s of one replica against batch size on the datasheet roofline, counting only
    the weights: each step streams them once (memory-bound) or multiplies every one of them by
    each sequence (compute-bound), whichever takes longer."""
    f = facts(inputs)
    cfg = f["cfg"]
    if cfg is None:
        return []
    # per GPU; the GPUs of a replica work in parallel. At batch 1 the weights read are the ones each
    # token multiplies (a mixture of experts touches more experts, so reads more, as the batch grows).
    active = f["d1"]["weight_bytes_read_per_gpu"] / f["wb"]
    rows = []
    for b in batches:
        read = steptime(cfg, decode_batch=b, context=1)["weight_bytes_read_per_gpu"]
        t_mem, t_flops = read / f["bw"], 2 * b * active / f["flops"]
        rows.append(dict(batch=b, tok_s=b / max(t_mem, t_flops),
                         regime="memory-bound" if t_mem >= t_flops else "compute-bound"))
    return rows


def note(inputs: LabInputs) -> str:
    """Why the numbers describe another deployment than the sidebar's, or "" when they do not."""
    return numbers(inputs)["settings_note"].removeprefix("> ")


def render(inputs: LabInputs, with_note: bool = True) -> str:
    """The write-up as Markdown, every placeholder filled for these inputs; the note on a
    deployment that cannot run as set opens it, unless the caller shows that note itself."""
    n = dict(numbers(inputs))
    if not with_note:
        n["settings_note"] = ""
    # what can be: paragraphs that need a number no deployment gave are left out
    blocks = [b for b in TEXT.read_text().split("\n\n") if all(n[k] != NA for k in PLACEHOLDER.findall(b))]
    # Markdown renderers read a pair of $ as math: escape the currency signs in the values
    return PLACEHOLDER.sub(lambda m: n[m.group(1)].replace("$", "\\$"), "\n\n".join(blocks))


def _memory_rule(plan, engine: str, weights_gb: str) -> dict[str, str]:
    """How the engine sizes its KV pool from one GPU's memory: the section's sentence, ending where the
    pool's size is named, and the same rule in a few words."""
    work, pool, share, name = gb(plan.workspace_bytes), gb(plan.kv_pool_bytes), f"{plan.mem_util:.0%}", engines.name(engine)
    if plan.share == "free":
        return dict(memory_rule_sentence=f"The weights take {weights_gb} of it per GPU and the activation workspace "
                                         f"{work}; {name} gives the KV cache {share} of the rest, **{pool}**:",
                    memory_rule_short=f"{share} of what the weights and workspace leave, {name}'s")
    if plan.share == "static":
        share = f"{plan.mem_util:.1%}"
        return dict(memory_rule_sentence=f"{name} gives the weights and the KV cache {share} of that "
                                         f"({gb(plan.budget_bytes)}, its mem_fraction_static for this GPU), and keeps "
                                         f"the rest for activations and CUDA graphs (the workspace needs {work}). The "
                                         f"weights take {weights_gb} per GPU; the rest of the share, **{pool}**, "
                                         f"becomes the KV pool:",
                    memory_rule_short=f"{share} of usable memory for the weights and the pool, {name}'s "
                                      f"mem_fraction_static")
    return dict(memory_rule_sentence=f"vLLM takes {share} of that ({gb(plan.budget_bytes)}). The weights take {weights_gb} "
                                     f"of it per GPU and the activation workspace {work}. The rest, **{pool}**, "
                                     f"becomes the KV pool:",
                memory_rule_short=f"{share} of usable memory for all of it, vLLM's")

