"""What every command shares: a parser whose errors are one line, the argument types, and output
as text or JSON."""
from __future__ import annotations

import argparse
import json
import sys

from .. import bounds
from ..physics import catalog
from ..serving import export
from ..serving.serve_command import release_dtype


MEM_UTIL_HELP = ("the engine's memory share: vLLM's gpu_memory_utilization (weights, workspace and KV cache), "
                 "TensorRT-LLM's free-memory fraction (the KV cache's share of what the weights and workspace leave), "
                 "SGLang's mem_fraction_static (weights and KV cache); 0.9 keeps each engine's default (SGLang's "
                 "own for the GPU)")
DTYPE_HELP = ("weights: bf16, fp8 (W8A8, needs FP8 support), fp4 (4-bit W4A4 on FP4 tensor cores, "
              f"{catalog.fp4_gpus()}), mxfp4 or int4 (AWQ/GPTQ, group 128); default: as the model is released "
              "(a quantised repo's name, gpt-oss's MXFP4, DeepSeek's fp8), else bf16")


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2 (argparse prints usage + message otherwise)
        raise UsageError(f"{self.prog}: {message}")


class UsageError(Exception):
    pass


def bounded(name: str):
    """The argument type of input `name` of the one table of ranges (core/bounds.py): finite,
    inside its range, whole where it counts something."""
    def parse(text: str):
        try:
            return bounds.parse(name, text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = name  # argparse names the type in some messages
    return parse


def emit(result: dict, as_json: bool, lines: list[str]) -> None:
    if as_json:
        json.dump(export.finite(result), sys.stdout, indent=1, default=jsonable, allow_nan=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write("\n".join(lines) + "\n")


def jsonable(o):
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"cannot write {type(o).__name__} as JSON")


def add_client_args(p: argparse.ArgumentParser) -> None:
    """How the load is offered: an open loop at --rate, or --concurrency users in a closed loop."""
    p.add_argument("--concurrency", type=bounded("concurrency"), default=None, metavar="N",
                   help="a closed loop of N users, each sending its next request when its last one has finished "
                        "(vLLM's --max-concurrency); with --rate as well, requests fall due at the rate and at most N "
                        "are in flight")
    p.add_argument("--think-time", type=bounded("think_time"), default=0.0, metavar="S",
                   help="seconds a closed loop's user waits after an answer before its next request")
    p.add_argument("--think-dist", default="fixed", choices=("fixed", "exponential"),
                   help="think time: the same every time, or exponential around --think-time")


def client_fields(args, default_rate: float | None = 5.0) -> dict:
    """WorkloadSpec's rate and client fields from the arguments: a closed loop without --rate sends
    as fast as its users are answered (vLLM's default --request-rate inf)."""
    if args.concurrency is None:
        if args.think_time:
            raise ValueError("--think-time is a closed loop's: give --concurrency N as well")
        if args.rate is None and default_rate is None:
            raise ValueError("give --rate (requests/s, an open loop) or --concurrency (users, a closed loop)")
        return dict(rate=args.rate if args.rate is not None else default_rate)
    return dict(rate=args.rate if args.rate is not None else float("inf"), concurrency=args.concurrency,
                think_s=args.think_time, think_dist=args.think_dist)


def acceptance_arg(text: str):
    """--spec-acceptance: one rate within 0..1, or one per draft token ('0.9,0.8,0.6')."""
    from ..physics.speculative import parse_acceptance
    try:
        value = parse_acceptance(text)
        for a in (value if isinstance(value, tuple) else (value,)):
            bounds.check("spec_acceptance", a)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def add_spec_args(p: argparse.ArgumentParser) -> None:
    """Speculative decoding (physics/speculative.py; the defaults' sources: data/speculative.json)."""
    from ..physics.speculative import METHODS
    p.add_argument("--spec-method", default=None, choices=METHODS,
                   help="speculative decoding's proposer: a draft model, an EAGLE or EAGLE-3 head, DeepSeek's MTP "
                        "module, or n-gram prompt lookup (default: off)")
    p.add_argument("--spec-tokens", type=bounded("spec_tokens"), default=None, metavar="K",
                   help="draft tokens a step (vLLM's num_speculative_tokens; default: the method's)")
    p.add_argument("--spec-acceptance", type=acceptance_arg, default=None, metavar="A",
                   help="chance a draft token is accepted given the ones before it were: one rate, or one per draft "
                        "position (0.9,0.8,0.6); default: the method's published rate")
    p.add_argument("--draft-model", default=None, metavar="ID",
                   help="the draft model of --spec-method draft (e.g. llama-3.2-1b for Llama-3.1)")


def add_offload_args(p: argparse.ArgumentParser) -> None:
    """KV offload to host memory (serving/offload.py; the defaults' sources: data/kv_offload.json)."""
    p.add_argument("--kv-offload-gb", type=bounded("kv_offload_gb"), default=0.0, metavar="GIB",
                   help="host-memory KV tier per replica, GiB over all its GPUs (vLLM's --kv-offloading-size; "
                        "default 0: none): blocks the GPU's prefix cache evicts go there and load back on a hit")
    p.add_argument("--kv-offload-gbps", type=bounded("kv_offload_gbps"), default=None, metavar="GBPS",
                   help="host link per GPU, GB/s (default: the GPU family's measured PCIe copy rate)")


def offload_fields(args) -> dict:
    return dict(kv_offload_gb=args.kv_offload_gb, kv_offload_gbps=args.kv_offload_gbps)


def spec_fields(args) -> dict:
    return dict(spec_method=args.spec_method, spec_tokens=args.spec_tokens, spec_acceptance=args.spec_acceptance,
                draft_model=args.draft_model)


def weights_as_released(args) -> None:
    """--dtype left out: the format the model's checkpoint holds (release_dtype), as the engine reads it
    from the checkpoint; `args.dtype_note` says so where that is not 16-bit."""
    if not hasattr(args, "dtype") or args.dtype is not None:
        return
    args.dtype = release_dtype(getattr(args, "model", None))
    args.dtype_note = (f"weights: {args.dtype}, as {args.model} is released (--dtype for another format)"
                       if args.dtype != "bf16" else None)
