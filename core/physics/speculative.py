"""Speculative decoding: a proposer guesses k tokens, the target checks them in one step.

Each decoding sequence carries its pending token and k draft tokens through the target model in one
step (k + 1 query positions: k + 1 times the GEMM rows and attention queries of a plain decode, the
same weight reads); the target accepts the drafts up to the first it disagrees with and samples one
token of its own after them, so a step yields 1 to k + 1 tokens (Leviathan et al. 2023). With
acceptance rate a_i for draft i given that the ones before it were accepted, the chance that at
least j drafts are accepted is a_1 ... a_j and the expected tokens a step are

    1 + sum_j a_1 ... a_j,     for a constant rate a: (1 - a^(k+1)) / (1 - a).

The proposer costs something of its own every step: a small draft model's k forward passes, an
EAGLE head's or DeepSeek's MTP module's k passes of one layer (feeding on the target's hidden
state, using the target's vocabulary projection), or n-gram prompt lookup's host time. Each
proposal's layers are priced by the same roofline as the target's (costmodel.proposer_time).

Default acceptance rates and draft lengths per method are in data/speculative.json, each with its
source. The engine draws, each step, how many drafts the whole decode cohort accepts
(engine/cohort.py), so that its mean over steps is the formula's.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from .. import DATA, bounds
from .catalog import Model, get_model, model_ids

METHODS = ("draft", "eagle", "eagle3", "mtp", "ngram")
SPEC_MAX = 15  # the most draft tokens the engine's tables hold (core/engine/layout.py)


@lru_cache(maxsize=1)
def data() -> dict:
    return json.loads((DATA / "speculative.json").read_text())


def method_defaults(method: str) -> dict:
    """{'acceptance': a, 'reused': a past the first draft or None, 'spec_tokens': k, 'source': ...} for `method`
    (data/speculative.json). A proposer trained for the first extra token only (DeepSeek's MTP module) drafts
    the later ones by running again on its own output, and they are accepted less often: `reused`."""
    entry = data()["methods"][method]
    reused = entry.get("reused_acceptance")
    return dict(acceptance=float(entry["acceptance"]["value"]), reused=float(reused["value"]) if reused else None,
                spec_tokens=int(entry["spec_tokens"]["value"]), source=entry["acceptance"]["source"])


@dataclass(frozen=True)
class Speculation:
    """A proposer and its acceptance model, checked (see `speculation`)."""
    method: str
    tokens: int  # k: draft tokens a step
    acceptance: tuple[float, ...]  # a_1..a_k: each draft's acceptance given the ones before
    draft: Model | None = None  # the draft model ("draft"); EAGLE and MTP use the target's own shape

    @property
    def survival(self) -> tuple[float, ...]:
        """Chance that at least j drafts are accepted, j = 1..k."""
        out, p = [], 1.0
        for a in self.acceptance:
            p *= a
            out.append(p)
        return tuple(out)

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a decoding sequence gains in one step."""
        return 1.0 + sum(self.survival)

    @property
    def mean_acceptance(self) -> float:
        """Accepted drafts over proposed drafts, in expectation (vLLM's draft acceptance rate)."""
        return sum(self.survival) / self.tokens

    def label(self) -> str:
        name = {"draft": f"draft model {self.draft.name}" if self.draft else "draft model", "eagle": "EAGLE head",
                "eagle3": "EAGLE-3 head", "mtp": "MTP module", "ngram": "n-gram lookup"}[self.method]
        return f"{name}, {self.tokens} draft tokens, {self.tokens_per_step:.2f} tokens a step"


def expected_tokens(acceptance: float, k: int) -> float:
    """(1 - a^(k+1)) / (1 - a): expected tokens a step at a constant acceptance rate."""
    if acceptance >= 1.0:
        return k + 1.0
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


def parse_acceptance(text: str) -> float | tuple[float, ...]:
    """'0.7' or '0.9,0.8,0.6' (one rate per draft position) from a command line or a link."""
    parts = [s.strip() for s in str(text).split(",") if s.strip()]
    if not parts:
        raise ValueError("speculative acceptance needs a rate within 0..1, or one per draft token (0.9,0.8,0.6)")
    try:
        values = tuple(float(s) for s in parts)
    except ValueError:
        raise ValueError(f"speculative acceptance must be numbers within 0..1, not '{text}'") from None
    return values[0] if len(values) == 1 else values


def speculation(method: str, tokens: int | None, acceptance, draft_model: str | None, target: Model) -> Speculation:
    """The checked speculative-decoding setup for `target`, with the method's sourced defaults for
    what is not given. Raises ValueError naming the fix."""
    if method not in METHODS:
        raise ValueError(f"unknown speculative method '{method}': choose draft, eagle, eagle3, mtp or ngram")
    defaults = method_defaults(method)
    if isinstance(acceptance, (list, tuple)):
        rates = tuple(acceptance)
        k = len(rates) if tokens is None else tokens
    else:
        rates = None
        k = defaults["spec_tokens"] if tokens is None else tokens
    k = bounds.check("spec_tokens", k)
    if rates is None and acceptance is None and defaults["reused"] is not None:
        rates = (defaults["acceptance"],) + (defaults["reused"],) * (k - 1)
    elif rates is None:
        a = defaults["acceptance"] if acceptance is None else acceptance
        rates = (a,) * k
    elif len(rates) != k:
        raise ValueError(f"{len(rates)} acceptance rates for {k} draft tokens: give one rate, or one per draft token")
    for a in rates:
        bounds.check("spec_acceptance", a)
    draft = None
    if method == "draft":
        draft = get_model(draft_model) if draft_model else default_draft(target)
        if draft.vocab != target.vocab:
            raise ValueError(f"{draft.name} has a vocabulary of {draft.vocab:,} tokens and {target.name} one of "
                             f"{target.vocab:,}: a draft model must share its target's tokenizer (choose one of the "
                             f"same family)")
        if draft.params() >= target.params():
            raise ValueError(f"{draft.name} ({draft.params() / 1e9:.1f}B parameters) is not smaller than "
                             f"{target.name} ({target.params() / 1e9:.1f}B): choose a smaller draft model")
    elif draft_model:
        raise ValueError(f"--draft-model is for --spec-method draft; {method} proposes with "
                         f"{'the target model itself' if method != 'ngram' else 'the prompt'}")
    if method == "mtp" and target.mtp_layers < 1:
        raise ValueError(f"{target.name} ships no multi-token prediction module: choose eagle, draft or ngram "
                         f"(MTP is DeepSeek-V3's)")
    return Speculation(method, k, tuple(float(a) for a in rates), draft)


def for_config(cfg, target: Model) -> Speculation | None:
    """The speculative decoding of a simulation config (its spec_* fields and draft_model),
    checked; None when it is off."""
    if cfg.spec_method is None:
        for name, value in (("--spec-tokens", cfg.spec_tokens), ("--spec-acceptance", cfg.spec_acceptance),
                            ("--draft-model", cfg.draft_model)):
            if value is not None:
                raise ValueError(f"{name} needs speculative decoding: choose a method (--spec-method draft, eagle, "
                                 f"eagle3, mtp or ngram)")
        return None
    return speculation(cfg.spec_method, cfg.spec_tokens, cfg.spec_acceptance, cfg.draft_model, target)


def default_draft(target: Model) -> Model:
    """The smallest catalog model with the target's vocabulary (its tokenizer), as a draft model."""
    fits = [m for m in map(get_model, model_ids()) if m.vocab == target.vocab and m.params() < target.params()
            and not m.parametric]
    if not fits:
        raise ValueError(f"the catalog has no smaller model with {target.name}'s tokenizer to draft for it: name "
                         f"one (--draft-model, a config.json of your own), or choose eagle or ngram")
    return min(fits, key=Model.params)


# ---------------------------------------------------------------- what the proposer is made of

@dataclass(frozen=True)
class Proposer:
    """What one draft token costs, per GPU of a replica of tp GPUs (costmodel.proposer_time)."""
    layers: int  # decoder layers one proposal runs
    weight_bytes: float  # bytes of those layers (plus the EAGLE/MTP input projection)
    flops_per_token: float
    kv_bytes_per_token: float  # the proposer's own KV cache, per context token (all its layers)
    head_bytes: float  # vocabulary projection read once per proposal
    head_flops: float  # per proposing sequence
    allreduce_bytes: float  # per token per all-reduce (tensor parallel)
    moe_layer: bool  # the layer is one of the target's MoE layers (MTP of an MoE model)
    host_s_per_seq: float  # host time of a proposal for one sequence (n-gram lookup)
    memory_bytes: float  # weights the proposer adds on each GPU (EAGLE/MTP heads, a draft model)


def proposer(spec: Speculation, target: Model, tp: int, weight_bytes: float, kv_value_bytes: int) -> Proposer:
    """The proposer of `spec` for `target` at tp, its linear layers in weight_bytes per weight."""
    h = target.hidden
    emb = 2  # embedding / LM head bytes (16-bit)
    if spec.method == "ngram":
        host = float(data()["proposer"]["ngram"]["host_us_per_seq"]["value"]) * 1e-6
        return Proposer(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, False, host, 0.0)
    if spec.method == "draft":
        d = spec.draft
        attn = d.attn_params() / tp
        mlp = d.mlp_params(d.ffn) / tp
        per_layer = attn + mlp
        kv = d.layers * 2 * max(1.0, d.kv_heads / tp) * d.head_dim * kv_value_bytes  # K/V heads replicate past kv_heads
        head = d.vocab * d.hidden / tp
        memory = d.layers * per_layer * weight_bytes + d.embedding_copies * head * emb
        return Proposer(d.layers, d.layers * per_layer * weight_bytes, 2 * d.layers * per_layer, kv, head * emb,
                        2 * head, d.hidden * 2, False, 0.0, memory)
    # EAGLE / EAGLE-3 / MTP: one decoder layer of the target's shape fed with the target's hidden
    # state through a projection of several hidden vectors into one
    entry = data()["proposer"][spec.method]
    inputs = int(entry["input_vectors"]["value"])  # hidden vectors concatenated into the layer's input
    vocab = int(entry.get("draft_vocab", {}).get("value", 0)) or target.vocab
    proj = inputs * h * h / tp
    moe = spec.method == "mtp" and target.is_moe
    if moe:  # the MTP block is an MoE layer: its attention and shared experts here, routed experts apart
        dense = target.attn_params() / tp + target.shared_experts * target.mlp_params(target.moe_ffn) / tp
        resident = dense + (target.experts * target.mlp_params(target.moe_ffn)) / tp
    else:
        dense = target.attn_params() / tp + target.mlp_params(target.ffn if not target.is_moe else target.moe_ffn) / tp
        resident = dense
    kv = target.kv_dims_per_layer() * kv_value_bytes / (1 if target.is_mla else tp)
    head = vocab * h / tp
    own_head = vocab != target.vocab  # EAGLE-3's reduced vocabulary; else the target's LM head is shared
    memory = (resident + proj) * weight_bytes + (head * emb if own_head else 0.0)
    return Proposer(1, (dense + proj) * weight_bytes, 2 * (dense + proj), kv, head * emb, 2 * head, h * 2, moe, 0.0,
                    memory)

