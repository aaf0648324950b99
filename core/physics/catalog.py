"""GPU and model catalogs, loaded from data/*.json (each value keeps its source there).

A model's parameter count, weight bytes and KV bytes per token are computed here from its
shape, so that the numbers the Lab shows follow from the architecture, not from a table.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import tempfile
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from .. import DATA


GIB = 1024**3
EMBED_BYTES = 2  # embedding table, LM head and norms stay 16-bit in every weight format (quantisation.json)
PARAMETRIC_PREFIX = "dense-"  # id of a parametric model: "dense-70b", "dense-1.5t"
PARAMETRIC_MIN, PARAMETRIC_MAX = 1e9, 1e12


@dataclass(frozen=True)
class WeightFormat:
    """How the weights of the decoder's linear layers are stored and multiplied (data/quantisation.json)."""
    id: str
    label: str
    bytes_per_weight: float  # memory and HBM traffic of one weight, group scales and zero points included
    gemm: str  # tensor-core rate of the layer's GEMMs: "bf16", "fp8" or "fp4"
    gemm_rate: float  # share of that rate reached when compute bound (a dequantising kernel's cost)
    needs_fp8: bool
    source: str = field(default="", compare=False, hash=False)
    needs_fp4: bool = False  # FP4 tensor cores (Blackwell, CDNA 4)
    # how a GPU without FP4 tensor cores runs these weights (None: it cannot): weight-only, dequantised
    without_fp4: "WeightFormat | None" = field(default=None, compare=False, hash=False)
    experts_only: bool = False  # only a mixture's routed experts take the format; every other layer stays 16-bit
    marlin_moe: bool = False  # its experts run Marlin's MoE kernel, whose rows a block follow the step's routings
    block_quant_kernels: int = 0  # with 128 x 128 block scales, activation-quantising kernels a layer adds
    # how a GPU without FP8 tensor cores runs these weights (None: it cannot), and the vendors whose engines
    # have that kernel (empty: any)
    without_fp8: "WeightFormat | None" = field(default=None, compare=False, hash=False)
    vendors: tuple[str, ...] = ()

    def check(self, model: "Model") -> None:
        """Refuse a format that quantises nothing of this model (experts_only on a dense model)."""
        if self.experts_only and not model.is_moe:
            raise ValueError(f"{self.id} weights quantise a mixture of experts' routed experts only (vLLM's MXFP4 "
                             f"leaves every other layer 16-bit), and {model.label()} is dense: choose fp4 or int4 "
                             f"for 4-bit weights")

    @property
    def dense_bytes_per_weight(self) -> float:
        """Bytes of a weight outside a mixture's routed experts: the format's, or 16-bit for an experts-only one."""
        return EMBED_BYTES if self.experts_only else self.bytes_per_weight

    @property
    def bytes_read(self) -> str:
        """What a step reads of weights in this format against 16-bit ones, in words."""
        share = self.bytes_per_weight / EMBED_BYTES
        if share >= 1:
            return "16-bit weights"
        amount = "half the" if share == 0.5 else f"{share:.0%} of the"
        return f"{'its experts in ' if self.experts_only else ''}{amount} bytes of 16-bit ones"

    def on(self, gpu: "GPU") -> "WeightFormat":
        """The format as this GPU runs it: natively, or weight-only where it lacks the FP4 or FP8 tensor cores
        the format multiplies on and its engine has a weight-only kernel for it."""
        if self.without_fp4 and self.needs_fp4 and not gpu.supports_fp4:
            return self.without_fp4
        alt = self.without_fp8
        if alt and self.needs_fp8 and not gpu.supports_fp8 and (not alt.vendors or gpu.vendor in alt.vendors):
            return alt
        return self


@dataclass(frozen=True)
class KVFormat:
    id: str
    label: str
    bytes_per_value: int
    needs_fp8: bool
    source: str = field(default="", compare=False, hash=False)
    needs_fp4: bool = False


@lru_cache(maxsize=1)
def _formats() -> tuple[dict[str, WeightFormat], dict[str, KVFormat]]:
    raw = json.loads((DATA / "quantisation.json").read_text())
    def weight(w, alt=None, alt8=None):
        return WeightFormat(w["id"], w["label"], float(w["bytes_per_weight"]), w["gemm"], float(w["gemm_rate"]),
                            bool(w["needs_fp8"]), w["source"], bool(w["needs_fp4"]), alt,
                            bool(w.get("experts_only", False)), bool(w.get("marlin_moe", False)),
                            int(w.get("block_scales", {}).get("quant_kernels_per_layer", 0)), alt8,
                            tuple(w.get("vendors", ())))

    def weight_only(w, key):  # the weight-only form: nothing it needs, no activation-quantising kernels
        alt = w.get(key)
        return weight({**w, "block_scales": {}, **alt, "needs_fp8": False, "needs_fp4": False}) if alt else None
    weights = {w["id"]: weight(w, weight_only(w, "without_fp4"), weight_only(w, "without_fp8")) for w in raw["weights"]}
    kv = {k["id"]: KVFormat(k["id"], k["label"], int(k["bytes_per_value"]), bool(k["needs_fp8"]), k["source"],
                            bool(k["needs_fp4"])) for k in raw["kv"]}
    return weights, kv


WEIGHT_DTYPES = tuple(_formats()[0])  # bf16, fp16, fp8, fp4, mxfp4, int4
KV_DTYPES = tuple(_formats()[1])  # bf16, fp8
# bytes of one linear-layer weight in each format (int4's group scales and zero points included)
DTYPE_BYTES = {w.id: int(w.bytes_per_weight) if w.bytes_per_weight.is_integer() else w.bytes_per_weight
               for w in _formats()[0].values()}


def weight_format(dtype: str) -> WeightFormat:
    fmt = _formats()[0].get(str(dtype).lower())
    if fmt is None:
        raise ValueError(f"unknown weight dtype '{dtype}': choose one of {', '.join(WEIGHT_DTYPES)}")
    return fmt


def kv_format(kv_dtype: str) -> KVFormat:
    fmt = _formats()[1].get(str(kv_dtype).lower())
    if fmt is None:
        raise ValueError(f"unknown KV cache dtype '{kv_dtype}': choose one of {', '.join(KV_DTYPES)}")
    return fmt


def check_formats(gpu: "GPU", dtype: str = "bf16", kv_dtype: str = "bf16") -> None:
    """Refuse a weight or KV cache format the GPU has no tensor cores for (data/gpus.json says which)."""
    w, kv = weight_format(dtype).on(gpu), kv_format(kv_dtype)
    if w.needs_fp4 and not gpu.supports_fp4:
        fp8 = "fp8, " if gpu.runs(weight_format("fp8")) else ""
        raise ValueError(f"{gpu.name} has no FP4 tensor cores, so it cannot run {w.id} weights: choose {fp8}int4 "
                         f"or bf16 weights, or a GPU with FP4 tensor cores ({fp4_gpus()})")
    wanted = [(what, fix) for what, fix, fmt in (("fp8 weights", "bf16 or int4 weights", w),
                                                 ("an fp8 KV cache", "a bf16 KV cache", kv)) if fmt.needs_fp8]
    if wanted and not gpu.supports_fp8:
        raise ValueError(f"{gpu.name} has no FP8 support (FP8 needs compute capability 8.9 or later: Ada, Hopper, "
                         f"Blackwell, or AMD MI300), so it cannot run {' or '.join(w for w, _ in wanted)}: choose "
                         f"{' and '.join(f for _, f in wanted)}, or a GPU with FP8")


@dataclass(frozen=True)
class GPU:
    id: str
    name: str
    vendor: str
    memory_gib: float
    hbm_tbps: float  # datasheet HBM bandwidth, TB/s
    bf16_tflops: float  # dense (no 2:4 sparsity)
    fp8_tflops: float | None
    sms: int  # streaming multiprocessors (compute units on AMD)
    link_topology: str  # "switch" (NVSwitch), "mesh" (Infinity Fabric), "pcie"
    link_gbps_per_dir: float  # GB/s per GPU per direction inside a node
    gpus_per_node: int  # GPUs one scale-up link joins: 8 in an HGX node, 72 in an NVL72 rack
    internode_gbps_per_dir: float  # GB/s per GPU per direction between nodes
    price_usd_per_gpu_hour: float
    price_provider: str
    price_date: str
    nvlink_pair_gbps_per_dir: float | None = None
    source: dict = field(default_factory=dict, compare=False, hash=False)
    # cost-model constants of a calibrated hardware profile, replacing the fitted ones:
    # (("eta_bw", 0.81), ...); empty for a catalog GPU
    efficiency: tuple[tuple[str, float], ...] = ()
    arch: str = ""  # the GPU family (Ampere, Hopper, ...): how the Lab finds the nearest validated run
    fp4_tflops: float | None = None  # dense FP4 tensor TFLOP/s; None: no FP4 tensor cores
    # GPUs one operating system runs, where fewer than a node's: an NVL72 rack's compute tray holds 4 of its 72
    gpus_per_host: int | None = None
    # the host CPU's time for the engine's Python work against the x86 servers every host constant was fitted
    # on: a Grace CPU's (Arm Neoverse V2) per call of a PyTorch module is 2.75 times a Xeon's
    host_time_factor: float = 1.0

    @property
    def host_gpus(self) -> int:
        """GPUs a launch command starts one server process on: a host's (its operating system's)."""
        return self.gpus_per_host or self.gpus_per_node

    def hosts(self, gpus: int) -> int:
        """Hosts that `gpus` of these GPUs take, each launched on its own."""
        return -(-gpus // self.host_gpus)

    @property
    def supports_fp8(self) -> bool:
        """FP8 tensor cores (compute capability >= 8.9, or MI300): the catalog's fp8_tflops, sourced per GPU."""
        return bool(self.fp8_tflops)

    @property
    def supports_fp4(self) -> bool:
        """FP4 tensor cores (Blackwell, CDNA 4): the catalog's fp4_tflops, sourced per GPU."""
        return bool(self.fp4_tflops)

    def runs(self, fmt: "WeightFormat | KVFormat") -> bool:
        """Whether this GPU has the tensor cores a weight or KV cache format needs."""
        if isinstance(fmt, WeightFormat):
            fmt = fmt.on(self)
        return (self.supports_fp8 or not fmt.needs_fp8) and (self.supports_fp4 or not fmt.needs_fp4)

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor-core FLOP/s of the GEMMs of weights in `dtype`: fp8 (and mxfp4, against 8-bit
        activations) on FP8 tensor cores, fp4 on FP4 ones, every other format (int4, and mxfp4 on a GPU
        without FP4 tensor cores, are dequantised to 16-bit) at the bf16 rate."""
        gemm = weight_format(dtype).on(self).gemm
        if gemm == "fp4" and self.fp4_tflops:
            return self.fp4_tflops * 1e12
        if gemm == "fp8" and self.fp8_tflops:
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12

    def tp_link_gbps(self, tp: int) -> float:
        """Per-direction bandwidth (GB/s) one GPU has for tensor-parallel traffic in a group of tp."""
        if tp <= 1:
            return math.inf
        if tp > self.gpus_per_node:
            return self.internode_gbps_per_dir
        if self.link_topology == "mesh":  # one direct link to each peer
            return self.link_gbps_per_dir * (tp - 1)
        if self.nvlink_pair_gbps_per_dir and tp == 2:
            return self.nvlink_pair_gbps_per_dir
        return self.link_gbps_per_dir


@dataclass(frozen=True)
class Model:
    id: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int  # FFN width of a dense layer
    vocab: int
    max_context: int
    qkv_bias: bool = False
    experts: int = 0  # routed experts per MoE layer (0: dense model)
    experts_per_token: int = 0
    shared_experts: int = 0
    moe_ffn: int = 0  # FFN width of one expert
    dense_layers: int = 0  # leading dense layers of an MoE model
    router_bias: bool = False
    mla_kv_lora_rank: int = 0  # multi-head latent attention (DeepSeek): latent width
    mla_rope_dim: int = 0
    mla_q_lora_rank: int = 0
    mla_qk_nope_dim: int = 0
    mla_v_dim: int = 0
    tied_embeddings: bool = False  # the LM head is the embedding table (tie_word_embeddings)
    mtp_layers: int = 0  # multi-token prediction modules shipped with it (num_nextn_predict_layers)
    fp8_block_scales: bool = False  # its fp8 checkpoint scales each 128 x 128 block (quantization_config weight_block_size)
    window: int = 0  # sliding-window attention: tokens a window layer's queries attend to (0: none)
    window_layers: int = 0  # layers that attend within the window; the others attend to every token
    # its query and key norms each span all heads (MiniMax-M2's qk_norm_type 'per_layer'), so under tensor
    # parallelism every attention layer all-reduces each token's sums of squares before it can normalise
    qk_norm_allreduce: bool = False
    # sparse attention (DeepSeek-V3.2's DSA): a small indexer scores every cached token for each query and the
    # attention reads only the index_topk best; the indexer's keys are cached too (fp8 with a scale a token)
    index_topk: int = 0  # tokens a query attends (0: every token, dense attention)
    index_heads: int = 0
    index_head_dim: int = 0
    # linear attention (Qwen3-Next's and Qwen3.5's Gated DeltaNet): linear_layers of the layers mix tokens through a
    # recurrent state each sequence holds (linear_v_heads matrices of linear_k_dim x linear_v_dim, and a short
    # convolution's last linear_conv - 1 inputs) in place of attention: no KV cache, a fixed state however long the
    # context; the other layers attend as usual
    linear_layers: int = 0
    linear_k_heads: int = 0
    linear_v_heads: int = 0
    linear_k_dim: int = 0
    linear_v_dim: int = 0
    linear_conv: int = 0
    linear_state_value_bytes: int = 2  # the recurrent state's bytes a value (vLLM: the model's dtype unless asked fp32)
    # the attention output gated by a projection of the hidden state (Qwen3-Next's gated attention): the query
    # projection twice as wide
    attn_output_gate: bool = False
    parametric: bool = False  # an interpolated shape, not a released model
    source: str = field(default="", compare=False, hash=False)

    # ---- parameter counts (per layer, whole model, no tensor parallelism) ----
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.mla_kv_lora_rank > 0

    def splits_over(self, tp: int) -> bool:
        """Whether tensor parallelism of degree tp splits this model's attention as vLLM's does: the query
        heads evenly, and the KV heads evenly or, past their count, each on tp / kv_heads GPUs
        (vllm/model_executor/layers/linear.py QKVParallelLinear: divide() asserts both); a latent (MLA) is
        whole on every GPU. Linear attention's key and value heads split evenly too (its state shapes divide
        them by tp: mamba_utils.py gated_delta_net_state_shape)."""
        if tp < 1 or self.heads % tp:
            return False
        if self.linear_layers and (self.linear_k_heads % tp or self.linear_v_heads % tp):
            return False
        return self.is_mla or (self.kv_heads % tp == 0 if tp <= self.kv_heads else tp % self.kv_heads == 0)

    def tp_choices(self, most: int = 64) -> list[int]:
        """The tensor-parallel degrees up to `most` that split this model's attention (splits_over)."""
        return [tp for tp in range(1, most + 1) if self.splits_over(tp)]

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def attention_layers(self) -> int:
        """Layers that attend (and cache K and V): all but the linear-attention ones."""
        return self.layers - self.linear_layers

    def attn_params(self) -> float:
        """Token-mixing parameters of one layer (attention projections with their norms and biases), the mean
        over the layers where linear-attention layers stand among the attending ones."""
        if not self.linear_layers:
            return self.full_attn_params()
        return self.mixer_mean(self.full_attn_params(), self.linear_attn_params())

    def mixer_mean(self, attending: float, linear: float) -> float:
        """The mean a layer of a figure that is `attending` in an attending layer and `linear` in a
        linear-attention one."""
        return (self.attention_layers * attending + self.linear_layers * linear) / self.layers

    @property
    def linear_conv_dim(self) -> int:
        """Channels of a linear-attention layer's short convolution: its queries, keys and values."""
        return 2 * self.linear_k_heads * self.linear_k_dim + self.linear_v_heads * self.linear_v_dim

    def linear_attn_params(self) -> int:
        """A Gated DeltaNet layer's weights: the query, key, value and output-gate projection, the per-head decay
        and update-rate projections, the short convolution, the decay's A_log and dt_bias, the output norm
        and projection (transformers' Qwen3NextGatedDeltaNet)."""
        h, nv, dv = self.hidden, self.linear_v_heads, self.linear_v_dim
        qkvz = h * (self.linear_conv_dim + nv * dv)
        return qkvz + h * 2 * nv + self.linear_conv_dim * self.linear_conv + 2 * nv + dv + nv * dv * h

    def linear_state_bytes(self, tp: int = 1) -> float:
        """One sequence's recurrent state in all linear-attention layers on one of tp GPUs: the delta rule's
        matrices and the convolution's last inputs (16-bit), as vLLM allocates them (mamba_utils.py
        gated_delta_net_state_shape: (conv_dim / tp, conv_kernel - 1) and (v_heads / tp, v_dim, k_dim))."""
        if not self.linear_layers:
            return 0.0
        conv = self.linear_conv_dim / tp * (self.linear_conv - 1) * 2
        delta = self.linear_v_heads / tp * self.linear_k_dim * self.linear_v_dim * self.linear_state_value_bytes
        return self.linear_layers * (conv + delta)

    def full_attn_params(self) -> int:
        """An attending layer's projection parameters (with their norms and biases)."""
        h, H, d = self.hidden, self.heads, self.head_dim
        if self.is_mla:
            r, q, nope, v = self.mla_rope_dim, self.mla_q_lora_rank, self.mla_qk_nope_dim, self.mla_v_dim
            kv = self.mla_kv_lora_rank
            query = h * q + q + q * H * (nope + r) if q else h * H * (nope + r)  # low-rank (+ norm) or direct
            return (query
                    + h * (kv + r) + kv + kv * H * (nope + v)  # latent KV down/up projection + norm
                    + H * v * h  # output projection
                    + self.indexer_params())
        K = self.kv_heads
        bias = (H + 2 * K) * d if self.qkv_bias else 0
        gate = h * H * d if self.attn_output_gate else 0
        return h * (H + 2 * K) * d + bias + H * d * h + gate

    def indexer_params(self) -> int:
        """A sparse-attention indexer's weights a layer: its queries from the query latent, one key (with its
        norm) and a weight a head from the hidden state (DeepSeek-V3.2's wq_b, wk, k_norm, weights_proj)."""
        if not self.index_topk:
            return 0
        d = self.index_head_dim
        return (self.mla_q_lora_rank or self.hidden) * self.index_heads * d + self.hidden * d + 2 * d \
            + self.hidden * self.index_heads

    def mlp_params(self, ffn: int) -> int:
        return 3 * self.hidden * ffn  # SwiGLU: gate, up, down

    def layer_params(self, moe: bool, active: bool) -> int:
        norms = 2 * self.hidden
        if not moe:
            return self.attn_params() + self.mlp_params(self.ffn) + norms
        n = self.experts_per_token if active else self.experts
        experts = (n + self.shared_experts) * self.mlp_params(self.moe_ffn)
        router = self.hidden * self.experts + (self.experts if self.router_bias else 0)
        return self.attn_params() + experts + router + norms

    def embedding_params(self) -> int:
        return self.vocab * self.hidden  # one of embedding / LM head

    @property
    def embedding_copies(self) -> int:
        """Vocabulary-sized matrices held: the embedding and the LM head, one when they are tied."""
        return 1 if self.tied_embeddings else 2

    def params(self, active: bool = False) -> int:
        """Total (or, for MoE, active-per-token) parameter count."""
        dense_layers = self.layers - self.moe_layers
        return round(dense_layers * self.layer_params(False, active)
                     + self.moe_layers * self.layer_params(True, active)
                     + self.embedding_copies * self.embedding_params() + self.hidden)

    def unquantised_params(self) -> int:
        """Parameters every weight format keeps at 16 bits: embedding, LM head, norms, MoE routers."""
        routers = self.moe_layers * (self.hidden * self.experts + (self.experts if self.router_bias else 0))
        return self.embedding_copies * self.embedding_params() + self.hidden * (2 * self.layers + 1) + routers

    def routed_expert_params(self) -> int:
        return self.moe_layers * self.experts * self.mlp_params(self.moe_ffn)

    def weight_bytes(self, dtype: str = "bf16") -> float:
        """The whole model's weights: its linear layers (or, for an experts-only format, its routed
        experts) in `dtype`, the rest at 16 bits."""
        fmt = weight_format(dtype)
        quantised = self.routed_expert_params() if fmt.experts_only else self.params() - self.unquantised_params()
        return self.params() * EMBED_BYTES - quantised * (EMBED_BYTES - fmt.bytes_per_weight)

    # ---- KV cache ----
    def kv_dims_per_layer(self) -> int:
        """Cached values per token per layer: K and V heads, or MLA's latent plus its RoPE key."""
        if self.is_mla:
            return self.mla_kv_lora_rank + self.mla_rope_dim
        return 2 * self.kv_heads * self.head_dim

    def index_key_bytes_per_layer(self) -> int:
        """A sparse-attention indexer's cached key a token a layer: fp8 values and a 4-byte scale, whatever the
        KV cache's format (0 with dense attention)."""
        return self.index_head_dim + 4 if self.index_topk else 0

    def kv_bytes_per_token(self, kv_dtype_bytes: int = 2) -> int:
        return self.attention_layers * (self.kv_dims_per_layer() * kv_dtype_bytes + self.index_key_bytes_per_layer())

    def label(self) -> str:
        if self.parametric:
            return f"{self.name} (interpolated Llama-3 shape)"
        return self.name


# ---------------------------------------------------------------- loading

@lru_cache(maxsize=1)
def _gpu_table() -> dict[str, GPU]:
    raw = json.loads((DATA / "gpus.json").read_text())["gpus"]
    table = {}
    for g in raw:
        gpu = GPU(id=g["id"], name=g["name"], vendor=g["vendor"], memory_gib=g["memory_gib"],
                  hbm_tbps=g["hbm_tbps"], bf16_tflops=g["bf16_tflops"], fp8_tflops=g.get("fp8_tflops"),
                  sms=g["sms"], link_topology=g["link_topology"], link_gbps_per_dir=g["link_gbps_per_dir"],
                  gpus_per_node=g["gpus_per_node"], internode_gbps_per_dir=g["internode_gbps_per_dir"],
                  price_usd_per_gpu_hour=g["price_usd_per_gpu_hour"], price_provider=g["price_provider"],
                  price_date=g["price_date"], nvlink_pair_gbps_per_dir=g.get("nvlink_pair_gbps_per_dir"),
                  source=g["source"], arch=g.get("arch", ""), fp4_tflops=g.get("fp4_tflops"),
                  gpus_per_host=g.get("gpus_per_host"), host_time_factor=g.get("host_time_factor", 1.0))
        table[g["id"]] = gpu
        for alias in g.get("aliases", []):
            table[alias] = gpu
    return table


def _linear_fields(lin: dict) -> dict:
    """A catalog entry's linear-attention block as Model fields (none for a model that only attends)."""
    if not lin:
        return {}
    return dict(linear_layers=lin["layers"], linear_k_heads=lin["key_heads"], linear_v_heads=lin["value_heads"],
                linear_k_dim=lin["key_head_dim"], linear_v_dim=lin["value_head_dim"], linear_conv=lin["conv_kernel"],
                linear_state_value_bytes=lin.get("state_value_bytes", 2))


@lru_cache(maxsize=1)
def _model_table() -> dict[str, Model]:
    raw = json.loads((DATA / "models.json").read_text())["models"]
    table = {}
    for m in raw:
        mla, dsa = m.get("mla", {}), m.get("dsa", {})
        model = Model(id=m["id"], name=m["name"], layers=m["layers"], hidden=m["hidden"], heads=m["heads"],
                      kv_heads=m["kv_heads"], head_dim=m["head_dim"], ffn=m["ffn"], vocab=m["vocab"],
                      max_context=m["max_context"], qkv_bias=m.get("qkv_bias", False),
                      experts=m.get("experts", 0), experts_per_token=m.get("experts_per_token", 0),
                      shared_experts=m.get("shared_experts", 0), moe_ffn=m.get("moe_ffn", 0),
                      dense_layers=m.get("dense_layers", 0), router_bias=m.get("router_bias", False),
                      mla_kv_lora_rank=mla.get("kv_lora_rank", 0), mla_rope_dim=mla.get("qk_rope_head_dim", 0),
                      mla_q_lora_rank=mla.get("q_lora_rank", 0), mla_qk_nope_dim=mla.get("qk_nope_head_dim", 0),
                      mla_v_dim=mla.get("v_head_dim", 0), tied_embeddings=m.get("tied_embeddings", False),
                      mtp_layers=m.get("mtp_layers", 0), fp8_block_scales=m.get("fp8_block_scales", False),
                      window=m.get("window", 0), window_layers=m.get("window_layers", 0),
                      qk_norm_allreduce=m.get("qk_norm_allreduce", False),
                      index_topk=dsa.get("index_topk", 0), index_heads=dsa.get("index_n_heads", 0),
                      index_head_dim=dsa.get("index_head_dim", 0), source=m["source"],
                      attn_output_gate=m.get("attn_output_gate", False), **_linear_fields(m.get("linear_attention", {})))
        table[m["id"]] = model
        for alias in m.get("aliases", []):
            table[alias] = model
    return table


def gpu_ids() -> list[str]:
    return list(dict.fromkeys(g.id for g in _gpu_table().values()))


def fp4_gpus() -> str:
    """The catalog's GPUs with FP4 tensor cores by family, in words: 'Blackwell: b200, b300; CDNA 4: mi355x'."""
    by_family: dict[str, list[str]] = {}
    for g in map(get_gpu, gpu_ids()):
        if g.supports_fp4:
            by_family.setdefault(g.arch, []).append(g.id)
    return "; ".join(f"{arch}: {', '.join(ids)}" for arch, ids in by_family.items())


def model_ids() -> list[str]:
    return list(dict.fromkeys(m.id for m in _model_table().values()))


def get_gpu(gpu_id: str) -> GPU:
    """A catalog GPU, a registered one (a datasheet or a calibrated profile: see register_gpu),
    or any of those at another price: '<id>@<usd per GPU-hour>', e.g. 'h100@1.85'; a catalog GPU also
    by the name nvidia-smi or a benchmark gives it ('NVIDIA H100 80GB HBM3': _named_gpu)."""
    key = str(gpu_id).strip().lower()
    gpu = _gpu_table().get(key) or _registered(key)
    if gpu is not None:
        return gpu
    base, sep, price = key.rpartition("@")
    if sep and base:
        return with_price(get_gpu(base), _price(price, gpu_id))
    named = _named_gpu(key)
    if named is not None:
        return _gpu_table()[named]
    raise ValueError(f"unknown GPU '{gpu_id}': choose one of {', '.join(gpu_ids())}, a GPU of your own "
                     f"(its datasheet as JSON) or a calibrated profile") from None


# A GPU as nvidia-smi, a benchmark's metadata or a cloud's instance page names it ('NVIDIA H100 80GB HBM3',
# 'A100-SXM4-80GB', 'h200-sxm', 'AMD Instinct MI300X'): the one catalog id whose words it holds (its chip, and
# the memory size or board that tells two of a chip apart). A board the id does not name is another GPU
# (H100 NVL, A100 PCIe), and a chip the catalog holds in two sizes needs its size (an A100 of 40 or 80 GB)
BOARD_WORDS = {"pcie", "nvl"}


def _named_gpu(key: str) -> str | None:
    words = set(re.split(r"[^a-z0-9]+", key))
    found = [g for g in gpu_ids() if set(g.split("-")) <= words and not (words & BOARD_WORDS) - set(g.split("-"))]
    return found[0] if len(found) == 1 else None


def _price(text: str, gpu_id: str) -> float:
    try:
        v = float(text.lstrip("$"))
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0 < v <= 1000):
        raise ValueError(f"'{gpu_id}': the price after '@' must be dollars per GPU-hour within 0..1000, "
                         f"e.g. h100@1.85")
    return v


def with_price(gpu: GPU, usd_per_gpu_hour: float) -> GPU:
    return replace(gpu, id=f"{gpu.id}@{usd_per_gpu_hour:g}", price_usd_per_gpu_hour=usd_per_gpu_hour,
                   price_provider="your price", price_date="your price")


# ---------------------------------------------------------------- GPUs of one's own

# Registered GPUs live in this process and, as JSON, in a folder of the system's temporary
# directory, so that the planner's worker processes (spawned, not forked) resolve the same ids.
# An id carries a digest of the GPU's figures: two different GPUs never share one.
REGISTRY = Path(tempfile.gettempdir()) / "llm-serving-lab-gpus"
_custom: dict[str, GPU] = {}
GPU_FIELDS = ("id", "name", "vendor", "memory_gib", "hbm_tbps", "bf16_tflops", "fp8_tflops", "sms", "link_topology",
              "link_gbps_per_dir", "gpus_per_node", "internode_gbps_per_dir", "price_usd_per_gpu_hour",
              "price_provider", "price_date", "nvlink_pair_gbps_per_dir", "source", "efficiency", "arch",
              "fp4_tflops", "gpus_per_host", "host_time_factor")


def gpu_to_dict(gpu: GPU) -> dict:
    d = {f: getattr(gpu, f) for f in GPU_FIELDS}
    d["efficiency"] = dict(gpu.efficiency)
    return d


def gpu_from_dict(d: dict) -> GPU:
    d = dict(d)
    d["efficiency"] = tuple(sorted((str(k), float(v)) for k, v in (d.get("efficiency") or {}).items()))
    return GPU(**{f: d[f] for f in GPU_FIELDS if f in d})


def register_gpu(gpu: GPU) -> GPU:
    """Make `gpu` resolvable by id everywhere (get_gpu); its id becomes '<id>-<digest>'.
    Validation of the figures is the caller's (physics.hardware)."""
    body = gpu_to_dict(replace(gpu, id=""))
    digest = hashlib.sha1(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:8]
    stem = gpu.id.lower().rsplit("-", 1)[0] if _registered(gpu.id.lower()) else gpu.id.lower()
    gpu = replace(gpu, id=f"{stem}-{digest}")
    _custom[gpu.id] = gpu
    try:
        REGISTRY.mkdir(exist_ok=True)
        (REGISTRY / f"{gpu.id}.json").write_text(json.dumps(gpu_to_dict(gpu), default=str))
    except OSError:
        pass  # a read-only system: the GPU still resolves in this process
    return gpu


def _registered(key: str) -> GPU | None:
    if key in _custom:
        return _custom[key]
    path = REGISTRY / f"{key}.json"
    if "/" in key or "\\" in key or not path.is_file():
        return None
    try:
        gpu = gpu_from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    _custom[key] = gpu
    return gpu


# An instruction-tuned or chat release keeps its base model's shape, so a Hugging Face repo's name
# resolves to the catalog model it fine-tunes: 'meta-llama/Meta-Llama-3.1-70B-Instruct' is llama-3.1-70b
RELEASE_WORDS = ("-instruct", "-chat", "-hf")


def _release_name(key: str) -> str:
    name = key.rsplit("/", 1)[-1].removeprefix("meta-")
    for word in RELEASE_WORDS:
        name = name.replace(word, "")
    return name


# A quantised checkpoint keeps its model's shape and names its weights' format after the model's name,
# with what else it holds after that ('nvidia/DeepSeek-R1-0528-FP4-v2', 'Qwen/Qwen3-235B-A22B-Instruct-2507-FP8',
# 'amd/Llama-3.1-405B-Instruct-FP8-KV', 'hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4'): the first
# such word, as vLLM reads the format from the checkpoint's own quantization config
CHECKPOINT_WORDS = {"nvfp4": "fp4", "fp4": "fp4", "mxfp4": "mxfp4", "fp8": "fp8", "awq": "int4", "gptq": "int4",
                    "int4": "int4", "w4a16": "int4"}


def _checkpoint_split(key: str) -> tuple[str, str | None]:
    """(the repo's name up to its format word, the format that word names), or (the name, None)."""
    words = key.rsplit("/", 1)[-1].replace("_", "-").split("-")
    for i, word in enumerate(words):
        if i and word in CHECKPOINT_WORDS:
            return "-".join(words[:i]), CHECKPOINT_WORDS[word]
    return "-".join(words), None


def checkpoint_format(model_id: str) -> str | None:
    """The weight format a Hugging Face repo's name says its checkpoint holds (fp8, fp4, mxfp4, int4),
    or None where it names none."""
    return _checkpoint_split(str(model_id).strip().lower())[1]


def get_model(model_id: str) -> Model:
    """A catalog model by id (or by the name of a Hugging Face repo of it or of its instruction-tuned
    release), a registered one (from a Hugging Face config.json: see register_model), or a parametric
    dense model from an id like 'dense-70b'."""
    key = str(model_id).strip().lower()
    if key in _model_table():
        return _model_table()[key]
    registered = _registered_model(key)
    if registered is not None:
        return registered
    if key.startswith(PARAMETRIC_PREFIX):
        return parametric_model(parse_param_count(key[len(PARAMETRIC_PREFIX):]))
    stem = _checkpoint_split(key)[0]
    for name in (key.rsplit("/", 1)[-1], _release_name(key), stem, _release_name(stem)):
        if name in _model_table():
            return _model_table()[name]
    raise ValueError(f"unknown model '{model_id}': choose one of {', '.join(model_ids())} (or a Hugging Face "
                     f"repo of one), or a parameter count such as 'dense-30b' (1b to 1t)")


# Models of one's own (physics/hfconfig.py parses their config.json) live in this process and, as
# JSON, next to the registered GPUs, so that the planner's worker processes resolve the same ids.
MODEL_PREFIX = "cfg-"
_custom_models: dict[str, Model] = {}
MODEL_FIELDS = tuple(f for f in Model.__dataclass_fields__)


def register_model(model: Model) -> Model:
    """Make `model` resolvable by id everywhere (get_model); its id becomes 'cfg-<stem>-<digest of
    its shape>', so two different shapes never share one."""
    body = {f: getattr(model, f) for f in MODEL_FIELDS if f not in ("id", "source")}
    digest = hashlib.sha1(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:8]
    stem = "".join(c if c.isalnum() or c in ".-" else "-" for c in model.name.lower())[:40].strip("-") or "model"
    model = replace(model, id=f"{MODEL_PREFIX}{stem}-{digest}")
    _custom_models[model.id] = model
    try:
        REGISTRY.mkdir(exist_ok=True)
        (REGISTRY / f"{model.id}.model.json").write_text(json.dumps({f: getattr(model, f) for f in MODEL_FIELDS}))
    except OSError:
        pass  # a read-only system: the model still resolves in this process
    return model


def _registered_model(key: str) -> Model | None:
    if key in _custom_models:
        return _custom_models[key]
    if not key.startswith(MODEL_PREFIX) or "/" in key or "\\" in key:
        return None
    path = REGISTRY / f"{key}.model.json"
    if not path.is_file():
        return None
    try:
        model = Model(**{f: v for f, v in json.loads(path.read_text()).items() if f in MODEL_FIELDS})
    except (OSError, ValueError, TypeError):
        return None
    _custom_models[key] = model
    return model


def parse_param_count(text: str) -> float:
    units = {"b": 1e9, "t": 1e12, "m": 1e6}
    text = text.strip().lower()
    try:
        if text and text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise ValueError(f"cannot read a parameter count from '{text}': write it like '70b' or '1.5t'") from None


# ---------------------------------------------------------------- parametric model

@lru_cache(maxsize=1)
def _anchors() -> list[dict]:
    return json.loads((DATA / "models.json").read_text())["parametric"]["points"]


def _interp_log(x: float, xs: list[float], ys: list[float]) -> float:
    """Piecewise-linear interpolation in log-log space, extrapolating the end segments."""
    lx = math.log(x)
    lxs = [math.log(v) for v in xs]
    i = 0
    while i < len(xs) - 2 and lx > lxs[i + 1]:
        i += 1
    t = (lx - lxs[i]) / (lxs[i + 1] - lxs[i])
    return math.exp(math.log(ys[i]) + t * (math.log(ys[i + 1]) - math.log(ys[i])))


def parametric_model(n_params: float) -> Model:
    """A dense GQA model of about n_params parameters, shaped like the Llama-3 family.

    Layers and the FFN/hidden ratio are interpolated between real Llama-3 shapes; the hidden
    size is then chosen so that the parameter count comes closest.
    """
    if not (PARAMETRIC_MIN <= n_params <= PARAMETRIC_MAX):
        raise ValueError(f"model size {n_params / 1e9:.3g}B is outside the slider's range: choose 1B to 1000B parameters")
    pts = _anchors()
    xs = [p["params"] for p in pts]
    layers = max(8, round(_interp_log(n_params, xs, [p["layers"] for p in pts])))
    ffn_ratio = _interp_log(n_params, xs, [p["ffn"] / p["hidden"] for p in pts])
    vocab, kv_heads = 128256, 8

    def shape(hidden: int, ffn: int) -> Model:
        head_dim = 64 if hidden < 3072 else 128
        return Model(id=f"{PARAMETRIC_PREFIX}{_short(n_params)}", name=f"Dense {_short(n_params).upper()}",
                     layers=layers, hidden=hidden, heads=hidden // head_dim, kv_heads=min(kv_heads, hidden // head_dim),
                     head_dim=head_dim, ffn=ffn, vocab=vocab, max_context=131072, parametric=True,
                     source="interpolated between the Llama-3 shapes in data/models.json 'parametric'")

    def fitted(hidden: int) -> Model:
        """The FFN width (whole multiples of 256) that brings this hidden size to n_params."""
        base = shape(hidden, 0).params()
        ffn = max(256, round((n_params - base) / (3 * hidden * layers) / 256) * 256)
        return shape(hidden, ffn)

    # hidden sizes in whole groups of 8 heads, so that 8 KV heads and tp up to 8 divide them;
    # among those, the one whose fitted FFN/hidden ratio is closest to the Llama-3 trend
    candidates = [fitted(h) for h in range(512, 65537, 512) if h < 3072 or h % 1024 == 0]
    candidates = [m for m in candidates if abs(m.params() - n_params) <= 0.02 * n_params] or candidates
    return min(candidates, key=lambda m: abs(math.log(m.ffn / m.hidden / ffn_ratio)))


def _short(n: float) -> str:
    if n >= 1e12:
        return f"{n / 1e12:g}t"
    return f"{n / 1e9:g}b"


def catalog_dict() -> dict:
    """Both catalogs as plain data, for `python -m core catalog --json` and the pages."""
    gpus = []
    for gid in gpu_ids():
        g = get_gpu(gid)
        gpus.append(dict(id=g.id, name=g.name, memory_gib=g.memory_gib, hbm_tbps=g.hbm_tbps,
                         bf16_tflops=g.bf16_tflops, fp8_tflops=g.fp8_tflops, fp4_tflops=g.fp4_tflops, sms=g.sms,
                         intra_node_gbps_per_dir=g.link_gbps_per_dir, link_topology=g.link_topology,
                         gpus_per_node=g.gpus_per_node, inter_node_gbps_per_dir=g.internode_gbps_per_dir,
                         price_usd_per_gpu_hour=g.price_usd_per_gpu_hour, price_provider=g.price_provider,
                         price_date=g.price_date, source=g.source))
    models = []
    for mid in model_ids():
        m = get_model(mid)
        models.append(dict(id=m.id, name=m.name, layers=m.layers, hidden=m.hidden, heads=m.heads,
                           kv_heads=m.kv_heads, head_dim=m.head_dim, ffn=m.ffn, vocab=m.vocab,
                           max_context=m.max_context, params_total=m.params(), params_active=m.params(active=True),
                           moe=m.is_moe, experts=m.experts, experts_per_token=m.experts_per_token,
                           attention="MLA" if m.is_mla else ("GQA" if m.kv_heads < m.heads else "MHA"),
                           kv_bytes_per_token_bf16=m.kv_bytes_per_token(2), weight_gb_bf16=m.weight_bytes("bf16") / 1e9,
                           source=m.source))
    return {"gpus": gpus, "models": models}
