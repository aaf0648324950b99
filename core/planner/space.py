"""The deployments the planner searches: what one is, how many there are within a budget, and the
simulation configuration each becomes on a workload.

A deployment is a GPU type, a weight dtype and a KV-cache dtype, a scheduling policy (with its prefill
chunk) and either colocated replicas of tp x pp GPUs each (pp pipeline stages of tp GPUs: tensor
parallel within a node, pipeline stages across nodes), or a prefill pool and a decode pool with their own tp (DistServe
sizes the two phases' parallelism separately). Serial and static batching are in the space too, at
tp=1 and bf16: when they meet the targets on as few GPUs, they are the simpler answer.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from .. import bounds
from ..physics import catalog, expert, speculative
from ..physics.memory import MEM_UTIL, plan_memory, smallest_fitting_tp
from ..serving import engines, serve_command
from ..serving.command import engine_defaults, on_engine
from ..serving.simulate import SimConfig, fitted_max_model_len
from ..serving.stepspread import carried_margin, step_scales
from ..serving.workload import WorkloadSpec, load_trace

# Scheduling choices: (policy, token budget = prefill chunk). vLLM V1 chunks prefills with a
# 2,048-token budget by default for online serving; Sarathi-Serve tunes the chunk down (512) for a
# tight TPOT. Without chunking a prompt runs whole in one step.
SCHEDULES = (("sarathi", 2048), ("sarathi", 512), ("vllm", 2048))
PIPELINE_STAGES = (2, 4)  # pp tried for colocated replicas, with tp up to a node's GPUs
TEACHING_SCHEDULES = (("serial", 2048), ("static", 2048))
DTYPES = ("bf16", "fp8", "fp4", "mxfp4", "int4")  # weight formats of data/quantisation.json, least quantisation error first
KV_DTYPES = catalog.KV_DTYPES  # bf16, fp8
# Searched unless the budget says otherwise: 16-bit and fp8 weights, a 16-bit cache. 4-bit weights and
# an fp8 cache trade some accuracy for memory, so the user opts into them.
DEFAULT_DTYPES = ("bf16", "fp8")
DEFAULT_KV_DTYPES = ("bf16",)
POLICY_WORDS = {"serial": "one request at a time", "static": "static batching", "vllm": "continuous batching",
                "sarathi": "chunked prefill", "sglang": "prefill-first chunked prefill",
                "inflight": "in-flight batching"}


def stage_of(policy: str, replica_gpus: int, disagg: bool) -> int:
    """The architecture stage a deployment amounts to, from the features it uses: a prefill pool,
    then the schedule, then sharding (a replica of more than one GPU)."""
    if disagg:
        return 5
    return {"serial": 1, "static": 2}.get(policy, 4 if replica_gpus > 1 else 3)


def slow_edge() -> float:
    """Engine steps at the trust band's slower edge (core/lab/trust.py): the step-time model's
    error spread says real steps may take this many times as long as it predicts."""
    return float(step_scales()[1])


HEADROOM = 0.2  # the default headroom: traffic bursts and a failed GPU eat more than simulation error


@dataclass(frozen=True)
class Targets:
    ttft_p99_ms: float = 1000.0
    tpot_p99_ms: float = 100.0
    attainment: float = 0.99  # share of requests that must meet both targets
    # A deployment meets the targets when it still meets them at the offered load x (1 + headroom)
    # with every engine step at the trust band's slower edge (step_scale): an answer on the edge of
    # the targets is not one anyone deploys, since simulation error, bursts and a lost GPU eat into it
    headroom: float = HEADROOM
    step_scale: float = field(default_factory=slow_edge)

    def slack(self, ttft_p99_ms: float, tpot_p99_ms: float) -> float:
        """The larger of p99 TTFT and p99 TPOT as a share of its target: at equal cost, the
        deployment with more room under the targets is the better answer."""
        return max(ttft_p99_ms / self.ttft_p99_ms, tpot_p99_ms / self.tpot_p99_ms)

    def check(self) -> None:
        for name, v in (("TTFT target", self.ttft_p99_ms), ("TPOT target", self.tpot_p99_ms)):
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"the {name} must be a number of ms above 0, not {v}")
        if not 0.5 <= self.attainment <= 1.0:
            raise ValueError(f"attainment {self.attainment} must be a share within 0.5..1 of the requests "
                             f"(0.99: 99% of requests within both targets)")
        bounds.check("headroom", self.headroom, "the headroom (a share of the offered load: 0.2 for 20%)")
        bounds.check("step_scale", self.step_scale)

    @property
    def has_margin(self) -> bool:
        """Whether the check is stricter than the offered load at the cost model's own steps."""
        return self.headroom > 0 or self.step_scale > 1

    def _slower(self) -> str:
        return f"every step {(self.step_scale - 1) * 100:.1f}% slower"

    def margin(self) -> str:
        """The check's margin in a few words: '20% headroom, every step 4.5% slower'."""
        return f"{self.headroom:.0%} headroom, {self._slower()}" if self.headroom else self._slower()

    def rule(self) -> str:
        """The check in words: 'at 1.2x the offered load with every step 5.5% slower'."""
        slower = (f"{self._slower()} than the cost model (the trust band's edge "
                  f"on a validated GPU family, further out on others: by {carried_margin()[0]:.1%}, or by the worst "
                  f"error of their own public runs)")
        if self.headroom == 0:
            return f"at the offered load with {slower}"
        return f"at {1 + self.headroom:g}x the offered load ({self.headroom:.0%} headroom) with {slower}"


@dataclass(frozen=True)
class Budget:
    gpu_types: tuple[str, ...] = ("h100",)
    max_gpus: int = 16
    prices: tuple[tuple[str, float], ...] = ()  # (gpu id, $ per GPU-hour) overrides of the catalog's list prices
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    kv_dtypes: tuple[str, ...] = DEFAULT_KV_DTYPES
    disaggregation: bool = True
    teaching_stages: bool = True  # serial and static batching as candidates too
    # the schedule (policy, token budget) the user runs: searched beside SCHEDULES, and preferred over
    # them at equal cost, stage and dtypes, so that an answer the user's own settings reach is given in them
    own_schedule: tuple[str, int] | None = None
    # speculative decoding's proposers the deployments may use (physics/speculative.py: draft, eagle,
    # eagle3, mtp, ngram), each with continuous batching on the schedules' first, beside every plain shape
    speculative: tuple[str, ...] = ()
    # N+1 redundancy: replicas (of each pool, in a prefill/decode split) beyond what meets the
    # targets, so that the deployment still meets them with N replicas lost
    spare_replicas: int = 0
    # host memory (GiB per replica) a KV offload tier may take under the prefix cache: where prompts
    # share prefixes, the first schedule's colocated replicas are tried with it (0: never)
    kv_offload_gb: float = 0.0
    # the weight format the model itself is released in where it has no 16-bit release (gpt-oss's
    # MXFP4 experts, DeepSeek's fp8): searched whatever `dtypes` say, and preferred at equal cost,
    # since serving any other format needs a conversion of the release (set by for_model)
    released: tuple[str, ...] = ()

    def for_model(self, model_id: str) -> "Budget":
        """This budget for one model: its released format (data/recipes.json) filled in."""
        return replace(self, released=serve_command.released_formats(model_id))

    def price(self, gpu: str) -> float:
        return dict(self.prices).get(gpu, catalog.get_gpu(gpu).price_usd_per_gpu_hour)

    def cost(self, d: "Deployment") -> float:
        """$ per hour of deployment `d`: each pool's GPUs at its GPU type's price."""
        return (d.tp * d.pp * d.replicas * self.price(d.gpu)
                + d.prefill_tp * d.prefill_replicas * self.price(d.prefill_gpu or d.gpu))

    def schedules(self) -> tuple[tuple[str, int], ...]:
        own = (self.own_schedule,) if self.own_schedule and self.own_schedule not in SCHEDULES else ()
        return SCHEDULES + own

    def preference(self, d: "Deployment") -> tuple:
        """preference(d) at this budget's price, then the user's own schedule before another."""
        return preference(d, self.cost(d), self.released) + (self.own_schedule is not None and
                                                   (d.policy, d.chunk) != self.own_schedule,)

    def check(self) -> None:
        if not self.gpu_types:
            raise ValueError("choose at least one GPU type to search")
        for g in self.gpu_types:
            catalog.get_gpu(g)
        if not 1 <= self.max_gpus <= 256:
            raise ValueError(f"the GPU budget must be within 1..256 GPUs, not {self.max_gpus}")
        for g, p in self.prices:
            catalog.get_gpu(g)
            if not (math.isfinite(p) and p > 0):
                raise ValueError(f"the price of {g} must be above $0 per GPU-hour, not {p}")
        for d in self.dtypes:
            if d not in DTYPES:
                raise ValueError(f"unknown weight dtype '{d}': choose from {', '.join(DTYPES)}")
        if not self.dtypes or not self.kv_dtypes:
            raise ValueError("choose at least one weight dtype and one KV cache dtype to search")
        for d in self.kv_dtypes:
            if d not in KV_DTYPES:
                raise ValueError(f"unknown KV cache dtype '{d}': choose from {', '.join(KV_DTYPES)}")
        bounds.check("kv_offload_gb", self.kv_offload_gb)
        for m in self.speculative:
            if m not in speculative.METHODS:
                raise ValueError(f"unknown speculative method '{m}': choose from {', '.join(speculative.METHODS)}")
        bounds.check("spare_replicas", self.spare_replicas)
        if self.spare_replicas >= self.max_gpus:
            raise ValueError(f"{self.spare_replicas} spare replicas leave none of the {self.max_gpus}-GPU budget to "
                             f"serve with: give at most {self.max_gpus - 1} spare replicas or raise the GPU budget")


@dataclass(frozen=True)
class Engine:
    """The serving engine and its limits, as the user runs it."""
    max_seqs: int = 256
    # vLLM V1 (its schedules searched), or SGLang or TensorRT-LLM with their own (engine_schedules)
    name: str = "vllm"
    block_size: int = 16
    router: str = "lor"  # least outstanding requests
    prefix_caching: bool = True  # vLLM V1's default
    max_steps: int = 50_000_000  # engine steps one simulation may take (SimConfig.max_steps); a page sets its own
    # a speculating deployment's draft tokens and acceptance (None: its method's published defaults),
    # and the draft model of method "draft" (None: the catalog's smallest with the model's tokenizer)
    spec_tokens: int | None = None
    spec_acceptance: float | tuple | None = None
    draft_model: str | None = None


@dataclass(frozen=True)
class Deployment:
    gpu: str
    tp: int = 1
    replicas: int = 1
    dtype: str = "bf16"
    policy: str = "sarathi"
    chunk: int = 2048
    prefill_tp: int = 0  # a prefill/decode split when prefill_replicas > 0
    prefill_replicas: int = 0
    pp: int = 1  # pipeline stages of a colocated replica
    kv_dtype: str = "bf16"
    spec: str = ""  # speculative decoding's proposer ("": none)
    prefill_gpu: str = ""  # a split's prefill pool's GPU type when it is not `gpu` (the decode pool's)
    spare: int = 0  # of the replicas (of each pool), this many are spares: it meets the targets without them
    # where prompts share prefixes: a router other than the engine's ("prefix": prefix-aware; "": the
    # engine's) and a host-memory KV tier per replica (GiB; 0: none)
    router: str = ""
    kv_offload_gb: float = 0.0
    # an MoE model's experts split over the replica's tp GPUs (ep = tp), with attention data-parallel
    # over them or not (physics/expert.py; 1: experts sliced by tensor parallelism)
    ep: int = 1
    dp_attention: bool = False
    # EPLB over the split experts, a redundant copy of a popular expert on every GPU of the (decode) replica
    eplb: bool = False

    @property
    def pool_gpus(self) -> tuple[str, str]:
        """(the prefill pool's GPU type, the decode pool's) of a split."""
        return (self.prefill_gpu or self.gpu, self.gpu)

    def serving(self) -> "Deployment":
        """The deployment with its spare replicas lost: what must meet the targets."""
        if not self.spare:
            return self
        return replace(self, replicas=self.replicas - self.spare, spare=0,
                       prefill_replicas=self.prefill_replicas - self.spare if self.disagg else 0)

    def with_spares(self, n: int) -> "Deployment":
        """This deployment with n spare replicas added to each pool."""
        if not n:
            return self
        return replace(self, replicas=self.replicas + n, spare=self.spare + n,
                       prefill_replicas=self.prefill_replicas + n if self.disagg else 0)

    @property
    def replica_gpus(self) -> int:
        """GPUs of one (decode or colocated) replica."""
        return self.tp * self.pp

    @property
    def disagg(self) -> bool:
        return self.prefill_replicas > 0

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas + self.prefill_tp * self.prefill_replicas

    @property
    def stage(self) -> int:
        return stage_of(self.policy, self.tp * self.pp, self.disagg)

    def pool_experts(self, tp: int) -> dict:
        """A pool's replica of `tp` GPUs under this shape's expert parallelism (expert.replica_split), and
        EPLB's redundant copies it holds: one a GPU of the decode replica, which every pool's width divides."""
        ep, dp = expert.replica_split(tp, self.ep > 1, self.dp_attention)
        copies = dict(redundant_experts=expert.eplb_copies(self.tp)) if self.eplb and ep > 1 else {}
        return dict(ep=ep, dp_attention=dp, **copies)

    def balance(self) -> dict:
        """The cost model's balancer field: EPLB's placement of the experts, where the shape runs it."""
        return dict(eplb=True) if self.eplb else {}

    def label(self) -> str:
        pre, dec = (g.upper() for g in self.pool_gpus)
        mixed = self.disagg and pre != dec
        gpus = (f"{self.prefill_tp * self.prefill_replicas} {pre} + {self.tp * self.replicas} {dec}" if mixed
                else f"{self.gpus} {dec}")
        sched = POLICY_WORDS[self.policy] + (f" {self.chunk}" if self.policy in ("sarathi", "sglang") else "")
        if self.disagg and self.ep > 1:  # each pool's experts over its own replica's GPUs
            shape = (f"{self.prefill_replicas}×ep{self.prefill_tp} prefill + {self.replicas}×ep{self.tp} decode"
                     + (" with DP attention" if self.dp_attention else ""))
        elif self.disagg:
            shape = (f"{self.prefill_replicas}×tp{self.prefill_tp} prefill + {self.replicas}×tp{self.tp} decode")
        else:
            shape = f"{self.replicas}×tp{self.tp}" + (f"×pp{self.pp}" if self.pp > 1 else "")
        if self.ep > 1 and not self.disagg:
            shape += f" ep{self.ep}" + (" with DP attention" if self.dp_attention else "")
        if self.eplb:
            shape += " and EPLB" if self.dp_attention else " with EPLB"
        if self.spare:
            shape += f" ({self.spare} spare{' each' if self.disagg else ''})"
        kv = f", {self.kv_dtype} KV" if self.kv_dtype != "bf16" else ""
        spec = f", {self.spec} speculation" if self.spec else ""
        spec += ", prefix-aware routing" if self.router == "prefix" else ""
        spec += f", {self.kv_offload_gb:g} GiB host KV tier" if self.kv_offload_gb else ""
        return f"{gpus}: {shape}, {self.dtype}{kv}, {sched}{spec}"

    def to_dict(self) -> dict:
        return dict(asdict(self), gpus=self.gpus, stage=self.stage, label=self.label())


@dataclass(frozen=True)
class Workload:
    """What the planner sizes for: a model, its traffic and the latency targets."""
    model: str
    spec: WorkloadSpec = field(default_factory=WorkloadSpec)
    targets: Targets = field(default_factory=Targets)
    engine: Engine = field(default_factory=Engine)
    trace_csv: str | None = None

    def check(self) -> None:
        catalog.get_model(self.model)
        self.targets.check()
        if self.engine.name not in engines.SERVING:
            raise ValueError(f"the serving engine is one of {', '.join(engines.SERVING)}, not '{self.engine.name}'")
        if not self.spec.closed_loop and not (math.isfinite(self.spec.rate) and self.spec.rate > 0):
            raise ValueError(f"the request rate must be above 0 req/s, not {self.spec.rate}")

    @property
    def carried_rate(self) -> float:
        """Requests/s every deployment must carry, by which the roofline bounds the replicas: an open
        loop's rate. A closed loop holds back when the server is slow (its users wait for their
        answers), so it demands no rate: only the latency targets size it."""
        return 0.0 if self.spec.closed_loop else self.spec.rate

    def judged(self) -> "Workload":
        """The load the targets are checked at: the offered rate (a closed loop's users) x (1 +
        headroom). Its own headroom is 0, so that a check of a check adds none."""
        h = self.targets.headroom
        t = replace(self.targets, headroom=0.0)
        if h == 0:
            return replace(self, targets=t)
        if self.spec.closed_loop:
            return replace(self.at_users(math.ceil(self.spec.concurrency * (1 + h) - 1e-9)), targets=t)
        return replace(self.at_rate(self.spec.rate * (1 + h)), targets=t)

    def at_rate(self, rate: float) -> "Workload":
        return replace(self, spec=replace(self.spec, rate=rate))

    def at_users(self, users: int) -> "Workload":
        """The same closed loop with more users, each sending as many requests as before."""
        n = max(self.spec.n_requests, self.spec.n_requests * users // max(self.spec.concurrency, 1))
        return replace(self, spec=replace(self.spec, concurrency=users, n_requests=n))


def to_config(d: Deployment, w: Workload) -> SimConfig:
    """The simulation of deployment `d` serving workload `w` (every replica, spares included; steps
    at the cost model's own times: search.check_config is the targets' check)."""
    budget = d.chunk
    pools = ([(d.prefill_gpu or d.gpu, d.prefill_tp), (d.gpu, d.tp)] if d.disagg else [(d.gpu, d.tp)])
    max_len = min(fitted_max_model_len(catalog.get_gpu(g), catalog.get_model(w.model), w.spec, w.trace_csv, tp,
                                       d.dtype, budget, w.engine.max_seqs, w.engine.block_size, d.pp,
                                       kv_dtype=d.kv_dtype, engine=w.engine.name, **d.pool_experts(tp))
                  for g, tp in pools)
    cfg = SimConfig(gpu=d.gpu, model=w.model, gpus=d.gpus, tp=d.tp, pp=d.pp, dtype=d.dtype, kv_dtype=d.kv_dtype,
                    policy=d.policy,
                    block_size=w.engine.block_size, max_seqs=w.engine.max_seqs,
                    max_batched_tokens=max(budget, w.engine.max_seqs), chunk=max(budget, w.engine.max_seqs),
                    max_model_len=max_len, workload=w.spec, trace_csv=w.trace_csv, router=d.router or w.engine.router,
                    ttft_slo_ms=w.targets.ttft_p99_ms, tpot_slo_ms=w.targets.tpot_p99_ms,
                    prefix_caching=w.engine.prefix_caching, max_steps=w.engine.max_steps,
                    kv_offload_gb=d.kv_offload_gb, ep=d.ep, dp_attention=d.dp_attention, eplb=d.eplb,
                    redundant_experts=expert.eplb_copies(d.tp) if d.eplb else 0)
    if d.spec:
        cfg = replace(cfg, spec_method=d.spec, spec_tokens=w.engine.spec_tokens, spec_acceptance=w.engine.spec_acceptance,
                      draft_model=w.engine.draft_model if d.spec == "draft" else None)
    if d.disagg:
        cfg = replace(cfg, disagg=True, prefill_gpus=d.prefill_tp * d.prefill_replicas, prefill_tp=d.prefill_tp,
                      decode_tp=d.tp, prefill_gpu=d.prefill_gpu if d.prefill_gpu not in ("", d.gpu) else None)
    return on_engine(cfg, w.engine.name)


def engine_memory(w: Workload, gpu: catalog.GPU):
    """The workload's engine's share of a GPU's memory at a replica's tp (smallest_fitting_tp's rules)."""
    return lambda tp, dp: engines.kv_memory(w.engine.name, gpu, tp, 1, dp)


def tp_degrees(gpu: str, model_id: str, dtype: str, w: Workload, kv_dtype: str = "bf16") -> list[int]:
    """Tensor-parallel degrees worth trying for one replica: powers of two from the smallest whose
    weights leave room for KV blocks, splitting the model's attention as vLLM does (Model.splits_over),
    within one node (tp across nodes pays the inter-node link on every layer) and never more than 16."""
    g, model = catalog.get_gpu(gpu), catalog.get_model(model_id)
    first = smallest_fitting_tp(g, model, w.engine.block_size, 2048, w.engine.max_seqs, dtype, kv_dtype,
                                rules=engine_memory(w, g))
    if first is None:
        return []
    out, tp = [], first
    while tp <= min(16, max(g.gpus_per_node, first)):
        if model.splits_over(tp):
            out.append(tp)
        tp *= 2
    return out


def runs(g: catalog.GPU, dtype: str, kv_dtype: str) -> bool:
    """Whether GPU `g` runs these weight and KV cache formats (fp8 needs FP8 support, fp4 FP4 tensor cores)."""
    return g.runs(catalog.weight_format(dtype)) and g.runs(catalog.kv_format(kv_dtype))


def engine_schedules(w: Workload, budget: Budget, g: catalog.GPU, disagg: bool = False) -> tuple[tuple[str, int], ...]:
    """The schedules (policy, token budget) searched on GPU `g`: vLLM's (SCHEDULES and the user's
    own), or the one SGLang or TensorRT-LLM runs out of the box there, in a prefill/decode split's
    pools if `disagg` (to_config gives it its limits)."""
    if w.engine.name == "vllm":
        return budget.schedules()
    own = engine_defaults(g.id, w.engine.name, True, disagg=disagg)
    return ((own["policy"], own["max_batched_tokens"]),)


def shapes(w: Workload, budget: Budget) -> list[Deployment]:
    """Every deployment shape within the budget (replica counts left at 1; room left for the spare
    replicas): each GPU type, each weight and KV dtype it supports (fp8 needs FP8 support), each
    tensor-parallel degree that fits, each schedule; and prefill/decode splits whose pools take the
    smallest fitting tp or twice it, over every pair of the budget's GPU types (a pool each). Each
    proposer the budget allows speculates on the first schedule's colocated replicas and on the
    splits' decode pools."""
    out = []
    methods = proposers(w, budget)
    reuse = prefix_reuse(w, budget)
    room = budget.max_gpus // (1 + budget.spare_replicas)  # GPUs one replica of each pool may take
    model = catalog.get_model(w.model)
    moe = model.is_moe
    dtypes = [d for d in dict.fromkeys(budget.released + budget.dtypes)  # the release as it is, whatever dtypes say
              if moe or not catalog.weight_format(d).experts_only]  # mxfp4: experts only
    for gpu in [g for g in budget.gpu_types if engines.runs_on(w.engine.name, catalog.get_gpu(g))]:
        g = catalog.get_gpu(gpu)
        schedules = engine_schedules(w, budget, g)
        for dtype in dtypes:
            for kv in [k for k in budget.kv_dtypes if runs(g, dtype, k)]:
                tps = [tp for tp in tp_degrees(gpu, w.model, dtype, w, kv) if tp <= room]
                for tp in tps:
                    for policy, chunk in schedules + (TEACHING_SCHEDULES if budget.teaching_stages else ()):
                        if policy in ("serial", "static") and (tp > 1 or dtype != "bf16" or kv != "bf16"):
                            continue
                        out.append(Deployment(gpu, tp, 1, dtype, policy, chunk, kv_dtype=kv))
                    out.extend(Deployment(gpu, tp, 1, dtype, *schedules[0], kv_dtype=kv, spec=m)
                               for m in methods)
                    out.extend(Deployment(gpu, tp, 1, dtype, *schedules[0], kv_dtype=kv, router=router,
                                          kv_offload_gb=gb) for router, gb in reuse)
                out.extend(Deployment(gpu, ep, 1, dtype, *schedules[0], kv_dtype=kv, ep=ep, dp_attention=dp,
                                      eplb=eplb)
                           for ep, dp in expert_shapes(g, w.model) if ep <= room for eplb in balancers(ep))
                for pp, tp in pipeline_shapes(g, w, dtype, kv):
                    if tp * pp <= room:
                        out.extend(Deployment(gpu, tp, 1, dtype, policy, chunk, pp=pp, kv_dtype=kv)
                                   for policy, chunk in schedules)
    if budget.disaggregation:
        for pre in budget.gpu_types:
            for dec in budget.gpu_types:
                gp, gd = catalog.get_gpu(pre), catalog.get_gpu(dec)
                if not (engines.runs_on(w.engine.name, gp) and engines.runs_on(w.engine.name, gd)):
                    continue
                split = engine_schedules(w, budget, gd, disagg=True)[0]  # the decode pool's first, each pool's
                for dtype in dtypes:
                    for kv in [k for k in budget.kv_dtypes if runs(gp, dtype, k) and runs(gd, dtype, k)]:
                        ptps = [tp for tp in tp_degrees(pre, w.model, dtype, w, kv) if tp <= room][:2]
                        dtps = [tp for tp in tp_degrees(dec, w.model, dtype, w, kv) if tp <= room][:2]
                        out.extend(Deployment(dec, dtp, 1, dtype, *split, ptp, 1, kv_dtype=kv,
                                              prefill_gpu="" if pre == dec else pre, spec=m)
                                   for ptp in ptps for dtp in dtps if ptp + dtp <= room for m in ("",) + methods)
                        # a mixture's split as DeepSeek's and SGLang's run it: a narrow expert-parallel prefill
                        # replica, a decode one as wide, or wider, each with data-parallel attention
                        fits = [smallest_fitting_tp(g, model, w.engine.block_size, 2048, w.engine.max_seqs,
                                                    dtype, kv, "ep_dp", rules=engine_memory(w, g))
                                for g in (gp, gd)]
                        if None not in fits:
                            widths = [ep for ep, dp in expert_shapes(gd, w.model) if dp and ep >= min(fits)]
                            out.extend(Deployment(dec, dw, 1, dtype, *split, pw, 1, kv_dtype=kv,
                                                  prefill_gpu="" if pre == dec else pre, ep=dw, dp_attention=True,
                                                  eplb=eplb)
                                       for pw in widths[:2] for dw in widths
                                       if fits[0] <= pw <= dw and dw >= fits[1] and pw + dw <= room
                                       for eplb in balancers(dw))
    return out


def shares(w: Workload) -> bool:
    """Whether some prompts repeat a prefix another request computes (what prefix caching reuses)."""
    if w.trace_csv is not None:
        wl = load_trace(w.trace_csv)
        return wl.prefix_id is not None or wl.conversation_id is not None
    return w.spec.prefix_groups > 0 or w.spec.turns > 1


def prefix_reuse(w: Workload, budget: Budget) -> list[tuple[str, float]]:
    """(router, host tier GiB) variants worth trying where prompts share prefixes and the engine
    caches them: prefix-aware routing, and with the budget's host memory, a tier under it too."""
    if not (w.engine.prefix_caching and shares(w)):
        return []
    routers = [""] + (["prefix"] if w.engine.router != "prefix" else [])
    tiers = [0.0] + ([budget.kv_offload_gb] if budget.kv_offload_gb > 0 else [])
    return [(r, gb) for r in routers for gb in tiers if r or gb]


def proposers(w: Workload, budget: Budget) -> tuple[str, ...]:
    """The budget's speculative methods that this model can use (MTP needs the module the model
    ships; a draft model, a smaller model with its tokenizer)."""
    out = []
    for m in budget.speculative:
        try:
            speculative.speculation(m, w.engine.spec_tokens, w.engine.spec_acceptance,
                                    w.engine.draft_model if m == "draft" else None, catalog.get_model(w.model))
        except ValueError:
            continue
        out.append(m)
    return tuple(out)


EP_SIZES = (2, 4, 8, 16, 32, 64)  # the expert-parallel widths searched, within and across nodes
# the widths from which EPLB is searched too: its balance matters where many ranks wait for the busiest
# (the busiest of 8 ranks takes 1.3x the mean routings without it, of 32 1.9x: data/moe.json)
EPLB_FROM = 8


def balancers(ep: int) -> tuple[bool, ...]:
    """Whether to try an expert-parallel shape without EPLB, and with it (from EPLB_FROM ranks)."""
    return (False, True) if ep >= EPLB_FROM else (False,)


def expert_shapes(g: catalog.GPU, model_id: str) -> list[tuple[int, bool]]:
    """(ep, data-parallel attention) of an MoE model's expert-parallel replicas worth trying: every
    width of EP_SIZES that divides its experts; with attention tensor-parallel over the same GPUs
    within a node (where tp splits the attention heads; tensor parallelism across nodes pays the network on
    every layer), and with attention data-parallel within and across nodes. Whether the weights
    fit is the memory bound's to say (bounds.py)."""
    model = catalog.get_model(model_id)
    if not model.is_moe:
        return []
    out = []
    for ep in EP_SIZES:
        if model.experts % ep:
            continue
        if ep <= g.gpus_per_node and model.splits_over(ep):
            out.append((ep, False))
        out.append((ep, True))
    return out


def pipeline_shapes(g: catalog.GPU, w: Workload, dtype: str, kv_dtype: str = "bf16") -> list[tuple[int, int]]:
    """(pp, tp) of pipelined replicas worth trying: for each pp in PIPELINE_STAGES, the smallest
    tensor-parallel degree within a node whose stages hold their layers and some KV cache, and the
    whole node's (the shape deployments across nodes run: tp within a node, pp across)."""
    model = catalog.get_model(w.model)
    out = []
    for pp in PIPELINE_STAGES:
        if pp > model.layers:
            continue
        fits = []
        tp = 1
        while tp <= g.gpus_per_node:
            if model.splits_over(tp):
                try:
                    plan_memory(g, model, tp, w.engine.block_size, MEM_UTIL, 2048, w.engine.max_seqs, dtype, pp,
                                kv_dtype=kv_dtype)
                    fits.append(tp)
                except ValueError:
                    pass
            tp *= 2
        for tp in sorted({fits[0], fits[-1]}) if fits else ():
            out.append((pp, tp))
    return out


def preference(d: Deployment, cost: float, released: tuple[str, ...] = ()) -> tuple:
    """Cheapest first ($ per hour, `cost`); at equal cost the simpler stage, then the least
    quantisation error: the model's own release (`released`, where it has no 16-bit one), then 16-bit
    weights before fp8 before fp4 before int4, a 16-bit KV cache before fp8; then no proposer to run
    before one, the engine's router before another, no host tier before one, experts sliced by tensor
    parallelism before expert parallelism (no busiest rank, no all-to-all to run), no balancer before EPLB."""
    return (round(cost, 6), d.stage, d.dtype not in released, DTYPES.index(d.dtype) if d.dtype in DTYPES else 0,
            d.kv_dtype != "bf16", d.spec != "", d.router != "", d.kv_offload_gb > 0, d.ep > 1, d.dp_attention, d.eplb)
