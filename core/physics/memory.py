"""Memory planner: what one GPU of a replica holds, and how many KV blocks are left for the cache.

Per GPU: weights/tp + activation workspace + KV pool = usable memory x utilisation, the way vLLM
sizes its cache (gpu_memory_utilization, default 0.9; TensorRT-LLM's free_gpu_memory_fraction is
0.9 too). The KV pool is cut into blocks of `block_size` tokens.

With pipeline parallelism (pp stages) each GPU holds its stage's layers (the fullest stage's:
ceil(layers / pp)) and the embedding or the LM head, and its KV cache holds those layers of every
token; vLLM sizes the pool on every worker and keeps the smallest block count, so the fullest stage
sets it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

from .catalog import EMBED_BYTES, GIB, GPU, Model, check_formats, kv_format, weight_format
from . import expert
from .costmodel import _attn_params_per_gpu, check_tp, kv_bytes_per_token_per_gpu
from .pipeline import check_pp, stage_layers
from .speculative import Speculation, proposer

# The driver and CUDA context keep part of the HBM: an "80 GB" H100 reports 79.2 GiB to PyTorch.
DRIVER_RESERVED_GIB = 0.8
# cuBLAS workspaces, CUDA-graph pools and NCCL buffers outside the activation estimate.
NON_TORCH_GIB = 0.25
NON_TORCH_TP_GIB = 0.5  # more with tensor parallelism (NCCL and custom all-reduce buffers)
# The share of memory for weights, workspace and KV cache: vLLM's gpu_memory_utilization default.
MEM_UTIL = 0.9
# What an engine's memory share is of and holds (plan_memory's `share`): the whole GPU for weights,
# workspace and pool (vLLM), the memory the weights and workspace leave for the pool (TensorRT-LLM),
# the whole GPU for weights and pool, the workspace outside it (SGLang)
SHARES = ("gpu", "free", "static")


@dataclass(frozen=True)
class MemoryPlan:
    gpu: str
    model: str
    tp: int
    block_size: int
    mem_util: float
    dtype: str  # weights
    kv_dtype: str
    usable_bytes: float  # per GPU
    budget_bytes: float  # usable x utilisation
    weights_bytes: float  # per GPU
    workspace_bytes: float  # activations, logits, non-torch buffers
    kv_pool_bytes: float
    kv_bytes_per_token: float  # per GPU
    kv_blocks: int  # per replica (every GPU of the replica holds its share of each block)
    kv_tokens: int
    pp: int = 1  # pipeline stages; the figures per GPU are the fullest stage's
    ep: int = 1  # expert parallelism (physics/expert.py)
    dp_attention: bool = False  # kv_bytes_per_token is then the mean GPU's: each holds its own sequences
    window_bytes: float = 0.0  # of the pool: the window layers' KV of max_seqs sequences (sliding windows)
    state_bytes: float = 0.0  # of the pool: the linear-attention layers' recurrent state of max_seqs sequences
    share: str = "gpu"  # what mem_util is a share of and holds (SHARES)

    @property
    def unused_bytes(self) -> float:
        """Memory left outside the utilisation budget, plus the pool's rounding to whole blocks."""
        used = (self.weights_bytes + self.workspace_bytes + self.window_bytes + self.state_bytes
                + self.kv_blocks * self.block_size * self.kv_bytes_per_token)
        return self.usable_bytes - used

    def share_words(self) -> str:
        """What the memory share is, with its figure."""
        if self.share == "free":
            return f"KV cache {self.mem_util:.0%} of what the weights and workspace leave"
        if self.share == "static":
            return (f"weights and KV cache {self.mem_util:.1%}: {self.budget_bytes / 1e9:.2f} GB, the workspace in "
                    f"the rest")
        return f"budget {self.mem_util:.0%}: {self.budget_bytes / 1e9:.2f} GB"

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(weights_gb_per_gpu=self.weights_bytes / 1e9, kv_gb_per_gpu=self.kv_pool_bytes / 1e9,
                 workspace_gb_per_gpu=self.workspace_bytes / 1e9, usable_gb_per_gpu=self.usable_bytes / 1e9,
                 unused_gb_per_gpu=self.unused_bytes / 1e9)
        return d


def weight_bytes_per_gpu(model: Model, tp: int, dtype: str = "bf16", pp: int = 1, ep: int = 1,
                         dp_attention: bool = False, redundant_experts: int = 0) -> float:
    """Weights one GPU holds: layers sharded by tp (K/V projections replicated when tp > KV
    heads), embedding and LM head split over the vocabulary; with pp stages, the fullest stage's
    layers and one of the embedding and the LM head. Under expert parallelism a GPU holds
    experts / ep whole experts ((experts + redundant) / ep with EPLB's redundant copies); under
    data-parallel attention the attention, dense and shared-expert
    weights, the embedding and the LM head whole (expert.py). The linear layers are in `dtype`;
    embedding, LM head, norms and MoE routers stay 16-bit (data/quantisation.json)."""
    h = model.hidden
    fmt = weight_format(dtype)
    atp = expert.attention_tp(tp, dp_attention)
    attn = _attn_params_per_gpu(model, atp)
    linear_dense = attn + model.mlp_params(model.ffn) / atp
    params = (model.layers - model.moe_layers) * (linear_dense + 2 * h)
    linear = (model.layers - model.moe_layers) * linear_dense
    if model.is_moe:
        # a slice of each, or experts / ep whole (EPLB's redundant copies besides)
        routed = expert.slots(model, redundant_experts) * model.mlp_params(model.moe_ffn) / tp
        experts = routed + model.shared_experts * model.mlp_params(model.moe_ffn) / atp
        router = h * model.experts
        params += model.moe_layers * (attn + experts + router + 2 * h)
        linear = model.moe_layers * routed if fmt.experts_only else linear + model.moe_layers * (attn + experts)
    if pp > 1:
        share = stage_layers(model, pp) / model.layers
        params = params * share + model.vocab * h / atp + h
        linear = linear * share
    else:
        params += model.embedding_copies * model.vocab * h / atp + h
    # written so that 16-bit weights give exactly params x 2
    return params * EMBED_BYTES - linear * (EMBED_BYTES - fmt.bytes_per_weight)


def workspace_bytes(model: Model, tp: int, max_batched_tokens: int, max_seqs: int, atp: int | None = None) -> float:
    """Peak activations of a step of max_batched_tokens tokens, fp32 logits of max_seqs rows,
    and buffers outside PyTorch's allocator; atp, the GPUs an attention rank spans (tp unless
    attention is data-parallel)."""
    h = model.hidden
    atp = tp if atp is None else atp
    ffn = (model.moe_ffn * (model.experts_per_token + model.shared_experts) if model.is_moe else model.ffn) / tp
    qkv = (model.heads / atp + 2 * max(1.0, model.kv_heads / atp)) * model.head_dim
    activations = max_batched_tokens * 2 * (4 * h + 2 * ffn + qkv)
    logits = max_seqs * model.vocab * 4
    non_torch = (NON_TORCH_TP_GIB if tp > 1 else NON_TORCH_GIB) * GIB
    return activations + logits + non_torch


def usable_bytes(gpu: GPU) -> float:
    return (gpu.memory_gib - DRIVER_RESERVED_GIB) * GIB


def plan_memory(gpu: GPU, model: Model, tp: int = 1, block_size: int = 16, mem_util: float = MEM_UTIL,
                max_batched_tokens: int = 8192, max_seqs: int = 256, dtype: str = "bf16", pp: int = 1,
                kv_dtype: str = "bf16", spec: Speculation | None = None, ep: int = 1,
                dp_attention: bool = False, redundant_experts: int = 0, window_share: float | None = None,
                share: str = "gpu") -> MemoryPlan:
    """Split one GPU's memory (of the fullest pipeline stage); raises ValueError (naming the
    smallest tp that fits) when the weights and workspace leave no room for the KV cache. An fp8
    KV cache holds a token in half the bytes of a bf16 one, so the same pool holds twice the blocks.
    A speculative proposer (a draft model, an EAGLE head, an MTP module) adds its weights, and its
    KV cache shares the pool: each token's block holds the proposer's layers too. Under
    data-parallel attention (ep = tp GPUs) max_batched_tokens and max_seqs are one rank's, each
    GPU's pool holds its own sequences, and the replica's blocks are all its GPUs' together.
    With sliding-window attention (vLLM's hybrid KV cache manager) a window layer keeps the blocks
    of its last window only: the pool's blocks hold the full-attention layers, and the window
    layers' blocks of max_seqs sequences are set aside (when memory binds, the batch is full); an
    engine that sizes the window layers' tokens with the pool at a share of the full layers' tokens
    (window_share: 1 where its pool holds every layer's whole context, TensorRT-LLM's; SGLang's
    swa_full_tokens_ratio) gives each token of the pool that share of a window layer's bytes and sets
    nothing aside a sequence. mem_util is the
    `share` (SHARES) of the whole GPU that weights, workspace and pool take (vLLM's
    gpu_memory_utilization), of the memory the weights and workspace leave free that the pool takes
    (TensorRT-LLM's free_gpu_memory_fraction), or of the whole GPU that the weights and pool take,
    the workspace kept outside it (SGLang's mem_fraction_static)."""
    expert.check(model, tp, ep, dp_attention, redundant_experts)
    atp = expert.attention_tp(tp, dp_attention)
    check_tp(model, atp)
    check_pp(model, pp)
    check_formats(gpu, dtype, kv_dtype)
    weight_format(dtype).check(model)
    if not 0.05 <= mem_util <= 1.0:
        raise ValueError(f"memory utilisation {mem_util} is outside 0.05..1.0 (vLLM's default is 0.9)")
    if block_size < 1 or block_size > 1024:
        raise ValueError(f"block size {block_size} tokens is outside 1..1024 (vLLM's default is 16)")
    usable = usable_bytes(gpu)
    weights = weight_bytes_per_gpu(model, tp, dtype, pp, ep, dp_attention, redundant_experts)
    work = workspace_bytes(model, tp, max_batched_tokens, max_seqs, atp)
    kv_tok = kv_bytes_per_token_per_gpu(model, tp, kv_format(kv_dtype).bytes_per_value, dp_attention)
    window_tok = kv_tok * model.window_layers / model.attention_layers  # 0 without windows
    if window_share is None:  # each sequence's window set aside, below
        kv_tok -= window_tok
    else:  # the window layers' tokens in the pool, at a share of the full layers'
        kv_tok, window_tok = kv_tok - (1.0 - window_share) * window_tok, 0.0
    # a linear-attention layer holds a fixed state a sequence, no KV (vLLM's hybrid manager sizes its state pages
    # apart): the states of max_seqs sequences are set aside, as the window layers' blocks are
    state = max_seqs * model.linear_state_bytes(atp)
    if pp > 1:
        kv_tok = kv_tok * stage_layers(model, pp) / model.layers
        window_tok = window_tok * stage_layers(model, pp) / model.layers
        state = state * stage_layers(model, pp) / model.layers
    if spec is not None:
        prop = proposer(spec, model, atp, weight_format(dtype).dense_bytes_per_weight, kv_format(kv_dtype).bytes_per_value)
        weights += prop.memory_bytes
        kv_tok += prop.kv_bytes_per_token * atp / tp  # under DP attention, a GPU's own sequences'
    budget, pool = split_share(usable, weights, work, mem_util, share)
    # a sequence's window layers hold up to a block beyond the window (vLLM frees whole blocks)
    window = max_seqs * (model.window + block_size) * window_tok if window_tok else 0.0
    blocks = int((pool - window - state) // (block_size * kv_tok)) if pool - window - state > 0 else 0
    if blocks < 1 and pool >= block_size * kv_tok:
        # the weights leave a pool, but what every sequence sets aside of it (its window layers' last window,
        # its linear layers' state) at the batch limit takes all of it: a smaller batch limit fits
        held = " and ".join(what for what, size in (("the window layers' KV", window), ("the linear layers' state", state))
                            if size)
        half = int(pool / 2 // ((window + state) / max_seqs))
        raise ValueError(
            f"{model.label()} on {gpu.name} at tp={tp}: {held} of {max_seqs} sequences takes "
            f"{(window + state) / 1e9:.1f} GB of its {pool / 1e9:.1f} GB KV pool, leaving no block for the cache; "
            + (f"lower the batch limit (--max-seqs; at {half} it takes half the pool), or use more GPUs" if half >= 1
               else "use more GPUs") + ".")
    if blocks < 1:
        # what the budget holds besides the cache (SGLang's share holds no workspace)
        held = f"weights take {weights / 1e9:.1f} GB" + (
            f" and the workspace {work / 1e9:.1f} GB" if share != "static" else "")
        if ep > 1:
            raise ValueError(
                f"{model.label()} does not fit on {gpu.name} at tp={tp} with ep={ep}"
                f"{' and data-parallel attention' if dp_attention else ''}: {held} of the {budget / 1e9:.1f} GB budget "
                f"per GPU, leaving nothing for the KV cache; it needs more GPUs (a larger ep and tp)"
                + _smaller_weights(gpu, dtype) + ".")
        need = smallest_fitting_tp(gpu, model, block_size, max_batched_tokens, max_seqs, dtype, kv_dtype,
                                   rules=lambda _tp, _dp: dict(mem_util=mem_util, share=share))
        where = (f"at least {need} GPUs with tensor parallelism (tp={need})" if need
                 else "more memory than tensor parallelism over 64 GPUs gives")
        if pp > 1 or (need and need > gpu.gpus_per_node):
            where += " or more pipeline stages (pp)"
        stage = f" x pp={pp}" if pp > 1 else ""
        raise ValueError(
            f"{model.label()} does not fit on {gpu.name} at tp={tp}{stage}: {held} of the {budget / 1e9:.1f} GB "
            f"budget per GPU ({mem_util:.0%} of {usable / 1e9:.1f} GB), leaving nothing for the KV cache; it needs "
            f"{where}" + _smaller_weights(gpu, dtype) + ".")
    return MemoryPlan(gpu=gpu.id, model=model.id, tp=tp, block_size=block_size, mem_util=mem_util, dtype=dtype,
                      kv_dtype=kv_dtype, ep=ep, dp_attention=dp_attention,
                      usable_bytes=usable, budget_bytes=budget, weights_bytes=weights, workspace_bytes=work,
                      kv_pool_bytes=pool, kv_bytes_per_token=kv_tok, kv_blocks=blocks, kv_tokens=blocks * block_size,
                      pp=pp, window_bytes=window, state_bytes=state, share=share)


def split_share(usable: float, weights: float, work: float, mem_util: float, share: str) -> tuple[float, float]:
    """(the budget, the KV pool) of a GPU's usable bytes under an engine's memory share (SHARES)."""
    if share not in SHARES:
        raise ValueError(f"memory share {share!r} is not one of {', '.join(SHARES)}")
    if share == "free":  # the share is of what the weights and workspace leave: the budget is what that takes
        pool = (usable - weights - work) * mem_util
        return min(usable, weights + work + max(pool, 0.0)), pool
    budget = usable * mem_util
    if share == "static":  # the workspace lives in the memory the share leaves
        return budget, budget - weights
    return budget, budget - weights - work


def _smaller_weights(gpu: GPU, dtype: str) -> str:
    """The smaller weight formats this GPU runs, as the end of a sentence."""
    lb = weight_format(dtype).bytes_per_weight
    smaller = [d for d in ("fp8", "fp4", "int4") if weight_format(d).bytes_per_weight < lb and gpu.runs(weight_format(d))]
    return f", or {' or '.join(smaller)} weights" if smaller else ""


def smallest_fitting_tp(gpu: GPU, model: Model, block_size: int = 16,
                        max_batched_tokens: int = 8192, max_seqs: int = 256, dtype: str = "bf16",
                        kv_dtype: str = "bf16", experts: str = "tp", eplb: bool = False,
                        rules: Callable[[int, bool], dict] | None = None, min_tokens: int = 0) -> int | None:
    """The smallest tensor-parallel degree (one that splits the attention as vLLM does, up to 64) whose
    per-GPU weights and workspace leave room for at least one KV block, or `min_tokens` of one
    sequence. A mixture's experts split as `experts` says: sliced by tp ("tp"), or whole over the
    replica's GPUs ("ep"), with attention data-parallel ("ep_dp", "ep_dp_overlap"), whose every GPU
    then holds all of attention's weights; with `eplb` each GPU of an expert-parallel replica holds one
    redundant expert besides (the Lab's and the planner's EPLB). `rules(tp, dp_attention)` gives an
    engine's share of memory as plan_memory takes it (mem_util and share); vLLM's by default."""
    usable = usable_bytes(gpu)
    for tp in model.tp_choices():
        ep, dp = expert.replica_split(tp, experts != "tp" and model.is_moe, experts.startswith("ep_dp"))
        redundant = expert.eplb_copies(ep) if eplb and ep > 1 else 0
        r = rules(tp, dp) if rules else dict(mem_util=MEM_UTIL, share="gpu")
        _, pool = split_share(usable, weight_bytes_per_gpu(model, tp, dtype, ep=ep, dp_attention=dp,
                                                          redundant_experts=redundant),
                              workspace_bytes(model, tp, max_batched_tokens, max_seqs), r["mem_util"], r["share"])
        # a sequence's KV lives on one attention rank: under DP attention, one of tp
        need = max(block_size, min_tokens) * (tp if dp else 1)
        if pool >= need * kv_bytes_per_token_per_gpu(model, tp, kv_format(kv_dtype).bytes_per_value, dp):
            return tp
    return None
