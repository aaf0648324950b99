"""KV offload to host memory and prefix-aware routing: the inputs' checks and the numbers the
engine takes (engine/kvcache.py offload, engine/loop.py load_from_host and route_prefix), with
their defaults from data/kv_offload.json, each sourced there."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from .. import bounds
from ..engine import layout as L
from ..physics import catalog

GIB = float(1 << 30)
# the host tier the Lab shows where the sidebar sets none (the Trade-offs A/B, the Tutorial): the
# Lab's assumption, a small share of a serving node's host memory (1-2 TiB on an HGX node)
TEACHING_TIER_GIB = 128


@lru_cache(maxsize=1)
def data() -> dict:
    return json.loads((Path(__file__).resolve().parent.parent / "data" / "kv_offload.json").read_text())


def host_link_gbps(gpu: catalog.GPU) -> float:
    """One GPU's achieved host-link copy bandwidth (GB/s, one direction), by GPU family."""
    links = data()["host_link_gbps"]
    if gpu.arch not in links:
        raise ValueError(f"no host-link bandwidth is known for {gpu.name} ({gpu.arch or 'no family'}): "
                         f"give --kv-offload-gbps")
    return float(links[gpu.arch]["value"])


def router_weights() -> str:
    """The prefix-aware router's weights in words, as data/kv_offload.json sources them."""
    w = data()["router"]
    return (f"{w['w_prefix']['value']:g} for the cached share, {w['w_queue']['value']:g} for the queue and "
            f"{w['w_kv']['value']:g} for free KV")


def host_links() -> str:
    """The host links' default bandwidths in words, by GPU family."""
    by_rate: dict[float, list[str]] = {}
    for family, v in data()["host_link_gbps"].items():
        by_rate.setdefault(v["value"], []).append(family)
    return "; ".join(f"{rate:g} GB/s a GPU on {', '.join(fams)}" for rate, fams in sorted(by_rate.items(), reverse=True))


def check(cfg) -> None:
    """Refuse, with the knob to turn, a tier or a router the rest of the configuration cannot use."""
    bounds.check("kv_offload_gb", cfg.kv_offload_gb)
    if cfg.kv_offload_gbps is not None:
        bounds.check("kv_offload_gbps", cfg.kv_offload_gbps)
    paged_cache = cfg.prefix_caching and cfg.policy in L.PAGED_POLICIES
    if cfg.kv_offload_gb > 0 and not paged_cache:
        raise ValueError("a KV offload tier keeps the blocks the prefix cache evicts: turn prefix caching on "
                         "(with the vllm, sarathi or sglang policy), or set the offload tier to 0 GiB")
    if cfg.kv_offload_gb > 0 and cfg.pp > 1:
        raise ValueError("a KV offload tier is simulated with pp=1: set pp=1 or the offload tier to 0 GiB")
    if cfg.router == "prefix" and not paged_cache:
        raise ValueError("prefix-aware routing scores replicas by their cached prefixes: turn prefix caching on "
                         "(with the vllm, sarathi or sglang policy), or choose another router")


def tier_blocks(cfg, pool, kv_bytes_per_token: float) -> int:
    """KV blocks the replica's host tier holds: kv_offload_gb GiB over all its GPUs (vLLM's
    --kv-offloading-size is summed over the tensor-parallel ranks as well)."""
    if cfg.kv_offload_gb <= 0:
        return 0
    return int(cfg.kv_offload_gb * GIB // (cfg.block_size * kv_bytes_per_token))


def configure(cfg, gpu: catalog.GPU, pools: list, cfg_f) -> None:
    """The host link's seconds a byte (a replica's tp GPUs load their shards over tp links at once,
    each slower by the trust band's step scale as every link is) and the router's weights."""
    if cfg.kv_offload_gb > 0:
        gbps = cfg.kv_offload_gbps if cfg.kv_offload_gbps is not None else host_link_gbps(gpu)
        cfg_f[L.G_OFF_S_BYTE] = cfg.step_scale / (gbps * 1e9 * pools[0].tp)
    w = data()["router"]
    cfg_f[L.G_ROUTE_W_PREFIX] = w["w_prefix"]["value"]
    cfg_f[L.G_ROUTE_W_QUEUE] = w["w_queue"]["value"]
    cfg_f[L.G_ROUTE_W_KV] = w["w_kv"]["value"]
    cfg_f[L.G_ROUTE_HOST] = w["host_block_weight"]["value"]


def summary(cfg, PI, kv_bytes_per_token: float) -> dict | None:
    """The host tier's work in a run: blocks stored to it, loaded back and dropped, in GB too."""
    if cfg.kv_offload_gb <= 0:
        return None
    block = cfg.block_size * kv_bytes_per_token
    stored, loaded = int(PI[:, L.P_OFF_STORED].sum()), int(PI[:, L.P_OFF_LOADED].sum())
    return dict(capacity_gib=float(cfg.kv_offload_gb), blocks_per_replica=int(PI[:, L.P_OFF_CAP].max()),
                blocks_stored=stored, blocks_loaded=loaded, blocks_dropped=int(PI[:, L.P_OFF_DROPPED].sum()),
                gb_stored=stored * block / 1e9, gb_loaded=loaded * block / 1e9,
                tokens_loaded=loaded * cfg.block_size,
                # prompt tokens found cached, by the tier they were found in
                hit_tokens_gpu=int(PI[:, L.P_PC_HIT].sum()) - loaded * cfg.block_size,
                hit_tokens_host=loaded * cfg.block_size)
