"""`python -m core simulate`: a serving simulation from the command line."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..engine import layout
from ..physics import catalog, costmodel
from ..physics.memory import MEM_UTIL
from ..serving import engines
from ..serving.command import DEFAULTS, cli_max_model_len, filled_defaults
from ..serving.metrics import clients_words, overload
from ..serving.simulate import SCALE_METRICS, SimConfig, simulate
from ..serving.workload import ARRIVALS, LENGTH_DISTS, WorkloadSpec, diurnal_schedule, parse_schedule
from ..text import count
from .args import (DTYPE_HELP, MEM_UTIL_HELP, add_client_args, add_offload_args, add_spec_args, bounded, client_fields,
                   emit, offload_fields, spec_fields)
from .yourdata import add_hardware_args, write_simulation_csv


def register(sub) -> None:
    p = sub.add_parser("simulate", help="simulate serving a workload, step by step")
    add_shape_args(p)
    add_args(p)
    add_client_args(p)
    p.add_argument("--csv", default=None, metavar="DIR", help="write requests.csv, steps.csv and run.json here")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_simulate)


def add_shape_args(p) -> None:
    """The deployment's GPU, sharding and weights (the sweep takes lists of them instead)."""
    p.add_argument("--gpu", default=None, help="GPU id; h100@1.85 for your price per GPU-hour")
    p.add_argument("--tp", type=bounded("tp"), default=1, help="tensor-parallel degree of a replica")
    p.add_argument("--gpus", type=bounded("gpus"), default=None, help="GPUs in all (default: tp x pp, one replica)")
    p.add_argument("--dtype", "--weights", dest="dtype", default=None, choices=catalog.WEIGHT_DTYPES,
                   help=DTYPE_HELP)


def add_expert_args(p, pace: bool = True) -> None:
    """How an MoE model's experts and attention split over a replica's GPUs (physics/expert.py); pace:
    with the flags that change a step's time alone (the load spread, micro-batch overlap)."""
    p.add_argument("--ep", type=bounded("ep"), default=1,
                   help="expert parallelism: the replica's N GPUs each hold experts/N whole experts (vLLM "
                        "--enable-expert-parallel); tp defaults to N; with --disagg each pool's experts split "
                        "over its own replica's GPUs (--prefill-tp, --decode-tp)")
    p.add_argument("--dp-attention", action="store_true",
                   help="with --ep: attention and the KV cache data-parallel over the same GPUs, an all-to-all "
                        "dispatching tokens to their experts (vLLM --data-parallel-size, SGLang --enable-dp-attention)")
    p.add_argument("--eplb", action="store_true",
                   help="with --ep: the expert-parallel load balancer (vLLM --enable-eplb) places the experts so "
                        "that every rank receives about the mean (the busiest of 32 ranks 1.11x it, not 2.56x)")
    p.add_argument("--redundant-experts", type=bounded("redundant_experts"), default=0, metavar="N",
                   help="with --eplb: N extra copies of the most popular experts (vLLM's num_redundant_experts; "
                        "32 in large deployments): each GPU holds (experts + N) / ep, so 256 experts and 32 "
                        "copies split over 36, 48 or 72 GPUs")
    if not pace:
        return
    p.add_argument("--ep-load-cv", type=bounded("ep_load_cv"), default=None,
                   help="spread of routed tokens over experts, std/mean (default 1.28, DeepSeek-R1 without EPLB; "
                        "0.12 with --eplb; 0: perfectly balanced)")
    p.add_argument("--micro-batch-overlap", action="store_true",
                   help="with --dp-attention: each step as two micro-batches, one's expert all-to-all under the "
                        "other's compute, each streaming the weights (vLLM --enable-dbo, SGLang "
                        "--enable-two-batch-overlap)")


def expert_fields(args) -> dict:
    """ep, dp_attention, EPLB and the load spread for a SimConfig; --ep alone sets the replica's tp to it.
    A command without the pace flags (add_expert_args(pace=False)) leaves those at SimConfig's defaults."""
    tp = args.ep if args.ep > 1 and args.tp == 1 else args.tp
    return dict(tp=tp, ep=args.ep, dp_attention=args.dp_attention, ep_load_cv=getattr(args, "ep_load_cv", None),
                eplb=args.eplb, redundant_experts=args.redundant_experts,
                micro_batch_overlap=getattr(args, "micro_batch_overlap", False))


def add_args(p) -> None:
    """Everything else a simulation takes: the model, the engine, the workload, the cluster."""
    p.add_argument("--model", default=None, help="model id, or dense-<N>b for a parametric model (or --model-config)")
    p.set_defaults(model_required=True)
    p.add_argument("--pp", type=bounded("pp"), default=1,
                   help="pipeline stages of a replica (tp GPUs each; pp batches in flight); a replica of tp x pp GPUs")
    add_expert_args(p)
    p.add_argument("--kv-dtype", default="bf16", choices=catalog.KV_DTYPES,
                   help="KV cache: bf16, or fp8 (half the bytes a token, twice the blocks; needs FP8 support)")
    p.add_argument("--rate", type=bounded("rate"), default=None,
                   help="mean request rate, req/s (default 5; with --concurrency, none: a pure closed loop)")
    p.add_argument("--prompt", type=bounded("prompt"), default=None, help="mean prompt tokens (default: the distribution's)")
    p.add_argument("--output", type=bounded("output"), default=None, help="mean output tokens (default: the distribution's)")
    p.add_argument("--requests", type=bounded("requests"), default=DEFAULTS["requests"],
                   help="requests to simulate (default 2000, the Lab's: enough for a stable p99)")
    p.add_argument("--policy", default=None, choices=layout.POLICIES,
                   help="scheduler (default sarathi: continuous batching with chunked prefill, vLLM V1's and the "
                        "Lab's default; vllm: whole prompts in steps of their own; inflight: whole prompts beside the "
                        "decodes, as far as the token budget holds them (TensorRT-LLM's in-flight batching); with "
                        "--engine sglang or trtllm the engine's own)")
    p.add_argument("--length-dist", default=DEFAULTS["length_dist"], choices=LENGTH_DISTS,
                   help="prompt and output lengths around --prompt/--output (default lognormal, the Lab's: no real "
                        "workload sends one length; fixed: every request the same)")
    p.add_argument("--spread", type=bounded("spread"), default=DEFAULTS["spread"],
                   help="uniform: +-fraction; lognormal: sigma (default 0.5)")
    p.add_argument("--arrival", default="poisson", choices=ARRIVALS)
    p.add_argument("--cv", type=bounded("cv"), default=1.0, help="coefficient of variation of gamma gaps")
    p.add_argument("--block-size", type=bounded("block"), default=16)
    p.add_argument("--max-seqs", type=bounded("max_seqs"), default=None,
                   help="sequences a step (default 256, the Lab's; with --offline vLLM's LLM class's for the GPU: "
                        "1024 on GPUs of 70 GiB and more bar A100s; with --engine sglang its own; trtllm 2048, and with "
                        "--offline trtllm-bench's for the requests: from the KV cache it expects them to fill)")
    p.add_argument("--max-batched-tokens", type=bounded("budget"), default=None,
                   help="token budget of a step (default 2048, the Lab's: vLLM V1's online default on A100s and "
                        "GPUs under 70 GiB; it sets 8192 on H100-class GPUs. With --offline vLLM's LLM class's: "
                        "16384 there, 8192 elsewhere; with --engine sglang its chunk for the GPU; trtllm 8192, and with "
                        "--offline trtllm-bench's: the longest prompt beside a full batch at least)")
    p.add_argument("--chunk", type=bounded("chunk"), default=None,
                   help="longest prefill chunk of a step (default: the token budget, as vLLM V1 and Sarathi-Serve)")
    p.add_argument("--max-model-len", type=bounded("max_model_len"), default=None,
                   help="longest request, prompt + output (default: as the Lab fits it, the workload's long tail "
                        "within the model's context and one replica's KV cache; a trace's longest request)")
    p.add_argument("--mem-util", type=bounded("mem_util"), default=MEM_UTIL, help=MEM_UTIL_HELP)
    p.add_argument("--watermark", type=bounded("watermark"), default=DEFAULTS["watermark"],
                   help="share of KV blocks admission keeps free (vLLM's default 0.01)")
    p.add_argument("--admission", choices=engines.ADMISSION, default=None,
                   help="fits-now: admit a prompt while its blocks fit now, preempting the newest request when the "
                        "cache fills (vLLM, SGLang; TensorRT-LLM's MAX_UTILIZATION); no-evict: only while the cache "
                        "holds every admitted request whole, prompt and output, so none is preempted (TensorRT-LLM's "
                        "default, GUARANTEED_NO_EVICT). Default: the engine's")
    p.add_argument("--ttft-slo-ms", type=bounded("ttft"), default=1000.0)
    p.add_argument("--tpot-slo-ms", type=bounded("tpot"), default=100.0)
    p.add_argument("--seed", type=bounded("seed"), default=0)
    p.add_argument("--trace", default=None, help="CSV file: arrival_s,prompt_tokens,output_tokens, optionally "
                   "conversation_id, prefix_id, prefix_tokens (what prefix caching can reuse)")
    p.add_argument("--system-prompts", type=bounded("system_prompts"), default=0,
                   help="distinct system prompts the prompts start with (0: none shared)")
    p.add_argument("--system-prompt-tokens", type=bounded("system_prompt_tokens"), default=0,
                   help="tokens of each system prompt, ahead of the user's message (--prompt)")
    p.add_argument("--turns", type=bounded("turns"), default=1,
                   help="turns per conversation: each turn's prompt holds the earlier turns and their answers")
    p.add_argument("--turn-gap", type=bounded("turn_gap"), default=30.0, help="seconds from one turn to the next")
    p.add_argument("--no-prefix-caching", action="store_true",
                   help="recompute every prompt (vLLM's --no-enable-prefix-caching)")
    p.add_argument("--router", default=DEFAULTS["router"], choices=layout.ROUTERS,
                   help="how requests reach replicas (default lor, the Lab's: least outstanding requests; rr: "
                        "round robin; kv: least KV load; prefix: the replica holding the longest cached prefix, "
                        "weighed against load as llm-d's scheduler does)")
    add_offload_args(p)
    p.add_argument("--disagg", action="store_true", help="split GPUs into a prefill and a decode pool")
    p.add_argument("--prefill-gpus", type=bounded("prefill_gpus"), default=0)
    p.add_argument("--prefill-gpu", default=None, metavar="ID",
                   help="with --disagg and --decode-gpu: the prefill pool's GPU type (a split over two types moves "
                        "its KV cache over the network: two GPU types never share a node)")
    p.add_argument("--decode-gpu", default=None, metavar="ID",
                   help="with --disagg and --prefill-gpu: the decode pool's GPU type (in place of --gpu)")
    p.add_argument("--prefill-tp", type=bounded("tp"), default=None)
    p.add_argument("--decode-tp", type=bounded("tp"), default=None)
    p.add_argument("--rate-schedule", default=None, help="'t0:r0,t1:r1,...' seconds:req/s (overrides --rate)")
    p.add_argument("--diurnal", type=bounded("diurnal"), default=None, metavar="PERIOD_S",
                   help="a day of load compressed into PERIOD_S seconds around --rate")
    p.add_argument("--autoscale", action="store_true", help="start and drain replicas on a load target")
    p.add_argument("--min-replicas", type=bounded("min_replicas"), default=1)
    p.add_argument("--scale-metric", default="concurrency", choices=SCALE_METRICS,
                   help="concurrency: requests per replica; kv: share of KV blocks in use")
    p.add_argument("--scale-target", type=bounded("scale_target"), default=64.0, help="per-replica target of the metric")
    p.add_argument("--scale-down-frac", type=bounded("scale_down_frac"), default=DEFAULTS["scale_down_frac"],
                   help="drain a replica when the load fits one fewer at this share of the target")
    p.add_argument("--scale-interval", type=bounded("scale_interval"), default=5.0, help="seconds between autoscaler decisions")
    p.add_argument("--startup-s", type=bounded("startup_s"), default=30.0, help="fixed replica start-up before weight loading")
    p.add_argument("--load-gbps", type=bounded("load_gbps"), default=5.0, help="weight loading bandwidth per GPU, GB/s")
    p.add_argument("--step-scale", type=bounded("step_scale"), default=DEFAULTS["step_scale"],
                   help="every engine step this many times as long as the cost model says (default 1; the Lab's "
                        "trust band and the planner's headroom rule run its error spread's edges, about 0.93 and 1.06)")
    p.add_argument("--attention", default="paged", choices=("sdpa", "paged"))
    p.add_argument("--launch", default=DEFAULTS["launch"], choices=sorted(costmodel.LAUNCH_MODES),
                   help="CUDA graphs for every step (default, as vLLM V1 runs), eager, or auto (graphs for "
                        "decode-only steps)")
    p.add_argument("--engine", default=DEFAULTS["engine_overhead"], choices=engines.ENGINES,
                   help="vllm: vLLM V1's host time around each step (default); sglang: SGLang's profile (its rule of "
                        "prompts in steps of their own, its chunk, budget and batch limit for the GPU unless "
                        "--policy, --max-batched-tokens, --chunk or --max-seqs say otherwise, its overlap scheduler "
                        "and server; data/engines.json); trtllm: TensorRT-LLM's PyTorch backend (whole prompts in steps "
                        "of their own, its batch limits, admission that reserves each request whole, CUDA graphs of decode "
                        "batches only: up to 128 sequences, under --offline trtllm-bench's batch limit; a step with "
                        "prompt tokens issued op by op; a KV pool that counts a sliding-window layer whole); bare: "
                        "forward passes alone")
    p.add_argument("--no-async-scheduling", action="store_true",
                   help="schedule each step after the last, as vLLM before 0.14 (default: async, vLLM >= 0.14)")
    p.add_argument("--offline", action="store_true",
                   help="clients call the engine directly (vLLM's offline LLM class), not through its API server")
    add_spec_args(p)
    add_hardware_args(p)


def config_from_args(args) -> SimConfig:
    schedule = ()
    if args.rate_schedule and args.diurnal:
        raise ValueError("give either --rate-schedule or --diurnal, not both")
    if args.rate_schedule:
        schedule = parse_schedule(args.rate_schedule)
    elif args.diurnal is not None:
        schedule = diurnal_schedule(args.rate if args.rate is not None else 5.0, args.diurnal)
    spec = WorkloadSpec(n_requests=args.requests, **client_fields(args), arrival=args.arrival, cv=args.cv,
                        prompt_mean=args.prompt, output_mean=args.output, length_dist=args.length_dist,
                        spread=args.spread, rate_schedule=schedule, seed=args.seed,
                        prefix_groups=args.system_prompts, prefix_tokens=args.system_prompt_tokens, turns=args.turns,
                        turn_gap_s=args.turn_gap)
    trace = None
    if args.trace:
        try:
            trace = Path(args.trace).read_text()
        except OSError as e:
            raise ValueError(f"cannot read trace file '{args.trace}': {e.strerror}") from None
    gpu, prefill_gpu = pool_gpus(args)
    cfg = SimConfig(gpu=gpu, model=args.model, pp=args.pp, gpus=args.gpus, dtype=args.dtype, **expert_fields(args),
                     kv_dtype=args.kv_dtype, policy=args.policy or DEFAULTS["policy"],
                     block_size=args.block_size,
                     max_seqs=DEFAULTS["max_seqs"] if args.max_seqs is None else args.max_seqs,
                     max_batched_tokens=(DEFAULTS["max_batched_tokens"] if args.max_batched_tokens is None
                                         else args.max_batched_tokens),
                     chunk=args.chunk, max_model_len=args.max_model_len, mem_util=args.mem_util, workload=spec,
                     trace_csv=trace, router=args.router, disagg=args.disagg, prefill_gpus=args.prefill_gpus,
                     prefill_tp=args.prefill_tp, decode_tp=args.decode_tp, autoscale=args.autoscale,
                     min_replicas=args.min_replicas, scale_metric=args.scale_metric, scale_target=args.scale_target,
                     scale_interval_s=args.scale_interval, startup_fixed_s=args.startup_s, load_gbps=args.load_gbps,
                     ttft_slo_ms=args.ttft_slo_ms, tpot_slo_ms=args.tpot_slo_ms, attn_kernel=args.attention,
                     prefix_caching=not args.no_prefix_caching, watermark=args.watermark,
                     no_evict=args.admission == "no-evict",
                     scale_down_frac=args.scale_down_frac, launch=args.launch, engine_overhead=args.engine,
                     async_scheduling=not args.no_async_scheduling, api_server=not args.offline,
                     prefill_gpu=prefill_gpu, step_scale=args.step_scale, **spec_fields(args),
                     **offload_fields(args))
    if cfg.gpu:
        cfg = fill_engine(cfg, args)
    if cfg.max_model_len is None and cfg.gpu and cfg.model:
        # the Lab's max model length (serving/command.py), so that the same flags give the same figures
        try:
            cfg = replace(cfg, max_model_len=cli_max_model_len(cfg))
        except ValueError:
            pass  # an unknown GPU or model: the simulation says so in its own words
    return cfg


def fill_engine(cfg: SimConfig, args) -> SimConfig:
    """The engine fields no flag set, as the engine itself picks them on the GPU (serving/command.py
    filled_defaults: SGLang's under --engine sglang, vLLM's offline LLM class's under --offline,
    trtllm-bench's under --engine trtllm --offline)."""
    d = filled_defaults(cfg)
    left = dict(policy=args.policy is None, max_batched_tokens=args.max_batched_tokens is None,
                chunk=args.chunk is None, max_seqs=args.max_seqs is None, engine_overhead=True,
                no_evict=args.admission is None)
    return replace(cfg, **{k: v for k, v in d.items() if left[k]})


def pool_gpus(args) -> tuple[str | None, str | None]:
    """(the deployment's GPU, the prefill pool's when a split runs two types) from --gpu, or from
    --prefill-gpu with --decode-gpu, which come as a pair."""
    pre, dec = getattr(args, "prefill_gpu", None), getattr(args, "decode_gpu", None)
    if (pre is None) != (dec is None):
        given, missing = ("--prefill-gpu", "--decode-gpu") if dec is None else ("--decode-gpu", "--prefill-gpu")
        raise ValueError(f"{given} names one pool's GPU type only: give {missing} as well (both pools' types), or "
                         f"neither and --gpu for both")
    if pre is None:
        return args.gpu, None
    if args.gpu is not None and args.gpu != dec:
        raise ValueError(f"--gpu {args.gpu} and --decode-gpu {dec} disagree: with --prefill-gpu and --decode-gpu "
                         f"leave out --gpu")
    return dec, pre


def vllm_defaults_note(cfg: SimConfig, args) -> str | None:
    """Where the budget and sequence limit are the command line's defaults (the Lab's, on every GPU)
    but vLLM, left at its own, would pick others on this GPU: what it would pick, as flags."""
    if cfg.engine_overhead != "vllm" or args.offline or (args.max_batched_tokens, args.max_seqs) != (None, None):
        return None
    try:
        gpu = catalog.get_gpu(cfg.gpu)
    except ValueError:
        return None
    budget, seqs = engines.vllm_batch_defaults(gpu)
    if (budget, seqs) == (cfg.max_batched_tokens, cfg.max_seqs):
        return None
    return (f"engine: {cfg.max_batched_tokens:,} tokens a step and {cfg.max_seqs:,} sequences, the Lab's on every "
            f"GPU; vLLM's server left at its defaults takes {budget:,} and {seqs:,} on the {gpu.name}: add "
            f"--max-batched-tokens {budget} --max-seqs {seqs} to replay such a run")


# the header names an engine whose profile is not the policy's own name (vLLM V1, the default; SGLang's is "sglang")
ENGINE_WORDS = {"trtllm": " (TensorRT-LLM's profile)", "bare": " (forward passes alone, no serving engine's host)"}


def cmd_simulate(args) -> None:
    cfg = config_from_args(args)
    result = simulate(cfg)
    s = result.summary
    lines = [
        f"{s['requests']} requests, {_deployment(s)}, "
        f"policy {s['policy']}{ENGINE_WORDS.get(cfg.engine_overhead, '')}: "
        + ("stable" if s["stable"] else f"OVERLOADED, {overload(s)}"),
    ]
    if clients_words(s):
        lines.append(f"  clients: {clients_words(s)}")
    lines += [
        f"  TTFT ms   mean {s['ttft_ms']['mean']:9.1f}  p50 {s['ttft_ms']['p50']:9.1f}  p99 {s['ttft_ms']['p99']:9.1f}",
        f"  TPOT ms   mean {s['tpot_ms']['mean']:9.2f}  p50 {s['tpot_ms']['p50']:9.2f}  p99 {s['tpot_ms']['p99']:9.2f}",
        f"  ITL ms    mean {s['itl_ms']['mean']:9.2f}  p50 {s['itl_ms']['p50']:9.2f}  p99 {s['itl_ms']['p99']:9.2f}",
        f"  E2E s     mean {s['e2e_s']['mean']:9.2f}  p50 {s['e2e_s']['p50']:9.2f}  p99 {s['e2e_s']['p99']:9.2f}",
        f"  throughput {s['throughput_tok_s']:.0f} tok/s, {s['throughput_req_s']:.2f} req/s; goodput "
        f"{s['goodput_req_s']:.2f} req/s ({s['slo_attainment']:.1%} meet TTFT <= {s['ttft_slo_ms']:g} ms and TPOT <= "
        f"{s['tpot_slo_ms']:g} ms)",
        f"  KV: {s['kv_blocks_total']:,} blocks, peak {s['peak_kv_blocks_used']:,} used, {s['kv_utilization']:.1%} of "
        f"the held blocks' slots filled, {s['preemptions']} preemptions; mean batch {s['mean_batch']:.1f}",
        f"  prefix cache: {s['prefix_hit_rate']:.1%} of prompt tokens found cached, {s['prefill_tokens_saved']:,} "
        f"prefill tokens saved, {s['prefix_cache_evictions']:,} cached blocks evicted",
    ]
    if s["speculative"]:
        sp = s["speculative"]
        lines.append(f"  speculative decoding ({sp['method']}, {sp['spec_tokens']} draft tokens): "
                     f"{sp['acceptance_rate']:.1%} of drafts accepted, {sp['tokens_per_step']:.2f} tokens a sequence "
                     f"a step")
    for note in (getattr(args, "dtype_note", None), vllm_defaults_note(cfg, args)):
        if note:
            lines.append(f"  {note}")
    lines += [
        f"  cost: {s['gpu_hours']:.3f} GPU-hours, ${s['cost_per_1m_tokens_usd']:.3f} per 1M output tokens "
        f"(${s['price_usd_per_gpu_hour']:.2f}/GPU-h, {s['price_date']})",
        f"  simulated in {s['sim_wall_s'] * 1e3:.0f} ms",
    ]
    if args.csv:
        paths = write_simulation_csv(args.csv, result, {k: v for k, v in vars(args).items() if k != "func"})
        lines.append(f"  wrote {', '.join(p.name for p in paths)} to {args.csv}")
    emit(s, args.json, lines)


def _replicas(r: dict) -> str:
    experts = (f", ep={r['ep']}" + (" with data-parallel attention" if r.get("dp_attention") else "")
               if r.get("ep", 1) > 1 else "")
    return (f"{count(r['replicas'], 'replica')} of tp={r['tp']}" + (f" x pp={r['pp']}" if r["pp"] > 1 else "")
            + experts + f" ({count(r['gpus'], 'GPU')})")


def _deployment(s: dict) -> str:
    """The replicas, or each pool of a prefill/decode split: the split is the point of --disagg, and the
    pools' tp may differ."""
    pools = s.get("pools", {})
    if "prefill" in pools and "decode" in pools:
        pre, dec = pools["prefill"], pools["decode"]
        on = (lambda p: f" on {p['gpu'].upper()}") if pre.get("gpu") != dec.get("gpu") else (lambda p: "")
        return f"prefill pool{on(pre)}: {_replicas(pre)}; decode pool{on(dec)}: {_replicas(dec)}"
    return _replicas(s)
