"""Expert parallelism: how a mixture of experts' layers are split over a replica's GPUs.

Three shapes of a replica of `tp` GPUs (data/moe.json holds the sourced constants):
- tensor parallelism (ep=1): every GPU holds a 1/tp slice of every expert and computes every
  routed token's slice; two all-reduces a layer, no imbalance;
- expert parallelism (ep=tp, vLLM's --enable-expert-parallel): every GPU holds experts/ep whole
  experts and computes the tokens routed to them; attention stays tensor-parallel and the MoE
  output is all-reduced as before, but the busiest GPU's share of the routings sets the pace;
- expert parallelism with data-parallel attention (--dp-attention; vLLM's --data-parallel-size
  with --enable-expert-parallel, SGLang's --enable-dp-attention): every GPU runs attention, the
  dense layers and its own sequences' KV cache for 1/ep of the batch with the weights whole; an
  all-to-all dispatches each routed token to its expert's GPU and another combines the outputs,
  over NVLink within a node and the network across nodes: a decode step's low-latency kernels send
  every routed copy, a prompt's normal kernels a token's row once to each node and forward it there
  (data/moe.json deepep_modes).

The busiest rank: a rank's routings are the sum over its experts/ep experts, each expert's load
spread by the expert-load variation `cv` (skewed expert popularity) plus the sampling noise of
few tokens; of ep ranks the busiest sits z_ep standard deviations above the mean (the expected
maximum of ep normal draws, Blom's approximation).
"""
from __future__ import annotations

import json
from functools import lru_cache
from statistics import NormalDist

from .. import DATA
from .catalog import GPU, Model


@lru_cache(maxsize=1)
def constants() -> dict:
    return json.loads((DATA / "moe.json").read_text())


def eplb_copies(gpus: int) -> int:
    """EPLB's redundant experts the Lab and the planner place on a replica whose experts split over `gpus`
    GPUs: one a GPU (vLLM's docs price 'one redundant expert per EP rank'; DeepSeek's and TensorRT-LLM's
    9 slots a rank for 8 experts at EP32)."""
    return gpus


def slots(model: Model, redundant: int = 0) -> int:
    """Expert copies a layer's expert-parallel group holds: the model's experts and EPLB's redundant
    copies of the most popular ones (data/moe.json redundant_experts)."""
    return model.experts + redundant


def check(model: Model, tp: int, ep: int, dp_attention: bool, redundant: int = 0, overlap: bool = False) -> None:
    """One sentence naming the fix for a shape no engine runs."""
    if not isinstance(ep, int) or isinstance(ep, bool) or ep < 1:
        raise ValueError(f"expert parallelism must be a whole number of GPUs >= 1, not {ep}")
    if overlap and not dp_attention:
        raise ValueError("micro-batch overlap hides a data-parallel attention's expert all-to-all under compute: "
                         f"add --ep {max(tp, 2)} --dp-attention or drop --micro-batch-overlap")
    if redundant and ep == 1:
        raise ValueError("redundant experts are copies EPLB places over expert-parallel ranks: add --ep "
                         f"{max(tp, 2)} or drop --redundant-experts")
    if dp_attention and ep == 1:
        raise ValueError("data-parallel attention runs with expert parallelism (the MoE layers join the ranks' "
                         f"batches): add --ep {max(tp, 2)} or drop --dp-attention")
    if ep == 1:
        return
    if not model.is_moe:
        raise ValueError(f"{model.name} is a dense model: expert parallelism splits a mixture of experts' experts, "
                         "so drop --ep (or choose an MoE model)")
    if ep != tp:
        raise ValueError(f"--ep {ep} must equal the replica's {tp} GPUs (tp): expert parallelism splits the experts "
                         f"over the GPUs tensor parallelism would slice them over; give --tp {ep}")
    n = slots(model, redundant)
    if n % ep:
        ok = [d for d in range(2, min(n, 64) + 1) if n % d == 0]
        what = f"{model.experts} experts" + (f" and {redundant} redundant copies ({n})" if redundant else "")
        fits = sorted({r for r in (redundant - n % ep, redundant + ep - n % ep) if r >= 0})
        raise ValueError(f"--ep {ep} does not divide {model.name}'s {what}: choose ep among {', '.join(map(str, ok))}"
                         + (f", or --redundant-experts {' or '.join(map(str, fits))}" if redundant else
                            ", or add redundant experts (--eplb --redundant-experts) that make the copies a "
                            "multiple of it"))


def replica_split(tp: int, expert_parallel: bool, dp_attention: bool) -> tuple[int, bool]:
    """(ep, dp_attention) of a replica of `tp` GPUs: under expert parallelism its experts whole over all
    of its GPUs, each pool of a split over its own; a replica of one GPU has nothing to split."""
    if expert_parallel and tp > 1:
        return tp, dp_attention
    return 1, False


def attention_tp(tp: int, dp_attention: bool) -> int:
    """GPUs one attention rank spans: the whole replica under tensor parallelism, one under DP attention."""
    return 1 if dp_attention else tp


def attention_ranks(tp: int, dp_attention: bool) -> int:
    """Attention ranks of a replica of tp GPUs, each with its own sequences, max batch and token
    budget: tp under DP attention, else one."""
    return tp // attention_tp(tp, dp_attention)


def busiest_rank_z(ep: int) -> float:
    """Expected maximum of ep standard normal draws (Blom): how far the busiest rank sits above the mean."""
    if ep <= 1:
        return 0.0
    return NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))


def load_variance(model: Model, ep: int, cv: float | None = None, eplb: bool = False, redundant: int = 0) -> float:
    """Squared relative spread of one rank's routings from expert popularity: cv^2 / (expert copies per
    rank); cv is EPLB's when the balancer places the experts (data/moe.json), unless given."""
    if cv is None:
        cv = constants()["eplb_load_cv" if eplb else "expert_load_cv"]["value"]
    if ep <= 1 or not model.is_moe:
        return 0.0
    return cv * cv * ep / slots(model, redundant)


def a2a_link(gpu: GPU, ep: int) -> tuple[float, float]:
    """(seconds per byte one GPU sends in an all-to-all, the share of its bytes that leave the node's
    NVLink for the network). Within a node the GPU's own link; across nodes the NIC carries the
    share bound for other nodes while NVLink carries the rest at the same time, so the slower sets it."""
    eff = constants()["a2a_link_eff"]
    per_node = max(1, gpu.gpus_per_node)
    if ep <= per_node:
        return 1.0 / (gpu.link_gbps_per_dir * 1e9 * eff["nvlink"]), 0.0
    remote = (ep - per_node) / ep
    s_net = remote / (gpu.internode_gbps_per_dir * 1e9 * eff["network"])
    s_nvl = (1 - remote) / (gpu.link_gbps_per_dir * 1e9 * eff["nvlink"])
    return max(s_net, s_nvl), remote


def remote_nodes(model: Model, ep: int, per_node: int) -> float:
    """Expected nodes other than its own that hold at least one of a token's top-k experts, the experts
    spread evenly over ep / per_node nodes and routed uniformly."""
    nodes = ep / per_node
    if nodes <= 1:
        return 0.0
    return (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** model.experts_per_token)


def a2a_prompt_s_per_token(model: Model, gpu: GPU, ep: int) -> float:
    """Seconds one GPU's dispatch and combine take per token it sends, with DeepEP's normal kernels (the
    ones a step with prompt tokens runs): within a node as the low-latency ones; across nodes a token's
    row crosses the network once for each other node its experts live on, and that node forwards it over
    NVLink to each of them (the combine the reverse), the slower of the two links setting the pace."""
    per_node = max(1, gpu.gpus_per_node)
    s_link, _ = a2a_link(gpu, ep)
    if ep <= per_node:
        return dispatch_combine_bytes(model, ep) * s_link
    eff, c = constants()["a2a_link_eff"], constants()["dispatch_bytes"]
    row = model.hidden * (c["value"] + c["combine"])
    net = remote_nodes(model, ep, per_node) * row / (gpu.internode_gbps_per_dir * 1e9 * eff["network"])
    nvl = model.experts_per_token * row * (per_node - 1) / per_node / (gpu.link_gbps_per_dir * 1e9 * eff["nvlink"])
    return max(net, nvl)


def dispatch_combine_bytes(model: Model, ep: int) -> float:
    """Bytes one routed token sends and receives back in one MoE layer's dispatch and combine: its
    hidden row to each of its top-k experts' GPUs (FP8) and their outputs back (BF16), less the
    share whose expert lives on its own GPU."""
    c = constants()["dispatch_bytes"]
    return model.experts_per_token * model.hidden * (c["value"] + c["combine"]) * (ep - 1) / ep
