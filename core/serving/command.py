"""The `python -m core simulate ...` command line that reproduces a simulation.

Every view's Run (JSON) carries it (export.run_dict), and the Lab shows it, so that a figure on a
page can be re-run headless and give the same numbers: the simulator is deterministic, so the
command's summary equals the page's.

The command line and the Lab share one set of defaults (DEFAULTS below: the Lab's, which are
vLLM V1's online-serving ones), so a command with only the deployment's shape (GPU, model, tp,
GPUs, load, lengths) already gives the Lab's figures; `simulate_command` writes a flag for every
other field that differs from them.

What a command cannot carry is said in a trailing shell comment (ignored when pasted): a replayed
trace is a file (`--trace trace.csv`, and where to find its text), and a GPU or model registered
from an uploaded file is known by its id only on the machine that registered it.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import replace

from ..physics import catalog
from ..physics.memory import MEM_UTIL
from . import engines, trtllm_bench
from .serve_command import release_dtype
from .experts import copies, pool_experts
from .simulate import SimConfig, fitted_max_model_len

# The defaults of `python -m core simulate` (core/cli/simulate.py reads them from here): the Lab's
# (core/lab/inputs.py LabInputs, whose defaults tests/test_reproduce.py holds equal to these), which
# follow vLLM V1's online serving: chunked prefill (policy sarathi) at a 2,048-token budget (vLLM's
# on A100s and GPUs under 70 GiB; it gives H100-class GPUs 8,192, the Lab keeps one budget for all),
# max_num_seqs 256, 16-token blocks, prefix caching on; a router that sends each request to the
# replica with the fewest outstanding (vLLM's production-stack default, llm-d's); log-normal lengths
# (sigma 0.5) because no real workload sends one length; 2,000 requests, enough for a stable p99.
DEFAULTS = dict(
    tp=1, pp=1, ep=1, redundant_experts=0, dtype="bf16", kv_dtype="bf16", policy="sarathi", block_size=16, max_seqs=256,
    max_batched_tokens=2048, mem_util=MEM_UTIL, watermark=0.01, prefix_caching=True, router="lor",
    requests=2000, length_dist="lognormal", spread=0.5, arrival="poisson", cv=1.0, seed=0,
    system_prompts=0, system_prompt_tokens=0, turns=1, turn_gap_s=30.0, think_s=0.0, think_dist="fixed",
    prefill_gpus=0, min_replicas=1, scale_metric="concurrency", scale_target=64.0, scale_down_frac=0.7,
    scale_interval_s=5.0, startup_fixed_s=30.0, load_gbps=5.0, ttft_slo_ms=1000.0, tpot_slo_ms=100.0, kv_offload_gb=0.0,
    attn_kernel="paged", launch="graph", engine_overhead="vllm", step_scale=1.0,
)

TRACE_FILE = "trace.csv"


def engine_defaults(gpu_id: str | None, engine: str, api_server: bool, tp: int = 1, dp_attention: bool = False,
                    disagg: bool = False) -> dict:
    """The engine fields `python -m core simulate` fills in where no flag sets them: SGLang's own for
    the GPU under --engine sglang (its rule, chunk, budget and batch limit), TensorRT-LLM's LLM API's
    under --engine trtllm, vLLM's offline LLM class's budget and batch limit for the GPU under
    --offline (data/engines.json vllm), else the Lab's (DEFAULTS: vLLM's API server on GPUs under
    70 GiB, kept on every GPU)."""
    lab = dict(max_batched_tokens=DEFAULTS["max_batched_tokens"], max_seqs=DEFAULTS["max_seqs"])
    if engine == "trtllm":
        return engines.trtllm_defaults()
    try:
        gpu = catalog.get_gpu(gpu_id) if gpu_id else None
    except ValueError:
        gpu = None  # an unknown GPU: the simulation says so in its own words
    if gpu is None or engine not in ("sglang", "vllm") or (engine == "vllm" and api_server):
        return lab
    if engine == "sglang":
        return engines.sglang_defaults(gpu, tp, dp_attention, disagg)
    budget, seqs = engines.vllm_batch_defaults(gpu, offline=True)
    return dict(max_batched_tokens=budget, max_seqs=seqs)


def filled_defaults(cfg: SimConfig) -> dict:
    """engine_defaults for `cfg`, with the batch and token limits trtllm-bench runs a rank with for an
    offline TensorRT-LLM run (trtllm_bench.offline_limits: they follow from its requests)."""
    d = engine_defaults(cfg.gpu, cfg.engine_overhead, cfg.api_server, cfg.tp, cfg.dp_attention, cfg.disagg)
    if cfg.engine_overhead == "trtllm" and not cfg.api_server and cfg.model:
        try:
            d["max_seqs"], d["max_batched_tokens"] = trtllm_bench.offline_limits(cfg)
        except ValueError:
            pass  # an unknown GPU or model, or a workload out of range: the simulation says so in its own words
    return d


def on_engine(cfg: SimConfig, engine: str) -> SimConfig:
    """`cfg` served by `engine` as it runs out of the box: SGLang's or TensorRT-LLM's own rule on the
    loop, token budget, prefill chunk and batch limit for the GPU (engine_defaults), in place of the
    Lab's vLLM ones. The teaching stages keep their rule (one request at a time, static batches: no
    engine's setting) and take the engine's host and kernels only. SGLang's prefill-first rule orders
    prompts against decodes in one server: a split's pools, each running one kind, chunk at its chunk
    instead. vLLM: `cfg` as it is."""
    if engine == "vllm":
        return cfg
    if engine not in engines.SERVING:
        raise ValueError(f"the serving engine is one of {', '.join(engines.SERVING)}, not '{engine}'")
    if cfg.policy in ("serial", "static"):
        return replace(cfg, engine_overhead=engine)
    return replace(cfg, **engine_defaults(cfg.gpu, engine, cfg.api_server, cfg.tp, cfg.dp_attention, cfg.disagg))


def cli_max_model_len(cfg: SimConfig) -> int:
    """The max model length the command line gives a configuration that sets none: the Lab's
    (fitted_max_model_len: the workload's long tail, within the context and one replica's KV cache;
    a trace's longest request), for the smallest replica of the deployment (of either pool's GPU
    type), which must hold it."""
    if cfg.disagg:
        pools = [(cfg.prefill_gpu or cfg.gpu, cfg.prefill_tp or cfg.tp), (cfg.gpu, cfg.decode_tp or cfg.tp)]
    else:
        pools = [(cfg.gpu, cfg.tp)]
    lengths = []
    for g, tp in pools:
        ep, dp = pool_experts(cfg, tp)
        lengths.append(fitted_max_model_len(catalog.get_gpu(g), catalog.get_model(cfg.model), cfg.workload,
                                            cfg.trace_csv, tp, cfg.dtype, cfg.max_batched_tokens, cfg.max_seqs,
                                            cfg.block_size, 1 if cfg.disagg else cfg.pp, kv_dtype=cfg.kv_dtype,
                                            ep=ep, dp_attention=dp, redundant_experts=copies(cfg, ep),
                                            engine=cfg.engine_overhead))
    return min(lengths)


def _num(v) -> str:
    """A number as the parser reads it back exactly: 2048, 0.5, 1.2345678901234567."""
    if isinstance(v, bool):
        raise TypeError("a flag's value, not a switch")
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 2**53):
        return str(int(v))
    return repr(float(v))


def _gpu(gpu_id: str) -> tuple[str, str | None]:
    """(the --gpu value, a note where it is not a catalog GPU)."""
    base = gpu_id.rpartition("@")[0] or gpu_id
    try:
        known = catalog.get_gpu(base).id in catalog.gpu_ids()
    except ValueError:
        known = False
    if known:  # a catalog GPU, at its list price or at the user's (h100@1.85): exact anywhere
        return gpu_id, None
    return gpu_id, (f"{base} is the GPU of your uploaded datasheet or profile, known by that id only on this "
                    f"machine: elsewhere give --gpu-file with that file instead of --gpu"
                    + (" (and the price after '@' is lost)" if "@" in gpu_id else ""))


def _model(model_id: str) -> tuple[str, str | None]:
    if model_id.startswith(catalog.MODEL_PREFIX):
        return model_id, (f"{model_id} is the model of your uploaded config.json, known by that id only on this "
                          f"machine: elsewhere give --model-config with that file instead of --model")
    return model_id, None


def simulate_command(cfg: SimConfig, trace_note: str | None = None) -> str:
    """`python -m core simulate ...` for `cfg`: the deployment's shape always, then a flag for every
    field that differs from the command line's defaults. With a replayed trace the command reads
    `--trace trace.csv`; `trace_note` says where that file's text is (default: the trace replayed)."""
    D, w = DEFAULTS, cfg.workload
    args: list[str] = []
    notes: list[str] = []

    def flag(name, value=None):
        args.append(name)
        if value is not None:
            args.append(value if isinstance(value, str) else _num(value))

    def differs(name, value, field=None):
        if value != D[field or name.replace("-", "_")]:
            flag(f"--{name}", value)

    gpu, note = _gpu(cfg.gpu)
    notes += [note] if note else []
    model, note = _model(cfg.model)
    notes += [note] if note else []
    if cfg.prefill_gpu is not None:  # a split over two GPU types: each pool's
        pre, note = _gpu(cfg.prefill_gpu)
        notes += [note] if note else []
        flag("--prefill-gpu", pre)
        flag("--decode-gpu", gpu)
    else:
        flag("--gpu", gpu)
    flag("--model", model)
    flag("--tp", cfg.tp)
    if cfg.gpus is not None:
        flag("--gpus", cfg.gpus)
    differs("pp", cfg.pp)
    differs("ep", cfg.ep)
    if cfg.dp_attention:
        flag("--dp-attention")
    if cfg.ep_load_cv is not None:
        flag("--ep-load-cv", cfg.ep_load_cv)
    if cfg.eplb:
        flag("--eplb")
    differs("redundant-experts", cfg.redundant_experts)
    if cfg.micro_batch_overlap:
        flag("--micro-batch-overlap")
    if cfg.dtype != release_dtype(cfg.model):  # no --dtype means the weights as the model is released
        flag("--dtype", cfg.dtype)
    differs("kv-dtype", cfg.kv_dtype)

    # the load: an open loop at a rate, or a closed loop of users (a rate of inf: as fast as answered)
    if w.closed_loop:
        flag("--concurrency", w.concurrency)
        differs("think-time", w.think_s, "think_s")
        differs("think-dist", w.think_dist)
    if w.rate_schedule:
        flag("--rate-schedule", ",".join(f"{_num(t)}:{_num(r)}" for t, r in w.rate_schedule))
    if math.isfinite(w.rate):
        flag("--rate", w.rate)
    elif not w.closed_loop and cfg.trace_csv is None:  # a trace's arrivals are its own
        notes.append("every request due at once (an offline batch, a request rate of inf) has no flag: the "
                     "command asks for the highest rate the command line takes")
        flag("--rate", 100000.0)
    if w.prompt_mean is not None:
        flag("--prompt", w.prompt_mean)
    if w.output_mean is not None:
        flag("--output", w.output_mean)
    differs("requests", w.n_requests)
    differs("length-dist", w.length_dist)
    differs("spread", w.spread)
    differs("arrival", w.arrival)
    differs("cv", w.cv)
    differs("seed", w.seed)
    differs("system-prompts", w.prefix_groups)
    differs("system-prompt-tokens", w.prefix_tokens)
    differs("turns", w.turns)
    differs("turn-gap", w.turn_gap_s, "turn_gap_s")
    if cfg.trace_csv is not None:
        flag("--trace", TRACE_FILE)
        notes.append(f"{TRACE_FILE}: {trace_note or 'the trace this run replayed'}")

    # the engine (a budget and batch limit the command line would fill in for this engine and GPU go unsaid)
    filled = filled_defaults(cfg)
    if cfg.policy != filled.get("policy", D["policy"]):
        flag("--policy", cfg.policy)
    differs("block-size", cfg.block_size)
    if cfg.max_seqs != filled["max_seqs"]:
        flag("--max-seqs", cfg.max_seqs)
    if cfg.max_batched_tokens != filled["max_batched_tokens"]:
        flag("--max-batched-tokens", cfg.max_batched_tokens)
    # a chunk equal to the budget is what no --chunk means under chunked prefill, and SGLang's own what it
    # means under --engine sglang; otherwise say it
    chunk = filled.get("chunk")
    if cfg.chunk is not None and cfg.chunk != chunk and not (
            chunk is None and cfg.policy == "sarathi" and cfg.chunk == cfg.max_batched_tokens):
        flag("--chunk", cfg.chunk)
    if cfg.max_model_len is not None:
        try:
            fitted = cli_max_model_len(cfg)
        except ValueError:
            fitted = None
        if cfg.max_model_len != fitted:
            flag("--max-model-len", cfg.max_model_len)
    differs("mem-util", cfg.mem_util)
    differs("watermark", cfg.watermark)
    if cfg.no_evict != filled.get("no_evict", False):
        flag("--admission", engines.ADMISSION[int(cfg.no_evict)])
    if not cfg.prefix_caching:
        flag("--no-prefix-caching")
    differs("attention", cfg.attn_kernel, "attn_kernel")
    differs("launch", cfg.launch)
    differs("engine", cfg.engine_overhead, "engine_overhead")
    differs("step-scale", cfg.step_scale)
    if not cfg.async_scheduling:
        flag("--no-async-scheduling")
    if not cfg.api_server:
        flag("--offline")
    if cfg.spec_method is not None:  # speculative decoding: the method, and what differs from its defaults
        flag("--spec-method", cfg.spec_method)
        if cfg.spec_tokens is not None:
            flag("--spec-tokens", cfg.spec_tokens)
        if cfg.spec_acceptance is not None:
            rates = cfg.spec_acceptance if isinstance(cfg.spec_acceptance, tuple) else (cfg.spec_acceptance,)
            flag("--spec-acceptance", ",".join(_num(a) for a in rates))
        if cfg.draft_model is not None:
            flag("--draft-model", cfg.draft_model)

    differs("kv-offload-gb", cfg.kv_offload_gb, "kv_offload_gb")
    if cfg.kv_offload_gbps is not None:
        flag("--kv-offload-gbps", cfg.kv_offload_gbps)

    # the cluster
    differs("router", cfg.router)
    if cfg.disagg:
        flag("--disagg")
    differs("prefill-gpus", cfg.prefill_gpus)
    if cfg.prefill_tp is not None:
        flag("--prefill-tp", cfg.prefill_tp)
    if cfg.decode_tp is not None:
        flag("--decode-tp", cfg.decode_tp)
    if cfg.autoscale:
        flag("--autoscale")
    differs("min-replicas", cfg.min_replicas)
    differs("scale-metric", cfg.scale_metric)
    differs("scale-target", cfg.scale_target)
    differs("scale-down-frac", cfg.scale_down_frac)
    differs("scale-interval", cfg.scale_interval_s, "scale_interval_s")
    differs("startup-s", cfg.startup_fixed_s, "startup_fixed_s")
    differs("load-gbps", cfg.load_gbps)
    differs("ttft-slo-ms", cfg.ttft_slo_ms)
    differs("tpot-slo-ms", cfg.tpot_slo_ms)
    # Not carried, because no figure depends on them: max_steps (a guard: a page's run that finished
    # within its 10 million steps finishes within the command line's 50 million), fast_forward (the
    # same results either way), trace_cap and stream_* (how many steps and token times are sampled
    # for the charts); workload.max_total_tokens is the max model length, set by the run.
    line = "python -m core simulate " + " ".join(shlex.quote(a) for a in args)
    if notes:
        line += "  # " + "; ".join(n.replace("\n", " ") for n in notes)
    return line
