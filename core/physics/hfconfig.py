"""A model from its Hugging Face config.json: the shape the simulator needs (layers, hidden size,
attention heads and KV heads, FFN widths, experts, multi-head latent attention), read as data.

    parsed = parse(Path("config.json").read_text())    # ValueError naming the field when it cannot
    model = catalog.register_model(parsed.model)       # now 'cfg-...' works wherever a model id does

The file is parsed with json only, never executed (no trust_remote_code), and refused above
MAX_BYTES. Families: Llama, Mistral, Qwen2/2.5, Qwen3, Mixtral, Qwen-MoE (Qwen1.5/2 and Qwen3),
DeepSeek-V2/V3 (MLA, shared and routed experts, leading dense layers) and Kimi K2 (DeepSeek-V3's
layers; K2.5 and K2.6 wrap it), Qwen3-Next and Qwen3.5 (Gated DeltaNet linear attention on most layers),
gpt-oss, Llama 4 (its text model: one routed and one shared expert a token), Gemma 1/2/3 and Phi-3 (and
Phi-3.5-MoE). Field names and defaults are those of each family's
configuration class in transformers (configuration_<family>.py); where a class has a default the
file may leave a field out, otherwise its absence is an error that names it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache

from .. import DATA
from ..text import against
from .catalog import Model

MAX_BYTES = 256 * 1024  # real config.json files are 0.5-5 KB; anything this large is not one

# model_type -> family. Each family says which fields it reads and how.
FAMILIES = {
    "llama": "dense", "mistral": "dense", "qwen2": "dense", "qwen3": "dense", "gemma": "dense", "gemma2": "dense",
    "gemma3_text": "dense", "phi3": "dense",
    "mixtral": "mixtral", "phimoe": "mixtral", "gpt_oss": "mixtral", "minimax_m2": "mixtral",
    "qwen2_moe": "qwen_moe", "qwen3_moe": "qwen_moe", "llama4_text": "llama4",
    "deepseek_v2": "deepseek", "deepseek_v3": "deepseek", "kimi_k2": "deepseek",  # Kimi K2: DeepSeek-V3's layers
    "deepseek_v32": "deepseek",  # DeepSeek-V3.2: V3's layers with sparse attention (index_topk)
    "glm4_moe": "glm_moe",  # GLM-4.5, 4.6, 4.7: DeepSeek-V3's MoE layers behind grouped-query attention
    # Qwen3-Next and Qwen3.5: Gated DeltaNet (linear attention) on three layers of four, gated attention on the rest
    "qwen3_next": "qwen_moe", "qwen3_5_moe_text": "qwen_moe", "qwen3_5_text": "dense",
}
LINEAR_ATTENTION = ("qwen3_next", "qwen3_5_moe_text", "qwen3_5_text")  # families with Gated DeltaNet layers
# transformers' defaults where its configuration class has one and a file may leave the field out
TIED_DEFAULT = {"gemma": True, "gemma2": True, "gemma3_text": True}  # every other family: False
QKV_BIAS = {"qwen2": True, "qwen2_moe": True, "phimoe": True}  # always biased; others read attention_bias


@dataclass(frozen=True)
class Parsed:
    model: Model
    model_type: str
    notes: tuple[str, ...]  # what the simulator leaves out of this model (a window on every layer, ...)
    suggested_dtype: str | None  # the weight format its quantization_config names, if any
    card: dict | None  # the model card's parameter count on file for this shape (data/model_cards.json)
    modelled: tuple[str, ...] = ()  # what of this model the simulator takes in beyond a plain shape (sliding windows)

    def params_line(self) -> str:
        """The parameter count computed from the shape, against the model card's figure."""
        m = self.model
        active = f", {m.params(active=True) / 1e9:.2f}B active" if m.is_moe else ""
        text = f"{m.params() / 1e9:.2f}B parameters computed from the config{active}"
        if self.card is None:
            return text + " (no model card figure on file for this shape: compare with its card)"
        diff = m.params() / self.card["params"] - 1
        return (text + f"; the model card of {self.card['name']} says {self.card['params'] / 1e9:g}B "
                f"(the count from the config is {against(diff)})")


def parse(text: str | bytes, name: str | None = None) -> Parsed:
    """A model from the text of a config.json; `name` (e.g. the file's name) when the file names none."""
    if isinstance(text, bytes):
        if len(text) > MAX_BYTES:
            raise ValueError(f"the config file is {len(text) / 1024:.0f} KB: a config.json is a few KB (at most "
                             f"{MAX_BYTES // 1024} KB here)")
        text = text.decode("utf-8", errors="replace")
    if len(text) > MAX_BYTES:
        raise ValueError(f"the config file is {len(text) / 1024:.0f} KB: a config.json is a few KB (at most "
                         f"{MAX_BYTES // 1024} KB here)")
    try:
        raw = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise ValueError(f"the config file is not JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    if not isinstance(raw, dict):
        raise ValueError("a config.json is a JSON object of fields (hidden_size, num_hidden_layers, ...)")
    return from_dict(raw, name)


def _no_constant(word: str):
    raise ValueError(f"the config file holds {word}, which is not a number a config.json may hold")


def from_dict(raw: dict, name: str | None = None) -> Parsed:
    cfg = raw
    model_type = raw.get("model_type")
    # multimodal wrappers: their language model (Kimi K2.5 and K2.6 wrap Kimi K2's)
    wrapped = {"gemma3": "gemma3_text", "llama4": "llama4_text", "kimi_k25": "kimi_k2",
               "qwen3_5_moe": "qwen3_5_moe_text", "qwen3_5": "qwen3_5_text"}
    if model_type in wrapped and isinstance(raw.get("text_config"), dict):
        model_type = wrapped[model_type]
        cfg = {**raw["text_config"], "model_type": model_type}
    if not isinstance(model_type, str) or not model_type:
        raise ValueError("the config has no 'model_type': it is not a Hugging Face config.json of a language model")
    family = FAMILIES.get(model_type)
    if family is None:
        raise ValueError(f"model_type '{model_type[:40]}' is not one this simulator reads: it reads "
                         f"{', '.join(sorted(FAMILIES))}")
    f = Fields(cfg, model_type)
    notes, modelled = [], []
    h = f.int("hidden_size")
    layers = f.int("num_hidden_layers", hi=1000)
    heads = f.int("num_attention_heads", hi=4096)
    kv_heads = f.int("num_key_value_heads", default=heads, hi=4096)
    if heads % kv_heads:
        raise ValueError(f"'num_attention_heads' ({heads}) is not a multiple of 'num_key_value_heads' ({kv_heads})")
    head_dim = f.int("head_dim", default=h // heads if h % heads == 0 else None, hi=4096)
    vocab = f.int("vocab_size", hi=10_000_000)
    context = f.int("max_position_embeddings", hi=100_000_000)
    tied = f.bool("tie_word_embeddings", TIED_DEFAULT.get(model_type, False))
    bias = QKV_BIAS.get(model_type) or f.bool("attention_bias", False)
    shape = dict(layers=layers, hidden=h, heads=heads, kv_heads=kv_heads, head_dim=head_dim, vocab=vocab,
                 max_context=context, qkv_bias=bias, tied_embeddings=tied)

    if family == "dense":
        shape["ffn"] = f.int("intermediate_size")
    elif family == "mixtral":
        experts = f.int("num_local_experts", hi=4096)
        shape.update(ffn=f.int("intermediate_size"), experts=experts, moe_ffn=f.int("intermediate_size"),
                     experts_per_token=f.int("num_experts_per_tok", hi=experts),
                     router_bias=f.bool("use_routing_bias", False))  # MiniMax-M2's e_score_correction_bias
    elif family == "qwen_moe":
        experts = f.int("num_experts", hi=4096)
        moe_ffn = f.int("moe_intermediate_size")
        if f.int("decoder_sparse_step", default=1) != 1:
            raise ValueError("'decoder_sparse_step' other than 1 (MoE every other layer) is not modelled: "
                             "the simulator's MoE layers follow the dense ones")
        dense = f.leading_layers("mlp_only_layers", layers)
        shared = model_type in ("qwen2_moe", "qwen3_next", "qwen3_5_moe_text")  # Qwen3's own MoE has none
        shared_ffn = f.int("shared_expert_intermediate_size", default=0, lo=0) if shared else 0
        if shared_ffn % moe_ffn:
            raise ValueError(f"'shared_expert_intermediate_size' ({shared_ffn}) is not a whole number of experts of "
                             f"'moe_intermediate_size' ({moe_ffn}), which the simulator needs")
        shape.update(ffn=f.int("intermediate_size") if dense else moe_ffn, experts=experts, moe_ffn=moe_ffn,
                     experts_per_token=f.int("num_experts_per_tok", hi=experts),
                     shared_experts=shared_ffn // moe_ffn, dense_layers=dense)
        if shared_ffn:
            notes.append("the shared expert's sigmoid gate (one weight vector a layer) is left out")
    elif family == "llama4":
        # transformers' Llama4TextMoe: routed experts and one shared expert, both intermediate_size wide;
        # every interleave_moe_layer_step-th layer is MoE, the others a dense MLP intermediate_size_mlp wide
        experts = f.int("num_local_experts", hi=4096)
        moe_ffn = f.int("intermediate_size")
        step = f.int("interleave_moe_layer_step", default=1, hi=layers)
        moe_layers = layers // step
        shape.update(ffn=f.int("intermediate_size_mlp") if moe_layers < layers else moe_ffn, experts=experts,
                     moe_ffn=moe_ffn, experts_per_token=f.int("num_experts_per_tok", hi=experts), shared_experts=1,
                     dense_layers=layers - moe_layers)
        if step > 1:
            notes.append(f"every {step}th layer is MoE: counted as {moe_layers} MoE and {layers - moe_layers} dense "
                         "layers, which a step's time and memory do not tell from interleaved ones (pipeline "
                         "stages split them in order)")
        if f.int("attention_chunk_size", default=0, lo=0, nullable=True):
            notes.append("chunked local attention (attention_chunk_size tokens on the layers with rotary "
                         "embeddings) is taken as full attention: exact below one chunk, more KV cache above it")
    else:  # deepseek's MoE layers, behind its latent attention or (GLM-4.x) grouped-query attention
        experts = f.int("n_routed_experts", hi=4096)
        if f.int("moe_layer_freq", default=1) != 1:
            raise ValueError("'moe_layer_freq' other than 1 is not modelled: the simulator's MoE layers follow "
                             "the dense ones")
        shape.update(ffn=f.int("intermediate_size"), experts=experts, moe_ffn=f.int("moe_intermediate_size"),
                     experts_per_token=f.int("num_experts_per_tok", hi=experts),
                     shared_experts=f.int("n_shared_experts", default=0, lo=0),
                     dense_layers=f.int("first_k_dense_replace", default=0, lo=0, hi=layers - 1),
                     # e_score_correction_bias: DeepSeek-V3 names it by noaux_tc; transformers' Glm4MoeTopkRouter
                     # always holds one
                     router_bias=family == "glm_moe" or cfg.get("topk_method") == "noaux_tc")
        if family == "deepseek":
            q_lora = f.int("q_lora_rank", default=0, lo=0, nullable=True)
            shape.update(mla_kv_lora_rank=f.int("kv_lora_rank"), mla_rope_dim=f.int("qk_rope_head_dim"),
                         mla_q_lora_rank=q_lora, mla_qk_nope_dim=f.int("qk_nope_head_dim"),
                         mla_v_dim=f.int("v_head_dim"))
            shape.update(kv_heads=heads, head_dim=shape["mla_qk_nope_dim"])
            topk = f.int("index_topk", default=0, lo=0)
            if topk:  # DeepSeek Sparse Attention: an fp8 indexer picks the tokens each query attends
                shape.update(index_topk=topk, index_heads=f.int("index_n_heads", hi=4096),
                             index_head_dim=f.int("index_head_dim", hi=4096))
                modelled.append(f"sparse attention: each query attends the {topk:,} cached tokens its indexer "
                                f"scores highest, after the indexer reads every cached token's key")
        mtp = f.int("num_nextn_predict_layers", default=0, lo=0)
        if mtp:  # it serves speculative decoding (--spec-method mtp), whose proposer cost counts it there
            shape["mtp_layers"] = mtp
            notes.append("the multi-token-prediction module (num_nextn_predict_layers) is not in the weights: it "
                         "serves speculative decoding (spec method mtp), which loads it")
    shape["window"], shape["window_layers"] = _windows(cfg, model_type, layers, context, notes, modelled)
    if model_type in LINEAR_ATTENTION:
        shape.update(_linear_attention(cfg, f, layers, modelled))
        notes.append("a cached prefix is reused as an attending model's is: vLLM's caching of the linear layers' state "
                     "at block boundaries (its mamba cache modes) is not modelled apart")
        if model_type != raw.get("model_type"):
            notes.append("the vision encoder's weights are left out: the simulator serves text")
    if model_type == "gpt_oss":
        notes.append("the attention sinks (one weight a head) and the router's bias are left out of the count")
    if model_type in ("qwen3", "qwen3_moe", "gemma3_text") or f.bool("use_qk_norm", False):
        notes.append("the query and key norms (at most (heads + KV heads) x head_dim weights a layer) are left out "
                     "of the count")
    if model_type in ("gemma2", "gemma3_text"):
        notes.append("the extra norms after attention and MLP (2 x hidden weights a layer) are left out of the count")
    # MiniMax-M2's norms span all the heads ('per_layer'): vLLM and SGLang all-reduce each token's sums of
    # squares over the attention's GPUs in every layer (MiniMaxText01RMSNormTP, MiniMaxM2QKRMSNorm)
    if f.bool("use_qk_norm", False) and cfg.get("qk_norm_type") == "per_layer":
        shape["qk_norm_allreduce"] = True
        modelled.append("query and key norms over all the heads: one more all-reduce a layer under tensor parallelism")
    title = _name(raw, name)
    quantization = cfg.get("quantization_config") or raw.get("quantization_config")  # a wrapper's is its own
    shape["fp8_block_scales"] = _block_scaled(quantization)
    model = Model(id="cfg", name=title, source=f"config.json ({model_type})", **shape)
    _check(model)
    return Parsed(model, model_type, tuple(notes), _suggested_dtype(quantization), card_for(model),
                  tuple(modelled))


def _windows(cfg: dict, model_type: str, layers: int, context: int, notes: list, modelled: list) -> tuple[int, int]:
    """Sliding-window attention: the window in tokens and the layers that use it, from layer_types
    where the file lists them, else by the family's rule in transformers (Gemma 2 and gpt-oss: the even
    layers; Gemma 3: all but every sliding_window_pattern-th); (0, 0) when there is none, or when every
    layer slides, which the simulator's KV pool (blocks of full-attention layers) cannot hold."""
    window = cfg.get("sliding_window")
    if not (isinstance(window, int) and not isinstance(window, bool) and 0 < window < context) or \
            cfg.get("use_sliding_window", True) is False:
        return 0, 0
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers and all(isinstance(t, str) for t in types):
        sliding = sum(t == "sliding_attention" for t in types)
    elif model_type in ("gemma2", "gpt_oss"):
        sliding = (layers + 1) // 2
    elif model_type == "gemma3_text":
        pattern = cfg.get("sliding_window_pattern", 6)
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise ValueError(f"'sliding_window_pattern' must be a whole number >= 1, not {json.dumps(pattern)[:40]}")
        sliding = layers - layers // pattern
    else:  # Mistral's and Qwen2's window covers every layer
        sliding = layers
    if sliding >= layers:
        notes.append(f"sliding-window attention on every layer ({window} tokens) is not modelled: every layer "
                     f"caches every token")
        return 0, 0
    if sliding:
        modelled.append(f"sliding-window attention: {sliding} of {layers} layers attend to the last {window} tokens "
                        f"and keep only those in the KV cache (vLLM's hybrid KV cache manager)")
    return (window, sliding) if sliding else (0, 0)


def _linear_attention(cfg: dict, f: "Fields", layers: int, modelled: list) -> dict:
    """Gated DeltaNet layers (Qwen3-Next, Qwen3.5): which layers (layer_types where the file lists them, else
    every full_attention_interval-th attends, as transformers' Qwen3NextConfig derives them), their heads and
    the state's value format (a config's mamba_ssm_dtype, which vLLM takes for the state; else 16-bit)."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != layers or not all(t in ("linear_attention", "full_attention") for t in types):
            raise ValueError(f"'layer_types' must list {layers} entries, each 'linear_attention' or 'full_attention'")
        linear = sum(t == "linear_attention" for t in types)
    else:
        interval = f.int("full_attention_interval", default=4, hi=layers)
        linear = layers - layers // interval
    if linear >= layers:
        raise ValueError("every layer is linear attention: the simulator needs at least one attending layer")
    state = cfg.get("mamba_ssm_dtype")
    fields = dict(linear_layers=linear, linear_k_heads=f.int("linear_num_key_heads", default=16, hi=4096),
                  linear_v_heads=f.int("linear_num_value_heads", default=32, hi=4096),
                  linear_k_dim=f.int("linear_key_head_dim", default=128, hi=4096),
                  linear_v_dim=f.int("linear_value_head_dim", default=128, hi=4096),
                  linear_conv=f.int("linear_conv_kernel_dim", default=4, hi=64),
                  linear_state_value_bytes=4 if state in ("float32", "fp32") else 2,
                  attn_output_gate=f.bool("attn_output_gate", True))
    modelled.append(f"linear attention: {linear} of {layers} layers are Gated DeltaNet, which hold a fixed state a "
                    f"sequence in place of a KV cache (the other {layers - linear} attend and cache every token)")
    return fields


class Fields:
    """Reads fields of one config, each check raising a ValueError that names the field."""

    def __init__(self, cfg: dict, model_type: str):
        self.cfg, self.model_type = cfg, model_type

    def int(self, key: str, default: int | None = None, lo: int = 1, hi: int = 10_000_000,
            nullable: bool = False) -> int:
        v = self.cfg.get(key)
        if v is None and (key not in self.cfg or nullable):
            if default is None:
                raise ValueError(f"the config of a {self.model_type} model needs '{key}', and this one has none")
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
            raise ValueError(f"'{key}' must be a whole number, not {json.dumps(v)[:40]}")
        if not lo <= v <= hi:
            raise ValueError(f"'{key}' = {int(v)} is outside {lo}..{hi}")
        return int(v)

    def bool(self, key: str, default: bool) -> bool:
        v = self.cfg.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise ValueError(f"'{key}' must be true or false, not {json.dumps(v)[:40]}")
        return v

    def leading_layers(self, key: str, layers: int) -> int:
        """A list of dense layer indices that must be the first k (the simulator's layout): k."""
        v = self.cfg.get(key) or []
        if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
            raise ValueError(f"'{key}' must be a list of layer indices")
        if sorted(v) != list(range(len(v))) or len(v) >= layers:
            raise ValueError(f"'{key}' {v[:8]} are not the leading layers, which is the only mix of dense and MoE "
                             f"layers the simulator models")
        return len(v)


def _name(raw: dict, name: str | None) -> str:
    path = raw.get("_name_or_path")
    text = path if isinstance(path, str) and path.strip() else (name or "")
    text = text.strip().rstrip("/").split("/")[-1] if "/" in text.strip().rstrip("/") else text.strip()
    if text.lower().endswith(".json"):
        text = text[:-5]
    text = "".join(c for c in text if c.isprintable())[:60].strip()
    if not text or text.lower() == "config":
        arch = raw.get("architectures")
        text = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else "Your model"
    return text[:60]


def _check(m: Model) -> None:
    """Shapes the cost model and the memory planner need to hold."""
    if m.experts and m.experts_per_token > m.experts:
        raise ValueError(f"'num_experts_per_tok' ({m.experts_per_token}) exceeds the experts ({m.experts})")
    if m.params() > 1e14:
        raise ValueError(f"the config describes {m.params() / 1e12:.0f} trillion parameters, beyond anything the "
                         f"simulator models (at most 100 trillion)")
    if not math.isfinite(m.params()):
        raise ValueError("the config's sizes do not make a finite parameter count")


# compressed-tensors' weight schemes (llm-compressor's FP8, FP8-dynamic, W4A16 and NVFP4 checkpoints):
# (num_bits, type) -> the weight format
COMPRESSED_TENSORS = {(8, "float"): "fp8", (4, "int"): "int4", (4, "float"): "fp4"}
MODELOPT = {"fp8": "fp8", "nvfp4": "fp4"}  # NVIDIA ModelOpt's quant_algo


def _suggested_dtype(q) -> str | None:
    """The weight format a checkpoint's quantization_config names (it is served that way)."""
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8" or q.get("fmt") in ("e4m3", "float8_e4m3fn"):
        return "fp8"
    if method in ("awq", "gptq") and q.get("bits") == 4:
        return "int4"
    if method == "mxfp4":  # gpt-oss: its experts (attention stays 16-bit, a small share of its weights)
        return "mxfp4"
    if method == "modelopt":
        return MODELOPT.get(str(q.get("quant_algo", "")).lower())
    if method == "compressed-tensors" and isinstance(q.get("config_groups"), dict):
        for group in q["config_groups"].values():
            weights = group.get("weights") if isinstance(group, dict) else None
            if isinstance(weights, dict):
                return COMPRESSED_TENSORS.get((weights.get("num_bits"), str(weights.get("type", "")).lower()))
    return None


def _block_scaled(q) -> bool:
    """Whether a checkpoint's fp8 weights carry a scale a block (fp8's weight_block_size, as DeepSeek-V3
    and Qwen3's -FP8 ship; compressed-tensors' 'block' strategy), not a tensor's or a channel's."""
    if not isinstance(q, dict):
        return False
    if isinstance(q.get("weight_block_size"), list):
        return True
    groups = q.get("config_groups")
    return isinstance(groups, dict) and any(isinstance(g, dict) and isinstance(g.get("weights"), dict)
                                            and g["weights"].get("strategy") == "block" for g in groups.values())


@lru_cache(maxsize=1)
def _cards() -> list[dict]:
    return json.loads((DATA / "model_cards.json").read_text())["cards"]


def card_for(m: Model) -> dict | None:
    """The model card's parameter count of the released model with this shape, if on file."""
    key = (m.layers, m.hidden, m.heads, m.kv_heads, m.vocab, m.experts)
    for c in _cards():
        if tuple(c["shape"]) == key:
            return c
    return None
