"""Run a serving simulation from plain inputs: build the engine's arrays, run it, read the results.

    cfg = SimConfig(gpu="h100", model="llama-3.1-8b", workload=WorkloadSpec(rate=5, n_requests=1000))
    result = simulate(cfg)
    result.summary["ttft_ms"]["p99"]
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from .. import bounds, progress
from ..engine import layout as L
from ..engine import cohort
from ..engine import loop as engine
from ..engine.kvcache import HOST_TABLE_BITS, blocks_for, tier_words, watermark_blocks
from ..physics import catalog, costmodel, expert, pipeline, speculative, vllm_host
from ..physics.memory import MEM_UTIL, MemoryPlan, plan_memory, weight_bytes_per_gpu
from . import engines, offload
from .capacity import capacity
from .experts import balancer, check_experts, copies, pool_experts
from .metrics import summarize
from .workload import Workload, WorkloadSpec, generate, load_trace, think_times

SCALE_METRICS = ("concurrency", "kv")
ROW_PAD = 8  # words past a cache table row's width: one 64-byte cache line (_prefix_cache)

# Constants that are times (scaled up) or rates (scaled down): scaling all of them by s makes every
# step s times as long (a step's time is sums and maxima of these terms). api_ms is not a step.
TIMES = ("t_layer_us", "t_issue_decode_us", "t_issue_prefill_us", "link_latency_us", "engine_step_us",
         "t_layer_engine_us", "engine_seq_us", "t_piecewise_us", "t_issue_engine_us", "t_moe_layer_us",
         "t_mla_layer_us", "sglang_moe_layer_us", "sglang_mla_layer_us", "sglang_issue_moe_us", "sglang_issue_mla_us",
         "sglang_rocm_fp8_layer_us", "allreduce_base_us", "allreduce_peer_us", "t_draft_pass_us", "t_spec_step_us")
RATES = ("eta_bw", "eta_gemm", "eta_attn", "link_eff")


def scaled_efficiency(eff: costmodel.Efficiency, scale: float) -> costmodel.Efficiency:
    """The cost model's constants with every step `scale` times as long."""
    if scale == 1.0:
        return eff
    return replace(eff, **{n: getattr(eff, n) * scale for n in TIMES}, **{n: getattr(eff, n) / scale for n in RATES})


def pool_efficiency(cfg: "SimConfig", gpu: catalog.GPU, eff=None) -> costmodel.Efficiency:
    """The cost model's constants a pool of `gpu` runs at: the fitted ones of its GPU (or `eff`,
    a calibration's), every step cfg.step_scale times as long."""
    return scaled_efficiency(eff or costmodel.efficiency_for(gpu), cfg.step_scale)


def prefill_gpu_of(cfg: "SimConfig") -> catalog.GPU:
    """The GPU type of the prefill pool (the deployment's own unless a split names another)."""
    return catalog.get_gpu(cfg.prefill_gpu or cfg.gpu)


@dataclass(frozen=True)
class SimConfig:
    gpu: str = "h100"
    model: str = "llama-3.1-8b"
    tp: int = 1
    pp: int = 1  # pipeline stages of tp GPUs per replica (core/physics/pipeline.py); colocated deployments
    gpus: int | None = None  # GPUs in all; None: one replica of tp x pp GPUs
    # an MoE model's experts split over a replica's tp GPUs (ep = tp; 1: sliced by tensor parallelism),
    # and attention data-parallel over them (physics/expert.py): the replica then runs tp attention ranks,
    # each with max_seqs, the token budget and its own sequences' KV cache, joined in every MoE layer
    ep: int = 1
    dp_attention: bool = False
    # routed tokens per expert: standard deviation over mean (None: data/moe.json's measured spread,
    # without EPLB or with it)
    ep_load_cv: float | None = None
    # EPLB (vLLM --enable-eplb): the balancer places the experts so that ranks receive about the mean, and
    # keeps redundant_experts extra copies of the most popular ones (each rank holds (experts + them) / ep)
    eplb: bool = False
    redundant_experts: int = 0
    # vLLM --enable-dbo, SGLang --enable-two-batch-overlap: each step as two micro-batches, one's expert
    # all-to-all under the other's compute (data-parallel attention only)
    micro_batch_overlap: bool = False
    dtype: str = "bf16"  # weights: bf16, fp8 or int4 (data/quantisation.json)
    kv_dtype: str = "bf16"  # KV cache: bf16 or fp8 (half the bytes a token: twice the blocks)
    policy: str = "vllm"
    block_size: int = 16
    max_seqs: int = 256
    # vLLM's server defaults on an 80 GB-class GPU (EngineArgs.get_batch_defaults in
    # vllm/engine/arg_utils.py: 8,192 tokens; 2,048 below 70 GiB and on A100s)
    max_batched_tokens: int = 8192
    # Longest prefill chunk of one step. None: the token budget, as vLLM V1 (whose
    # long_prefill_token_threshold is 0 by default) and Sarathi-Serve (the budget is the chunk) run it
    chunk: int | None = None
    max_model_len: int | None = None  # None: fitted to the workload (see default_max_model_len)
    mem_util: float = MEM_UTIL
    watermark: float = 0.01  # fraction of blocks admission keeps free (vLLM's default)
    # admit a request only while the KV pool holds every admitted request at its whole length, prompt
    # and output, so none is ever preempted (TensorRT-LLM's GUARANTEED_NO_EVICT); a rule of paged KV (the
    # policies that reserve the maximum length at admission never evict already)
    no_evict: bool = False
    # automatic prefix caching (vLLM V1's default: --enable-prefix-caching): full KV blocks a later
    # prompt repeats are reused, not recomputed; paged KV only (policies vllm and sarathi)
    prefix_caching: bool = True
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    trace_csv: str | None = None  # replaces the generated workload when given
    router: str = "rr"  # rr, lor, kv, or prefix: the replica holding the longest cached prefix, weighed against load
    # KV offload: a host-memory tier of this many GB per replica under its prefix cache (0: none), loaded
    # back over a host link of kv_offload_gbps GB/s per GPU (None: the GPU family's, data/kv_offload.json)
    kv_offload_gb: float = 0.0
    kv_offload_gbps: float | None = None
    disagg: bool = False
    prefill_gpus: int = 0
    # the prefill pool's GPU type when it is not `gpu` (the decode pool's): a split over two GPU types,
    # e.g. compute-rich GPUs for the prompts and memory-rich ones for the decodes (None: `gpu` for both)
    prefill_gpu: str | None = None
    prefill_tp: int | None = None  # None: tp
    decode_tp: int | None = None
    autoscale: bool = False
    min_replicas: int = 1
    scale_metric: str = "concurrency"
    scale_target: float = 64.0  # requests per replica (waiting + running), or KV blocks in use / capacity
    scale_down_frac: float = 0.7  # drain when the load fits one replica fewer at this share of the target
    scale_interval_s: float = 5.0
    startup_fixed_s: float = 30.0  # container start, CUDA context, graph capture
    load_gbps: float = 5.0  # weight loading bandwidth per GPU (local NVMe / cache), GB/s
    ttft_slo_ms: float = 1000.0
    tpot_slo_ms: float = 100.0
    attn_kernel: str = "paged"  # split-KV decode attention, as serving engines run it
    launch: str = "graph"  # serving engines replay CUDA graphs (vLLM v1: piecewise, for every step)
    engine_overhead: str = "vllm"
    # vLLM >= 0.14 schedules the next step while the GPU runs this one (vllm_host.py)
    async_scheduling: bool = True
    api_server: bool = True  # clients reach the engine through vLLM's OpenAI API server (not the offline LLM class)
    # every engine step this many times as long as the cost model says (and every link as much
    # slower): the trust band's edges (core/lab/trust.py), which the planner's headroom rule checks at
    step_scale: float = 1.0
    max_steps: int = 50_000_000  # a guard: a run needing more engine steps stops with a clear error
    fast_forward: bool = True  # run quiet decode steps back to back (fastforward.py); same results either way
    # speculative decoding (physics/speculative.py): a proposer (draft, eagle, eagle3, mtp, ngram; None:
    # off), its draft tokens a step and acceptance rate (None: the method's sourced defaults; a tuple:
    # one rate per draft position), and the draft model of method "draft"
    spec_method: str | None = None
    spec_tokens: int | None = None
    spec_acceptance: float | tuple | None = None
    draft_model: str | None = None
    trace_cap: int = 4096
    stream_samples: int = 12
    stream_cap: int = 4096


@dataclass
class Pool:
    name: str
    replicas: int
    tp: int
    plan: MemoryPlan
    params: np.ndarray  # with pp > 1, one stage's
    pp: int = 1
    gpu: catalog.GPU | None = None  # the pool's GPU type (a split may run two)
    ep: int = 1  # GPUs a replica's experts split over (1: sliced by tp)
    dp_attention: bool = False

    @property
    def ranks(self) -> int:
        """Attention ranks of a replica, each with its own sequences, max batch and token budget."""
        return expert.attention_ranks(self.tp, self.dp_attention)

    @property
    def rows(self) -> int:
        """Rows of the engine's replica table: a lane per batch in flight of each replica."""
        return self.replicas * self.pp


@dataclass
class SimResult:
    config: SimConfig
    summary: dict
    workload: Workload
    requests: dict  # per-request arrays (seconds)
    trace: dict  # per-step trace columns (bounded)
    stream: dict  # token times of a few sampled requests
    itl_hist: np.ndarray
    pools: list
    wall_s: float
    kv_tables: dict | None = None  # the engine's replica table, prefix-cache tables and int config (PI, KC, cfg) at the end

    def kv_books(self, replica: int = 0) -> dict:
        """Replica's KV block pool at the end of the run, counted from the tables (kvcache.books)."""
        from ..engine.kvcache import books
        return books(self.kv_tables["PI"], self.kv_tables["KC"], self.kv_tables["cfg"], replica)

    def to_json(self) -> dict:
        return self.summary


def model_len_for(longest: float, model: catalog.Model) -> int:
    """A max model length that holds `longest` tokens: a power of two, at least 2048, within the
    model's context."""
    n = 2048
    while n < min(longest, model.max_context):  # min: an infinite length must not loop forever
        n *= 2
    return min(n, model.max_context)


def default_max_model_len(model: catalog.Model, spec: WorkloadSpec) -> int:
    """Long enough for the workload's requests, including a long tail of four times the mean."""
    p, o = spec.means()
    return model_len_for(spec.longest_fixed() if spec.length_dist == "fixed" else 4 * (p + o), model)


def fitted_max_model_len(gpu: catalog.GPU, model: catalog.Model, spec: WorkloadSpec, trace_csv: str | None, tp: int,
                         dtype: str, budget_tokens: int, max_seqs: int, block_size: int, pp: int = 1,
                         kv_dtype: str = "bf16", ep: int = 1, dp_attention: bool = False,
                         redundant_experts: int = 0, engine: str = "vllm") -> int:
    """The max model length a deployment is given: a replayed trace's longest request; else long
    enough for the workload's long tail (longer requests are shortened), within the model's context
    and within what one replica's KV cache holds (leaving the admission watermark free) as `engine`
    sizes it."""
    if trace_csv is not None:
        return trace_max_model_len(load_trace(trace_csv), model)
    fixed = spec.length_dist == "fixed"
    need = shortest_max_model_len(spec, None, model)
    n = model_len_for(need if fixed else 2 * need, model)
    try:
        plan = plan_memory(gpu, model, tp, block_size, max_batched_tokens=max(budget_tokens, max_seqs),
                           max_seqs=max_seqs, dtype=dtype, pp=pp, kv_dtype=kv_dtype, ep=ep, dp_attention=dp_attention,
                           redundant_experts=redundant_experts,
                           **engines.kv_memory(engine, gpu, tp, pp, dp_attention, MEM_UTIL))
    except ValueError:
        return n  # the configuration fails later with the planner's own message
    # a sequence's KV lives on one attention rank
    room = int(plan.kv_blocks // expert.attention_ranks(tp, dp_attention) * 0.98) * block_size
    return max(min(n, room), need if fixed else min(n, need))


def shortest_max_model_len(spec: WorkloadSpec, trace_csv: str | None, model: catalog.Model) -> int:
    """The shortest max model length fitted_max_model_len gives, however little the KV cache holds: a
    replayed trace's longest request, the longest of fixed lengths, else a request of the mean lengths."""
    if trace_csv is not None:
        return trace_max_model_len(load_trace(trace_csv), model)
    p, o = spec.means()
    return spec.longest_fixed() if spec.length_dist == "fixed" else int(math.ceil(p + o))


def trace_max_model_len(trace: Workload, model: catalog.Model) -> int:
    """A replayed trace's max model length: its longest request's, within the model's context."""
    longest = int((trace.prompt_tokens + trace.output_tokens).max())
    if longest > model.max_context:
        raise ValueError(f"the trace has a request of {longest:,} tokens (prompt + output), beyond {model.name}'s "
                         f"context of {model.max_context:,}")
    return model_len_for(longest, model)


def steptime(cfg: SimConfig, tp: int | None = None, **mix) -> dict:
    """One step of this deployment's GPU, model and engine as its replicas run it (cost model, with the
    pools' constants and CUDA-graph limit), at `tp` (default: the config's); `mix` as for
    costmodel.steptime (decode_batch, context, prefill_tokens, ...)."""
    tp = tp or cfg.tp
    gpu, model = catalog.get_gpu(cfg.gpu), catalog.get_model(cfg.model)
    ep, dp = pool_experts(cfg, tp)
    max_len = cfg.max_model_len or default_max_model_len(model, cfg.workload)
    return costmodel.steptime(gpu, model, tp, launch=cfg.launch, dtype=cfg.dtype, attn_kernel=cfg.attn_kernel,
                              engine=cfg.engine_overhead, eff=pool_efficiency(cfg, gpu),
                              capture_tokens=graph_capture(cfg, gpu, tp, dp, max_len),
                              async_scheduling=cfg.async_scheduling, kv_dtype=cfg.kv_dtype, ep=ep, dp_attention=dp,
                              **balancer(cfg, ep), **mix)


def graph_capture(cfg: SimConfig, gpu: catalog.GPU, tp: int, dp_attention: bool, max_len: int) -> int:
    """Tokens of the largest step a replica of `gpu` at `tp` replays through a CUDA graph: its engine's
    limit (serving/engines.py) on each attention rank, the ranks' steps joined in every MoE layer."""
    capture = engines.cuda_graph_capture(cfg.engine_overhead, gpu, tp, cfg.max_seqs, _budget(cfg, max_len),
                                         not cfg.api_server)
    return capture * expert.attention_ranks(tp, dp_attention)


def _pools(cfg: SimConfig, gpu: catalog.GPU, model: catalog.Model, max_len: int, eff=None) -> list[Pool]:
    gpus = cfg.gpus if cfg.gpus is not None else cfg.tp * cfg.pp
    if not isinstance(gpus, (int, np.integer)) or gpus < 1:
        raise ValueError(f"GPU count must be a whole number >= 1, not {gpus}")
    if gpus > 4096:
        raise ValueError(f"{gpus} GPUs is beyond what the simulator models: use at most 4096")

    def pool(name, n_gpus, tp, pp=1, g=gpu):
        if tp < 1 or n_gpus % tp:
            raise ValueError(f"tp={tp} does not divide the {name} pool's {n_gpus} GPUs: choose a GPU count "
                             f"that is a multiple of tp")
        if n_gpus % (tp * pp):
            raise ValueError(f"a replica of tp={tp} x pp={pp} takes {tp * pp} GPUs, which does not divide the "
                             f"{name} pool's {n_gpus}: choose a GPU count that is a multiple of {tp * pp}")
        spec = speculative.for_config(cfg, model) if name != "prefill" else None  # a prefill pool never decodes
        ep, dp = pool_experts(cfg, tp)
        plan = plan_memory(g, model, tp, cfg.block_size, max_batched_tokens=_planned_tokens(cfg, max_len),
                           max_seqs=cfg.max_seqs, dtype=cfg.dtype, pp=pp, kv_dtype=cfg.kv_dtype, spec=spec, ep=ep,
                           dp_attention=dp, redundant_experts=copies(cfg, ep),
                           **engines.kv_memory(cfg.engine_overhead, g, tp, pp, dp, cfg.mem_util, name))
        need = blocks_for(max_len, cfg.block_size) + watermark_blocks(plan.kv_blocks, cfg.watermark)
        ranks = expert.attention_ranks(tp, dp)
        if plan.kv_blocks // ranks < need:  # a sequence's KV lives on one attention rank
            raise ValueError(f"the KV cache of one {name} {'attention rank' if dp else 'replica'} holds "
                             f"{plan.kv_tokens // ranks} tokens, fewer than one request of the maximum "
                             f"model length ({max_len} tokens): lower the max model length or raise tp")
        p = costmodel.build(g, model, tp, cfg.dtype, cfg.launch, cfg.attn_kernel, cfg.engine_overhead,
                            pool_efficiency(cfg, g, eff), graph_capture(cfg, g, tp, dp, max_len),
                            cfg.async_scheduling, cfg.kv_dtype, spec, ep, dp, **balancer(cfg, ep))
        return Pool(name, n_gpus // (tp * pp), tp, plan, pipeline.stage_params(p, pp), pp, g, ep, dp)

    if not cfg.disagg:
        return [pool("serving", gpus, cfg.tp, cfg.pp)]
    ptp, dtp = cfg.prefill_tp or cfg.tp, cfg.decode_tp or cfg.tp
    if gpus < 2:
        raise ValueError(f"disaggregation splits the GPUs into a prefill pool and a decode pool: it needs at least 2 "
                         f"GPUs in all, not {gpus} (set --gpus, the pools' GPUs together)")
    if not 0 < cfg.prefill_gpus < gpus:
        raise ValueError(f"disaggregation needs prefill GPUs between 1 and {gpus - 1} (of the {gpus} GPUs in all, "
                         f"--gpus), not {cfg.prefill_gpus}: the decode pool takes the rest")
    return [pool("prefill", cfg.prefill_gpus, ptp, g=prefill_gpu_of(cfg)), pool("decode", gpus - cfg.prefill_gpus, dtp)]


CHUNKING = ("sarathi", "sglang")  # policies that split a prompt over steps (the budget is the chunk)


def _budget(cfg: SimConfig, max_len: int) -> int:
    """Token budget of one engine step. Without chunked prefill a whole prompt must fit one step,
    so the budget is at least the max model length (vLLM's own rule); a static batch prefills all
    its members together, as request-level batching engines (FasterTransformer) do."""
    if cfg.policy in CHUNKING:
        return cfg.max_batched_tokens
    if cfg.policy == "static":
        return cfg.max_seqs * max_len
    return max(cfg.max_batched_tokens, max_len, cfg.max_seqs)


def _planned_tokens(cfg: SimConfig, max_len: int) -> int:
    """Tokens of one step that the memory planner sizes the activation workspace for: the budget, which
    vLLM raises to a whole request without chunked prefill; TensorRT-LLM sizes it by its max_num_tokens,
    which its own rule makes hold a whole prompt (trtllm-bench: the longest prompt beside a full batch)."""
    if cfg.policy in CHUNKING or cfg.engine_overhead == "trtllm":
        return cfg.max_batched_tokens
    return max(cfg.max_batched_tokens, max_len)


def validate(cfg: SimConfig) -> None:
    if cfg.engine_overhead not in engines.ENGINES:
        raise ValueError(f"unknown engine '{cfg.engine_overhead}': choose {', '.join(engines.ENGINES)}")
    if cfg.policy not in L.POLICIES:
        raise ValueError(f"unknown policy '{cfg.policy}': choose {', '.join(L.POLICIES)}")
    if cfg.router not in L.ROUTERS:
        raise ValueError(f"unknown router '{cfg.router}': choose rr (round robin), lor (least outstanding "
                         f"requests), kv (least KV load) or prefix (prefix-aware)")
    offload.check(cfg)
    # every number against the one table of ranges (core/bounds.py), before any of it sizes an array
    for name, value in (("max_seqs", cfg.max_seqs), ("budget", cfg.max_batched_tokens), ("chunk", cfg.chunk),
                        ("max_model_len", cfg.max_model_len), ("gpus", cfg.gpus), ("tp", cfg.tp),
                        ("tp", cfg.prefill_tp), ("tp", cfg.decode_tp), ("prefill_gpus", cfg.prefill_gpus),
                        ("mem_util", cfg.mem_util), ("ttft", cfg.ttft_slo_ms), ("tpot", cfg.tpot_slo_ms),
                        ("min_replicas", cfg.min_replicas), ("scale_target", cfg.scale_target),
                        ("scale_interval", cfg.scale_interval_s), ("startup_s", cfg.startup_fixed_s),
                        ("load_gbps", cfg.load_gbps)):
        if value is not None:
            bounds.check(name, value)
    if cfg.policy == "sarathi" and cfg.max_batched_tokens < cfg.max_seqs:  # SGLang decodes outside its prefill budget
        raise ValueError(f"max batched tokens ({cfg.max_batched_tokens}) must be at least max sequences "
                         f"({cfg.max_seqs}), so that every running sequence can decode in a step (vLLM's rule)")
    if not 0 <= cfg.watermark < 0.5:
        raise ValueError(f"watermark {cfg.watermark} must be a fraction within 0..0.5 of the blocks")
    if cfg.autoscale and cfg.disagg:
        raise ValueError("autoscaling works on a colocated deployment: turn off disaggregation to autoscale")
    if cfg.scale_metric not in SCALE_METRICS:
        raise ValueError(f"unknown autoscaling metric '{cfg.scale_metric}': choose concurrency or kv")
    if cfg.autoscale and not (cfg.scale_target > 0 and cfg.scale_interval_s > 0 and 0 <= cfg.scale_down_frac < 1):
        raise ValueError("autoscaling needs a target above 0, an interval above 0 s and a down fraction within 0..1")
    if not isinstance(cfg.pp, (int, np.integer)) or not 1 <= cfg.pp <= 64:
        raise ValueError(f"pipeline parallelism takes 1 to 64 stages, not {cfg.pp}")
    if cfg.policy == "sglang" and cfg.disagg:
        raise ValueError("SGLang's prefill-first rule orders prompts against decodes in one server; a split's prefill "
                         "and decode pools each run one kind: use --policy sarathi with SGLang's chunk (--engine "
                         "sglang --disagg does)")
    if cfg.pp > 1 and (cfg.disagg or cfg.autoscale):
        raise ValueError("pipeline parallelism (pp > 1) is simulated on a colocated deployment of fixed replicas: "
                         "turn off disaggregation and autoscaling, or set pp=1")
    bounds.check("block", cfg.block_size)
    check_experts(cfg)
    if cfg.spec_method is not None and cfg.pp > 1:
        raise ValueError("speculative decoding runs with pp=1 (vLLM V1 speculates on one pipeline stage): set pp=1 "
                         "or turn speculative decoding off")
    if cfg.spec_method is not None and cfg.policy in ("serial", "static"):
        raise ValueError("speculative decoding is simulated with iteration-level batching: choose the vllm, sarathi "
                         "or orca policy")
    speculative.for_config(cfg, catalog.get_model(cfg.model))
    bounds.check("step_scale", cfg.step_scale)
    if cfg.prefill_gpu is not None:
        if not cfg.disagg:
            raise ValueError("a prefill pool's own GPU type needs a prefill/decode split: turn on disaggregation "
                             "(--disagg), or leave out --prefill-gpu and --decode-gpu")
        catalog.get_gpu(cfg.prefill_gpu)  # an unknown id is refused in the catalog's words
    if cfg.trace_cap < 16 or cfg.trace_cap % 2:
        raise ValueError("trace capacity must be an even number of at least 16 rows")


def _prepare(cfg: SimConfig, eff=None, workload: Workload | None = None):
    """Everything a run needs before the engine starts: checked inputs, the requests, the max model
    length and the pools."""
    validate(cfg)
    gpu, model = catalog.get_gpu(cfg.gpu), catalog.get_model(cfg.model)
    spec = cfg.workload
    trace = load_trace(cfg.trace_csv) if cfg.trace_csv is not None else None
    max_len = cfg.max_model_len or (trace_max_model_len(trace, model) if trace is not None else
                                    default_max_model_len(model, spec))
    if max_len > model.max_context:
        raise ValueError(f"max model length {max_len} exceeds {model.name}'s context of {model.max_context} tokens")
    wl = workload or (trace if trace is not None else generate(replace(spec, max_total_tokens=max_len)))
    longest = int((wl.prompt_tokens + wl.output_tokens).max())
    if longest > max_len:
        raise ValueError(f"a request of {longest:,} tokens (prompt + output) is longer than the max model length of "
                         f"{max_len:,}: raise the max model length (--max-model-len) to at least {longest:,}")
    if wl.cached_tokens is not None and (cfg.disagg or wl.prefix_id is not None or wl.conversation_id is not None):
        raise ValueError("prompts already cached when they arrive are replayed on a colocated deployment without "
                         "system prompts or conversations: drop disaggregation, the prefix ids and the conversations")
    pools = _pools(cfg, gpu, model, max_len, eff)
    if cfg.autoscale and not 1 <= cfg.min_replicas <= pools[0].replicas:
        raise ValueError(f"minimum replicas must be within 1..{pools[0].replicas} (GPUs / tp)")
    return gpu, model, wl, max_len, pools


def estimate(cfg: SimConfig) -> float:
    """Engine steps the simulation of `cfg` would take, estimated without running it (estimated_steps)."""
    _, _, wl, _, pools = _prepare(cfg)
    return estimated_steps(cfg, wl, pools)[0]


def simulate(cfg: SimConfig, eff: costmodel.Efficiency | None = None, workload: Workload | None = None) -> SimResult:
    """Run one simulation; `eff` replaces the fitted cost-model constants (for calibration), a ready
    `workload` the one cfg.workload would generate (a replayed benchmark's own requests)."""
    gpu, model, wl, max_len, pools = _prepare(cfg, eff, workload)
    check_work(cfg, wl, pools)
    eff = pool_efficiency(cfg, gpu, eff)  # the decode (or colocated) pool's: links, the API server

    t0 = time.perf_counter()
    arrays = _build(cfg, wl, pools, max_len, gpu, model, eff)
    job = progress.current()
    if job is None:
        engine.run(*arrays["args"])
    else:  # long work a person watches: it reports how far it is and stops when they leave
        cfg_i, RF = arrays["cfg_i"], arrays["RF"]
        with job.simulation(stop=lambda: cfg_i.__setitem__(L.C_MAX_STEPS, 0),
                            finished=lambda: np.count_nonzero(RF[:, L.F_FINISH] >= 0) / len(RF), requests=wl.n):
            engine.run(*arrays["args"])
    wall = time.perf_counter() - t0
    if arrays["oi"][L.O_STEP_LIMIT]:
        raise ValueError(f"simulating this workload needs more than {cfg.max_steps:,} engine steps (a deeply "
                         f"overloaded queue served slowly): lower the number of requests, the output length or "
                         f"the request rate")
    if arrays["oi"][L.O_DEADLOCK]:
        raise RuntimeError("the simulation stopped with requests unserved (engine deadlock)")
    return _result(cfg, wl, pools, arrays, wall, gpu, max_len, eff)


def estimated_steps(cfg: SimConfig, wl: Workload, pools: list[Pool]) -> tuple[float, float]:
    """(engine steps the run will take, sequences in a typical step), estimated before running it:
    every output token is one sequence in one step, and a step holds at most the max batch (one
    sequence serially) and about as many as are in flight: by Little's law the arrival rate times
    the time a request spends decoding, its output at the batch-of-one step time."""
    decoders = pools[-1]
    slots = 1 if cfg.policy == "serial" else cfg.max_seqs * decoders.ranks
    span = float(wl.arrival_s[-1] - wl.arrival_s[0]) if wl.n > 1 else 0.0
    rate = wl.n / span if span > 0 else math.inf
    step_s = steptime(cfg, tp=decoders.tp, decode_batch=1, context=int(wl.prompt_tokens.mean()))["step_ms"] / 1e3
    in_flight = rate * float(wl.output_tokens.mean()) * step_s / decoders.replicas
    if cfg.workload.closed_loop:  # never more than the users in flight
        in_flight = min(in_flight, cfg.workload.concurrency / decoders.replicas)
    batch = min(slots, max(1.0, in_flight))
    steps = float(wl.output_tokens.sum()) / batch
    if cfg.autoscale:
        steps += span / cfg.scale_interval_s  # each decision costs about a step
    return steps, batch


def check_work(cfg: SimConfig, wl: Workload, pools: list[Pool]) -> None:
    """Refuse, before running, a run whose estimated engine steps exceed cfg.max_steps (a page's
    budget, or the command line's), naming the knob that brings it back within it."""
    steps, batch = estimated_steps(cfg, wl, pools)
    if steps <= cfg.max_steps:
        return
    fits = int(wl.n * cfg.max_steps / steps)
    knob = (f"lower the number of requests to at most {fits:,}" if fits >= 1 else
            "shorten the outputs")
    if cfg.policy != "serial" and batch >= cfg.max_seqs:  # the max batch is what holds the steps back
        knob += " or raise the max batch"
    raise ValueError(f"this run would take about {steps:,.0f} engine steps ({wl.n:,} requests of "
                     f"{float(wl.output_tokens.mean()):,.0f} output tokens on average, about {batch:,.0f} a step), over "
                     f"the budget of {cfg.max_steps:,}: {knob}")


def _build(cfg, wl: Workload, pools: list[Pool], max_len, gpu, model, eff=None) -> dict:
    n = wl.n
    R = sum(p.rows for p in pools)
    pp = pools[0].pp
    RI = np.zeros((n, L.NRI), np.int64)
    RI[:, L.R_PROMPT] = wl.prompt_tokens
    RI[:, L.R_OUTPUT] = wl.output_tokens
    if wl.cached_tokens is not None:  # computed already, in blocks it takes when admitted (loop.admit_waiting)
        RI[:, L.R_COMPUTED] = np.clip(wl.cached_tokens, 0, wl.prompt_tokens - 1)
    for col in (L.R_NEXT, L.R_REPLICA, L.R_HOME, L.R_STREAM, L.R_RPREV, L.R_RNEXT, L.R_HPOS, L.R_GROUP, L.R_CONV,
                L.R_GATE):
        RI[:, col] = -1
    n_stream = min(n, cfg.stream_samples)
    stream_ids = np.unique(np.linspace(0, n - 1, n_stream).round().astype(np.int64)) if n_stream else np.zeros(0, np.int64)
    RI[stream_ids, L.R_STREAM] = np.arange(len(stream_ids))
    RF = np.full((n, L.NRF), -1.0)
    RF[:, L.F_ARRIVAL] = wl.arrival_s
    stream, cl_t, cl_q = _clients(cfg, wl, RI, RF, gpu, eff)

    PI = np.zeros((R, L.NPI), np.int64)
    PF = np.zeros((R, L.Q_STAGE + pp))
    PI[:, [L.P_HEAD, L.P_TAIL, L.P_XHEAD, L.P_XTAIL, L.P_FHEAD, L.P_FTAIL, L.P_RHEAD, L.P_RTAIL, L.P_LHEAD,
           L.P_LTAIL, L.P_DHEAD, L.P_DTAIL]] = -1
    PI[:, L.P_SPEC_ADV] = 1  # tokens a cohort step gains (1 + drafts accepted under speculative decoding)
    PI[:, L.P_SPEC_DRAWS] = (np.arange(R, dtype=np.int64) * cohort.WEYL_START) & cohort.WEYL_MASK
    PF[:, L.Q_BUSY] = np.inf
    params = np.zeros((R, costmodel.N_PARAMS))
    r = 0
    for i, pool in enumerate(pools):
        sl = slice(r, r + pool.rows)
        PI[sl, L.P_LANE] = np.arange(pool.rows) % pool.pp
        PI[r:r + pool.rows:pool.pp, L.P_BLOCKS] = pool.plan.kv_blocks  # a pipeline's lanes share lane 0's pool
        PI[sl, L.P_POOL] = (L.POOL_MIXED if len(pools) == 1 else (L.POOL_PREFILL if i == 0 else L.POOL_DECODE))
        PI[sl, L.P_STATE] = L.ON
        # a replica's ranks batch together (an MoE layer joins them every step): their max batches and budgets
        PI[sl, L.P_MAX_SEQS] = 1 if cfg.policy == "serial" else cfg.max_seqs * pool.ranks
        PI[sl, L.P_BUDGET] = _budget(cfg, max_len) * pool.ranks
        params[sl] = pool.params
        r += pool.rows
    if cfg.autoscale:
        PI[cfg.min_replicas:, L.P_STATE] = L.OFF

    split = costmodel.PAGED_KV_SPLIT if cfg.attn_kernel == "paged" else 0
    cfg_i = np.zeros(L.NCI, np.int64)
    cfg_i[L.C_POLICY] = L.POLICIES.index(cfg.policy)
    cfg_i[L.C_BLOCK] = cfg.block_size
    cfg_i[L.C_CHUNK] = cfg.chunk or _budget(cfg, max_len)  # a prompt's chunk runs on one rank
    cfg_i[L.C_MAX_LEN] = max_len
    cfg_i[L.C_WATERMARK] = watermark_blocks(min(p.plan.kv_blocks for p in pools), cfg.watermark)
    cfg_i[L.C_ROUTER] = L.ROUTERS.index(cfg.router)
    cfg_i[L.C_N_PREFILL] = pools[0].replicas if cfg.disagg else 0
    cfg_i[L.C_AUTOSCALE] = int(cfg.autoscale)
    cfg_i[L.C_MIN_REPLICAS] = cfg.min_replicas
    cfg_i[L.C_SCALE_METRIC] = SCALE_METRICS.index(cfg.scale_metric)
    cfg_i[L.C_SPLIT] = split
    cfg_i[L.C_MAX_STEPS] = cfg.max_steps
    cfg_i[L.C_FAST_FORWARD] = int(cfg.fast_forward)
    cfg_i[L.C_PP] = pp
    cfg_i[L.C_PP_NODE] = pipeline.stages_per_node(gpu, pools[0].tp)
    cfg_i[L.C_USERS] = cfg.workload.concurrency
    cfg_i[L.C_ASYNC] = int(client_side(cfg) and cfg.async_scheduling)
    cfg_f = np.zeros(L.NCF)
    if cfg.disagg:
        cfg_f[L.G_XFER_BW], cfg_f[L.G_XFER_LAT] = kv_link(gpu, cfg, pools, eff)
    cfg_f[L.G_KV_BYTES_TOKEN] = model.kv_bytes_per_token(catalog.kv_format(cfg.kv_dtype).bytes_per_value)
    cfg_f[L.G_SCALE_INTERVAL] = cfg.scale_interval_s
    cfg_f[L.G_SCALE_TARGET] = cfg.scale_target
    cfg_f[L.G_SCALE_DOWN_FRAC] = cfg.scale_down_frac
    cfg_f[L.G_STARTUP_S] = startup_seconds(cfg, model, pools[0].tp)
    cfg_f[L.G_PP_BYTES_TOKEN] = pipeline.bytes_per_token(model)
    cfg_f[L.G_PP_S_BYTE], cfg_f[L.G_PP_LAT] = pipeline.handoff_link(gpu, pools[0].tp, False, eff)
    cfg_f[L.G_PP_S_BYTE_NET], cfg_f[L.G_PP_LAT_NET] = pipeline.handoff_link(gpu, pools[0].tp, True, eff)

    offload.configure(cfg, gpu, pools, cfg_f)
    PI[:, L.P_OFF_CAP] = offload.tier_blocks(cfg, pools[0], cfg_f[L.G_KV_BYTES_TOKEN])
    KC = _prefix_cache(cfg, wl, RI, PI, cfg_i)
    # nothing shared, no cache tables: a preempted request's own cached blocks are followed by counts
    # a policy that reserves the maximum length at admission (serial, static, orca) never evicts already
    cfg_i[L.C_NO_EVICT] = int(cfg.no_evict and cfg.policy in L.PAGED_POLICIES)
    cfg_i[L.C_RESUME] = int(cfg.prefix_caching and cfg.policy in L.PAGED_POLICIES and cfg_i[L.C_PREFIX] == 0)
    SLOTS = np.zeros((R, L.NL, int(PI[:, L.P_MAX_SEQS].max())), np.int64)
    # a row repeats its period up to SPEC_MAX phases past its end (cohort.bucket): at most 2 periods + SPEC_MAX
    BKT = np.zeros((R, L.NB, 2 * max(cfg.block_size, split) + speculative.SPEC_MAX), np.int64)
    trace = np.zeros((cfg.trace_cap, L.NT))
    stream_t = np.full((len(stream_ids), cfg.stream_cap), np.nan)
    itl_hist = np.zeros(L.ITL_BINS, np.int64)
    itl_edges = 10.0 ** (L.ITL_LO + np.arange(L.ITL_BINS + 1) / L.ITL_PER_DECADE)
    oi = np.zeros(L.NOI, np.int64)
    of = np.zeros(L.NOF)
    work_i, work_f = np.zeros(L.NW, np.int64), np.zeros(L.NM + costmodel.N_SCRATCH)
    args = (RI, RF, PI, PF, SLOTS, BKT, KC, params, cfg_i, cfg_f, trace, stream_t, stream_ids, itl_hist, itl_edges, oi,
            of, work_i, work_f, stream, cl_t, cl_q)
    return dict(args=args, RI=RI, RF=RF, PI=PI, PF=PF, trace=trace, stream_t=stream_t, stream_ids=stream_ids,
                itl_hist=itl_hist, oi=oi, of=of, cfg_i=cfg_i, stream=stream)


def _clients(cfg: SimConfig, wl: Workload, RI, RF, gpu, eff=None):
    """The clients' tables (engine/clients.py): the stream of requests in the order they fall due,
    and the heap of users thinking. In a closed loop a conversation's later turns leave the stream:
    each follows its earlier turn from the same user. A user's think time starts when it sees the
    last token, which reaches it the API server's time after the engine emits it."""
    spec = cfg.workload
    n = wl.n
    RI[:, L.R_FOLLOW] = -1
    RF[:, L.F_THINK] = RF[:, L.F_ASYNC] = 0.0
    if not spec.closed_loop:
        return np.arange(n, dtype=np.int64), np.zeros(1), np.zeros(1, np.int64)
    lag = (engines.server_ttft_ms(cfg.engine_overhead, (eff or costmodel.efficiency_for(gpu)).api_ms, gpu) * 1e-3
           if client_side(cfg) and cfg.api_server else 0.0)
    RF[:, L.F_THINK] = think_times(spec, n) + lag
    later = np.zeros(n, bool)
    if wl.conversation_id is not None:
        conv = wl.conversation_id
        order = np.lexsort((wl.arrival_s, conv))
        same = (conv[order][1:] == conv[order][:-1]) & (conv[order][1:] >= 0)
        RI[order[:-1][same], L.R_FOLLOW] = order[1:][same]
        later[order[1:][same]] = True
        RF[later, L.F_ARRIVAL] = np.inf  # known when the earlier turn has its answer
    users = spec.concurrency
    return np.flatnonzero(~later).astype(np.int64), np.zeros(users), np.zeros(users, np.int64)


def _reused(ids: np.ndarray | None) -> np.ndarray | None:
    """Dense ids of the streams at least two requests share; -1 for the rest (nothing reuses them)."""
    if ids is None:
        return None
    out = np.full(len(ids), -1, np.int64)
    some = ids >= 0
    if not some.any():
        return out
    _, dense, counts = np.unique(ids[some], return_inverse=True, return_counts=True)
    out[some] = np.where(counts[dense] >= 2, dense, -1)
    return out


# the most memory the prefix cache's tables take (every replica's rows of 8-byte words): 16-token blocks
# keep 64 replicas of a GPU with 80 GiB under a tenth of it; 1-token blocks of a small model on many GPUs
# would take tens of GiB
PREFIX_TABLE_BYTES = 2 << 30


def _prefix_cache(cfg: SimConfig, wl: Workload, RI, PI, cfg_i) -> np.ndarray:
    """Mark what prefix caching can reuse and build each replica's cache tables (kvcache.py): room
    for every distinct block the workload can reuse and at least the pool's blocks (a preempted
    request's own blocks stay entries: kvcache.keep_cached), within both tiers' blocks."""
    R = PI.shape[0]
    group, conv = _reused(wl.prefix_id), _reused(wl.conversation_id)
    paged = cfg.policy in L.PAGED_POLICIES
    if not (cfg.prefix_caching and paged) or ((group is None or (group < 0).all()) and
                                              (conv is None or (conv < 0).all())):
        return np.zeros((R, L.NKC, 1), np.int64)
    bs = cfg.block_size
    distinct = 0
    if group is not None:
        RI[:, L.R_GROUP] = group
        RI[:, L.R_SHARED] = np.where(group >= 0, wl.prefix_tokens, 0)
        if (group >= 0).any():
            longest = np.zeros(group.max() + 1, np.int64)
            np.maximum.at(longest, group[group >= 0], wl.prefix_tokens[group >= 0] // bs)
            distinct += int(longest.sum())
    if conv is not None:
        RI[:, L.R_CONV] = conv
        # a later turn follows: the next request of the same conversation by arrival (requests are sorted)
        order = np.lexsort((wl.arrival_s, conv))
        same = (conv[order][1:] == conv[order][:-1]) & (conv[order][:-1] >= 0)
        RI[order[:-1], L.R_LATER] = same
        RI[:, L.R_EARLIER] = -1
        RI[order[1:], L.R_EARLIER] = np.where(same, order[:-1], -1)
        if (conv >= 0).any():
            longest = np.zeros(conv.max() + 1, np.int64)
            some = conv >= 0
            np.maximum.at(longest, conv[some], (wl.prompt_tokens + wl.output_tokens)[some] // bs)
            distinct += int(longest.sum())
    gpu_blocks = int(PI[:, L.P_BLOCKS].max())
    entries = max(gpu_blocks, min(distinct, int((PI[:, L.P_BLOCKS] + PI[:, L.P_OFF_CAP]).max())))  # both tiers
    # a table at most half full (kvcache._slot: a bucket of 8 and more) for the entries the GPU's
    # blocks can hold, and one for the host tier's; nodes are the GPU's entries and the runs of plain
    # or dead blocks between them (a block at least each: no more nodes than the pool's blocks + 1)
    bits = max(4, int(math.ceil(math.log2(2 * gpu_blocks + 4))))
    host = int(PI[:, L.P_OFF_CAP].max())
    off_bits = max(4, int(math.ceil(math.log2(2 * host + 4)))) if host else 0
    groups = int(group.max()) + 1 if group is not None else 0
    # a row holds the GPU table, the router's memo (4 words a group) and what a look-up finds (a
    # block a word: as many as the longest prompt, which a large host tier may hold whole)
    width = max(1 << bits, 1 << int(4 * groups).bit_length(), 1 << int(wl.prompt_tokens.max() // bs).bit_length())
    tier_rows = -(-tier_words(off_bits) // width) if host else 0  # the tier's words, rows of the same width
    # each row a cache line longer than its width: rows a power of two wide put a node's fields in every
    # row, and every replica's rows, in one set of the processor's cache, which they then fight over
    table_bytes = R * (L.NKC + tier_rows) * (width + ROW_PAD) * 8
    if table_bytes > PREFIX_TABLE_BYTES:
        raise ValueError(f"prefix caching's tables for {R} replicas of {gpu_blocks:,} KV blocks each would take "
                         f"{table_bytes / 2**30:.1f} GiB of this machine's memory: raise the KV block size (vLLM's "
                         f"default is 16 tokens, here {bs}), or turn prefix caching off")
    KC = np.zeros((R, L.NKC + tier_rows, width + ROW_PAD), np.int64)
    KC[:, L.N_KEY, 0] = -1  # node 0: one run of every block, never used
    KC[:, L.N_COUNT, 0] = PI[:, L.P_BLOCKS]
    KC[:, L.N_PREV, 0] = KC[:, L.N_NEXT, 0] = -1
    KC[:, L.N_NEXT, 1:width] = np.arange(2, width + 1)  # the spare nodes
    KC[:, L.N_NEXT, width - 1] = -1
    PI[:, L.P_PC_QHEAD] = PI[:, L.P_PC_QTAIL] = 0
    PI[:, L.P_PC_ANON] = PI[:, L.P_BLOCKS]
    PI[:, L.P_PC_SPARE] = 1
    cfg_i[L.C_PREFIX] = 1
    cfg_i[L.C_PC_BITS] = bits
    cfg_i[L.C_OFF_BITS] = off_bits
    PI[:, L.P_OFF_TBITS] = min(HOST_TABLE_BITS, off_bits)  # the tier's table grows from there
    cfg_i[L.C_PC_ENTRIES] = entries
    return KC


def kv_link(gpu: catalog.GPU, cfg: SimConfig, pools: list[Pool], eff=None) -> tuple[float, float]:
    """Bandwidth (B/s) and latency (s) of moving one request's KV from a prefill to a decode
    replica: each GPU of the narrower replica sends its shard over its own link; within one node
    that is the scale-up link, across nodes the NIC. Two GPU types never share a node (an HGX or
    DGX node holds one type), so a split over two types always moves its KV over the network, at
    the slower NIC of the two."""
    lanes = min(pools[0].tp, pools[1].tp)
    gpus = sum(p.replicas * p.tp for p in pools)
    pre = getattr(pools[0], "gpu", None) or gpu  # the tutorial passes bare (replicas, tp) pools
    if pre.id != gpu.id:
        per_gpu, latency = min(pre.internode_gbps_per_dir, gpu.internode_gbps_per_dir), 50e-6
    elif gpus <= gpu.gpus_per_node:
        per_gpu, latency = gpu.tp_link_gbps(2), 10e-6
    else:
        per_gpu, latency = gpu.internode_gbps_per_dir, 50e-6
    return lanes * per_gpu * 1e9 * (eff or costmodel.efficiency_for(gpu)).link_eff, latency


def startup_seconds(cfg: SimConfig, model: catalog.Model, tp: int) -> float:
    """A new replica serves after its process starts and every GPU loads its weight shard."""
    if cfg.load_gbps <= 0 or cfg.startup_fixed_s < 0:
        raise ValueError("weight loading bandwidth must be above 0 GB/s and the fixed start-up time >= 0 s")
    return cfg.startup_fixed_s + weight_bytes_per_gpu(model, tp, cfg.dtype) / (cfg.load_gbps * 1e9)


def client_side(cfg: SimConfig) -> bool:
    """Whether the run is vLLM V1's engine behind its API server (or SGLang's, or TensorRT-LLM's), whose
    clients see each token later than the engine emits it (_client_side)."""
    return (cfg.engine_overhead == "vllm" and cfg.policy == "sarathi") or cfg.engine_overhead in ("sglang", "trtllm")


def _client_side(cfg, requests, async_step, stream_t, stream_ids, eff) -> None:
    """Shift each request's tokens to when its client sees them: the API server's time and, with
    async scheduling, the step already planned when it arrived at a busy engine (an idle engine
    schedules it at once): the step in flight on its replica then, which the engine recorded."""
    first = requests["first_token_s"]
    delay = vllm_host.client_delay_s(np.where(first >= 0, async_step, 0.0),
                                     engines.server_ttft_ms(cfg.engine_overhead, eff.api_ms, catalog.get_gpu(cfg.gpu))
                                     * cfg.api_server,
                                     cfg.async_scheduling)
    done = first >= 0
    first[done] += delay[done]
    fin = requests["finish_s"]
    fin[fin >= 0] += delay[fin >= 0]
    if len(stream_ids):
        stream_t += delay[stream_ids][:, None]  # NaN (no token yet) stays NaN


def due_rate_of(wl: Workload) -> float:
    """Requests/s a workload makes due over its arrival window (inf: all at once)."""
    span = float(wl.arrival_s[-1] - wl.arrival_s[0]) if wl.n > 1 else 0.0
    return (wl.n - 1) / span if span > 0 else math.inf


def _as_sent(wl: Workload, requests: dict, stream: dict):
    """A closed loop's requests as its clients sent them: the workload's arrival times are when each
    was sent (known only once the run has said when users were free), and every per-request array
    is in that order, as an open loop's are."""
    order = np.argsort(requests["arrival_s"], kind="stable")
    requests = {k: v[order] for k, v in requests.items()}
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    stream = dict(stream, request=inverse[stream["request"]])
    pick = (lambda x: None if x is None else x[order])
    wl = replace(wl, arrival_s=requests["arrival_s"], prompt_tokens=wl.prompt_tokens[order],
                 output_tokens=wl.output_tokens[order], prefix_id=pick(wl.prefix_id),
                 prefix_tokens=pick(wl.prefix_tokens), conversation_id=pick(wl.conversation_id),
                 cached_tokens=pick(wl.cached_tokens))
    return wl, requests, stream


def _result(cfg, wl, pools, a, wall, gpu, max_len, eff=None) -> SimResult:
    RI, RF, PI, PF, oi, of = a["RI"], a["RF"], a["PI"], a["PF"], a["oi"], a["of"]
    # columns of the engine's tables, as views (the tables are not used again)
    requests = dict(arrival_s=RF[:, L.F_ARRIVAL], scheduled_s=RF[:, L.F_SCHED], first_token_s=RF[:, L.F_FIRST],
                    finish_s=RF[:, L.F_FINISH], prompt_tokens=RI[:, L.R_PROMPT], output_tokens=RI[:, L.R_OUTPUT],
                    generated_tokens=RI[:, L.R_GENERATED], preemptions=RI[:, L.R_PREEMPTS],
                    replica=RI[:, L.R_REPLICA], cached_tokens=RI[:, L.R_CACHED], xfer_ready_s=RF[:, L.F_XFER_READY],
                    xfer_start_s=RF[:, L.F_XFER_START], xfer_done_s=RF[:, L.F_XFER_DONE])
    pp = pools[0].pp
    if pp > 1:  # the engine's rows are lanes: name the replica
        requests["replica"] = np.where(RI[:, L.R_REPLICA] >= 0, RI[:, L.R_REPLICA] // pp, -1)
    k = int(oi[L.O_TRACE_N])
    trace = {name: a["trace"][:k, i].copy() for i, name in enumerate(L.TRACE_COLUMNS)}
    if pp > 1:
        trace["replica"] //= pp
    trace["stride"] = int(oi[L.O_TRACE_STRIDE])
    if client_side(cfg):  # vLLM V1's engine and its API server
        _client_side(cfg, requests, RF[:, L.F_ASYNC], a["stream_t"], a["stream_ids"], eff or costmodel.efficiency_for(gpu))
    stream = dict(request=a["stream_ids"], arrival_s=RF[a["stream_ids"], L.F_ARRIVAL],
                  token_s=a["stream_t"])
    due_rate, dry = due_rate_of(wl), None
    if cfg.workload.closed_loop:
        sent = a["stream"]  # in the order its requests fell due
        due_rate = due_rate_of(replace(wl, arrival_s=wl.arrival_s[sent]))
        dry = float(RF[sent[-1], L.F_ARRIVAL])
        wl, requests, stream = _as_sent(wl, requests, stream)
    cap = capacity(cfg, pools, float(wl.prompt_tokens.mean()), float(wl.output_tokens.mean()), _budget(cfg, max_len),
                   cached=float(PI[:, L.P_PC_HIT].sum()) / wl.n)
    summary = summarize(cfg, wl, pools, requests, PI, PF, oi, of, a["itl_hist"], gpu, max_len, wall, cap, dry, due_rate)
    kv_token = catalog.get_model(cfg.model).kv_bytes_per_token(catalog.kv_format(cfg.kv_dtype).bytes_per_value)
    summary["kv_offload"] = offload.summary(cfg, PI, kv_token)
    return SimResult(cfg, summary, wl, requests, trace, stream, a["itl_hist"], pools, wall,
                     dict(PI=PI, KC=a["args"][6], cfg=a["cfg_i"]))
