"""Pipeline parallelism: a replica of tp x pp GPUs, pp stages of tp GPUs each.

Each stage holds layers / pp of the model (vLLM splits them evenly: get_pp_indices in
vllm/distributed/utils.py) and their share of every sequence's KV cache; the first stage also
holds the embedding, the last the LM head. The engine (core/engine/pipeline.py) keeps pp batches in
flight and sends each batch's activations from stage to stage; this module gives it one stage's
cost-model parameters and the links between stages.

Placement, as deployments across nodes run it (vLLM's docs on distributed serving: tensor parallel
within a node, pipeline parallel across nodes): the tp GPUs of a stage sit in one node when they
fit, so a node holds gpus_per_node // tp consecutive stages, and a boundary between two nodes
crosses the network; any other boundary stays on the node's GPU links.
"""
from __future__ import annotations

import math

import numpy as np

from . import costmodel as cm
from .catalog import GPU, Model

ACT_TENSORS = 2  # vLLM's IntermediateTensors between stages: hidden_states and residual
ACT_BYTES = 2  # 16-bit activations


def check_pp(model: Model, pp: int) -> None:
    if not isinstance(pp, (int, np.integer)) or pp < 1:
        raise ValueError(f"pipeline parallelism must be a whole number of stages >= 1, not {pp}")
    if pp > model.layers:
        raise ValueError(f"pp={pp} stages exceed {model.name}'s {model.layers} layers: choose pp of at most "
                         f"{model.layers}")


def stage_layers(model: Model, pp: int) -> int:
    """Layers of the fullest stage (vLLM gives the remainder of an uneven split to some stages)."""
    return math.ceil(model.layers / pp)


def stage_params(p: np.ndarray, pp: int) -> np.ndarray:
    """One stage's cost-model parameters from the whole replica's: layers / pp of every per-layer
    term, and the LM head spread over the stages (it runs on the last one: a stage's time is the
    mean stage's, so pp stages take one full pass)."""
    if pp == 1:
        return p
    s = p.copy()
    for k in (cm.LAYERS, cm.MOE_LAYERS, cm.HEAD_W, cm.HEAD_FLOPS):
        s[k] = p[k] / pp
    return s


def stages_per_node(gpu: GPU, tp: int) -> int:
    return max(1, gpu.gpus_per_node // tp)


def spans_nodes(gpu: GPU, tp: int, pp: int) -> bool:
    return tp * pp > gpu.gpus_per_node


def bytes_per_token(model: Model) -> float:
    """Activation bytes one token sends from a stage to the next."""
    return ACT_TENSORS * model.hidden * ACT_BYTES


def handoff_link(gpu: GPU, tp: int, across_nodes: bool, eff: cm.Efficiency | None = None) -> tuple[float, float]:
    """(seconds per byte of the batch's activations, latency in s) of one stage-to-stage hand-off:
    each of the tp GPUs sends 1/tp of the tensors to its peer in the next stage, over the network
    across nodes or the node's GPU links, and with tp > 1 the receivers all-gather the pieces over
    their own group's links (vLLM's send_tensor_dict / recv_tensor_dict with all_gather_group).
    Each is one NCCL call: the fitted call latency; bytes at the links' fitted efficiency."""
    eff = eff or cm.efficiency_for(gpu)
    within = gpu.tp_link_gbps(2) if gpu.gpus_per_node > 1 else gpu.internode_gbps_per_dir
    link = gpu.internode_gbps_per_dir if across_nodes or tp > gpu.gpus_per_node else within
    s_byte = 1.0 / (tp * link * 1e9 * eff.link_eff)
    latency = eff.link_latency_us * 1e-6
    if tp > 1:
        s_byte += (tp - 1) / tp / (gpu.tp_link_gbps(tp) * 1e9 * eff.link_eff)
        latency *= 2
    return s_byte, latency


def handoff_s(gpu: GPU, model: Model, tp: int, tokens: int, across_nodes: bool,
              eff: cm.Efficiency | None = None) -> float:
    """Seconds to hand `tokens` tokens' activations to the next stage."""
    s_byte, latency = handoff_link(gpu, tp, across_nodes, eff)
    return latency + tokens * bytes_per_token(model) * s_byte


def handoffs_s(gpu: GPU, model: Model, tp: int, pp: int, tokens: int, eff: cm.Efficiency | None = None) -> float:
    """All pp - 1 hand-offs of one batch of `tokens` tokens, each over its own link."""
    per_node = stages_per_node(gpu, tp)
    return sum(handoff_s(gpu, model, tp, tokens, (j + 1) % per_node == 0, eff) for j in range(pp - 1))


def placement(gpu: GPU, tp: int, pp: int) -> str:
    """Where the stages of one replica sit, in words."""
    if pp == 1:
        return (f"tp={tp} within one node" if tp <= gpu.gpus_per_node else
                f"tp={tp} across {math.ceil(tp / gpu.gpus_per_node)} nodes (the all-reduces cross the network)")
    if tp > gpu.gpus_per_node:
        return f"{pp} stages of tp={tp}, each across nodes: every hand-off and all-reduce crosses the network"
    per_node = stages_per_node(gpu, tp)
    if pp <= per_node:
        return f"{pp} stages of tp={tp} in one node: activations pass over the node's GPU links"
    nodes = math.ceil(pp / per_node)
    crossing = "1 hand-off crosses" if nodes == 2 else f"{nodes - 1} hand-offs cross"
    return (f"{pp} stages of tp={tp} over {nodes} nodes ({per_node} per node): tensor parallel within a node, "
            f"pipeline parallel across; {crossing} the network")
