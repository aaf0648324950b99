"""GPUs of one's own: from datasheet figures, at one's own price, or as a calibrated hardware
profile (a GPU plus the cost-model constants a benchmark run fitted).

Each becomes a GPU registered in the catalog (catalog.register_gpu), so its id works wherever a
catalog id does: the Lab, the Planner, `python -m core ... --gpu <id>`. A price alone needs no
registration: 'h100@1.85' is the catalog's H100 at $1.85 per GPU-hour.

A datasheet as JSON (every figure per GPU; see DATASHEET_FIELDS for units):

    {"name": "My H100 NVL", "memory_gib": 94, "hbm_tbps": 3.9, "bf16_tflops": 835, "fp8_tflops": 1670,
     "link_gbps_per_dir": 300, "price_usd_per_gpu_hour": 2.9}
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import fields

from . import catalog, costmodel

PROFILE_KIND = "llm-serving-lab hardware profile"
# name: (unit and meaning, low, high, required); ranges cover every accelerator in the catalog
# with room on both sides, so a typo (TB/s entered as GB/s) is caught
DATASHEET_FIELDS = {
    "memory_gib": ("GPU memory, GiB", 1, 2048, True),
    "hbm_tbps": ("memory bandwidth, TB/s", 0.05, 100, True),
    "bf16_tflops": ("dense bf16 tensor TFLOP/s (without sparsity)", 1, 100_000, True),
    "fp8_tflops": ("dense fp8 tensor TFLOP/s (none: no FP8 support, so fp8 weights and KV cache are refused)", 1,
                   200_000, False),
    "link_gbps_per_dir": ("interconnect between GPUs of a node, GB/s per direction", 1, 10_000, False),
    "price_usd_per_gpu_hour": ("price, $ per GPU-hour", 0.01, 1000, True),
    "sms": ("streaming multiprocessors (compute units)", 1, 1024, False),
    "gpus_per_node": ("GPUs per node", 1, 256, False),
    "internode_gbps_per_dir": ("network between nodes, GB/s per GPU per direction", 0.1, 10_000, False),
}
DEFAULTS = dict(link_gbps_per_dir=64.0, sms=132, gpus_per_node=8, internode_gbps_per_dir=25.0)
TOPOLOGIES = ("switch", "mesh", "pcie")
NAME = re.compile(r"^[\w .()+/-]{1,60}$")


def _number(d: dict, key: str, where: str) -> float | None:
    unit, lo, hi, required = DATASHEET_FIELDS[key]
    v = d.get(key)
    if v is None or v == "":
        if required:
            raise ValueError(f"{where}: '{key}' ({unit}) is missing")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where}: '{key}' ({unit}) must be a number, not {json.dumps(v)[:30]}")
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ValueError(f"{where}: '{key}' = {v:g} is outside {lo:g}..{hi:g} ({unit})")
    return float(v)


def datasheet_gpu(d: dict, where: str = "the GPU") -> catalog.GPU:
    """A GPU from datasheet figures, validated; not yet registered."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a JSON object of datasheet figures")
    unknown = set(d) - set(DATASHEET_FIELDS) - {"name", "id", "link_topology", "vendor", "source", "efficiency",
                                                 "price_provider", "price_date", "nvlink_pair_gbps_per_dir",
                                                 "kind", "about"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; the fields are name, "
                         f"{', '.join(DATASHEET_FIELDS)}, link_topology")
    name = str(d.get("name") or "").strip()
    if not NAME.match(name):
        raise ValueError(f"{where}: 'name' must be 1 to 60 letters, digits, spaces or .()+/-, not '{name[:60]}'")
    v = {k: _number(d, k, where) for k in DATASHEET_FIELDS}
    for k, default in DEFAULTS.items():
        if v[k] is None:
            v[k] = default
    if v["fp8_tflops"] is not None and v["fp8_tflops"] < v["bf16_tflops"]:
        raise ValueError(f"{where}: fp8 TFLOP/s ({v['fp8_tflops']:g}) below bf16 ({v['bf16_tflops']:g}): "
                         f"give dense figures of the same kind (fp8 is usually twice bf16)")
    topology = d.get("link_topology", "switch")
    if topology not in TOPOLOGIES:
        raise ValueError(f"{where}: 'link_topology' must be one of {', '.join(TOPOLOGIES)}, not '{topology}'")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:24].strip("-") or "gpu"
    return catalog.GPU(
        id=slug, name=name, vendor=str(d.get("vendor", "your GPU")), memory_gib=v["memory_gib"],
        hbm_tbps=v["hbm_tbps"], bf16_tflops=v["bf16_tflops"], fp8_tflops=v["fp8_tflops"], sms=int(v["sms"]),
        link_topology=topology, link_gbps_per_dir=v["link_gbps_per_dir"], gpus_per_node=int(v["gpus_per_node"]),
        internode_gbps_per_dir=v["internode_gbps_per_dir"], price_usd_per_gpu_hour=v["price_usd_per_gpu_hour"],
        price_provider=str(d.get("price_provider", "your price")), price_date=str(d.get("price_date", "your price")),
        source={"datasheet": "entered by the user"}, efficiency=_efficiency(d.get("efficiency"), where))


def _efficiency(d, where: str) -> tuple:
    if not d:
        return ()
    if not isinstance(d, dict):
        raise ValueError(f"{where}: 'efficiency' must be an object of cost-model constants")
    names = {f.name for f in fields(costmodel.Efficiency)}
    out = []
    for k, v in d.items():
        if k not in names:
            raise ValueError(f"{where}: unknown cost-model constant '{k}'; the constants are {', '.join(sorted(names))}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
            raise ValueError(f"{where}: cost-model constant '{k}' must be a number above 0, not {v}")
        if k.startswith("eta_") and v > 1.0:
            raise ValueError(f"{where}: '{k}' = {v:g} is a share of the datasheet peak and cannot exceed 1")
        out.append((k, float(v)))
    return tuple(sorted(out))


def _load(text: str | bytes, what: str) -> dict:
    if len(text) > 1_000_000:
        raise ValueError(f"the {what} is over 1 MB: a {what} is a small JSON object")
    try:
        d = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"the {what} is not valid JSON: {e}") from None
    if not isinstance(d, dict):
        raise ValueError(f"the {what} must be a JSON object")
    return d


def register_datasheet(d: dict | str | bytes) -> catalog.GPU:
    """Validate and register a GPU from its datasheet (a dict or JSON text); returns it with its id."""
    if not isinstance(d, dict):
        d = _load(d, "GPU file")
    if d.get("kind") == PROFILE_KIND:
        return load_profile(d)
    return catalog.register_gpu(datasheet_gpu(d, "the GPU file"))


def price_variant(gpu_id: str, usd_per_gpu_hour: float) -> str:
    """The id of `gpu_id` at another price (validated)."""
    base = catalog.get_gpu(gpu_id)
    if not (isinstance(usd_per_gpu_hour, (int, float)) and math.isfinite(usd_per_gpu_hour)
            and 0 < usd_per_gpu_hour <= 1000):
        raise ValueError(f"a price must be dollars per GPU-hour within 0..1000, not {usd_per_gpu_hour}")
    return catalog.get_gpu(f"{base.id.split('@')[0]}@{usd_per_gpu_hour:g}").id


def profile_dict(gpu: catalog.GPU, name: str, efficiency: dict, calibration: dict) -> dict:
    """A hardware profile: a name, the GPU's figures, the cost-model constants that replace the
    fitted ones, and how they were found."""
    name = name.strip()
    if not NAME.match(name):
        raise ValueError(f"a profile name is 1 to 60 letters, digits, spaces or .()+/-, not '{name[:60]}'")
    figures = {k: getattr(gpu, k) for k in DATASHEET_FIELDS}
    figures.update(name=name, link_topology=gpu.link_topology, price_provider=gpu.price_provider,
                   price_date=gpu.price_date)
    return {"kind": PROFILE_KIND, "name": name, "base_gpu": gpu.id.split("@")[0], "gpu": figures,
            "efficiency": {**dict(gpu.efficiency), **{k: round(float(v), 6) for k, v in efficiency.items()}},
            "calibration": calibration}


def load_profile(d: dict | str | bytes) -> catalog.GPU:
    """Register a hardware profile (dict or JSON text); returns its GPU, whose id the Lab, the
    Planner and the command line take."""
    if not isinstance(d, dict):
        d = _load(d, "profile")
    if d.get("kind") != PROFILE_KIND:
        raise ValueError(f"not a hardware profile: its 'kind' must be '{PROFILE_KIND}' (write one with "
                         f"`python -m core calibrate ... --out profile.json`)")
    figures = dict(d.get("gpu") or {})
    figures["efficiency"] = d.get("efficiency") or {}
    figures["name"] = d.get("name") or figures.get("name")
    return catalog.register_gpu(datasheet_gpu(figures, "the profile"))
