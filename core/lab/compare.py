"""Deployments side by side on one workload: up to four, each from the Lab's sidebar, a row of the
Planner, or edited by hand, simulated on the Lab's workload and targets.

A deployment is plain data (a dict), so that it can be pinned, stored in a session, written to a
file and read back:

    {"label": "...", "gpu": "h100", "model": "llama-3.1-8b", "gpus": 2, "tp": 1, "dtype": "bf16",
     "policy": "sarathi", "max_batched_tokens": 2048, "max_seqs": 256,
     "prefill_gpus": 0, "prefill_tp": null}          # prefill_gpus > 0: a prefill/decode split

A Planner row (core.planner.plan.Plan.row) is read as it is: its `chunk` is the token budget and
its prefill replicas times prefill tp the prefill pool.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..physics import catalog
from ..serving import engines
from ..serving.simulate import SimConfig
from . import gauges as G
from . import readings
from .inputs import EXPERT_SHAPES, LabInputs, _base, at_tp, current_config, run
from .recommend import experts_of

MAX_PINNED = 4
POLICIES = ("sarathi", "vllm", "sglang", "inflight", "static", "serial")
POLICY_WORDS = {"sarathi": "chunked prefill", "vllm": "continuous batching", "sglang": "prompts in steps of their own",
                "inflight": "whole prompts beside the decodes",
                "static": "static batching", "serial": "one request at a time"}  # a label a first-time reader understands


def _int(d: dict, key: str, default: int, lo: int = 0, hi: int = 4096) -> int:
    v = d.get(key, default)
    v = default if v is None else v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or not lo <= v <= hi:
        raise ValueError(f"deployment field '{key}' must be a whole number within {lo}..{hi}, not {v}")
    return int(v)


def normalise(d: dict, inputs: LabInputs) -> dict:
    """A validated deployment dict (defaults from the Lab's inputs); raises ValueError naming the field."""
    if not isinstance(d, dict):
        raise ValueError("a deployment is a dict of gpu, model, gpus, tp, dtype, policy, ...")
    gpu = catalog.get_gpu(str(d.get("gpu") or inputs.gpu)).id
    model = catalog.get_model(str(d.get("model") or inputs.model)).id
    tp = _int(d, "tp", 1, 1, 64)
    pp = _int(d, "pp", 1, 1, 64)  # pipeline stages of a colocated replica
    pre_tp = _int(d, "prefill_tp", tp, 0, 64) or tp  # 0 (a Planner row without a split): no prefill pool
    pre_gpus = _int(d, "prefill_gpus", pre_tp * _int(d, "prefill_replicas", 0, 0, 4096), 0)
    gpus = _int(d, "gpus", max(tp, inputs.gpus // tp * tp), 1)
    if gpus < tp or (gpus - pre_gpus) % tp:
        raise ValueError(f"{gpus} GPUs do not make whole replicas of tp={tp}: choose a GPU count that is a multiple "
                         f"of tp")
    if pp > 1 and (pre_gpus or gpus % (tp * pp)):
        raise ValueError(f"{gpus} GPUs do not make whole replicas of tp={tp} x pp={pp} without a prefill pool: choose "
                         f"a GPU count that is a multiple of {tp * pp}")
    budget = _int(d, "max_batched_tokens", _int(d, "chunk", inputs.max_batched_tokens, 1, 1 << 20), 1, 1 << 20)
    policy = d.get("policy") or "sarathi"
    if policy not in POLICIES:
        raise ValueError(f"deployment policy '{policy}' is not one of {', '.join(POLICIES)}")
    dtype = d.get("dtype") or "bf16"
    if dtype not in catalog.WEIGHT_DTYPES:
        raise ValueError(f"deployment weight dtype '{dtype}' is not one of {', '.join(catalog.WEIGHT_DTYPES)}")
    kv_dtype = d.get("kv_dtype") or "bf16"
    if kv_dtype not in catalog.KV_DTYPES:
        raise ValueError(f"deployment KV cache dtype '{kv_dtype}' is not one of {', '.join(catalog.KV_DTYPES)}")
    catalog.check_formats(catalog.get_gpu(gpu), dtype, kv_dtype)
    # a Planner row says its split by ep and dp_attention; a pin of the Lab's, by the sidebar's choice
    experts = d.get("experts") or (experts_of(d["ep"], bool(d.get("dp_attention"))) if "ep" in d else inputs.experts)
    if experts not in EXPERT_SHAPES:
        raise ValueError(f"deployment experts '{experts}' is not one of {', '.join(EXPERT_SHAPES)}")
    # the engine it is served by: a pin's own (the Lab's config names it engine_overhead), else the sidebar's
    engine = d.get("engine") or d.get("engine_overhead") or inputs.engine
    if engine not in engines.SERVING:
        raise ValueError(f"deployment engine '{engine}' is not one of {', '.join(engines.SERVING)}")
    eplb = d.get("eplb", False if "ep" in d else inputs.eplb)
    if not isinstance(eplb, bool):
        raise ValueError(f"deployment field 'eplb' must be true or false, not {eplb}")
    out = dict(gpu=gpu, model=model, gpus=gpus, tp=tp, pp=pp, dtype=dtype, kv_dtype=kv_dtype, policy=policy,
               max_batched_tokens=budget,
               max_seqs=_int(d, "max_seqs", inputs.max_seqs, 1, 4096), prefill_gpus=pre_gpus,
               prefill_tp=pre_tp if pre_gpus else None, experts=experts, eplb=eplb, engine=engine)
    out["label"] = str(d.get("label") or d.get("deployment") or describe(out))[:120]
    return out


def describe(d: dict) -> str:
    gpu = catalog.get_gpu(d["gpu"])
    split = f", {d['prefill_gpus']} for prefill (tp {d['prefill_tp']})" if d.get("prefill_gpus") else ""
    stages = f" x pp {d['pp']}" if d.get("pp", 1) > 1 else ""
    kv = f", {d['kv_dtype']} KV" if d.get("kv_dtype", "bf16") != "bf16" else ""
    if catalog.get_model(d["model"]).is_moe and d.get("experts", "tp") != "tp":
        stages += (", experts split" + (" with DP attention" if d["experts"].startswith("ep_dp") else "")
                   + (", two-batch overlap" if d["experts"] == "ep_dp_overlap" else "")
                   + (", EPLB" if d.get("eplb") else ""))
    served = f" on {engines.name(d['engine'])}" if d.get("engine", "vllm") != "vllm" else ""
    return (f"{d['gpus']} x {gpu.name}, tp {d['tp']}{stages}{split}, {d['dtype']}{kv}, {POLICY_WORDS[d['policy']]} "
            f"({d['max_batched_tokens']} tokens/step){served}")


def from_lab(inputs: LabInputs) -> dict:
    """The deployment the Lab's sidebar describes."""
    cfg = current_config(inputs)
    d = dict(gpu=cfg.gpu, model=cfg.model, gpus=cfg.gpus, tp=cfg.tp, pp=cfg.pp, dtype=cfg.dtype, kv_dtype=cfg.kv_dtype,
             policy=cfg.policy,
             max_batched_tokens=cfg.max_batched_tokens, max_seqs=cfg.max_seqs, experts=inputs.experts, eplb=inputs.eplb,
             engine=inputs.engine)
    return normalise(d, inputs)


def config(d: dict, inputs: LabInputs) -> SimConfig:
    """Deployment `d` serving the Lab's workload, with the Lab's targets."""
    d = normalise(d, inputs)
    lab = replace(inputs, gpu=d["gpu"], model=d["model"], gpus=d["gpus"], dtype=d["dtype"], kv_dtype=d["kv_dtype"],
                  max_batched_tokens=d["max_batched_tokens"], max_seqs=d["max_seqs"], pp=d["pp"], experts=d["experts"],
                  eplb=d["eplb"], engine=d["engine"])
    tp = min(d["tp"], d["prefill_tp"]) if d["prefill_gpus"] else d["tp"]
    cfg = _base(lab, tp=tp, policy=d["policy"])
    if d["prefill_gpus"]:
        cfg = at_tp(replace(cfg, disagg=True, prefill_gpus=d["prefill_gpus"], prefill_tp=d["prefill_tp"],
                            decode_tp=d["tp"]), lab, d["tp"])
    return cfg


def side_by_side(deployments: list[dict], inputs: LabInputs) -> list[dict]:
    """Each deployment simulated on the Lab's workload: its config, result, headline figures, the
    gauge that limits it, or the error that stops it."""
    if len(deployments) > MAX_PINNED:
        raise ValueError(f"compare at most {MAX_PINNED} deployments at once: unpin one")
    out = []
    for d in deployments:
        try:
            cfg = config(d, inputs)
            res = run(cfg)
        except ValueError as e:
            out.append(dict(label=d.get("label", "deployment"), error=str(e)))
            continue
        gs = G.gauges(cfg, res, inputs)
        worst = max(gs, key=lambda g: g.ratio)
        out.append(dict(label=d["label"], deployment=d, config=cfg, result=res, limiting=worst, error=None))
    return out


def table(entries: list[dict], inputs: LabInputs) -> list[dict]:
    """Rows of metric and unit, one column per deployment (its label), for the comparison table."""
    ok = [e for e in entries if not e["error"]]
    metrics = readings.rows((
        ("p50 TTFT", "ttft_p50"), ("p99 TTFT", "ttft_p99"), ("p50 TPOT", "tpot_p50"), ("p99 TPOT", "tpot_p99"),
        ("mean E2E", "e2e_mean"), ("Throughput", "throughput"), ("Goodput", "goodput_share"), ("Queue", "queue"),
        ("GPUs / replicas", "gpus_replicas"), ("Cost per hour", "cost_per_hour"),
        ("Cost per 1M output tokens", "cost_per_1m_fine"),
    ))
    rows = []
    for name, f in metrics:
        rows.append({"metric": name, **{_col(e, i): f(e["result"].summary) for i, e in enumerate(ok)}})
    rows.append({"metric": "Limiting gauge", **{_col(e, i): f"{e['limiting'].name}: {e['limiting'].reading}"
                                                for i, e in enumerate(ok)}})
    return rows


def _col(e: dict, i: int) -> str:
    return f"{i + 1}. {e['label']}"


def distributions(entries: list[dict], points: int = 200) -> list[dict]:
    """TTFT and TPOT of every request of each deployment as cumulative shares (for one chart):
    rows of deployment, metric, ms, share."""
    rows = []
    for i, e in enumerate(entries):
        if e["error"]:
            continue
        r = e["result"].requests
        out = r["output_tokens"]
        multi = out > 1
        ttft = (r["first_token_s"] - r["arrival_s"]) * 1e3
        tpot = (r["finish_s"][multi] - r["first_token_s"][multi]) / (out[multi] - 1) * 1e3
        for metric, x in (("TTFT", ttft), ("TPOT", tpot)):
            if not len(x):
                continue
            q = np.linspace(0, 100, points)
            for share, v in zip(q / 100, np.percentile(x, q)):
                if math.isfinite(v):
                    rows.append(dict(deployment=_col(e, i), metric=metric, ms=float(v), share=float(share)))
    return rows
