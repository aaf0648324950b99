"""Your data on the command line: `python -m core calibrate RESULT.json ...`, the hardware options
every command takes (--profile, --gpu-file; a price as --gpu h100@1.85) and `--csv DIR`."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..physics import catalog, hardware, hfconfig
from ..serving import benchfile, calibrate, engines, export, replay
from ..serving.simulate import SimConfig
from ..serving.workload import WorkloadSpec
from ..text import against
from .args import bounded, emit

SIZE_HINT = f"at most {benchfile.MAX_BYTES // 1024**2} MB"


def add_hardware_args(p, many: bool = False) -> None:
    """--profile / --gpu-file: a calibrated profile or a datasheet JSON; its GPU is used (added to
    the searched GPUs with `many`)."""
    p.add_argument("--profile", default=None, metavar="FILE",
                   help="a hardware profile JSON (from `calibrate --out`): its GPU and fitted constants")
    p.add_argument("--gpu-file", default=None, metavar="FILE",
                   help="your GPU's datasheet as JSON (name, memory_gib, hbm_tbps, bf16_tflops, fp8_tflops, "
                        "link_gbps_per_dir, price_usd_per_gpu_hour)")
    p.add_argument("--model-config", default=None, metavar="PATH",
                   help="a Hugging Face config.json (read as data, never run): the model to serve instead of --model")
    p.set_defaults(many_gpus=many)


def _read(path: str, what: str) -> bytes:
    try:
        p = Path(path)
        if p.stat().st_size > benchfile.MAX_BYTES:
            raise ValueError(f"{what} '{path}' is larger than {SIZE_HINT}")
        return p.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {what} '{path}': {e.strerror}") from None


def apply_model_config(args) -> None:
    """Register the model of --model-config and point --model at it."""
    path = getattr(args, "model_config", None)
    if path:
        if getattr(args, "model", None):
            raise ValueError("give either --model or --model-config, not both")
        parsed = hfconfig.parse(_read_config(path), Path(path).name)
        args.model = catalog.register_model(parsed.model).id
        args.model_config = None  # applied once
    elif getattr(args, "model_required", False) and not getattr(args, "model", None):
        raise ValueError("give --model (a catalog id, or dense-<N>b) or --model-config (a config.json)")


def _read_config(path: str) -> bytes:
    try:
        p = Path(path)
        if p.stat().st_size > hfconfig.MAX_BYTES:
            raise ValueError(f"'{path}' is {p.stat().st_size / 1024:.0f} KB: a config.json is a few KB (at most "
                             f"{hfconfig.MAX_BYTES // 1024} KB here)")
        return p.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read the config file '{path}': {e.strerror}") from None


def apply_hardware(args) -> None:
    """Register the GPU of --profile / --gpu-file and point --gpu at it (and the model of --model-config)."""
    apply_model_config(args)
    given = [x for x in ("profile", "gpu_file") if getattr(args, x, None)]
    if not given:
        # a split over two GPU types names them with --prefill-gpu and --decode-gpu (simulate.pool_gpus)
        pools = getattr(args, "prefill_gpu", None) is not None or getattr(args, "decode_gpu", None) is not None
        if getattr(args, "gpu", None) is None and hasattr(args, "profile") and not pools:
            raise ValueError("give --gpu (a catalog id, e.g. h100, or h100@1.85 for your price), --gpu-file or --profile")
        return
    if len(given) > 1:
        raise ValueError("give either --profile or --gpu-file, not both")
    if args.profile:
        gpu = hardware.load_profile(_read(args.profile, "profile"))
    else:
        gpu = hardware.register_datasheet(_read(args.gpu_file, "GPU file"))
    if args.many_gpus and args.gpu:
        args.gpu = f"{args.gpu},{gpu.id}"
    else:
        args.gpu = gpu.id


def write_simulation_csv(folder: str, result, inputs: dict) -> list[Path]:
    return export.write_dir(folder, {"requests.csv": export.requests_csv(result), "steps.csv": export.steps_csv(result),
                                     "run.json": export.to_json(export.run_dict(result, inputs))})


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="compare a benchmark result with the simulation and fit the cost model to it")
    p.add_argument("result", help="`vllm bench serve --save-result` JSON or SGLang bench_serving JSON lines")
    p.add_argument("--gpu", default=None, help="the GPU the benchmark ran on (catalog id; h100@1.85 for your price)")
    p.add_argument("--model", default=None, help="model id (default: read from the file where it names one)")
    p.add_argument("--tp", type=bounded("tp"), default=None,
                   help="tensor-parallel degree of one replica (default: what the file's metadata or name says, "
                        "e.g. '_tp8_'; else 1)")
    p.add_argument("--gpus", type=bounded("gpus"), default=None, help="GPUs in all (default: tp, one replica)")
    p.add_argument("--dtype", "--weights", dest="dtype", default="bf16", choices=catalog.WEIGHT_DTYPES,
                   help="the benchmark's weights: bf16, fp8 or int4 (AWQ/GPTQ)")
    p.add_argument("--kv-dtype", default="bf16", choices=catalog.KV_DTYPES, help="the benchmark's KV cache dtype")
    p.add_argument("--policy", default=None, choices=("sarathi", "vllm", "sglang"),
                   help="sarathi: chunked prefill (vLLM V1's default); vllm: whole prompts in steps of their own; "
                        "sglang: prompt chunks in steps of their own (default: sglang for an SGLang file, else sarathi)")
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None,
                   help="the engine planned each step while the last ran (vLLM 0.14 and later; default: what the "
                        "file's metadata or name says of vLLM's version, else on)")
    p.add_argument("--max-batched-tokens", type=bounded("budget"), default=None,
                   help="the engine's token budget per step (default 2048; an SGLang file: SGLang's chunk for the GPU)")
    p.add_argument("--max-seqs", type=bounded("max_seqs"), default=None,
                   help="the engine's sequences per step (default 256; an SGLang file: SGLang's 2,048)")
    p.add_argument("--concurrency", type=bounded("concurrency"), default=None, metavar="N",
                   help="requests in flight at most (default: the file's max_concurrency; none: open loop)")
    p.add_argument("--think-time", type=bounded("think_time"), default=0.0, metavar="S",
                   help="seconds a user waits after an answer before its next request (with a concurrency)")
    p.add_argument("--think-dist", default="fixed", choices=("fixed", "exponential"))
    p.add_argument("--line", type=bounded("line"), default=None, help="which run of a JSON-lines file (1-based line)")
    p.add_argument("--seed", type=bounded("seed"), default=0, help="seed of drawn arrivals and lengths")
    p.add_argument("--name", default=None, help="profile name (default: '<gpu> calibrated')")
    p.add_argument("--out", default=None, metavar="FILE", help="write the calibrated hardware profile here")
    p.add_argument("--compare-only", action="store_true", help="compare without fitting")
    p.add_argument("--csv", default=None, metavar="DIR", help="write the comparison and the run as CSV/JSON here")
    add_hardware_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_calibrate)


def pick_run(runs: list, line: int | None):
    if line is None:
        if len(runs) > 1:
            raise ValueError("the file holds several runs: choose one with --line: " +
                             "; ".join(r.label() for r in runs))
        return runs[0]
    for r in runs:
        if r.line == line:
            return r
    raise ValueError(f"no run on line {line}: the runs are on lines {', '.join(str(r.line) for r in runs)}")


def cmd_calibrate(args) -> None:
    apply_hardware(args)
    run = pick_run(benchfile.parse(_read(args.result, "result file"), Path(args.result).name), args.line)
    model = args.model or replay.guess_model(run.model_id)
    if model is None:
        raise ValueError("the file does not name a model the catalog knows" +
                         (f" ('{run.model_id}')" if run.model_id else "") + ": give --model")
    said = replay.said_deployment(run)
    tp, tp_from = (args.tp, "") if args.tp is not None else \
        (said["tp"][0], f" (from {said['tp'][1]})") if "tp" in said else (1, "")
    async_on, async_from = (args.async_scheduling, "") if args.async_scheduling is not None else \
        (said["async_scheduling"][0], f" (from {said['async_scheduling'][1]})") if "async_scheduling" in said \
        else (True, "")
    args.tp = tp
    if args.think_time and not (args.concurrency or run.max_concurrency):
        raise ValueError("--think-time is a closed loop's: the file records no max_concurrency, so give --concurrency N")
    clients = WorkloadSpec(concurrency=args.concurrency or 0, think_s=args.think_time, think_dist=args.think_dist)
    # an SGLang file replays with SGLang's profile (serving/engines.py), each setting its flag leaves unsaid
    engine = dict(policy="sarathi", max_batched_tokens=2048, max_seqs=256, engine_overhead="vllm")
    if run.tool == "sglang" and args.gpu:
        engine = engines.sglang_defaults(catalog.get_gpu(args.gpu), tp)
    args.policy = args.policy or engine["policy"]
    args.max_batched_tokens = args.max_batched_tokens or engine["max_batched_tokens"]
    args.max_seqs = args.max_seqs or engine["max_seqs"]
    base = SimConfig(gpu=args.gpu, model=model, tp=tp, gpus=args.gpus, dtype=args.dtype, kv_dtype=args.kv_dtype,
                     policy=args.policy, max_batched_tokens=args.max_batched_tokens, max_seqs=args.max_seqs,
                     async_scheduling=async_on, workload=clients, engine_overhead=engine["engine_overhead"])
    gpu = catalog.get_gpu(args.gpu)
    lines = [f"{run.label()}; replayed on {catalog.get_model(model).label()}, {base.gpus or base.tp} x {gpu.name}, "
             f"tp {tp}{tp_from}, {args.policy} with {args.max_batched_tokens} tokens per step, "
             f"{'async' if async_on else 'synchronous'} scheduling{async_from}"]
    lines += [f"  note: {n}" for n in replay.notes(run)]
    if args.compare_only:
        cmp = replay.compare(run, base, seed=args.seed)
        rows, out, result = cmp.rows, {"comparison": cmp.rows, "notes": cmp.notes}, cmp.result
        lines += _table(rows, None)
    else:
        cal = calibrate.fit(run, base, args.seed)
        rows, out = cal.rows_after, cal.to_json()
        result = calibrate.comparison_after(cal).result
        lines += [f"  {k}: {cal.before[k]:.3f} -> {cal.after[k]:.3f} (from the median {cal.targets[k][0].upper()}"
                  + (f"; at its {cal.bound[k]} bound" if cal.bound.get(k) else "") + ")" for k in cal.after]
        lines += [f"  warning: {w}" for w in cal.warnings]
        lines += _table(cal.rows_before, cal.rows_after)
        if args.out:
            name = args.name or f"{gpu.name} calibrated"
            prof = calibrate.profile(cal, name)
            export.write_dir(Path(args.out).parent or ".", {Path(args.out).name: export.to_json(prof)})
            out["profile"] = str(args.out)
            lines.append(f"hardware profile '{name}' written to {args.out}: use it with --profile {args.out}")
    if args.csv:
        rows_csv = export.table_csv(rows, f"measured against simulated, {run.label()}")
        paths = write_simulation_csv(args.csv, result, {"result_file": Path(args.result).name, "line": run.line,
                                                         "model": model, "gpu": args.gpu, "tp": args.tp})
        paths += export.write_dir(args.csv, {"comparison.csv": rows_csv})
        lines.append(f"wrote {', '.join(p.name for p in paths)} to {args.csv}")
    emit(out, args.json, lines)


def _table(before: list[dict], after: list[dict] | None) -> list[str]:
    """Measured against simulated (and calibrated), each comparison in words ('12% higher')."""
    labels = [f"{r['metric']} ({r['unit']})" for r in before]
    w = max([len("metric")] + [len(x) for x in labels]) + 1  # 'Output throughput (tok/s)' ran into its figure
    head = f"  {'metric':<{w}}{'measured':>11}{'simulated':>11}  {'vs measured':<16}"
    lines = [(head + (f"{'calibrated':>11}  {'vs measured':<16}" if after else "")).rstrip()]
    for i, r in enumerate(before):
        line = (f"  {labels[i]:<{w}}{r['measured']:11.2f}{r['simulated']:11.2f}  "
                f"{against(r['error']):<16}")
        if after:
            a = after[i]
            line += f"{a['simulated']:11.2f}  {against(a['error']):<16}"
        lines.append(line.rstrip())
    return lines
