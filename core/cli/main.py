"""Command line: `python -m core {catalog,steptime,memory,compile,simulate,sweep,plan,calibrate} ... [--json]`.

Bad arguments print one line on stderr and exit with status 2; no traceback reaches the user.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace

from .. import jitcache
from ..physics import catalog, costmodel, memory
from ..serving import engines
from ..serving.command import engine_defaults
from ..serving.experts import check_experts
from ..serving.simulate import SimConfig, steptime
from . import plan, simulate, sweep, yourdata
from .args import DTYPE_HELP, MEM_UTIL_HELP, Parser, UsageError, bounded, emit, weights_as_released


# ---------------------------------------------------------------- commands

def cmd_catalog(args) -> None:
    data = catalog.catalog_dict()
    lines = ["GPUs:"]
    for g in data["gpus"]:
        lines.append(f"  {g['id']:<10} {g['name']:<32} {g['memory_gib']:>5g} GiB  {g['hbm_tbps']:>5g} TB/s  "
                     f"{g['bf16_tflops']:>6g} TFLOP/s bf16  ${g['price_usd_per_gpu_hour']:.2f}/GPU-h ({g['price_date']})")
    lines.append("Models:")
    for m in data["models"]:
        moe = f" MoE {m['experts']}x top-{m['experts_per_token']}" if m["moe"] else ""
        lines.append(f"  {m['id']:<15} {m['params_total'] / 1e9:7.1f}B params ({m['params_active'] / 1e9:.1f}B active)"
                     f"  {m['attention']}{moe}  KV {m['kv_bytes_per_token_bf16'] / 1024:.1f} KiB/token")
    lines.append("Parametric: dense-<N>b (1b to 1000b), an interpolated Llama-3 shape.")
    emit(data, args.json, lines)


def cmd_steptime(args) -> None:
    cfg = SimConfig(gpu=args.gpu, model=args.model, dtype=args.dtype, kv_dtype=args.kv_dtype, launch=args.launch,
                    attn_kernel=args.attention, engine_overhead=args.engine, **simulate.expert_fields(args))
    check_experts(cfg)
    cfg = replace(cfg, **engine_defaults(cfg.gpu, cfg.engine_overhead, True, cfg.tp, cfg.dp_attention))
    r = steptime(cfg, decode_batch=args.decode_batch, context=args.context, prefill_tokens=args.prefill_tokens,
                 prefill_cached=args.prefill_cached)
    r.update(ep=cfg.ep, dp_attention=cfg.dp_attention)
    gpu, model = catalog.get_gpu(cfg.gpu), catalog.get_model(cfg.model)
    engine = (f"as {engines.profiles()[cfg.engine_overhead]['name']} runs it" if cfg.engine_overhead != "bare"
              else "a bare forward pass")
    experts = (f" (experts over {cfg.ep} GPUs{', attention data-parallel' if cfg.dp_attention else ''})"
               if cfg.ep > 1 else "")
    lines = [f"{model.label()} on {cfg.tp} x {gpu.name}{experts}, {engine}: one step of "
             f"{r['tokens']} tokens takes {r['step_ms']:.3f} ms (tensor-parallel communication {r['comm_ms']:.3f} ms)"]
    lines += [f"  {k:<16} {v:8.3f} ms" for k, v in r["breakdown_ms"].items() if v > 0]
    emit(r, args.json, lines)


def cmd_memory(args) -> None:
    gpu, model = catalog.get_gpu(args.gpu), catalog.get_model(args.model)
    cfg = SimConfig(gpu=args.gpu, model=args.model, pp=args.pp, **simulate.expert_fields(args))
    check_experts(cfg)
    tp = cfg.tp
    plan = memory.plan_memory(gpu, model, tp, args.block_size, max_batched_tokens=args.max_batched_tokens,
                              max_seqs=args.max_seqs, dtype=args.dtype, pp=args.pp, kv_dtype=args.kv_dtype, ep=args.ep,
                              dp_attention=args.dp_attention, redundant_experts=args.redundant_experts,
                              **engines.kv_memory(args.engine, gpu, tp, args.pp, args.dp_attention, args.mem_util))
    d = plan.to_dict()
    stages = f" x pp={args.pp} ({tp * args.pp} GPUs; the fullest stage)" if args.pp > 1 else ""
    experts = ""
    if args.ep > 1:
        held = (model.experts + args.redundant_experts) // args.ep
        experts = (f" (experts over {args.ep} GPUs, {held} a GPU"
                   f"{'; attention data-parallel, its weights whole on each' if args.dp_attention else ''})")
    per_token = f"{plan.kv_bytes_per_token / 1024:.1f} KiB/token per GPU"
    ranks = ""
    if args.dp_attention:  # a sequence's whole KV on the one rank that runs it; the blocks are the ranks' together
        per_token = f"{plan.kv_bytes_per_token * tp / 1024:.1f} KiB/token on the rank that runs the sequence"
        ranks = f" over the replica's {tp} attention ranks ({plan.kv_blocks // tp} blocks each)"
    lines = [f"{model.label()} on {tp} x {gpu.name}{stages}{experts}, {args.dtype} weights, {args.kv_dtype} KV cache, "
             f"per GPU:",
             f"  usable memory     {d['usable_gb_per_gpu']:8.2f} GB ("
             + plan.share_words() + ")",
             f"  weights           {d['weights_gb_per_gpu']:8.2f} GB",
             f"  workspace         {d['workspace_gb_per_gpu']:8.2f} GB",
             f"  KV cache          {d['kv_gb_per_gpu']:8.2f} GB at {per_token}",
             f"  KV blocks         {plan.kv_blocks:8d} of {args.block_size} tokens = {plan.kv_tokens} tokens{ranks}"]
    if plan.state_bytes:  # linear-attention layers: a fixed state a sequence, set aside of the KV cache's memory
        lines.insert(-1, f"  of which state    {plan.state_bytes / 1e9:8.2f} GB: the {model.linear_layers} linear-attention "
                         f"layers' state of {args.max_seqs} sequences ({plan.state_bytes / args.max_seqs / 1e6:.1f} MB each)")
    emit(d, args.json, lines)


def cmd_compile(args) -> None:
    m = jitcache.build()
    lines = [f"compiled the engine in {m['compile_s']:.0f} s ({m['compile_cpu_s']:.0f} s of CPU) for a generic "
             f"{m['triple']} CPU, Python {m['python']}, numba {m['numba']}; sources digest {m['digest']}",
             f"wrote {jitcache.SHIPPED.relative_to(jitcache.PACKAGE.parent)}/ (commit it with the sources)"]
    emit(m, args.json, lines)


def _add_shape_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", default=None, help="GPU id (see `catalog`); h100@1.85 for your price per GPU-hour")
    p.add_argument("--model", default=None, help="model id, or dense-<N>b for a parametric model (or --model-config)")
    p.set_defaults(model_required=True)
    p.add_argument("--tp", type=bounded("tp"), default=1, help="tensor-parallel degree (GPUs per replica)")
    p.add_argument("--dtype", "--weights", dest="dtype", default=None, choices=catalog.WEIGHT_DTYPES,
                   help=DTYPE_HELP)
    p.add_argument("--kv-dtype", default="bf16", choices=catalog.KV_DTYPES,
                   help="KV cache: bf16, or fp8 (half the bytes a token, needs FP8 support)")
    p.add_argument("--json", action="store_true", help="print JSON")
    yourdata.add_hardware_args(p)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m core", description="LLM Serving Design Lab: the numeric core, headless.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("catalog", help="list GPUs and models")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_catalog)

    p = sub.add_parser("steptime", help="time of one engine step for a token mix")
    _add_shape_args(p)
    p.add_argument("--decode-batch", type=bounded("decode_batch"), default=0, help="decoding sequences in the step")
    p.add_argument("--context", type=bounded("context"), default=0, help="tokens each decoding sequence attends to")
    p.add_argument("--prefill-tokens", type=bounded("prefill_tokens"), default=0, help="new tokens of one prefill chunk")
    p.add_argument("--prefill-cached", type=bounded("prefill_cached"), default=0, help="tokens already cached before the chunk")
    p.add_argument("--launch", default="auto", choices=sorted(costmodel.LAUNCH_MODES),
                   help="CUDA graphs, eager, or auto (graphs for decode-only steps)")
    p.add_argument("--attention", default="sdpa", choices=costmodel.ATTN_KERNELS,
                   help="decode attention kernel: sdpa (one thread block per sequence and KV head, as "
                        "measured) or paged (split-KV in 512-token partitions)")
    p.add_argument("--engine", default="bare", choices=costmodel.ENGINES,
                   help="bare: a forward pass alone (default); vllm, sglang or trtllm: as that engine runs the step "
                        "(its host time, and its CUDA graphs: SGLang's and TensorRT-LLM's of decode steps only, "
                        "up to their batch limits), as `simulate --engine` does")
    simulate.add_expert_args(p)
    p.set_defaults(func=cmd_steptime)

    p = sub.add_parser("memory", help="per-GPU memory plan and KV blocks")
    _add_shape_args(p)
    p.add_argument("--block-size", type=bounded("block"), default=16, help="tokens per KV block")
    p.add_argument("--mem-util", type=bounded("mem_util"), default=memory.MEM_UTIL, help=MEM_UTIL_HELP)
    p.add_argument("--max-batched-tokens", type=bounded("budget"), default=8192, help="token budget of one step")
    p.add_argument("--max-seqs", type=bounded("max_seqs"), default=256, help="sequences per step")
    p.add_argument("--pp", type=bounded("pp"), default=1, help="pipeline stages (the plan is the fullest stage's GPU)")
    p.add_argument("--engine", default="vllm", choices=engines.SERVING,
                   help="whose rule sizes the KV pool: vLLM's (and SGLang's, as simulated) share of the whole GPU, or "
                        "TensorRT-LLM's share of the memory the weights leave, counting a sliding-window layer whole")
    simulate.add_expert_args(p, pace=False)
    p.set_defaults(func=cmd_memory)

    p = sub.add_parser("compile", help="compile the engine into core/compiled/, the cache that ships with the "
                                       "code (run after changing the engine's sources)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compile)

    simulate.register(sub)
    sweep.register(sub)
    plan.register(sub)
    yourdata.register(sub)

    return parser


def simulation_of(command: str):
    """The SimConfig a `python -m core simulate ...` line asks for, parsed as the command line parses
    it (a trailing # note is a comment): what a page's reproduce command and a public run's replay
    (calibration/family_check.py) stand for."""
    words = shlex.split(command, comments=True)
    if words[:4] != ["python", "-m", "core", "simulate"]:
        raise ValueError(f"not a `python -m core simulate` command: {command}")
    args = build_parser().parse_args(words[3:])
    yourdata.apply_hardware(args)
    weights_as_released(args)
    return simulate.config_from_args(args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if hasattr(args, "profile"):
            yourdata.apply_hardware(args)
        weights_as_released(args)
        args.func(args)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return 0
