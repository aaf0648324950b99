"""Time of one engine step of one replica, from the step's token mix: a per-operator roofline.

Kernels run one after another, so operator times add; inside one kernel, compute and memory
traffic overlap, so each operator takes about the larger of its FLOP time and its byte time
(their quadrature sum: near the ridge point neither unit runs at its peak). Per GPU of a replica of
`tp` GPUs:

  linear       weight streaming vs GEMM FLOPs of the projections and MLP, every layer (a step of
               one token streams 16-bit weights through matrix-vector products, at their own rate)
  experts      MoE layers (the fused-MoE kernel): only the experts the step's tokens route to are
               read; their grouped GEMMs compute each expert's tokens padded to whole tiles, at a
               fitted share of the dense GEMMs' rate; the kernel's scratch rows per routed token
               are written and read back; under expert parallelism (expert.py) the busiest GPU's
               routings set the pace, and with data-parallel attention an all-to-all dispatches
               the tokens to their experts' GPUs and combines the outputs
  elementwise  norms, activations, residual adds: activation bytes per token
  attn_decode  each decoding sequence reads its whole KV cache; bandwidth is capped by the
               number of thread blocks the kernel launches (one per sequence and KV head,
               times the KV splits of a split-KV kernel)
  attn_prefill causal attention FLOPs of each prefill chunk against its cached prefix
  lm_head      vocabulary projection for the rows that sample a token
  comm         tensor parallelism: two all-reduces of the step's activations per layer
  layer_overhead  per-layer cost of small kernels (launch, ramp-up, tail) inside a CUDA graph;
               fewer in a serving engine that fuses norms, rotary and activations
  host         eager mode: the CPU issues every kernel; the step lasts at least that long
  scheduler    the serving engine's host work of a step (scheduling, input preparation, sampling,
               output processing per sequence); vLLM V1 with async scheduling runs it while the
               GPU computes the previous step, so only what exceeds the GPU time shows

A serving engine (engine="vllm") runs steps as vLLM V1 does (vllm_host.py): a decode-only step up
to the CUDA-graph capture size replays one full graph; a step with prompt tokens replays graph
pieces between eagerly launched attention calls; a step above the capture size runs without graphs.

The efficiency and overhead constants are fitted to real H200 step times
(calibration/fit_costmodel.py -> data/costmodel_fit.json) and carried to other GPUs as
fractions of their datasheet values.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from .. import DATA
from ..jit import engine_jit, step_jit

from . import expert
from .catalog import EMBED_BYTES, GPU, Model, check_formats, kv_format, weight_format
from .speculative import SPEC_MAX, Speculation, proposer

FIT_FILE = DATA / "costmodel_fit.json"

# ---- parameter vector layout (one float64 array per replica shape; read inside jitted code)
LAYERS = 0
MOE_LAYERS = 1
DENSE_W = 2  # bytes of attention projections + dense MLP (or shared experts) per layer per GPU
DENSE_FLOPS = 3  # FLOPs per token of those, per layer per GPU
MOE_DENSE_W = 4  # same for an MoE layer (attention projections, shared experts, router)
MOE_DENSE_FLOPS = 5
EXPERT_W = 6  # one routed expert's bytes per GPU
EXPERT_FLOPS = 7  # FLOPs per token of one routed expert per GPU
N_EXPERTS = 8
TOPK = 9
ACT_BYTES = 10  # elementwise activation traffic per token per layer per GPU
KV_BYTES = 11  # KV cache bytes per token per layer per GPU
DEC_PAIR_FLOPS = 12  # decode attention FLOPs per (query, cached token) pair per layer per GPU
PRE_PAIR_FLOPS = 13  # prefill attention FLOPs per (query, key) pair per layer per GPU
KV_HEADS = 14  # KV heads per GPU (thread blocks per decoding sequence)
HEAD_W = 15  # LM head bytes per GPU
HEAD_FLOPS = 16  # LM head FLOPs per sampled row per GPU
ALLREDUCE_BYTES = 17  # bytes all-reduced per token per all-reduce (hidden x activation bytes)
S_BYTE = 18  # seconds per byte streamed from HBM (1 / effective bandwidth)
S_CTA_BYTE = 19  # seconds per byte for one attention thread block (1 / its bandwidth)
S_FLOP = 20  # seconds per GEMM FLOP (1 / effective FLOP/s)
S_ATTN_FLOP = 21  # seconds per attention FLOP
MOE_BW_EFF = 22  # fraction of BW that grouped expert GEMMs reach
T_LAYER = 23  # per-layer small-kernel overhead on the GPU, s
T_ISSUE_DECODE = 24  # eager: host time to issue one layer of a decode step, s
T_ISSUE_PREFILL = 25  # eager: host time to issue one layer of a prefill step, s
ISSUE_SHARED = 26  # fraction of a prefill layer's issue time shared with the decode path
LAUNCH = 27  # 0 CUDA graphs, 1 eager, 2 auto (graphs for decode-only steps)
TP = 28
S_LINK_BYTE = 29  # seconds per byte on the tensor-parallel link, per GPU per direction
LINK_LAT = 30  # latency of one all-reduce, s
T_STEP = 31  # serving engine's per-step host overhead, s
KV_SPLIT = 32  # split-KV partition of the decode attention kernel in tokens (0: no split)
ENGINE = 33  # 0 a bare forward pass, 1 vLLM V1's step (launch modes, host time)
CAPTURE = 34  # vLLM: largest step (tokens) replayed through a CUDA graph
T_PIECE = 35  # host time per layer of a step with prompt tokens: vLLM's piecewise graphs; SGLang issues it op by op, s
T_ISSUE_ENGINE = 36  # host time per layer of a step run without graphs (a mean over the layers), s
T_SEQ = 37  # vLLM: host time per scheduled sequence (sampling, output processing), s
ASYNC = 38  # vLLM: fraction of the GPU time of a step that hides host work (0 without async scheduling)
T_MOE_LAYER = 39  # per-MoE-layer time of the routing kernels (top-k, token sort, output sum), s
# the fused-MoE kernel and expert parallelism (expert.py)
EXPERTS_LOCAL = 40  # routed experts one GPU holds: all of them (a slice each) under tp, experts / ep under ep
PAIR_SHARE = 41  # share of the step's (token, expert) routings one GPU computes: 1 under tp, 1 / ep under ep
EP_Z = 42  # how many standard deviations above the mean the busiest expert rank sits (0: no expert parallelism)
EP_LOAD_VAR = 43  # squared relative spread of a rank's routings from expert popularity
EP_SAMPLE = 44  # ep / top-k: a rank's relative sampling variance is EP_SAMPLE / tokens (Poisson)
MOE_GEMM_EFF = 45  # the grouped GEMMs' FLOP rate as a share of the dense GEMMs' (full tiles)
MOE_TILE = 46  # rows a grouped-GEMM tile computes: each touched expert's tokens pad to a multiple (0: Marlin's rule)
MOE_TILE_SMALL = 47  # the tile of a step with no more tokens than the model has experts
MOE_SCRATCH = 48  # bytes of scratch rows written and read back per routing a GPU computes
A2A_BYTES = 49  # all-to-all bytes one GPU sends and receives per token of the step (dispatch + combine)
S_A2A_BYTE = 50  # seconds per all-to-all byte
A2A_LAT = 51  # latency of one all-to-all call, s (two a MoE layer)
# speculative decoding (speculative.py): the proposer's share of a step, per draft token
SPEC_K = 52  # draft tokens each decoding sequence proposes and the target verifies a step (0: off)
DRAFT_LAYERS = 53  # decoder layers one proposal runs (a draft model's all; an EAGLE head's or MTP's one)
DRAFT_W = 54  # bytes of those layers per GPU
DRAFT_FLOPS = 55  # their FLOPs per proposing sequence per GPU
DRAFT_KV = 56  # the proposer's KV bytes per context token (all its layers) per GPU
DRAFT_HEAD_W = 57  # the vocabulary projection a proposal samples from, bytes per GPU
DRAFT_HEAD_FLOPS = 58  # its FLOPs per proposing sequence per GPU
DRAFT_ALLREDUCE = 59  # bytes all-reduced per token per all-reduce of a proposer layer
DRAFT_MOE = 60  # 1: the proposer's layer is one of the target's MoE layers (DeepSeek's MTP module)
T_PROPOSE_SEQ = 61  # host time of one sequence's proposal (n-gram prompt lookup), s
SPEC_SURV = 62  # SPEC_SURV + j - 1: the chance that at least j drafts are accepted (j = 1..SPEC_MAX)
SPEC_PER_DRAFT = SPEC_SURV + SPEC_MAX  # 1 / SPEC_K: speculating sequences a draft token (a step divides nothing)
# SPEC_TABLE + b: 1 + the drafts accepted by every draw u in [b, b + 1) / SPEC_BINS (the engine's draws
# are 32-bit: b is a draw's top 8 bits), so that a step finds its tokens gained at one read and, in
# the few bins that hold a survival chance, a compare or two (engine/cohort.py speculative_step)
SPEC_BINS = 256
SPEC_TABLE = SPEC_PER_DRAFT + 1
# sliding-window attention (gpt-oss, Gemma): WINDOW_LAYERS of the LAYERS attend to the last WINDOW tokens only
WINDOW = SPEC_TABLE + SPEC_BINS  # tokens (0: every layer attends to every token)
WINDOW_LAYERS = WINDOW + 1
# a step of one token multiplies each 16-bit weight matrix by one vector: a matrix-vector product, not
# a GEMM, whose weight stream on some GPU families runs nearer the memory's rate (gpu_families.json)
S_BYTE_GEMV = WINDOW + 2  # seconds per byte of a 16-bit matrix-vector product's weights (the LM head's)
S_BYTE_ONE = WINDOW + 3  # seconds per byte of the projections and MLP in a one-token step: S_BYTE_GEMV if 16-bit
# a serving engine's drafting loop: each proposal of a model proposer is a pass whose inputs the host prepares
# (positions, slot mappings, attention metadata) and whose draft it samples; a speculative step also rejection-samples
T_DRAFT_PASS = WINDOW + 4  # host time of one proposal pass of a draft model or head, s
T_SPEC_STEP = WINDOW + 5  # a speculative step's own time (rejection sampling, the accepted tokens' bookkeeping), s
# a decoding sequence's all-reduced bytes beyond the link's rate, where a GPU family's decode steps grow with the
# batch faster than the link's measured rate says (ROCm's: gpu_families.json decode_allreduce_share)
S_DECODE_LINK_BYTE = WINDOW + 6  # extra seconds per byte a decoding sequence all-reduces, on its link
# query and key norms over all the heads (MiniMax-M2): one more all-reduce a layer, of each token's two fp32 sums
QK_NORM_ALLREDUCES = WINDOW + 7  # all-reduces of them a layer (0: the norms are per head, or one GPU holds the heads)
# sparse attention (DeepSeek-V3.2's DSA): a query attends the ATTEND_TOPK cached tokens its indexer scores highest;
# the indexer reads every cached token's key and scores it with a few fp8 heads
ATTEND_TOPK = WINDOW + 8  # tokens a query attends in every layer (0: all of them)
INDEX_BYTES = WINDOW + 9  # the indexer's cached key, bytes per token per layer per GPU
INDEX_PAIR_FLOPS = WINDOW + 10  # its FLOPs per (query, cached token) pair per layer per GPU
S_INDEX_FLOP = WINDOW + 11  # seconds per indexer FLOP (fp8 tensor cores where the GPU has them)
# a step with prompt tokens dispatches with DeepEP's normal kernels, which cross the network once per node a
# token's experts live on and forward over NVLink inside it (expert.py a2a_prompt_s_per_token)
A2A_PROMPT_S = WINDOW + 12  # seconds of such a step's dispatch and combine per token of the step (0: as decode)
# micro-batch overlap (vLLM --enable-dbo, SGLang --enable-two-batch-overlap): a step runs as two halves, one's
# all-to-all under the other's compute, each streaming the weights and launching the kernels
OVERLAP = WINDOW + 13  # 1: on (data-parallel attention only)
# linear attention (Gated DeltaNet): LINEAR_LAYERS of the LAYERS attend no cached token; each decoding sequence
# reads and writes its recurrent state there, and every token updates it
LINEAR_LAYERS = WINDOW + 14
LINEAR_STATE_RW = WINDOW + 15  # bytes a decoding sequence reads and writes of its state a linear layer, per GPU
LINEAR_DEC_FLOPS = WINDOW + 16  # FLOPs of one token's state update and readout a linear layer, per GPU
LINEAR_PRE_FLOPS = WINDOW + 17  # the same for a prompt token in the chunked form, per GPU
N_PARAMS = WINDOW + 18
# the chunked delta rule's chunk: a prompt token attends the tokens of its chunk beside the state update
# (flash-linear-attention's chunk_gated_delta_rule, CHUNK_SIZE = 64, which vLLM and SGLang run)
LINEAR_CHUNK = 64
ENGINE_LAYER_KERNELS = 11  # the kernels of vLLM's compiled layer, over which t_layer_engine_us is derived
QK_NORM_BYTES = 8.0  # bytes a token all-reduces for them: the query's and the key's sums of squares in fp32

LAUNCH_MODES = {"graph": 0, "eager": 1, "auto": 2}
# a forward pass alone; vLLM V1's host around it; SGLang's; TensorRT-LLM's PyTorch backend's (serving/engines.py)
ENGINES = ("bare", "vllm", "sglang", "trtllm")
# engines that replay CUDA graphs of decode batches only and issue a step with prompt tokens op by op from Python
EAGER_PROMPT_ENGINES = ("sglang", "trtllm")
# engines whose latent-attention layer takes SGLang's fitted kernel time (data/engines.json trtllm decode_kernels:
# SGLang on Blackwell runs TensorRT-LLM's MLA kernel for DeepSeek)
FUSED_MLA_ENGINES = ("sglang", "trtllm")
ATTN_KERNELS = ("sdpa", "paged")  # measured reference kernel; split-KV paged kernel of serving engines
PAGED_KV_SPLIT = 512  # vLLM PagedAttention V2 partition size (csrc/attention: PARTITION_SIZE = 512)


@dataclass(frozen=True)
class Efficiency:
    """Fitted constants (fractions of datasheet peaks; seconds for overheads)."""
    eta_bw: float
    eta_gemm: float
    eta_attn: float
    cta_saturation: float  # thread blocks per SM at which decode attention saturates HBM
    t_layer_us: float  # the reference PyTorch model of the calibration runs
    t_issue_decode_us: float
    t_issue_prefill_us: float
    issue_shared: float
    moe_bw_eff: float  # share of HBM bandwidth the grouped GEMMs' weight reads reach
    link_eff: float
    link_latency_us: float  # an all-reduce's fixed time where no measurement by tp exists (PCIe pairs, AMD's mesh)
    engine_step_us: float
    t_layer_engine_us: float  # a serving engine's fused kernels (vLLM)
    engine_seq_us: float = 0.0  # vLLM: host time per scheduled sequence
    t_piecewise_us: float = 0.0  # vLLM: host time per layer of a piecewise-graph step
    t_issue_engine_us: float = 0.0  # vLLM: host time per layer of a step run without graphs
    t_moe_layer_us: float = 0.0  # MoE routing kernels per MoE layer
    t_mla_layer_us: float = 0.0  # a served MLA layer's small kernels beyond a grouped-query layer's (DeepSeek)
    moe_gemm_eff: float = 1.0  # the grouped GEMMs' FLOP rate on full tiles as a share of the dense GEMMs'
    moe_gemm_eff_fp8: float = 1.0  # the same with block-scaled fp8 weights (Model.fp8_block_scales)
    api_ms: float = 0.0  # client TTFT beyond the engine: API server, tokenisation, first-token streaming
    async_overlap: float = 1.0  # vLLM async scheduling: share of a step's GPU time its host work can hide behind
    # SGLang's own (fit_moe.py, to its public runs at a fixed concurrency): its MoE routing kernels per MoE
    # layer and an MLA layer's small kernels beyond a grouped-query layer's, in a decode graph; and what an
    # MoE layer and an MLA layer add to a layer's host issue in the steps it runs without graphs (prompts)
    sglang_moe_layer_us: float = 0.0
    sglang_mla_layer_us: float = 0.0
    sglang_issue_moe_us: float = 0.0
    sglang_issue_mla_us: float = 0.0
    sglang_rocm_fp8_layer_us: float = 0.0  # ROCm's kernels a block-fp8 layer beyond CUDA's (SGLang on AMD GPUs)
    # a Gated DeltaNet layer (fit_moe.py, to its public runs at one request): its small kernels beyond an attending
    # layer's in every step (the convolution, gating and recurrent-update kernels), and what its chunked prompt
    # kernels (flash-linear-attention's Triton kernels, launched from Python in every engine) add to a layer's issue
    t_linear_layer_us: float = 0.0
    t_issue_linear_us: float = 0.0
    # vLLM's one-stage all-reduce over an NVLink switch: a base time and a time per peer GPU it reads from
    allreduce_base_us: float = 0.0
    allreduce_peer_us: float = 0.0
    # the link rate a decoding sequence's all-reduced bytes take, as a share of link_eff's: 1 on the fitted
    # family, whose decode steps the link's rate accounts for; a family whose do not sets a factor on it
    decode_allreduce_share: float = 1.0
    # a 16-bit matrix-vector product's weight stream (a one-token step) beyond the GEMMs' (eta_bw): the same
    # kernels' on the fitted family; a family whose GEMMs stream slower than it sets its own (gpu_families.json)
    gemv_bw_eff: float = 1.0
    # speculative decoding beyond the proposer's GPU work (fit_spec.py, to vLLM's runs): the host's time for
    # each proposal pass of a draft model or head, and a speculative step's own (rejection sampling)
    t_draft_pass_us: float = 0.0
    t_spec_step_us: float = 0.0


@lru_cache(maxsize=1)
def fitted() -> Efficiency:
    raw = json.loads(FIT_FILE.read_text())
    return Efficiency(**raw["constants"])


@lru_cache(maxsize=1)
def families() -> dict:
    """data/gpu_families.json: each GPU family's factors on the fitted family's efficiencies."""
    return json.loads((DATA / "gpu_families.json").read_text())


def family_factors(arch: str) -> dict[str, float]:
    """A GPU family's factor on each fitted constant it was measured at (none: it carries the fitted
    ones): its own and, where it runs another family's kernels, that family's (same_as) for the
    constants those kernels set (`constants`; all of them where the entry names none)."""
    entry = families()["families"].get(arch, {})
    own = {k: f["value"] for k, f in entry.items() if isinstance(f, dict) and "value" in f}
    if "same_as" in entry:
        theirs = family_factors(entry["same_as"])
        return {**{k: f for k, f in theirs.items() if k in entry.get("constants", theirs)}, **own}
    return own


def family_scaled(eff: Efficiency, gpu: GPU) -> Efficiency:
    """`eff`, fitted on the fitted family's GPUs, as this GPU's family reaches it."""
    factors = family_factors(gpu.arch)
    return replace(eff, **{k: getattr(eff, k) * f for k, f in factors.items()}) if factors else eff


def efficiency_for(gpu: GPU) -> Efficiency:
    """The constants of this GPU: a calibrated hardware profile's own, else the fitted ones as the
    GPU's family reaches them."""
    return replace(fitted(), **dict(gpu.efficiency)) if gpu.efficiency else family_scaled(fitted(), gpu)


def allreduce_latency_us(gpu: GPU, tp: int, eff: Efficiency) -> float:
    """The fixed time of one all-reduce among tp GPUs of a node: vLLM's own one-stage all-reduce
    (custom_all_reduce.py, which SGLang copies), in which every GPU signals and reads each of its
    tp - 1 peers. Over an NVLink switch that is a base time and a time per peer, measured by vLLM's
    benchmark of the kernel; elsewhere the fitted time. The kernel turns itself off on more than two
    GPUs without NVLink; NCCL's floor over PCIe is then the least an all-reduce takes."""
    if gpu.link_topology == "pcie" and 2 < tp <= gpu.gpus_per_node:
        return max(eff.link_latency_us, families()["collectives"]["nccl_pcie_latency_us"]["value"])
    if gpu.link_topology == "switch" and tp <= gpu.gpus_per_node:
        return eff.allreduce_base_us + eff.allreduce_peer_us * (tp - 1)
    return eff.link_latency_us


def build(gpu: GPU, model: Model, tp: int = 1, dtype: str = "bf16", launch: str = "auto",
          attn_kernel: str = "sdpa", engine: str = "bare", eff: Efficiency | None = None,
          capture_tokens: int = 512, async_scheduling: bool = True, kv_dtype: str = "bf16",
          spec: Speculation | None = None, ep: int = 1, dp_attention: bool = False,
          ep_load_cv: float | None = None, eplb: bool = False, redundant_experts: int = 0,
          micro_batch_overlap: bool = False) -> np.ndarray:
    """The parameter vector of one replica: model shape per GPU x GPU rates x fitted constants.
    capture_tokens and async_scheduling describe the serving engine's CUDA graphs and host (vllm_host.py,
    serving/engines.py); spec, speculative
    decoding (its proposer priced per draft token, its acceptance model for the engine); ep and
    dp_attention, how an MoE model's layers split over the replica's tp GPUs (expert.py), and eplb with
    redundant_experts, EPLB's placement of them and its extra copies (each rank holds (experts +
    redundant) / ep, the load spread over them as the balancer leaves it). Under
    data-parallel attention each GPU holds attention and the dense layers whole and computes 1/tp
    of the step's tokens through them: the per-token terms are a GPU's share of the step's.

    Quantised weights (data/quantisation.json) shrink the bytes the linear layers stream; their
    GEMMs run at the rate of the format's tensor cores (fp8 at the FP8 rate; int4 is dequantised
    to 16-bit in the kernel, at the bf16 rate times the kernel's measured share of it). The LM head
    stays 16-bit. An fp8 KV cache halves the bytes decode attention reads."""
    fmt = weight_format(dtype).on(gpu)
    check_formats(gpu, dtype, kv_dtype)
    fmt.check(model)
    if launch not in LAUNCH_MODES:
        raise ValueError(f"unknown launch mode '{launch}': choose graph, eager or auto")
    if attn_kernel not in ATTN_KERNELS:
        raise ValueError(f"unknown attention kernel '{attn_kernel}': choose sdpa or paged")
    if engine not in ENGINES:
        raise ValueError(f"unknown engine '{engine}': choose bare (a forward pass), vllm, sglang or trtllm")
    served = engine != "bare"  # a serving engine's host around the step: vLLM's fitted times (SGLang's too)
    expert.check(model, tp, ep, dp_attention, redundant_experts, micro_batch_overlap)
    atp = expert.attention_tp(tp, dp_attention)  # GPUs one attention rank spans
    check_tp(model, atp)
    eff = eff or efficiency_for(gpu)
    wb = fmt.bytes_per_weight
    dense_wb = fmt.dense_bytes_per_weight  # an experts-only format (mxfp4) leaves the rest 16-bit
    act = 2  # activations and KV cache in 16-bit
    h = model.hidden
    p = np.zeros(N_PARAMS)
    p[LAYERS] = model.layers
    p[MOE_LAYERS] = model.moe_layers
    attn = _attn_params_per_gpu(model, atp)  # held
    dense = attn + model.mlp_params(model.ffn) / atp
    # computed per token of the step: a 1/tp share of the tokens through whole weights under DP
    # attention, every token through a 1/tp slice under tensor parallelism: the same FLOPs either way
    share = atp / tp
    p[DENSE_W] = dense * dense_wb
    p[DENSE_FLOPS] = 2 * dense * share
    # block-scaled fp8 checkpoints (DeepSeek-V3/R1, Qwen3's -FP8) scale each 128 x 128 block of weights: a GEMM
    # rescales its partial sums every 128 of K and quantises the activations it reads in groups of 128 first;
    # a tensor's or a channel's scale (fp8 quantised at load) costs nothing of it
    block_fp8 = fmt.gemm == "fp8" and model.fp8_block_scales
    if model.is_moe:
        shared = model.shared_experts * model.mlp_params(model.moe_ffn) / atp
        router = h * model.experts
        p[MOE_DENSE_W] = (attn + shared + router) * dense_wb + router * (EMBED_BYTES - dense_wb)  # a 16-bit router
        p[MOE_DENSE_FLOPS] = 2 * (attn + shared + router) * share
        expert_slice = model.mlp_params(model.moe_ffn) / (1 if ep > 1 else tp)  # a whole expert under ep
        p[EXPERT_W] = expert_slice * wb
        p[EXPERT_FLOPS] = 2 * expert_slice
        copies = expert.slots(model, redundant_experts)  # a routing reaches one copy of its expert
        p[N_EXPERTS] = copies
        p[TOPK] = model.experts_per_token
        p[EXPERTS_LOCAL] = copies / ep
        p[PAIR_SHARE] = 1.0 / ep
        p[EP_Z] = expert.busiest_rank_z(ep)
        p[EP_LOAD_VAR] = expert.load_variance(model, ep, ep_load_cv, eplb, redundant_experts)
        p[EP_SAMPLE] = ep / model.experts_per_token
        ffn_slice = model.moe_ffn / (1 if ep > 1 else tp)  # the expert's width on one GPU
        p[MOE_GEMM_EFF] = eff.moe_gemm_eff_fp8 if block_fp8 else eff.moe_gemm_eff
        tiles = expert.constants()["tile_rows"]
        p[MOE_TILE], p[MOE_TILE_SMALL] = (0.0 if fmt.marlin_moe else tiles["value"]), tiles["small_batch"]
        p[MOE_SCRATCH] = act * (6 * ffn_slice + 2 * h)  # gate/up rows, activation rows, output rows
        if dp_attention:
            p[A2A_BYTES] = expert.dispatch_combine_bytes(model, ep) / tp
            p[S_A2A_BYTE] = expert.a2a_link(gpu, ep)[0]
            p[A2A_LAT] = eff.link_latency_us * 1e-6
            p[A2A_PROMPT_S] = expert.a2a_prompt_s_per_token(model, gpu, ep) / tp
            p[OVERLAP] = 1.0 if micro_batch_overlap else 0.0
    # the routed experts' activation rows are the fused-MoE kernel's scratch (MOE_SCRATCH)
    ffn_gpu = (model.moe_ffn * model.shared_experts if model.is_moe else model.ffn) / atp
    heads_gpu = model.heads / atp
    kv_heads_gpu = kv_heads_per_gpu(model, atp)
    if model.is_mla:
        q_dim = heads_gpu * (model.mla_qk_nope_dim + model.mla_rope_dim)
        kv_dim = model.mla_kv_lora_rank + model.mla_rope_dim
        p[DEC_PAIR_FLOPS] = 2 * heads_gpu * (kv_dim + model.mla_kv_lora_rank)  # absorbed latent attention
        p[PRE_PAIR_FLOPS] = 2 * heads_gpu * (model.mla_qk_nope_dim + model.mla_rope_dim + model.mla_v_dim)
    else:
        q_dim = heads_gpu * model.head_dim
        kv_dim = 2 * kv_heads_gpu * model.head_dim
        p[DEC_PAIR_FLOPS] = 4 * heads_gpu * model.head_dim
        p[PRE_PAIR_FLOPS] = 4 * heads_gpu * model.head_dim
    # elementwise traffic per token per layer: two norms (read+write), two residual adds
    # (2 reads + 1 write), activation of the MLP (read gate and up, write product), the
    # GEMMs' inputs and outputs, the KV-cache write and attention's query/output
    p[ACT_BYTES] = act * (14 * h + 6 * ffn_gpu + 3 * q_dim + 2 * kv_dim) * share
    # the attention reads KV_BYTES of each token it attends; a sparse-attention indexer INDEX_BYTES of every one
    p[INDEX_BYTES] = model.index_key_bytes_per_layer() * share
    p[KV_BYTES] = kv_bytes_per_token_per_gpu(model, tp, kv_format(kv_dtype).bytes_per_value,
                                             dp_attention) / model.attention_layers - p[INDEX_BYTES]
    if model.index_topk:  # the indexer is replicated over an attention rank's GPUs: each scores all its heads
        p[ATTEND_TOPK] = model.index_topk
        p[INDEX_PAIR_FLOPS] = 2.0 * model.index_heads * model.index_head_dim * share
        p[S_INDEX_FLOP] = 1.0 / (gpu.peak_flops("fp8" if gpu.supports_fp8 else "bf16") * eff.eta_attn)
    p[KV_HEADS] = kv_heads_gpu * share  # a GPU runs 1/tp of the sequences under DP attention
    p[WINDOW], p[WINDOW_LAYERS] = model.window, model.window_layers
    if model.linear_layers:
        # a decode token reads the state S, updates it (S k, then a rank-one write) and reads it out (q S): six
        # FLOPs a state value; a prompt token adds its chunk's causal attention (keys and values of 64 tokens)
        heads_v, dk, dv = model.linear_v_heads / atp, model.linear_k_dim, model.linear_v_dim
        p[LINEAR_LAYERS] = model.linear_layers
        p[LINEAR_STATE_RW] = 2 * model.linear_state_bytes(atp) / model.linear_layers * share
        p[LINEAR_DEC_FLOPS] = 6 * heads_v * dk * dv * share
        p[LINEAR_PRE_FLOPS] = (6 * dk * dv + 2 * LINEAR_CHUNK * (dk + dv)) * heads_v * share
    p[DEC_PAIR_FLOPS] *= share
    p[PRE_PAIR_FLOPS] *= share
    p[HEAD_W] = model.vocab / atp * h * EMBED_BYTES
    p[HEAD_FLOPS] = 2 * model.vocab / tp * h
    p[ALLREDUCE_BYTES] = h * act
    # rates stored as their inverses (seconds per byte, per FLOP): the engine multiplies, every step
    bw = gpu.hbm_tbps * 1e12 * eff.eta_bw
    p[S_BYTE] = 1.0 / bw
    p[S_BYTE_GEMV] = p[S_BYTE] / eff.gemv_bw_eff
    # fp8 and int4 weights run their own kernels at one token too, at the GEMMs' stream
    p[S_BYTE_ONE] = p[S_BYTE_GEMV] if dense_wb == EMBED_BYTES else p[S_BYTE]
    p[S_CTA_BYTE] = eff.cta_saturation * gpu.sms / bw
    p[S_FLOP] = 1.0 / (gpu.peak_flops(dtype) * eff.eta_gemm * fmt.gemm_rate)
    s_flop_16 = 1.0 / (gpu.peak_flops("bf16") * eff.eta_gemm)
    if p[S_FLOP] != s_flop_16:  # the 16-bit LM head, in the GEMMs' seconds
        p[HEAD_FLOPS] *= s_flop_16 / p[S_FLOP]
        if fmt.experts_only:  # so are the 16-bit layers around the experts
            p[DENSE_FLOPS] *= s_flop_16 / p[S_FLOP]
            p[MOE_DENSE_FLOPS] *= s_flop_16 / p[S_FLOP]
    p[S_ATTN_FLOP] = 1.0 / (gpu.peak_flops("bf16") * eff.eta_attn)
    p[MOE_BW_EFF] = eff.moe_bw_eff
    # a latent-attention layer (DeepSeek) runs more small kernels than a grouped-query one: its own norms and the
    # absorbed per-head products (fit_moe.py; its block-fp8 GEMMs' quantising kernels are `quant`, below); SGLang's
    # kernels for both, and its MoE routing, are its own (fused top-k and alignment: fitted apart); TensorRT-LLM's
    # decode of DeepSeek-R1 at one request reads SGLang's latent-attention time, not vLLM's (its blog's 111 tok/s)
    sglang = engine == "sglang"
    mla = (eff.sglang_mla_layer_us if engine in FUSED_MLA_ENGINES else eff.t_mla_layer_us) if model.is_mla else 0.0
    # SGLang on an AMD GPU runs ROCm's kernels, and with block-scaled fp8 weights they take longer a layer
    # (fit_moe.py); 16-bit layers decode at the CUDA-fitted pace (Llama-4 Scout and Maverick on MI300X)
    rocm = eff.sglang_rocm_fp8_layer_us if sglang and gpu.vendor == "AMD" and block_fp8 else 0.0
    quant = block_quant_us(fmt, eff) if block_fp8 else 0.0
    linear = model.mixer_mean(0.0, eff.t_linear_layer_us)  # a mean a layer
    p[T_LAYER] = ((eff.t_layer_engine_us + mla + rocm if served else eff.t_layer_us) + quant + linear) * 1e-6
    # every host time was fitted on x86 servers; a Grace host takes longer for the same Python work (catalog)
    host = gpu.host_time_factor
    p[T_ISSUE_DECODE] = eff.t_issue_decode_us * 1e-6 * host
    p[T_ISSUE_PREFILL] = eff.t_issue_prefill_us * 1e-6 * host
    p[ISSUE_SHARED] = eff.issue_shared
    p[LAUNCH] = LAUNCH_MODES[launch]
    p[TP] = atp  # the all-reduces span an attention rank; DP attention has none
    # SGLang's MiniMaxM2QKRMSNorm sums the query's and the key's squares in one kernel and all-reduces both at once;
    # vLLM's norm does the same where its fused kernel is built (forward_qk, minimax_allreduce_rms_qk), else two
    p[QK_NORM_ALLREDUCES] = 1.0 if model.qk_norm_allreduce and atp > 1 else 0.0
    p[S_LINK_BYTE] = 1.0 / (gpu.tp_link_gbps(atp) * 1e9 * eff.link_eff) if atp > 1 else 0.0
    p[S_DECODE_LINK_BYTE] = p[S_LINK_BYTE] * (1.0 / eff.decode_allreduce_share - 1.0)
    p[LINK_LAT] = allreduce_latency_us(gpu, atp, eff) * 1e-6
    p[T_STEP] = eff.engine_step_us * 1e-6 * host if served else 0.0
    p[KV_SPLIT] = PAGED_KV_SPLIT if attn_kernel == "paged" else 0
    p[ENGINE] = 1.0 if served else 0.0
    p[CAPTURE] = capture_tokens
    # a layer's host issue without graphs; SGLang's MoE and MLA layers issue more (fit_moe.py): a mean a layer.
    # TensorRT-LLM's PyTorch backend issues them from Python too, and publishes no step times: SGLang's fit
    eager_prompts = engine in EAGER_PROMPT_ENGINES
    issue = eff.t_issue_engine_us
    if eager_prompts:
        issue += (eff.sglang_issue_moe_us * model.moe_layers
                  + (eff.sglang_issue_mla_us * model.layers if model.is_mla else 0.0)) / model.layers
        # a linear layer's chunked prompt kernels, fitted where a prompt's step is issued op by op (SGLang's runs);
        # vLLM's piecewise steps run the same kernels, but no vLLM run of a linear-attention model checks a carry
        issue += model.mixer_mean(0.0, eff.t_issue_linear_us)
    p[T_ISSUE_ENGINE] = issue * 1e-6 * host
    # vLLM runs a prompt's step as piecewise graphs around eager attention; SGLang and TensorRT-LLM capture
    # graphs of decode batches only, and issue a prompt's step op by op (data/engines.json: cuda_graphs)
    p[T_PIECE] = p[T_ISSUE_ENGINE] if eager_prompts else eff.t_piecewise_us * 1e-6 * host
    p[T_SEQ] = eff.engine_seq_us * 1e-6 * host if served else 0.0
    # SGLang's overlap scheduler prepares the next batch while the GPU runs this one (data/engines.json);
    # TensorRT-LLM's host's per-step share is vLLM's fitted one, no step times of its own being public
    p[ASYNC] = (1.0 if sglang else eff.async_overlap) if async_scheduling else 0.0
    p[T_MOE_LAYER] = (eff.sglang_moe_layer_us if sglang else eff.t_moe_layer_us) * 1e-6 if model.is_moe else 0.0
    if spec is not None:
        prop = proposer(spec, model, atp, dense_wb, kv_format(kv_dtype).bytes_per_value)
        p[SPEC_K] = spec.tokens
        p[DRAFT_LAYERS] = prop.layers
        p[DRAFT_W] = prop.weight_bytes
        p[DRAFT_FLOPS] = prop.flops_per_token * share
        p[DRAFT_KV] = prop.kv_bytes_per_token * share
        p[DRAFT_HEAD_W] = prop.head_bytes
        p[DRAFT_HEAD_FLOPS] = prop.head_flops * share * p[HEAD_FLOPS] / (2 * model.vocab / tp * h)  # 16-bit, as the LM head
        p[DRAFT_ALLREDUCE] = prop.allreduce_bytes if atp > 1 else 0.0
        p[DRAFT_MOE] = 1.0 if prop.moe_layer else 0.0
        p[T_PROPOSE_SEQ] = prop.host_s_per_seq * host
        # fitted to vLLM V1's drafting loop, checked on SGLang's (calibration/SPEC_FIT.md)
        p[T_DRAFT_PASS] = eff.t_draft_pass_us * 1e-6 * host if served and prop.layers > 0 else 0.0
        p[T_SPEC_STEP] = eff.t_spec_step_us * 1e-6 if served else 0.0
        p[SPEC_SURV:SPEC_SURV + spec.tokens] = spec.survival
        p[SPEC_PER_DRAFT] = 1.0 / spec.tokens
        tops = np.arange(1, SPEC_BINS + 1) / SPEC_BINS
        p[SPEC_TABLE:SPEC_TABLE + SPEC_BINS] = 1 + (np.asarray(spec.survival)[None, :] >= tops[:, None]).sum(axis=1)
    return p


def block_quant_us(fmt, eff: Efficiency) -> float:
    """A layer's activation-quantising kernels with block-scaled weights (data/quantisation.json), each at
    the measured time of one of vLLM's compiled layer's kernels, µs."""
    return fmt.block_quant_kernels * eff.t_layer_engine_us / ENGINE_LAYER_KERNELS


def check_tp(model: Model, tp: int) -> None:
    if not isinstance(tp, (int, np.integer)) or tp < 1:
        raise ValueError(f"tensor parallelism must be a whole number of GPUs >= 1, not {tp}")
    if not model.splits_over(tp):
        heads = (f"{model.heads} attention heads" if model.heads % tp else
                 f"{model.kv_heads} KV heads (vLLM splits them evenly, or copies each to tp / {model.kv_heads} GPUs)")
        raise ValueError(f"tp={tp} does not divide {model.name}'s {heads}: "
                         f"choose tp among {', '.join(map(str, model.tp_choices()))}")


def _attn_params_per_gpu(model: Model, tp: int) -> float:
    """Attention projection parameters one GPU holds (the mean layer's, where linear-attention layers stand
    among the attending ones); K/V projections replicate when tp > kv_heads."""
    if model.is_mla:
        return model.attn_params() / tp
    h, d = model.hidden, model.head_dim
    q_o = (3 if model.attn_output_gate else 2) * h * model.heads * d / tp
    kv = 2 * h * kv_heads_per_gpu(model, tp) * d
    bias = (model.heads / tp + 2 * kv_heads_per_gpu(model, tp)) * d if model.qkv_bias else 0
    if not model.linear_layers:
        return q_o + kv + bias
    return model.mixer_mean(q_o + kv + bias, model.linear_attn_params() / tp)


def kv_heads_per_gpu(model: Model, tp: int) -> float:
    if model.is_mla:
        return 1.0  # one latent shared by all heads, replicated on every GPU
    return max(1.0, model.kv_heads / tp)


def kv_bytes_per_token_per_gpu(model: Model, tp: int, kv_dtype_bytes: int = 2, dp_attention: bool = False) -> float:
    """KV bytes one GPU holds per token of the replica: its K/V heads' share under tensor parallelism
    (MLA's latent whole on every GPU, and a sparse-attention indexer's keys: vLLM replicates the indexer);
    under data-parallel attention a GPU holds its own sequences' whole KV, so 1/tp of the replica's
    tokens (the mean rank's)."""
    if dp_attention:
        return model.kv_bytes_per_token(kv_dtype_bytes) / tp
    if model.is_mla:
        return model.kv_bytes_per_token(kv_dtype_bytes)
    return model.attention_layers * (2 * kv_heads_per_gpu(model, tp) * model.head_dim * kv_dtype_bytes
                                     + model.index_key_bytes_per_layer())


# ---------------------------------------------------------------- operators (jitted)

@engine_jit
def soft_max(a, b):
    """Roofline join of compute time a and memory time b: their quadrature sum, which is the
    larger of the two when they differ a lot, and up to sqrt(2) times it at the ridge point, where
    neither unit runs at its peak (a fit of the exponent to the H200 measurements gives 1.97)."""
    return math.sqrt(a * a + b * b)


@engine_jit
def experts_touched(p, tokens):
    """Expected distinct routed experts of one GPU's per MoE layer that `tokens` tokens route to
    under uniform top-k routing (of all the experts under tp, of its own experts / ep under ep)."""
    e = p[N_EXPERTS]
    if e <= 0.0 or tokens <= 0:
        return 0.0
    return p[EXPERTS_LOCAL] * (1.0 - (1.0 - p[TOPK] / e) ** tokens)


@engine_jit
def linear_time(p, tokens):
    """Projection and MLP GEMMs of all layers for `tokens` new tokens: at one token, 16-bit weights
    meet one vector each (a matrix-vector product) and stream at that product's rate."""
    if tokens <= 0:
        return 0.0
    s_byte = p[S_BYTE_ONE] if tokens == 1 else p[S_BYTE]
    dense_layers = p[LAYERS] - p[MOE_LAYERS]
    t = dense_layers * soft_max(p[DENSE_FLOPS] * tokens * p[S_FLOP], p[DENSE_W] * s_byte)
    if p[MOE_LAYERS] > 0:
        t += p[MOE_LAYERS] * soft_max(p[MOE_DENSE_FLOPS] * tokens * p[S_FLOP], p[MOE_DENSE_W] * s_byte)
    return t


@engine_jit
def busiest_share(p, tokens):
    """The busiest expert rank's routings over the mean rank's: expert popularity's spread plus the
    sampling noise of `tokens` tokens, z standard deviations up (1 without expert parallelism)."""
    if p[EP_Z] <= 0.0:
        return 1.0
    return 1.0 + p[EP_Z] * math.sqrt(p[EP_LOAD_VAR] + p[EP_SAMPLE] / tokens)


@engine_jit
def marlin_block(routings):
    """Marlin's MoE kernel's rows a block for `routings` a touched expert on average: the smallest of
    8, 16, 32, 48 and 64 that they fill to less than 90% (vLLM's fused_marlin_moe)."""
    for rows in (8.0, 16.0, 32.0, 48.0):
        if routings / rows < 0.9:
            return rows
    return 64.0


@engine_jit
def experts_time(p, tokens, prompt=False):
    """All MoE layers on the busiest GPU: the fused-MoE kernel (expert_gemms_time) and, under DP
    attention, the dispatch and combine all-to-alls (all_to_all_time)."""
    return expert_gemms_time(p, tokens) + all_to_all_time(p, tokens, prompt)


@engine_jit
def expert_gemms_time(p, tokens):
    """The fused-MoE kernel of all MoE layers on the busiest GPU: the grouped GEMMs stream the
    touched experts' weights against their FLOPs, each expert's tokens padded to whole tiles; the
    scratch rows of every routing it computes; the routing kernels."""
    if p[MOE_LAYERS] <= 0 or tokens <= 0:
        return 0.0
    busiest = busiest_share(p, tokens)
    pairs = tokens * p[TOPK] * p[PAIR_SHARE] * busiest
    touched = experts_touched(p, tokens)
    if p[MOE_TILE] <= 0:
        tile = marlin_block(tokens * p[TOPK] / p[N_EXPERTS])
    else:
        tile = p[MOE_TILE_SMALL] if tokens <= p[N_EXPERTS] else p[MOE_TILE]
    rows = touched * tile * math.ceil(pairs / (touched * tile))
    t_gemm = rows * p[EXPERT_FLOPS] * p[S_FLOP] / p[MOE_GEMM_EFF]
    t_weights = touched * p[EXPERT_W] * p[S_BYTE] / p[MOE_BW_EFF]
    return p[MOE_LAYERS] * (soft_max(t_gemm, t_weights) + pairs * p[MOE_SCRATCH] * p[S_BYTE] + p[T_MOE_LAYER])


@engine_jit
def all_to_all_time(p, tokens, prompt):
    """Under DP attention, every MoE layer's dispatch and combine for `tokens` tokens of the step, the
    busiest rank's share: two calls' fixed time and the bytes over the slower of its links. A decode
    step's low-latency kernels send each routed copy on its own, a step with prompt tokens (`prompt`)
    the normal kernels, once a node across nodes."""
    if p[A2A_BYTES] <= 0 or p[MOE_LAYERS] <= 0 or tokens <= 0:
        return 0.0
    per_token = p[A2A_PROMPT_S] if prompt and p[A2A_PROMPT_S] > 0 else p[A2A_BYTES] * p[S_A2A_BYTE]
    return p[MOE_LAYERS] * (2.0 * p[A2A_LAT] + tokens * busiest_share(p, tokens) * per_token)


@engine_jit
def elementwise_time(p, tokens):
    return p[LAYERS] * tokens * p[ACT_BYTES] * p[S_BYTE]


@engine_jit
def decode_ctas(p, ctx):
    """Thread blocks a decode attention kernel gives one sequence of `ctx` cached tokens (the tokens it
    attends, under sparse attention)."""
    if p[ATTEND_TOPK] > 0:
        ctx = min(ctx, p[ATTEND_TOPK])
    if p[KV_SPLIT] > 0:
        return p[KV_HEADS] * math.ceil(ctx / p[KV_SPLIT])
    return p[KV_HEADS]


@engine_jit
def decode_layer_tokens(p, n_decode, sum_ctx):
    """Cached tokens the decode attention of all layers reads for `n_decode` sequences of `sum_ctx`
    tokens in all: a window layer reads at most its window of each, and sparse attention at most the
    tokens its indexer picks, each taken as the lesser of the summed context and n_decode windows
    (exact while every context is past the window, or none)."""
    full = sum_ctx if p[ATTEND_TOPK] <= 0 else min(sum_ctx, n_decode * p[ATTEND_TOPK])
    attending = p[LAYERS] - p[LINEAR_LAYERS]  # a linear-attention layer reads a state, no cached token
    if p[WINDOW_LAYERS] <= 0:
        return attending * full
    return (attending - p[WINDOW_LAYERS]) * full + p[WINDOW_LAYERS] * min(sum_ctx, n_decode * p[WINDOW])


@engine_jit
def index_time(p, pairs, keys):
    """A sparse-attention indexer: `pairs` (query, cached token) scores in fp8 and `keys` cached index
    keys read, over all layers (0 without sparse attention)."""
    if p[ATTEND_TOPK] <= 0:
        return 0.0
    return max(p[LAYERS] * keys * p[INDEX_BYTES] * p[S_BYTE], p[LAYERS] * pairs * p[INDEX_PAIR_FLOPS] * p[S_INDEX_FLOP])


@engine_jit
def decode_attention_time(p, n_decode, sum_ctx, ctas, queries=1.0):
    """All decoding sequences of a step: read every cached token's K and V once per layer (a window
    layer's last WINDOW tokens, sparse attention's chosen ones after its indexer scored them all),
    for `queries` query positions a sequence (1 + its draft tokens under speculative decoding)."""
    if sum_ctx <= 0:
        return 0.0
    s_byte = max(p[S_BYTE], p[S_CTA_BYTE] / ctas)  # too few thread blocks cannot pull full bandwidth
    layer_tokens = decode_layer_tokens(p, n_decode, sum_ctx)
    t_mem = layer_tokens * p[KV_BYTES] * s_byte
    t_flops = layer_tokens * queries * p[DEC_PAIR_FLOPS] * p[S_ATTN_FLOP]
    return max(t_mem, t_flops) + index_time(p, sum_ctx * queries, sum_ctx) + linear_decode_time(p, n_decode, queries)


@engine_jit
def linear_decode_time(p, n_decode, queries=1.0):
    """The linear-attention layers of a decode step: each sequence's state read and written back, and
    updated for each of its `queries` tokens (0 for a model whose every layer attends)."""
    if p[LINEAR_LAYERS] <= 0:
        return 0.0
    t_mem = n_decode * p[LINEAR_LAYERS] * p[LINEAR_STATE_RW] * p[S_BYTE]
    t_flops = n_decode * queries * p[LINEAR_LAYERS] * p[LINEAR_DEC_FLOPS] * p[S_ATTN_FLOP]
    return max(t_mem, t_flops)


@engine_jit
def capped_pairs(new_tokens, cached, cap):
    """(query, key) pairs of a causal chunk of `new_tokens` queries after `cached` tokens when each query
    takes at most `cap` keys (a window, or sparse attention's pick)."""
    inside = min(new_tokens, max(0.0, cap - cached))  # queries whose whole causal prefix fits the cap
    return inside * (cached + (inside + 1) / 2.0) + (new_tokens - inside) * cap


@engine_jit
def prefill_attention_time(p, new_tokens, cached):
    """One prefill chunk of `new_tokens` queries, causal over `cached` + itself; in a window layer
    each query attends to the last WINDOW positions at most, under sparse attention to the
    ATTEND_TOPK its indexer picks after scoring them all."""
    if new_tokens <= 0:
        return 0.0
    causal = new_tokens * (cached + (new_tokens + 1) / 2.0)
    pairs, keys, pair_flops = causal, cached + new_tokens, p[PRE_PAIR_FLOPS]
    if p[ATTEND_TOPK] > 0:  # vLLM's sparse MLA attends the picked latents in the absorbed form, as a decode does
        pairs, pair_flops = capped_pairs(new_tokens, cached, p[ATTEND_TOPK]), p[DEC_PAIR_FLOPS]
        keys = min(keys, p[ATTEND_TOPK] + new_tokens)
    w = p[WINDOW]  # no window layers: the terms below with WINDOW_LAYERS = 0 are every layer's
    window_pairs = capped_pairs(new_tokens, cached, w)
    full = p[LAYERS] - p[WINDOW_LAYERS] - p[LINEAR_LAYERS]
    t_flops = (full * pairs * pair_flops + p[WINDOW_LAYERS] * window_pairs * p[PRE_PAIR_FLOPS]
               + p[LINEAR_LAYERS] * new_tokens * p[LINEAR_PRE_FLOPS]) * p[S_ATTN_FLOP]
    t_mem = (full * keys + p[WINDOW_LAYERS] * min(cached + new_tokens, w + new_tokens)) * p[KV_BYTES] * p[S_BYTE]
    return max(t_flops, t_mem) + index_time(p, causal, cached + new_tokens)


@engine_jit
def lm_head_time(p, rows):
    if rows <= 0:
        return 0.0
    s_byte = p[S_BYTE_GEMV] if rows == 1 else p[S_BYTE]  # the LM head is 16-bit whatever the weights' format
    return soft_max(p[HEAD_FLOPS] * rows * p[S_FLOP], p[HEAD_W] * s_byte)


@engine_jit
def allreduce_once(p, bytes_):
    """One ring all-reduce of `bytes_` over the tp GPUs: its fixed time and 2(tp - 1)/tp of the message
    over each GPU's link."""
    tp = p[TP]
    return p[LINK_LAT] + 2.0 * (tp - 1.0) / tp * bytes_ * p[S_LINK_BYTE]


@engine_jit
def allreduce_time(p, tokens, n_decode):
    """All-reduce of the activations after attention and after the MLP, every layer, and of each token's
    sums of squares where the query and key norms span all the heads; the bytes of the `n_decode`
    decoding sequences take longer where a family's decode steps grow with the batch faster than the
    link's rate says (S_DECODE_LINK_BYTE, 0 elsewhere)."""
    if p[TP] <= 1 or tokens <= 0:
        return 0.0
    decode_extra = 2.0 * (p[TP] - 1.0) / p[TP] * n_decode * p[ALLREDUCE_BYTES] * p[S_DECODE_LINK_BYTE]
    t = 2.0 * p[LAYERS] * (allreduce_once(p, tokens * p[ALLREDUCE_BYTES]) + decode_extra)
    if p[QK_NORM_ALLREDUCES] > 0:  # norms over all the heads: each token's sums of squares, every layer
        t += p[LAYERS] * p[QK_NORM_ALLREDUCES] * allreduce_once(p, tokens * QK_NORM_BYTES)
    return t


@engine_jit
def host_issue_time(p, n_decode, n_chunks):
    """Eager mode: the CPU issues each layer's kernels; per layer, the prefill path's ops, plus the
    decode path's ops that the prefill path does not already issue (a mixed step runs one GEMM,
    norm and activation over all its tokens; only the decode attention and its cache writes add)."""
    per_layer = 0.0
    if n_decode > 0 and n_chunks > 0:
        per_layer = p[T_ISSUE_PREFILL] + (1.0 - p[ISSUE_SHARED]) * p[T_ISSUE_DECODE]
    elif n_decode > 0:
        per_layer = p[T_ISSUE_DECODE]
    elif n_chunks > 0:
        per_layer = p[T_ISSUE_PREFILL]
    return p[LAYERS] * per_layer


@step_jit
def proposer_fixed(p, seqs):
    """One proposal's share of speculative decoding that its batch alone sets (not the contexts):
    the proposer's layers (weights streamed against their GEMMs, its routed experts for an MoE
    layer, its all-reduces), the vocabulary projection it samples a draft from, its kernels."""
    if p[DRAFT_LAYERS] <= 0:
        return 0.0
    one = soft_max(p[DRAFT_FLOPS] * seqs * p[S_FLOP], p[DRAFT_W] * p[S_BYTE])
    if p[DRAFT_MOE] > 0:  # its routed experts, as one of the target's MoE layers
        one += experts_time(p, seqs, False) / p[MOE_LAYERS]
    one += soft_max(p[DRAFT_HEAD_FLOPS] * seqs * p[S_FLOP], p[DRAFT_HEAD_W] * p[S_BYTE])
    one += p[DRAFT_LAYERS] * p[T_LAYER]
    if p[TP] > 1 and p[DRAFT_ALLREDUCE] > 0:
        one += 2.0 * p[DRAFT_LAYERS] * allreduce_once(p, seqs * p[DRAFT_ALLREDUCE])
    return one


@step_jit
def proposer_time(p, fixed, seqs, sum_ctx):
    """Speculative decoding's proposer for `seqs` sequences of `sum_ctx` cached tokens in all: k
    proposals one after another, each `fixed` (proposer_fixed) plus reading the proposer's own KV
    cache and the host's pass around it, and the host's share (n-gram lookup runs on the CPU); and
    the step's own rejection sampling."""
    return (p[SPEC_K] * (fixed + p[T_DRAFT_PASS] + sum_ctx * p[DRAFT_KV] * p[S_BYTE]) + seqs * p[T_PROPOSE_SEQ]
            + p[T_SPEC_STEP])


# breakdown slots, then what step_fixed keeps for step_time: the proposer's batch-set share, the
# query positions a decoding sequence verifies, the speculating sequences and their share of the
# decodes (kept so that a quiet run's steps divide nothing: a division is the slowest step of a step)
B_LINEAR, B_EXPERTS, B_ELEMENTWISE, B_ATTN_DECODE, B_ATTN_PREFILL, B_LM_HEAD, B_COMM, B_LAYER_OVERHEAD, \
    B_HOST_WAIT, B_SCHEDULER, B_PROPOSER, B_EXPOSED_A2A, B_PROPOSER_FIXED, B_QUERIES, B_SPEC_SEQS, B_SPEC_SHARE, \
    B_A2A = range(17)
N_SCRATCH = 17
BREAKDOWN_NAMES = ("linear", "experts", "elementwise", "attn_decode", "attn_prefill", "lm_head", "comm",
                   "layer_overhead", "host_issue_wait", "scheduler", "proposer", "all_to_all")


@engine_jit
def step_breakdown(p, tokens, n_decode, sum_ctx, ctas, prefill_attn, n_chunks, rows, out, drafts=0.0):
    """Fill `out` (len N_SCRATCH) with each operator's share of the step; return the step time (s).

    tokens: all new tokens of the step (draft tokens verified included); n_decode / sum_ctx / ctas:
    the decoding sequences, their summed context and thread blocks; prefill_attn: summed
    prefill_attention_time of the chunks; rows: rows whose logits are computed (decodes and their
    drafts, plus chunks that finish their prompt); drafts: draft tokens verified, p[SPEC_K] a
    sequence that speculates.
    """
    step_fixed(p, tokens, n_decode, prefill_attn, rows, drafts, out)
    return step_time(p, tokens, n_decode, sum_ctx, ctas, n_chunks, out, drafts)


@engine_jit
def step_fixed(p, tokens, n_decode, prefill_attn, rows, drafts, out):
    """The operators of a step that its token counts set, not the decodes' contexts: a run of
    decode steps with the same batch (fastforward.py) computes them once."""
    prompt = prefill_attn > 0
    out[B_ELEMENTWISE] = elementwise_time(p, tokens)
    out[B_ATTN_PREFILL] = prefill_attn
    out[B_COMM] = allreduce_time(p, tokens, n_decode)
    out[B_LAYER_OVERHEAD] = p[LAYERS] * p[T_LAYER] if tokens > 0 else 0.0
    if p[OVERLAP] > 0 and tokens >= 2:
        # two micro-batches of half the tokens, one after the other: each streams the weights and launches
        # the kernels; their all-to-alls are set apart for step_time to overlap with the other half's compute
        half = tokens / 2.0
        out[B_LINEAR] = 2.0 * linear_time(p, half)
        out[B_EXPERTS] = 2.0 * expert_gemms_time(p, half)
        out[B_LM_HEAD] = 2.0 * lm_head_time(p, rows / 2.0)
        out[B_LAYER_OVERHEAD] *= 2.0
        out[B_A2A] = 2.0 * all_to_all_time(p, half, prompt)
    else:
        out[B_LINEAR] = linear_time(p, tokens)
        out[B_EXPERTS] = expert_gemms_time(p, tokens)
        out[B_LM_HEAD] = lm_head_time(p, rows)
        out[B_A2A] = all_to_all_time(p, tokens, prompt)
    out[B_QUERIES], out[B_SPEC_SEQS], out[B_SPEC_SHARE], out[B_PROPOSER_FIXED] = 1.0, 0.0, 0.0, 0.0
    if drafts > 0:
        seqs = drafts * p[SPEC_PER_DRAFT]
        per_decode = 1.0 / n_decode
        out[B_QUERIES] = 1.0 + drafts * per_decode
        out[B_SPEC_SEQS] = seqs
        out[B_SPEC_SHARE] = seqs * per_decode
        out[B_PROPOSER_FIXED] = proposer_fixed(p, seqs)


@engine_jit
def step_time(p, tokens, n_decode, sum_ctx, ctas, n_chunks, out, drafts):
    """The step's time from `out` as step_fixed left it: add the decodes' attention and the
    proposer (which read every context), the host's share, and sum."""
    out[B_ATTN_DECODE] = decode_attention_time(p, n_decode, sum_ctx, ctas, out[B_QUERIES])
    out[B_PROPOSER] = 0.0
    if drafts > 0:  # the speculating sequences and their share of the summed context
        out[B_PROPOSER] = proposer_time(p, out[B_PROPOSER_FIXED], out[B_SPEC_SEQS], sum_ctx * out[B_SPEC_SHARE])
    gpu = out[B_PROPOSER]
    for i in range(8):
        gpu += out[i]
    # the step waits for its dispatch and combine; with micro-batch overlap they run under the other half's
    # compute, and only what they take beyond it shows
    out[B_EXPOSED_A2A] = max(0.0, out[B_A2A] - gpu) if p[OVERLAP] > 0 else out[B_A2A]
    gpu += out[B_EXPOSED_A2A]
    out[B_HOST_WAIT] = 0.0
    if p[ENGINE] > 0:
        return vllm_step(p, tokens, n_decode, n_chunks, gpu, out)
    eager = p[LAUNCH] == 1 or (p[LAUNCH] == 2 and n_chunks > 0)
    if eager and tokens > 0:
        out[B_HOST_WAIT] = max(0.0, host_issue_time(p, n_decode, n_chunks) - gpu)
    out[B_SCHEDULER] = p[T_STEP]
    return gpu + out[B_HOST_WAIT] + out[B_SCHEDULER]


@engine_jit
def vllm_step(p, tokens, n_decode, n_chunks, gpu, out):
    """A vLLM V1 step (vllm_host.py): the host issues what no CUDA graph covers while the GPU
    runs it, so the GPU part lasts the longer of the two; the engine's host work of the step
    (scheduling, input preparation, sampling and output processing per sequence) runs after the
    GPU part, or, with async scheduling, alongside the previous step's GPU part as far as the
    fitted overlap says (the measured vLLM runs hide little of it: one Python thread still
    prepares, launches and reads back every step)."""
    issue = 0.0
    if tokens > 0:
        if p[LAUNCH] == 1 or tokens > p[CAPTURE]:  # enforce-eager, or above the largest captured graph
            issue = p[LAYERS] * p[T_ISSUE_ENGINE]
        elif n_chunks > 0:  # prompt tokens: piecewise graphs around eager attention
            issue = p[LAYERS] * p[T_PIECE]
    out[B_HOST_WAIT] = max(0.0, issue - gpu)
    device = gpu + out[B_HOST_WAIT]
    host = p[T_STEP] + p[T_SEQ] * (n_decode + n_chunks)
    out[B_SCHEDULER] = host - min(host, p[ASYNC] * device)
    return device + out[B_SCHEDULER]


# ---------------------------------------------------------------- Python entry point

def steptime(gpu: GPU, model: Model, tp: int = 1, decode_batch: int = 0, context: int = 0,
             prefill_tokens: int = 0, prefill_cached: int = 0, launch: str = "auto", dtype: str = "bf16",
             attn_kernel: str = "sdpa", engine: str = "bare", eff: Efficiency | None = None,
             capture_tokens: int = 512, async_scheduling: bool = True, kv_dtype: str = "bf16",
             spec: Speculation | None = None, ep: int = 1, dp_attention: bool = False,
             ep_load_cv: float | None = None, eplb: bool = False, redundant_experts: int = 0,
             micro_batch_overlap: bool = False) -> dict:
    """One step of `decode_batch` sequences at `context` tokens each plus, optionally, one prefill
    chunk of `prefill_tokens` new tokens after `prefill_cached` cached ones. Times in ms. With
    speculative decoding (spec) every decoding sequence verifies spec.tokens drafts too."""
    for name, v in (("decode batch", decode_batch), ("context", context), ("prefill tokens", prefill_tokens),
                    ("prefill cached tokens", prefill_cached)):
        if v < 0:
            raise ValueError(f"{name} must be >= 0, not {v}")
    if decode_batch == 0 and prefill_tokens == 0:
        raise ValueError("an empty step: give --decode-batch (with --context) and/or --prefill-tokens")
    if decode_batch > 0 and context < 1:
        raise ValueError("decoding sequences need a context of at least 1 token (--context)")
    if prefill_cached and not prefill_tokens:
        raise ValueError("--prefill-cached needs --prefill-tokens")
    longest = max(context, prefill_tokens + prefill_cached)
    if longest > model.max_context:
        raise ValueError(f"{longest} tokens exceed {model.name}'s context of {model.max_context}")
    p = build(gpu, model, tp, dtype, launch, attn_kernel, engine, eff, capture_tokens, async_scheduling, kv_dtype,
              spec, ep, dp_attention, ep_load_cv, eplb, redundant_experts, micro_batch_overlap)
    ctas = decode_batch * decode_ctas(p, context) if decode_batch else 0.0
    pre = prefill_attention_time(p, prefill_tokens, prefill_cached)
    n_chunks = 1 if prefill_tokens else 0
    drafts = decode_batch * spec.tokens if spec else 0
    tokens = decode_batch + drafts + prefill_tokens
    out = np.zeros(N_SCRATCH)
    total = step_breakdown(p, tokens, decode_batch, decode_batch * context, ctas, pre, n_chunks,
                           decode_batch + drafts + n_chunks, out, float(drafts))
    breakdown = {name: float(v) * 1e3 for name, v in zip(BREAKDOWN_NAMES, out)}
    weights_read = (model.layers - model.moe_layers) * p[DENSE_W] + model.moe_layers * (
        p[MOE_DENSE_W] + experts_touched(p, tokens) * p[EXPERT_W]) + p[HEAD_W]
    return {
        "step_ms": total * 1e3,
        "comm_ms": breakdown["comm"],
        "breakdown_ms": breakdown,
        "tokens": tokens,
        "weight_bytes_read_per_gpu": float(weights_read),
        "kv_bytes_read_per_gpu": float(decode_layer_tokens(p, decode_batch, decode_batch * context) * p[KV_BYTES]),
        "launch": launch,
        "weights": dtype,
        "kv_dtype": kv_dtype,
        "attention_kernel": attn_kernel,
        "engine": engine,
        "gpu": gpu.id,
        "model": model.id,
        "tp": tp,
    }
