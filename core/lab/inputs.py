"""The Lab's inputs and how they become simulations.

A person sets a workload (request rate, prompt and output lengths, model, GPUs, a p99
time-to-first-token target) and two toggles (continuous batching with paged attention; tensor
parallel sharding). `LabInputs` holds them; `current_config` turns them into the deployment they
describe, and `stage_config` into each of the five architecture stages the design evolves
through, on the same workload:

  1 one GPU serving one request at a time      (policy serial, every GPU its own replica)
  2 a KV cache with request-level batching     (policy static)
  3 continuous batching + paged attention      (policy sarathi, or vllm without chunked prefill)
  4 tensor-parallel sharding                   (stage 3, each replica sharded over tp GPUs)
  5 prefill/decode disaggregation              (stage 4, GPUs split into a prefill and a decode pool)
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from .. import bounds, memo
from ..engine.layout import PAGED_POLICIES
from ..physics import catalog, expert, pipeline, speculative
from ..physics.memory import MemoryPlan, plan_memory, smallest_fitting_tp
from ..planner.space import Targets
from ..serving import engines, serve_command
from ..serving.command import engine_defaults, on_engine
from ..serving.simulate import (SimConfig, SimResult, estimate, fitted_max_model_len, simulate,
                                shortest_max_model_len, trace_max_model_len)
from ..serving.workload import LENGTH_DISTS, WorkloadSpec, load_trace

LOADS = ("rate", "users")
EXPERT_SHAPES = ("tp", "ep", "ep_dp", "ep_dp_overlap")  # LabInputs.experts

STAGES = {
    1: "One GPU, one request at a time",
    2: "KV cache with batching",
    3: "Continuous batching + paged attention",
    4: "Tensor-parallel sharding",
    5: "Prefill/decode disaggregation",
}

# Engine steps one simulation behind a page may take, estimated before it runs and enforced while it
# does (SimConfig.max_steps): 70-250 ns a step (bench/engine_speed.py) make it 1-2.5 s, so that a
# page of several runs answers within seconds; the refusal names the knob that brings a run back.
PAGE_STEPS = 10_000_000


@dataclass(frozen=True)
class LabInputs:
    # the seed's workload inputs
    rate: float = 4.0  # requests per second
    # how the load is offered: "rate", an open loop at `rate`; or "users", a closed loop of `users`
    # concurrent users, each sending its next request think_s after its last answer (how benchmarks
    # run: vllm bench serve --max-concurrency)
    load: str = "rate"
    users: int = 64
    think_s: float = 0.0
    prompt_tokens: int = 512  # average
    output_tokens: int = 256  # average
    model: str = "llama-3.1-8b"  # catalog id, or "dense-<N>b" for the model-size slider
    gpus: int = 1
    gpu: str = "h100"
    ttft_p99_ms: float = 1000.0
    # the seed's two toggles
    continuous_batching: bool = True  # continuous batching + paged attention
    tensor_parallel: bool = False
    # advanced
    chunked_prefill: bool = True
    tp: int = 0  # 0: the smallest degree that fits (at least 2) when sharding is on
    pp: int = 0  # pipeline stages per replica; 0: one within a node, across nodes when a replica spans them
    block_size: int = 16
    max_seqs: int = 256
    max_batched_tokens: int = 2048
    length_dist: str = "lognormal"
    spread: float = 0.5
    tpot_ms: float = 100.0
    requests: int = 2000
    seed: int = 0
    router: str = "lor"
    dtype: str = "bf16"  # weights: bf16, fp8 or int4
    kv_dtype: str = "bf16"  # KV cache: bf16 or fp8
    # what prefix caching can reuse: shared system prompts (how many, and their tokens) ahead of the
    # prompt's own tokens, and conversations whose later turns hold the earlier ones
    system_prompts: int = 0
    system_prompt_tokens: int = 1024
    turns: int = 1
    turn_gap_s: float = 30.0
    prefix_caching: bool = True  # vLLM V1's default
    # speculative decoding (physics/speculative.py): a proposer, or "off"; 0 draft tokens and a
    # negative acceptance rate stand for the method's published defaults (data/speculative.json);
    # a draft model is the catalog's smallest with the model's tokenizer
    spec_method: str = "off"
    spec_tokens: int = 0
    spec_acceptance: float = -1.0
    # KV offload (serving/offload.py): a host-memory tier per replica under its prefix cache, GiB
    kv_offload_gb: float = 0.0
    # how a sharded MoE model's experts split over a replica's GPUs (physics/expert.py): sliced by
    # tensor parallelism ("tp"), expert parallel ("ep"), or expert parallel with data-parallel
    # attention ("ep_dp"), its micro-batches overlapping their all-to-alls ("ep_dp_overlap"); a dense
    # model, or a replica of one GPU, has no experts to split
    experts: str = "tp"
    # EPLB over split experts, with a redundant copy of a popular expert on every GPU of the split
    # (DeepSeek's and TensorRT-LLM's 9 slots a rank for 8 experts at EP32)
    eplb: bool = False
    trace_csv: str | None = None  # a replayed trace replaces the generated workload
    # the serving engine (serving/engines.py): vLLM V1, or SGLang or TensorRT-LLM as each runs out of
    # the box, whose own rule, token budget, prefill chunk and batch limit on the GPU replace the
    # chunked-prefill toggle, the token budget and the max batch (batch_limits)
    engine: str = "vllm"

    @property
    def closed_loop(self) -> bool:
        return self.load == "users"

    def load_label(self) -> str:
        """'4 req/s', or '64 concurrent users' (and their think time): the load, as the pages name it."""
        if self.closed_loop:
            think = f" thinking {self.think_s:g} s between requests" if self.think_s else ""
            return f"{self.users:,} concurrent users{think}"
        return f"{self.rate:g} req/s"

    def shares_prefixes(self) -> bool:
        """Whether any prompt repeats another's prefix (a trace: whether it names what is shared)."""
        if self.trace_csv is not None:
            wl = load_trace(self.trace_csv)
            return wl.prefix_id is not None or wl.conversation_id is not None
        return self.system_prompts > 0 or self.turns > 1

    def speculation(self, policy: str = "sarathi") -> dict:
        """SimConfig's speculative-decoding fields for a deployment of `policy` (none for the stages
        before continuous batching: speculation is a rule of iteration-level batching)."""
        if self.spec_method == "off" or policy in ("serial", "static"):
            return {}
        return dict(spec_method=self.spec_method, spec_tokens=self.spec_tokens or None,
                    spec_acceptance=self.spec_acceptance if self.spec_acceptance >= 0 else None)

    def caching(self, policy: str = "sarathi") -> dict:
        """SimConfig's prefix-cache fields for a deployment of `policy`: the stages without paged KV
        have no prefix cache, so no host tier under it, and their router weighs load alone."""
        cache = self.prefix_caching and policy in PAGED_POLICIES
        router = "lor" if self.router == "prefix" and not cache else self.router
        return dict(prefix_caching=self.prefix_caching, router=router, kv_offload_gb=self.kv_offload_gb if cache else 0.0)

    def expert_parallel(self, tp: int) -> dict:
        """SimConfig's expert fields for a replica of `tp` GPUs: the experts over all of them."""
        ep, dp = expert.replica_split(tp, self.experts != "tp" and catalog.get_model(self.model).is_moe,
                                      self.experts.startswith("ep_dp"))
        if ep == 1:
            return {}
        return dict(ep=ep, dp_attention=dp, micro_batch_overlap=self.experts == "ep_dp_overlap",
                    **(dict(eplb=True, redundant_experts=expert.eplb_copies(ep)) if self.eplb else {}))

    def batch_limits(self) -> tuple[int, int]:
        """(tokens a step, sequences a step) the deployment runs with: the Advanced knobs under vLLM,
        else the engine's own on the GPU (SGLang's chunk and running-request limit, TensorRT-LLM's
        max_num_tokens and max_batch_size: serving.command.engine_defaults)."""
        if self.engine == "vllm":
            return self.max_batched_tokens, self.max_seqs
        own = engine_defaults(self.gpu, self.engine, True)
        return own["max_batched_tokens"], own["max_seqs"]

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "trace_csv"}

    @classmethod
    def from_dict(cls, d: dict) -> "LabInputs":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def validate(self) -> None:
        catalog.get_gpu(self.gpu)
        catalog.get_model(self.model)
        catalog.check_formats(catalog.get_gpu(self.gpu), self.dtype, self.kv_dtype)
        if self.engine not in engines.SERVING:
            raise ValueError(f"the serving engine is one of {', '.join(engines.SERVING)}, not '{self.engine}'")
        engines.check_gpu(self.engine, catalog.get_gpu(self.gpu))
        if self.gpus < 1:
            raise ValueError("the GPU count must be at least 1")
        if self.trace_csv is not None:  # raises with the offending line, or the request beyond the context
            trace_max_model_len(load_trace(self.trace_csv), catalog.get_model(self.model))
            return
        if self.experts not in EXPERT_SHAPES:
            raise ValueError(f"experts split as one of {', '.join(EXPERT_SHAPES)}, not '{self.experts}'")
        if self.load not in LOADS:
            raise ValueError(f"the load is a request rate or concurrent users ({', '.join(LOADS)}), not '{self.load}'")
        if self.closed_loop:
            bounds.check("concurrency", self.users)
            bounds.check("think_time", self.think_s)
        elif not self.rate > 0:
            raise ValueError(f"request rate must be above 0 req/s, not {self.rate:g}: move the request-rate slider up")
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError("prompt and output lengths must each be at least 1 token")
        if not self.ttft_p99_ms > 0:
            raise ValueError("the p99 time-to-first-token target must be above 0 ms")
        if self.length_dist not in LENGTH_DISTS:
            raise ValueError(f"unknown length distribution '{self.length_dist}'")
        if self.spec_method != "off":  # the proposer exists for this model; the draft counts are in range
            if self.spec_method not in speculative.METHODS:
                raise ValueError(f"speculative decoding is off or one of {', '.join(speculative.METHODS)}, not "
                                 f"'{self.spec_method}'")
            fields_ = self.speculation()
            speculative.speculation(self.spec_method, fields_["spec_tokens"], fields_["spec_acceptance"], None,
                                    catalog.get_model(self.model))
        bounds.check("kv_offload_gb", self.kv_offload_gb)
        if (self.router == "prefix" or self.kv_offload_gb > 0) and not (self.prefix_caching and self.continuous_batching):
            what = "prefix-aware routing" if self.router == "prefix" else "a KV offload tier"
            raise ValueError(f"{what} works on the prefix cache: turn continuous batching and prefix caching on "
                             f"(Advanced), or choose another router and no offload tier")
        context = catalog.get_model(self.model).max_context
        if self.prompt_tokens + self.output_tokens > context:
            raise ValueError(f"{self.prompt_tokens} prompt + {self.output_tokens} output tokens exceed "
                             f"{catalog.get_model(self.model).name}'s context of {context} tokens: shorten them")
        longest = workload(self).longest_fixed()
        if longest > context:
            raise ValueError(f"a conversation's last turn holds {longest:,} tokens (system prompt, every turn and "
                             f"answer), beyond {catalog.get_model(self.model).name}'s context of {context:,}: "
                             f"fewer turns, a shorter system prompt or shorter messages")


def memory_plan(inputs: LabInputs, gpu, model, tp: int, **shape) -> MemoryPlan:
    """One GPU's memory under the Lab's batch limits and engine, at `tp` (dtype, kv_dtype, ep and
    dp_attention the inputs' unless given)."""
    shape = dict(dict(dtype=inputs.dtype, kv_dtype=inputs.kv_dtype, ep=1, dp_attention=False), **shape)
    budget, max_seqs = inputs.batch_limits()
    return plan_memory(gpu, model, tp, inputs.block_size, max_batched_tokens=budget, max_seqs=max_seqs, **shape,
                       **engines.kv_memory(inputs.engine, gpu, tp, 1, shape["dp_attention"]))


def with_trace_lengths(inputs: LabInputs) -> LabInputs:
    """With a replayed trace the sidebar's prompt and output lengths describe requests the run never
    sees (and may exceed the model's context), so the figures of one typical request (a prompt's
    prefill, the decode context, the tutorial's numbers) take the trace's mean lengths instead."""
    if inputs.trace_csv is None:
        return inputs
    try:
        wl = load_trace(inputs.trace_csv)
    except ValueError:  # validate() names the bad line
        return inputs
    return replace(inputs, prompt_tokens=max(1, round(float(wl.prompt_tokens.mean()))),
                   output_tokens=max(1, round(float(wl.output_tokens.mean()))))


def workload(inputs: LabInputs) -> WorkloadSpec:
    clients = (dict(rate=math.inf, concurrency=inputs.users, think_s=inputs.think_s) if inputs.closed_loop else
               dict(rate=inputs.rate))
    return WorkloadSpec(n_requests=inputs.requests, **clients, prompt_mean=inputs.prompt_tokens,
                        output_mean=inputs.output_tokens, length_dist=inputs.length_dist, spread=inputs.spread,
                        seed=inputs.seed, prefix_groups=inputs.system_prompts,
                        prefix_tokens=inputs.system_prompt_tokens if inputs.system_prompts else 0,
                        turns=inputs.turns, turn_gap_s=inputs.turn_gap_s)


def max_model_len(inputs: LabInputs, tp: int = 1, pp: int = 1) -> int:
    """The max model length the Lab's deployments get (serving.simulate.fitted_max_model_len)."""
    return fitted_max_model_len(catalog.get_gpu(inputs.gpu), catalog.get_model(inputs.model), workload(inputs),
                                inputs.trace_csv, tp, inputs.dtype, *inputs.batch_limits(),
                                inputs.block_size, pp, kv_dtype=inputs.kv_dtype, engine=inputs.engine,
                                **{k: v for k, v in inputs.expert_parallel(tp).items()
                                   if k in ("ep", "dp_attention", "redundant_experts")})


def request_tokens(inputs: LabInputs) -> int:
    """The KV cache one request of the workload needs on a replica (tokens): the shortest max model
    length the Lab fits, beside the blocks admission keeps free."""
    need = shortest_max_model_len(workload(inputs), inputs.trace_csv, catalog.get_model(inputs.model))
    return math.ceil(need / 0.98)


def min_tp(inputs: LabInputs) -> int | None:
    """Smallest tensor-parallel degree whose weights leave the KV cache room for one request of the
    workload, as the serving engine sizes its cache."""
    gpu, model = catalog.get_gpu(inputs.gpu), catalog.get_model(inputs.model)
    return smallest_fitting_tp(gpu, model, inputs.block_size, *inputs.batch_limits(), inputs.dtype,
                               inputs.kv_dtype, inputs.experts, inputs.eplb, min_tokens=request_tokens(inputs),
                               rules=lambda tp, dp: engines.kv_memory(inputs.engine, gpu, tp, 1, dp))


def tp_choices(inputs: LabInputs) -> list[int]:
    """Tensor-parallel degrees a sharded replica can take here: from the smallest that fits (at
    least 2), doubling, each dividing the GPU count and splitting the model's attention (Model.splits_over)."""
    model = catalog.get_model(inputs.model)
    tp, out = max(2, min_tp(inputs) or 2), []
    while tp <= inputs.gpus:
        if inputs.gpus % tp == 0 and model.splits_over(tp):
            out.append(tp)
        tp *= 2
    return out


class NeedsShape(ValueError):
    """A deployment the sidebar cannot simulate as set, with the sidebar settings (LabInputs fields)
    of the smallest one that runs: a page offers them as a button."""

    def __init__(self, message: str, settings: dict, action: str):
        super().__init__(message)
        self.settings, self.action = settings, action


def sharded_shape(inputs: LabInputs, need: int) -> tuple[int, int, int]:
    """(GPUs, tp, pp) of the smallest replica of at least `need` GPUs' worth of sharding that the
    sidebar can set: a power of two (the degrees heads divide), tensor parallel within a node and
    pipeline stages across nodes (replica_shape), on the fewest of the sidebar's GPU counts."""
    model, gpu = catalog.get_model(inputs.model), catalog.get_gpu(inputs.gpu)
    tp, pp = replica_shape(replace(inputs, pp=0), 2 ** max(1, math.ceil(math.log2(need))))
    size = tp * pp
    if model.splits_over(tp):
        for g in bounds.sidebar_options("gpus"):
            if g >= size and g % size == 0:
                return g, tp, pp
    raise ValueError(f"{model.label()} needs more than {bounds.sidebar_options('gpus')[-1]} {gpu.name} GPUs per "
                     f"replica: choose a GPU with more memory, or fp8 or int4 weights (Advanced)")


def needs_more_gpus(inputs: LabInputs, need: int) -> NeedsShape:
    """The sidebar's GPUs hold no replica: name the smallest shape that can be set, and offer it; a
    model released only quantised (gpt-oss, DeepSeek) whose release fits them is offered that first."""
    model, gpu = catalog.get_model(inputs.model), catalog.get_gpu(inputs.gpu)
    for fmt in serve_command.released_formats(inputs.model):
        fits = min_tp(replace(inputs, dtype=fmt))
        if fmt != inputs.dtype and fits is not None and fits <= inputs.gpus:
            return NeedsShape(f"{model.label()} in {inputs.dtype} does not fit the sidebar's {inputs.gpus} {gpu.name} "
                              f"GPUs; it is released in {fmt}, which fits them: set Weights to {fmt} (Advanced)",
                              dict(dtype=fmt), f"Use {fmt} weights (its release)")
    gpus, tp, pp = sharded_shape(inputs, need)
    short = f"tp={tp}" + (f" × pp={pp}" if pp > 1 else "")
    shape = f"tp={tp}" + (f" within each {gpu.gpus_per_node}-GPU node × pp={pp} pipeline stages across nodes"
                          if pp > 1 else "")
    return NeedsShape(f"{model.label()} in {inputs.dtype} does not fit the sidebar's {inputs.gpus} {gpu.name} GPUs: "
                      f"a replica needs {need} or more, and one of {tp * pp} runs {shape}. Set the GPU count to "
                      f"{gpus} with tensor-parallel sharding on (its degree on auto)",
                      dict(gpus=gpus, tensor_parallel=True, tp=0, pp=0), f"Use {gpus} GPUs ({short})")


def auto_tp(inputs: LabInputs) -> int:
    """The tensor-parallel degree when sharding is on: the user's choice, or the planner's: of the
    degrees that fit these GPUs, the one with the most room under the targets when every GPU serves
    (the smallest that fits can leave too little room for the KV cache)."""
    if inputs.tp:
        return inputs.tp
    choices = tp_choices(inputs)
    if not choices:
        need = min_tp(inputs)
        if need is None:
            model = catalog.get_model(inputs.model)
            raise ValueError(f"{model.label()} does not fit {catalog.get_gpu(inputs.gpu).name} GPUs at any "
                             f"tensor-parallel degree up to 64: choose a GPU with more memory, or fp8 or int4 weights")
        raise needs_more_gpus(inputs, max(2, need))
    if len(choices) == 1:
        return choices[0]
    return min(choices, key=lambda tp: target_slack(run(_base(inputs, policy=continuous_policy(inputs), tp=tp)).summary,
                                                    inputs))


def target_slack(summary: dict, inputs: LabInputs) -> tuple[bool, float]:
    """(whether the queue grows, the larger of p99 TTFT and p99 TPOT as a share of its target):
    smaller is better."""
    targets = Targets(inputs.ttft_p99_ms, inputs.tpot_ms)
    return not summary["stable"], targets.slack(summary["ttft_ms"]["p99"], summary["tpot_ms"]["p99"])


def replica_shape(inputs: LabInputs, tp: int) -> tuple[int, int]:
    """(tp, pp) of a replica of `tp` GPUs' worth of sharding: as deployments across nodes run it,
    tensor parallel within a node and pipeline stages across nodes when the replica is larger than
    a node (tp=16 on 8-GPU nodes becomes tp=8 x pp=2); a pipeline the inputs set stays as set."""
    if inputs.pp:
        return tp, inputs.pp
    per_node = catalog.get_gpu(inputs.gpu).gpus_per_node
    if tp > per_node and tp % per_node == 0 and catalog.get_model(inputs.model).splits_over(per_node):
        return per_node, tp // per_node
    return tp, 1


def placement_note(cfg: SimConfig) -> str | None:
    """What the Lab did with a replica that spans nodes, in words (None within one node)."""
    gpu = catalog.get_gpu(cfg.gpu)
    if not pipeline.spans_nodes(gpu, cfg.tp, cfg.pp):
        return None
    if cfg.dp_attention:  # no all-reduce: each token's routed rows reach the other nodes' experts over the network
        nodes = -(-cfg.tp // gpu.gpus_per_node)
        return (f"A replica of {cfg.tp} GPUs spans {nodes} {gpu.gpus_per_node}-GPU nodes: attention runs data-parallel "
                f"on every GPU, and the experts' all-to-all sends the {expert.a2a_link(gpu, cfg.ep)[1]:.0%} of each "
                f"decoding token's routed rows bound for other nodes over the network; a prompt's token crosses it "
                f"once for each other node its experts live on "
                f"({expert.remote_nodes(catalog.get_model(cfg.model), cfg.ep, gpu.gpus_per_node):.1f} on average).")
    return (f"A replica of {cfg.tp * cfg.pp} GPUs spans {gpu.gpus_per_node}-GPU nodes: "
            f"{pipeline.placement(gpu, cfg.tp, cfg.pp)}.")


def _base(inputs: LabInputs, tp: int = 1, **kw) -> SimConfig:
    experts = {} if kw.get("disagg") else inputs.expert_parallel(tp)
    if kw.get("disagg") or experts:  # an expert-parallel replica spans its GPUs, across nodes too
        pp = 1
    else:
        tp, pp = replica_shape(inputs, tp)
    budget = max(inputs.max_batched_tokens, inputs.max_seqs)
    cfg = SimConfig(gpu=inputs.gpu, model=inputs.model, gpus=inputs.gpus, dtype=inputs.dtype,
                    kv_dtype=inputs.kv_dtype, tp=tp, pp=pp,
                    block_size=inputs.block_size, max_seqs=inputs.max_seqs, max_batched_tokens=budget, chunk=budget,
                    max_model_len=max_model_len(inputs, tp, pp), workload=workload(inputs), trace_csv=inputs.trace_csv,
                    ttft_slo_ms=inputs.ttft_p99_ms, tpot_slo_ms=inputs.tpot_ms, max_steps=PAGE_STEPS,
                    **inputs.caching(kw.get("policy", "sarathi")), **inputs.speculation(kw.get("policy", "sarathi")),
                    **experts, **kw)
    return on_engine(cfg, inputs.engine)


def at_tp(cfg: SimConfig, inputs: LabInputs, tp: int) -> SimConfig:
    """`cfg` on replicas of `tp` GPUs, their experts split as the sidebar chose for that width (a split's
    decode width: each pool's experts over its own replica's GPUs)."""
    return on_engine(replace(cfg, tp=tp, **{"ep": 1, "dp_attention": False, "eplb": False, "redundant_experts": 0,
                                            "micro_batch_overlap": False, **inputs.expert_parallel(tp)}), inputs.engine)


def continuous_policy(inputs: LabInputs) -> str:
    """The rule on the loop once batching is continuous: vLLM's chunked prefill or whole prompts (the
    toggle), else the engine's own (SGLang's prefill-first steps, TensorRT-LLM's whole prompts)."""
    if inputs.engine != "vllm":
        return engine_defaults(inputs.gpu, inputs.engine, True)["policy"]
    return "sarathi" if inputs.chunked_prefill else "vllm"


def must_shard(inputs: LabInputs) -> bool:
    """Whether the model needs sharding that the toggle leaves off: no single GPU holds it."""
    return not inputs.tensor_parallel and inputs.pp <= 1 and (min_tp(inputs) or 99) > 1


def current_config(inputs: LabInputs) -> SimConfig:
    """The deployment the toggles describe. A model no single GPU holds is sharded whatever the
    sharding toggle says (sharding_note says so): a link or a first look at a 70B model on 8 GPUs
    should show figures, not ask for a toggle first."""
    inputs.validate()
    policy = continuous_policy(inputs) if inputs.continuous_batching else "static"
    sharded = inputs.tensor_parallel or must_shard(inputs)
    tp = auto_tp(replace(inputs, tensor_parallel=True)) if sharded else 1
    return _base(inputs, policy=policy, tp=tp)


def sharding_note(inputs: LabInputs, cfg: SimConfig) -> str | None:
    """What the Lab did with a model too large for one GPU while the sharding toggle is off."""
    if not must_shard(inputs):
        return None
    return (f"{catalog.get_model(inputs.model).label()} does not fit one {catalog.get_gpu(inputs.gpu).name}, so it is "
            f"sharded below (tp={cfg.tp}" + (f" × pp={cfg.pp}" if cfg.pp > 1 else "") + ") although the "
            f"tensor-parallel sharding toggle is off: sharding is the only way it runs here.")


def stage_config(inputs: LabInputs, stage: int, split: tuple[int, int, int] | None = None) -> SimConfig:
    """Stage 1..5 on the inputs' workload and GPUs (toggles ignored). Raises ValueError when the
    stage cannot run there (the model does not fit one GPU; too few GPUs to shard or split).
    `split` = (prefill GPUs, prefill tp, decode tp) for stage 5 (default: the first candidate)."""
    inputs.validate()
    if stage not in STAGES:
        raise ValueError(f"stage must be 1..5, not {stage}")
    if stage <= 3:
        need = min_tp(inputs)
        if need is None or need > 1:
            raise ValueError(f"{catalog.get_model(inputs.model).label()} does not fit one "
                             f"{catalog.get_gpu(inputs.gpu).name}, so no single-GPU design can serve it")
        policy = {1: "serial", 2: "static", 3: continuous_policy(inputs)}[stage]
        return _base(inputs, policy=policy, tp=1)
    if stage == 4:
        return _base(inputs, policy=continuous_policy(inputs), tp=auto_tp(inputs))
    pre, ptp, dtp = split or disagg_splits(inputs)[0]
    cfg = _base(inputs, policy=continuous_policy(inputs), tp=min(ptp, dtp), disagg=True, prefill_gpus=pre)
    return at_tp(replace(cfg, prefill_tp=ptp, decode_tp=dtp), inputs, dtp)


def disagg_splits(inputs: LabInputs) -> list[tuple[int, int, int]]:
    """Candidate stage-5 deployments (prefill GPUs, prefill tp, decode tp): each pool whole
    replicas of the smallest fitting tp or twice it (DistServe sizes the phases' parallelism
    separately), the prefill pool about a quarter, a third or half of the GPUs. Under expert
    parallelism each pool's experts split over its own replica's GPUs, and the decode pool is as wide
    as the prefill pool or wider (DeepSeek's and SGLang's shape: a narrow prefill pool, a wide decode
    one whose every rank batches more sequences), as the planner searches it."""
    model = catalog.get_model(inputs.model)
    base = min_tp(inputs)
    if base is None:
        raise ValueError(f"{model.label()} does not fit {catalog.get_gpu(inputs.gpu).name}s at any tensor-parallel degree")
    experts = bool(inputs.expert_parallel(2 * base))
    tps = [t for t in (base, 2 * base) if model.splits_over(t) and (t == 1 or not experts or model.experts % t == 0)]
    out = []
    for ptp in tps:
        for dtp in (t for t in tps if t >= ptp or not experts):
            for share in (0.25, 1 / 3, 0.5):
                pre = max(ptp, round(inputs.gpus * share / ptp) * ptp)
                dec = inputs.gpus - pre
                if dec >= dtp and dec % dtp == 0 and (pre, ptp, dtp) not in out:
                    out.append((pre, ptp, dtp))
    if not out:
        raise ValueError(f"disaggregation needs a prefill and a decode replica of tp={base} each: raise the GPU "
                         f"count to {2 * base} or more")
    return out


def check_page_work(configs: list[SimConfig], what: str) -> None:
    """Refuse, before running any of them, the simulations behind one page part (a sweep, the five
    stages, the trade-offs) when their estimated engine steps together exceed PAGE_STEPS, naming the
    knob that brings them back within it. A configuration that cannot run is left to say so itself."""
    total = 0.0
    for cfg in configs:
        try:
            total += estimate(cfg)
        except ValueError:
            continue
    if total <= PAGE_STEPS:
        return
    n = configs[0].workload.n_requests
    if configs[0].trace_csv is not None:
        knob = "replay a shorter trace"
    else:
        fits = [r for r in bounds.sidebar_options("requests") if r <= n * PAGE_STEPS / total]
        knob = (f"lower the simulated requests (Advanced) to {fits[-1]:,} or fewer" if fits else
                "shorten the outputs or raise the max batch")
    raise ValueError(f"{what} would take about {total:,.0f} engine steps in all ({len(configs)} simulations), over "
                     f"a page's budget of {PAGE_STEPS:,}: {knob}")


# the simulations shared by the Lab's pages in one server process: 128 MB holds about 10 runs of
# 100,000 requests or 96 of 2,000 (README: what memory a host needs)
RUN_MEMO_BYTES = 128 << 20


@memo.bounded(max_bytes=RUN_MEMO_BYTES, max_entries=96)
def run(cfg: SimConfig) -> SimResult:
    """A simulation, memoised by its (frozen, hashable) configuration, so that pages asking the same
    question share one answer; bounded by memory as well as count (memo.py)."""
    return simulate(cfg)


def current(inputs: LabInputs) -> tuple[SimConfig, SimResult]:
    """The deployment the toggles describe, simulated."""
    cfg = current_config(inputs)
    return cfg, run(cfg)
