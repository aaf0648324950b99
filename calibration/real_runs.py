"""End-to-end check and fit: replay the workloads of real serving runs and compare.

usage: python calibration/real_runs.py [REAL_RUNS.json] [--fit] [--fit-family ARCH] [--write] [--logo]

Each point of calibration/real_runs_public.json (vLLM on H100/A100/H200; its conventions are in
calibration/real_runs_README.md) is replayed with the engine settings it records: the BLIS runs
as vLLM v1 with chunked prefill (policy sarathi, chunk = token budget) and constant-rate arrivals
in stages; the vLLM 0.6 ShareGPT runs as prefill-first batching (policy vllm) with Poisson
arrivals; the vLLM CI latency runs as one batch of 8. Only points whose GPU the catalog holds,
and whose model it holds or whose config.json the point names (model_config_sim, read as the Lab
reads an uploaded one), are replayed.

--fit   fits the host-side constants the GPU step measurements cannot see (vLLM's host time per
        step and per scheduled sequence, an MoE layer's fixed time and its experts' stream rate, the
        API server's share of TTFT) to the HELD-IN runs only, and stores them in
        core/data/costmodel_fit.json
--fit-family ARCH  fits a GPU family's factor on the weight-stream fraction (eta_bw) to its dense
        runs' decode (an Ampere A100's: the vLLM CI batch-of-8 runs and the vLLM 0.6 TPOT) and stores
        it in core/data/gpu_families.json (CAUSES.md section 7)
--write writes the comparison to calibration/VALIDATION.md: held-in and held-out errors, a
        leave-one-group-out score (each model class, GPU and workload left out of the fit in
        turn, with --logo), and every run predicted to overload where the real server was
        stable, the public runs on other GPU families and TensorRT-LLM's offline throughput
        (calibration/family_check.py, its runs and --offline's); and core/data/validation_errors.json,
        each vLLM V1 run's setting (GPU family, model size, simulated load) and errors, from which the
        Lab shows the error of the validated setting nearest the user's (core/lab/trust.py)
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.physics import catalog, costmodel, hfconfig  # noqa: E402
from core.serving.simulate import SimConfig, simulate  # noqa: E402
from core.serving.workload import WorkloadSpec, generate  # noqa: E402
import family_check  # noqa: E402 (calibration/, this script's folder)
import fit_moe  # noqa: E402

ENGINE_FITTED = ("engine_step_us", "engine_seq_us", "t_moe_layer_us", "moe_bw_eff", "api_ms")
# An MoE layer's fixed kernels (router, top-k, token sort, activation, top-k sum) and its experts' weight stream,
# fitted together: the Mixtral runs alone cannot tell them apart (one expert size); runs whose experts' bytes a
# layer differ fifty-fold can (calibration/moe_runs.json, fit_moe_layer)
MOE_LAYER_GRID = tuple((t, b) for t in (0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0) for b in (0.8, 0.85, 0.9, 0.95, 1.0))
# Held out of every fit: the 70B-class runs (Llama-2-70B and Llama-3.x-70B, tp4; BLIS and CI).
# They check that constants fitted on 7-8B models on one GPU carry to a model ten times larger
# on four GPUs (tensor-parallel all-reduces, 80 layers). And every A100 run: the host constants
# are fitted on Hopper GPUs only, so the A100 runs check that they carry to another GPU family.
HELD_OUT = ("70b", "a100")
# Engine generations: vLLM 0.6 (V0, multi-step scheduling) runs are compared, never fitted
V1_KINDS = ("blis", "latency")


def held_out(p: dict) -> bool:
    """Held out of every fit: the 70B class and the A100 (HELD_OUT), every model outside the catalog,
    replayed from its config.json as the Lab reads an uploaded one, and the vLLM CI latency runs of dense
    models (a 2024-25 build of unrecorded version, not the engine whose host times are fitted: fit)."""
    dense_ci = p["id"].startswith("vllm-ci-latency") and "mixtral" not in p["id"].lower()
    return any(k in p["id"].lower() for k in HELD_OUT) or bool(p.get("model_config_sim")) or dense_ci


def model_id(p: dict) -> str:
    """The simulator's id of a run's model: the catalog's, or one registered from the config.json the
    run names (model_config_sim)."""
    return _config_model(p["model_config_sim"]) if p.get("model_config_sim") else p.get("model_id_sim") or ""


@lru_cache(maxsize=None)
def _config_model(relpath: str) -> str:
    """A config.json's model, parsed and registered once: every replay of a fit's grid asks for it."""
    path = ROOT / relpath
    return catalog.register_model(hfconfig.parse(path.read_bytes(), path.name).model).id


def group_keys(p: dict) -> dict:
    """The groups a run belongs to, for leave-one-group-out: model class, GPU, GPU family (its
    architecture: Hopper's H100 and H200 left out together), workload."""
    m = catalog.get_model(model_id(p))
    model = "MoE" if m.is_moe else "70B class" if m.params() > 50e9 else \
        "12-34B class" if m.params() > 10e9 else "7-8B class"
    workload = p.get("workload_profile") or ("batch of 8 (latency)" if p["id"].startswith("vllm-ci") else "sharegpt")
    gpu = p.get("gpu_id_sim") or ""
    return {"model": model, "GPU": gpu, "GPU family": catalog.get_gpu(gpu).arch if gpu else "",
            "workload": workload.replace("-lite", "")}


# inference-perf's shared_prefix generator cycles through groups x prompts-per-group fixed prompts
# (kubernetes-sigs/inference-perf inference_perf/datagen/shared_prefix_datagen.py: data_index %
# len(prompts)); each run's dataset line says how many: "9 system prompts x 5 users"
PROMPT_GROUPS = re.compile(r"(\d+) system prompts x (\d+) users")


def shared_prompts(p: dict, wl):
    """A BLIS run's requests as the prefix cache sees them: request j repeats distinct prompt
    j mod (groups x users), whose first shared_prefix_tokens are its group's system prompt. The
    engine's prefix cache (vLLM's, core/engine/kvcache.py) finds what is cached when each arrives."""
    found = PROMPT_GROUPS.search(p["workload"].get("dataset", ""))
    if not p.get("scheduler", {}).get("prefix_caching") or not found:
        return wl, False
    groups, users = int(found[1]), int(found[2])
    prompt = np.arange(wl.n) % (groups * users)
    shared = int(p["workload"].get("shared_prefix_tokens") or 0)
    return dataclasses.replace(wl, prefix_id=prompt // users, prefix_tokens=np.minimum(shared, wl.prompt_tokens),
                               conversation_id=prompt), True


def config_for(p: dict, scale: float = 1.0) -> tuple[SimConfig, str, object] | None:
    """The simulator's settings for one real run, its kind, and its ready workload (or None).
    scale < 1 shortens every stage of a staged run (same rates, same share of requests per stage)."""
    try:
        catalog.get_gpu(p.get("gpu_id_sim") or "")
        model = catalog.get_model(model_id(p)).id
    except ValueError:
        return None
    if not p.get("engine", "").startswith("vLLM"):
        return None
    gpu, tp = p["gpu_id_sim"], int(p["tp"])
    w, s = p["workload"], p.get("scheduler", {})
    # an FP8 checkpoint (Llama-4-Scout's FP8-dynamic: a scale a channel) and expert parallelism over the tp
    # GPUs where the run's notes say the launch turned it on
    dtype = "fp8" if str(p.get("precision", "")).lower().startswith("fp8") else "bf16"
    base = dict(gpu=gpu, model=model, tp=tp, gpus=tp, dtype=dtype, ep=tp if s.get("expert_parallel") else 1)
    if p["id"].startswith("blis"):
        stages = w["stages"]
        sched, t, n = [], 0.0, 0
        for st in stages:
            sched.append((t, st["rate_rps"]))
            t += st["duration_s"] * scale
            n += int(round(st["rate_rps"] * st["duration_s"] * scale))
        n = int(w["num_requests"]) if scale == 1.0 else n
        spec = WorkloadSpec(n_requests=n, rate=stages[0]["rate_rps"], arrival="fixed",
                            prompt_mean=float(w["input_tokens_mean"]), output_mean=float(w["output_tokens_mean"]),
                            length_dist="fixed", rate_schedule=tuple(sched) if len(sched) > 1 else ())
        budget = int(s["max_num_batched_tokens"])
        max_len = int(s.get("max_model_len") or 4096)
        # vLLM 0.15: V1 engine, async scheduling on by default, OpenAI API server in front
        wl, caching = shared_prompts(p, generate(dataclasses.replace(spec, max_total_tokens=max_len)))
        cfg = SimConfig(policy="sarathi", max_seqs=int(s["max_num_seqs"]), max_batched_tokens=budget, chunk=budget,
                        max_model_len=max_len, workload=spec, async_scheduling=True, prefix_caching=caching, **base)
        return cfg, "blis", wl
    if p["id"].startswith("vllm-ci-latency"):
        spec = WorkloadSpec(n_requests=int(w["batch_size"]), rate=math.inf, arrival="fixed",
                            prompt_mean=float(w["input_tokens_mean"]), output_mean=float(w["output_tokens_mean"]),
                            length_dist="fixed")
        # the offline LLM class (no API server); a 2024-25 build, before async scheduling was the default
        return SimConfig(policy="vllm", workload=spec, async_scheduling=False, api_server=False, **base), \
            "latency", None
    if p["id"].startswith("sglang-bench060-vllm"):
        offline = "offline" in p["id"]
        n = int(w.get("num_requests") or 1200)
        # ShareGPT through sglang.bench_serving's filter: the prompt mean is not printed (~220);
        # vLLM 0.6 is the V0 engine: synchronous, multi-step scheduling
        spec = WorkloadSpec(n_requests=n, rate=math.inf if offline else float(w["rate_rps"]),
                            arrival="fixed" if offline else "poisson", prompt_mean=220.0,
                            output_mean=float(w["output_tokens_mean"]), length_dist="sharegpt", seed=1)
        return SimConfig(policy="vllm", max_seqs=256, max_model_len=4096, workload=spec, async_scheduling=False,
                         api_server=not offline, **base), "offline" if offline else "sharegpt", None
    return None


def compare(p: dict, kind: str, s: dict, out_len: float) -> list[tuple[str, float, float]]:
    m = p["metrics"]
    rows = []
    if kind == "blis":
        rows.append(("TTFT mean ms", m["ttft_ms"]["mean"], s["ttft_ms"]["mean"]))
        rows.append(("E2E mean ms", m["e2e_ms"]["mean"], s["e2e_s"]["mean"] * 1e3))
        pred_dec = (s["e2e_s"]["mean"] * 1e3 - s["ttft_ms"]["mean"]) / (out_len - 1)
        rows.append(("decode ms/token", m["decode_ms_per_token_derived"], pred_dec))
    elif kind == "latency":
        rows.append(("E2E mean ms", m["e2e_ms"]["mean"], s["e2e_s"]["mean"] * 1e3))
    elif kind == "sharegpt":
        # vLLM 0.6 ran 10 decode steps per scheduling decision (multi-step scheduling), which
        # delays every new prompt by several steps; the simulator schedules every step, so its
        # TTFT is compared but not fitted
        rows.append(("TTFT p50 ms", m["ttft_ms"]["p50"], s["ttft_ms"]["p50"]))
        rows.append(("TPOT p50 ms", m["tpot_ms"]["p50"], s["tpot_ms"]["p50"]))
        rows.append(("E2E p50 ms", m["e2e_ms"]["p50"], s["e2e_s"]["p50"] * 1e3))
    elif kind == "offline":
        rows.append(("throughput req/s", m["throughput"]["req_s"], s["completed_req_s"]))
    return rows


def replay(points, eff=None, quiet=False, scale=1.0, loads=None, family=True):
    """(run id, metric, measured, simulated, error, stable) rows; `loads` (a dict) gets each run's
    simulated utilisation (throughput against the roofline capacity: the Lab's load level). `eff`:
    constants as fitted (None: the fitted file's), taken to each run's GPU family unless `family`
    is False (data/gpu_families.json)."""
    rows = []
    for p in points:
        made = config_for(p, scale)
        if made is None:
            continue
        cfg, kind, wl = made
        e = eff or costmodel.fitted()
        if family:
            e = costmodel.family_scaled(e, catalog.get_gpu(cfg.gpu))
        s = simulate(cfg, e, wl).summary
        if loads is not None:
            loads[p["id"]] = float(s["utilisation"])
        for metric, real, pred in compare(p, kind, s, cfg.workload.output_mean):
            rows.append((p["id"], metric, real, pred, pred / real - 1, bool(s["stable"])))
            if not quiet:
                print(f"{p['id'][:58]:<58} {metric:<17} real {real:9.2f}  sim {pred:9.2f}  {pred / real - 1:+7.1%}",
                      flush=True)
    return rows


def errors(rows, metric):
    return np.array([e for _, m, _, _, e, _ in rows if m == metric])


def moe_layer_runs() -> list[dict]:
    """The public MoE runs at a fixed concurrency that fit an MoE layer's two constants beside the Mixtral
    runs (calibration/moe_runs.json, fit_moe_layer)."""
    return [r for r in json.loads(fit_moe.RUNS.read_text())["runs"] if r.get("fit_moe_layer")]


def fit(points, base=None, seq=True, quiet=False, moe_runs=None):
    """Fit vLLM's host constants to `points` (V1 runs): the host time per step and per sequence
    on a small grid against mean E2E and decode time per token (median |log error|), an MoE layer's
    fixed time and its experts' stream rate to the MoE runs, then the API server's TTFT share in closed form (the
    median TTFT shortfall). A grid, not a gradient: every evaluation replays every run.
    The host times are an engine version's own: the per-step time and the API share are fitted to the
    vLLM 0.15 runs (BLIS), the version the Lab simulates, wherever `points` hold any; the MoE layer's two
    to the Mixtral runs (their E2E) and the public MoE runs at a fixed concurrency on Hopper that
    calibration/moe_runs.json marks fit_moe_layer (their TPOT), mean squared log error."""
    base = base or costmodel.fitted()
    pts = [p for p in points if (config_for(p) or (0, ""))[1] in V1_KINDS]
    host = [p for p in pts if p["id"].startswith("blis")] or pts

    def score(eff, subset):
        rows = replay(subset, eff, quiet=True, scale=FIT_SCALE)
        e = [np.log1p(err) for _, m, _, _, err, _ in rows if m in ("E2E mean ms", "decode ms/token")]
        return float(np.median(np.abs(e))) + 0.5 * abs(float(np.median(e))) if e else 0.0, rows

    steps = (500.0, 625.0, 750.0, 875.0, 1000.0, 1125.0, 1250.0, 1500.0, 2000.0, 2500.0, 3000.0)
    seqs = (0.0, 10.0, 20.0, 40.0) if seq else (base.engine_seq_us,)
    best = None
    for st in steps:
        for sq in seqs:
            eff = dataclasses.replace(base, engine_step_us=st, engine_seq_us=sq)
            sc, _ = score(eff, host)
            if not quiet:
                print(f"  engine_step_us {st:6.0f}  engine_seq_us {sq:4.0f}  score {sc:.4f}", flush=True)
            if best is None or sc < best[0]:
                best = (sc, eff)
    eff = best[1]
    # the Mixtral runs among `points` and `moe_runs` (default: all of moe_layer_runs); a leave-one-group-out fit
    # passes what its group leaves
    moe = [p for p in pts if "mixtral" in model_id(p)]
    fixed = moe_layer_runs() if moe_runs is None else moe_runs

    def moe_loss(e):  # mean squared log error of the Mixtral runs' E2E and the others' TPOT
        errs = [err for _, m, _, _, err, _ in replay(moe, e, quiet=True, scale=FIT_SCALE) if m == "E2E mean ms"]
        errs += [fit_moe.errors(r, e)["mean_tpot_ms"] for r in fixed]
        return sum(math.log1p(x) ** 2 for x in errs) / len(errs)
    if moe or fixed:
        eff = min((dataclasses.replace(eff, t_moe_layer_us=t, moe_bw_eff=b) for t, b in MOE_LAYER_GRID),
                  key=moe_loss)
    rows = replay(host, dataclasses.replace(eff, api_ms=0.0), quiet=True, scale=FIT_SCALE)
    short = [real - pred for _, m, real, pred, _, _ in rows if m == "TTFT mean ms"]
    if short:
        eff = dataclasses.replace(eff, api_ms=max(0.0, float(np.median(short))))
    return eff


def family_runs(points, arch):
    """The runs on a GPU family whose decode time the family's weight stream decides: dense models'
    E2E of a batch of 8 (vLLM CI) and TPOT of the vLLM 0.6 ShareGPT runs (its TTFT is the V0
    engine's multi-step scheduling, not the GPU)."""
    out = []
    for p in points:
        made = config_for(p)
        if made is None or catalog.get_gpu(made[0].gpu).arch != arch:
            continue
        if made[1] in ("latency", "sharegpt") and not catalog.get_model(made[0].model).is_moe:
            out.append(p)
    return out


def fit_family(points, arch, quiet=False):
    """A GPU family's factor on the fitted weight-stream fraction (eta_bw), on a grid against its
    dense runs' decode metrics (median |log error|); the fused-MoE kernel's expert stream keeps the
    fitted fraction (moe_bw_eff takes the reciprocal). Returns (factor, errors before, after)."""
    pts = family_runs(points, arch)
    if not pts:
        raise ValueError(f"no public run on a {arch} GPU to fit its family factor to")
    base = costmodel.fitted()
    metrics = ("E2E mean ms", "TPOT p50 ms")

    def score(f):
        eff = dataclasses.replace(base, eta_bw=base.eta_bw * f, moe_bw_eff=base.moe_bw_eff / f)
        rows = [r for r in replay(pts, eff, quiet=True, family=False) if r[1] in metrics]
        return float(np.median([abs(np.log1p(r[4])) for r in rows])), rows

    grid = [round(0.70 + 0.01 * i, 2) for i in range(31)]
    scored = {f: score(f) for f in grid}
    best = min(grid, key=lambda f: scored[f][0])
    if not quiet:
        for f in grid:
            print(f"  {arch} eta_bw factor {f:.2f}: median |log error| {scored[f][0]:.4f}", flush=True)
    return best, scored[1.0][1], scored[best][1]


FIT_SCALE = 0.2  # fits replay every stage at a fifth of its length (same rates): steady state is reached in seconds
HEADLINE = ("TTFT mean ms", "E2E mean ms", "decode ms/token")


def summary_lines(rows, title):
    lines = [f"**{title}**", "", "| metric | runs | median abs error | max abs error |", "|---|---|---|---|"]
    for metric in dict.fromkeys(m for _, m, _, _, _, _ in rows):
        e = np.abs(errors(rows, metric))
        lines.append(f"| {metric} | {len(e)} | {np.median(e):.1%} | {e.max():.1%} |")
    return lines + [""]


def false_overloads(rows):
    """Runs the real server served stably (every BLIS run completed all its requests at the
    offered rate) that the simulator predicts to overload."""
    return sorted({i for i, _, _, _, _, stable in rows if not stable and i.startswith("blis")})


def leave_one_group_out(points, eff):
    """Refit the per-step host time, the MoE layer's two constants and the API share without each group;
    predict the group. The MoE layer's other runs (moe_layer_runs) stay in the fit unless they ran on the GPU
    or family left out: left out, the Mixtral runs leave the MoE layer to the others."""
    v1 = [p for p in points if (config_for(p) or (0, ""))[1] in V1_KINDS]
    gpus = [(r, catalog.get_gpu(r["gpu"])) for r in moe_layer_runs()]
    out = []
    for key in ("model", "GPU", "GPU family", "workload"):
        for value in sorted({group_keys(p)[key] for p in v1}):
            rest = [p for p in v1 if group_keys(p)[key] != value]
            left = [p for p in v1 if group_keys(p)[key] == value]
            if not rest or not left:
                continue
            others = [r for r, g in gpus if not (key == "GPU" and g.id == catalog.get_gpu(value).id
                                                 or key == "GPU family" and g.arch == value)]
            e = fit(rest, eff, seq=False, quiet=True, moe_runs=others)
            rows = replay(left, e, quiet=True)
            out.append((key, value, len(left), rows))
            print(f"  leave out {key} = {value}: {len(left)} runs", flush=True)
    return out


def carried_rows(points):
    """The V1 runs on a GPU family other than the fitted one, replayed with the fitted fractions
    carried unchanged (no family factor): how wrong the carry is on a family with no measurements,
    the error the Lab widens its band by on such a family (core/lab/trust.py family_margin)."""
    fitted = costmodel.families()["fitted_family"]
    pts = [p for p in points if (config_for(p) or (0, ""))[1] in V1_KINDS
           and catalog.get_gpu(p["gpu_id_sim"]).arch != fitted]
    return replay(pts, quiet=True, family=False)


# the family_check metrics validation_errors.json keeps (core/lab/trust.py METRIC_WORDS names them)
FAMILY_METRICS = ("E2E mean ms", "TTFT mean ms", "TPOT mean ms")


def family_validation_runs(family, arch) -> dict:
    """calibration/family_check.py's replays as validated runs of their GPU family (the Lab's nearest
    run and its band's margin on that family): their E2E, TTFT and TPOT mean errors, flagged
    `family_check` (checks: the runs a family factor was fitted to are left out; trust.family_margin widens
    the band by their worst error)."""
    runs = {}
    for f in family:
        if f["metric"] not in FAMILY_METRICS or f["fitted"]:
            continue
        key = f["id"] + (f" {f['label']}" if f["label"] else "")
        model, gpu = catalog.get_model(f["model_id"]), catalog.get_gpu(f["gpu_id"])
        r = runs.setdefault(key, dict(
            id=key, engine=f["engine_name"], engine_version=f["engine"], source=dict(url=f["source"]), gpu=gpu.id,
            gpu_name=gpu.name, arch=arch.get(gpu.id, ""), model=model.id, model_name=model.name,
            params_b=round(model.params() / 1e9, 1), moe=bool(model.is_moe), tp=int(f["tp"]), workload=f["workload"],
            load=round(f["load"], 3), stable=f["stable"], set="held out", family_check=True, errors={},
            errors_model_left_out={}))
        r["errors"][f["metric"]] = round(float(f["error"]), 6)
    return runs


# the MoE runs at a fixed concurrency (calibration/moe_runs.json): a mixture's nearest validated runs in the Lab.
# SGLang's cookbook runs give a median TTFT, the check there (their first clients wait for the server's warm-up)
MOE_METRICS = {"mean_tpot_ms": "TPOT mean ms", "median_ttft_ms": "TTFT median ms", "mean_ttft_ms": "TTFT mean ms"}
MOE_HEADER = ("**Mixtures of experts at a fixed concurrency (calibration/moe_runs.json, replayed as calibration/fit_moe.py "
              "replays them: vLLM and SGLang runs of DeepSeek, Qwen3, GLM, MiniMax, gpt-oss and Llama 4 on H100, H200, "
              "B200 and MI300X)**: the Lab's nearest validated run for a mixture; set 'held in' where a run fitted an "
              "MoE constant (calibration/MOE_FIT.md). They check the MoE layer, not a GPU family's carry: the band's "
              "family margin does not take them")


@lru_cache(maxsize=1)
def moe_rows() -> tuple:
    """(run, metric, measured, simulated, error, stable, load) of each fixed-concurrency MoE run: its mean TPOT
    and its TTFT (the median where the run gives one)."""
    rows = []
    eff = costmodel.fitted()
    for r in json.loads(fit_moe.RUNS.read_text())["runs"]:
        if r["concurrency"] is None:
            continue
        s = fit_moe.replay(r, eff)
        sim = {"mean_tpot_ms": s["tpot_ms"]["mean"], "median_ttft_ms": s["ttft_ms"]["p50"],
               "mean_ttft_ms": s["ttft_ms"]["mean"]}
        ttft = "median_ttft_ms" if "median_ttft_ms" in r["measured"] else "mean_ttft_ms"
        for key in ("mean_tpot_ms", ttft):
            if key in r["measured"]:
                real = r["measured"][key]
                rows.append((r, MOE_METRICS[key], real, sim[key], sim[key] / real - 1, bool(s["stable"]),
                             float(s["utilisation"])))
    return tuple(rows)


def moe_lines() -> list[str]:
    lines = ["", MOE_HEADER, "", "| run | metric | measured | simulated | error | set |", "|---|---|---|---|---|---|"]
    for r, m, real, pred, e, stable, _ in moe_rows():
        lines.append(f"| {r['id']} | {m} | {real:.2f} | {pred:.2f} | {e:+.1%} | {moe_set(r)}"
                     f"{'' if stable else ', OVERLOAD'} |")
    return lines + [""]


def moe_set(r: dict) -> str:
    return "held in" if r.get("fit") or r.get("fit_sglang") or r.get("fit_moe_layer") else "held out"


def moe_validation_runs(arch) -> dict:
    """The fixed-concurrency MoE runs as validated runs, flagged `moe_check` (stepspread.family_margin leaves
    them out: they check the MoE layer, not the carry of the fitted fractions onto a GPU family)."""
    runs = {}
    for r, m, _, _, e, stable, load in moe_rows():
        model, gpu = catalog.get_model(fit_moe.model_id(r)), catalog.get_gpu(r["gpu"])
        lengths = r.get("bench_lengths")
        workload = (f"{r['dataset']} {lengths['input_len']}/{lengths['output_len']} tokens" if lengths
                    else r["dataset"]) + f", {r['concurrency']} clients"
        v = runs.setdefault(r["id"], dict(
            id=r["id"], engine=r["engine"], engine_version=r["engine_version"], source=dict(url=r["source"]),
            gpu=gpu.id, gpu_name=gpu.name, arch=arch.get(gpu.id, ""), model=model.id, model_name=r["model_name"],
            params_b=round(model.params() / 1e9, 1), moe=True, tp=int(r["tp"]), workload=workload,
            load=round(load, 3), stable=stable, set=moe_set(r), moe_check=True, errors={}, errors_model_left_out={}))
        v["errors"][m] = round(float(e), 6)
    return runs


def engine_checks(offline: list[dict]) -> dict:
    """Per serving engine with no serving run of its own (TensorRT-LLM): its public checks' count and
    their worst and median absolute error, by which the Lab widens its band for that engine."""
    errors = [abs(r["error"]) for r in offline if not r["fitted"]]
    if not errors:
        return {}
    return {"trtllm": dict(metrics=len(errors), worst_abs_error=round(max(errors), 6),
                           median_abs_error=round(float(np.median(errors)), 6),
                           what="TensorRT-LLM's offline throughput (calibration/offline_runs.json, "
                                "calibration/family_check.py --offline): checks, nothing fitted")}


def validation_errors(points, table, loads, logo, carried=(), family=(), offline=()) -> dict:
    """What the Lab needs to say how far to trust a figure (core/lab/trust.py): each vLLM V1 run's
    setting and errors (those with its model class left out of the fit too), and the step-time
    errors whose spread scales the Lab's band: the H200 step times each predicted by a fit that did
    not see it (calibration/fit_costmodel.py) and the real runs' decode time per token."""
    by_id = {p["id"]: p for p in points}
    left_out = {}
    for key, _, _, rows in logo:
        if key == "model":
            for i, m, _, _, e, _ in rows:
                left_out.setdefault(i, {})[m] = round(float(e), 6)
    arch = {g["id"]: g.get("arch", "") for g in json.loads((ROOT / "core" / "data" / "gpus.json").read_text())["gpus"]}
    carry = {}
    for i, m, _, _, e, _ in carried:
        carry.setdefault(i, {})[m] = round(float(e), 6)
    runs = {}
    for i, m, real, pred, e, stable in table:
        p = by_id[i]
        if config_for(p)[1] not in V1_KINDS:
            continue  # vLLM 0.6 (V0, multi-step scheduling) is not the engine the Lab simulates
        model, gpu = catalog.get_model(model_id(p)), catalog.get_gpu(p["gpu_id_sim"])
        r = runs.setdefault(i, dict(
            id=i, engine=p["engine"], engine_version=p["engine_version"], source=p["source"],
            gpu=gpu.id, gpu_name=gpu.name, arch=arch.get(gpu.id, ""), model=model.id, model_name=model.name,
            params_b=round(model.params() / 1e9, 1), moe=bool(model.is_moe), tp=int(p["tp"]),
            workload=group_keys(p)["workload"], load=round(loads[i], 3), stable=bool(stable),
            set="held out" if held_out(p) else "held in", errors={}, errors_model_left_out=left_out.get(i, {})))
        if i in carry:
            r["errors_family_carried"] = carry[i]
        r["errors"][m] = round(float(e), 6)
    runs.update(family_validation_runs(family, arch))
    runs.update(moe_validation_runs(arch))
    fit = json.loads(costmodel.FIT_FILE.read_text())["fit"]
    step = list(fit.get("leave_one_out_errors", {}).values())
    decode = [r["errors_model_left_out"].get("decode ms/token", r["errors"].get("decode ms/token"))
              for r in runs.values()]
    decode = [e for e in decode if e is not None]
    return {
        "about": "Errors of the simulator against real vLLM V1 runs (simulated / measured - 1), with each "
                 "run's setting: GPU family (arch), model size (params_b, moe), load (the simulated "
                 "utilisation: throughput against the roofline capacity). errors_model_left_out: the same "
                 "run predicted by host constants fitted without its model class. errors_family_carried: a run on a "
                 "GPU family other than the fitted one predicted with the fitted fractions carried unchanged "
                 "(data/gpu_families.json's factor left out). family_check: a public run on another GPU family that "
                 "checks the cost model, nothing fitted to it (calibration/family_check.py); where only such runs "
                 "cover a family, the Lab widens its band there by their worst error. moe_check: a mixture of "
                 "experts at a fixed concurrency (calibration/moe_runs.json, vLLM and SGLang), a mixture's nearest "
                 "validated run, which no family margin takes. "
                 "engine_checks: an engine with no serving run of its own, its public checks' errors (the Lab widens its "
                 "band for it by the worst). step_time_errors: "
                 "predicted / measured - 1 of step times a fit did not see (H200 leave-one-out) and of the "
                 "real runs' decode time per token (model class left out where known).",
        "script": "calibration/real_runs.py --write --logo",
        "measurements": "calibration/real_runs_public.json",
        "runs": list(runs.values()),
        "step_time_errors": {"h200_leave_one_out": step, "decode_ms_per_token": decode},
        "engine_checks": engine_checks(list(offline)),
    }


def main(argv):
    arch = argv[argv.index("--fit-family") + 1] if "--fit-family" in argv else None
    path = next((Path(a) for a in argv if not a.startswith("--") and a != arch),
                ROOT / "calibration" / "real_runs_public.json")
    points = json.loads(path.read_text())["points"]
    if "--fit" in argv:
        eff = fit([p for p in points if not held_out(p)])
        raw = json.loads(costmodel.FIT_FILE.read_text())
        for name in ENGINE_FITTED:
            raw["constants"][name] = round(getattr(eff, name), 6)
            print(f"  {name} = {getattr(eff, name):.4g}")
        raw["engine_fit"] = {"measurements": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
                             "fitted": list(ENGINE_FITTED),
                             "held_out": "runs whose id names a 70B model or an A100, runs of models read from a "
                                         "config.json, and the CI latency runs of dense models",
                             "script": "calibration/real_runs.py --fit"}
        costmodel.FIT_FILE.write_text(json.dumps(raw, indent=1) + "\n")
        costmodel.fitted.cache_clear()
    if arch:
        f, before, after = fit_family(points, arch)
        family_check.write_factor(arch, "eta_bw", f)
        path_f = family_check.write_factor(arch, "moe_bw_eff", round(1.0 / f, 3))
        for (i, m, real, _, e0, _), (_, _, _, pred, e1, _) in zip(before, after):
            print(f"  {i[:50]:<50} {m:<12} real {real:8.2f}  {e0:+6.1%} -> {e1:+6.1%}")
        print(f"{arch}: eta_bw x {f:.2f} (moe_bw_eff x {1 / f:.3f}) written to {path_f.relative_to(ROOT)}")
    t0 = time.perf_counter()
    loads = {}
    table = replay(points, loads=loads)
    by_id = {p["id"]: p for p in points}
    inn = [r for r in table if not held_out(by_id[r[0]]) and config_for(by_id[r[0]])[1] in V1_KINDS]
    out = [r for r in table if held_out(by_id[r[0]]) and config_for(by_id[r[0]])[1] in V1_KINDS]
    v1 = inn + out
    v0 = [r for r in table if config_for(by_id[r[0]])[1] not in V1_KINDS]
    for title, rows in (("all vLLM V1 runs", v1), ("held in", inn), ("held out", out), ("vLLM 0.6", v0)):
        for metric in dict.fromkeys(m for _, m, _, _, _, _ in rows):
            e = np.abs(errors(rows, metric))
            print(f"{title:<16} {metric:<17} n={len(e):2d} median |err| {np.median(e):6.1%}  max {e.max():6.1%}")
    bad = false_overloads(table)
    print(f"false overloads: {len(bad)} {bad}")
    lines = ["# End-to-end validation against real vLLM runs", "",
             f"Written by `python calibration/real_runs.py --write` ({len(table)} comparisons, "
             f"{time.perf_counter() - t0:.0f} s). Source data: `calibration/real_runs_public.json` "
             "(conventions in `calibration/real_runs_README.md`); causes and model: `calibration/CAUSES.md`.", "",
             "Host constants are fitted (`--fit`) to the held-in runs only: the per-step time and the API share to "
             "the vLLM 0.15 BLIS runs of 7B models (the engine version the Lab simulates), an MoE layer's fixed time "
             "and its experts' stream rate to the vLLM CI latency runs of Mixtral-8x7B on H100 and H200 with three "
             "public runs at a fixed concurrency (gpt-oss-120b on one and two H100s, Qwen3-30B-A3B on one; "
             "calibration/moe_runs.json). Held out of "
             "every fit: all 70B-class runs (Llama-2-70B and Llama-3.x-70B on four GPUs), all A100 runs (a GPU "
             "family the host constants never saw; the Ampere weight-stream factor of core/data/gpu_families.json is "
             "fitted to their decode, `--fit-family Ampere`) and the runs of models outside the catalog, replayed from "
             "their config.json as the Lab reads an uploaded one (Mistral-Nemo-12B on one and two H100s, Yi-34B and "
             "CodeLlama-34B on two; Llama-4-Scout on two; calibration/configs/), and the vLLM CI latency runs of "
             "dense models (a 2024-25 build of unrecorded version). The vLLM 0.6 runs (V0 engine, multi-step "
             "scheduling) are compared but never fitted.", "",
             f"**Runs predicted to overload where the real server was stable: {len(bad)}**"
             + (f" ({', '.join(bad)})" if bad else ""), ""]
    lines += summary_lines(v1, "All vLLM V1 runs (0.15 BLIS serving runs and CI latency runs)")
    lines += summary_lines(inn, "Held in (fitted)")
    lines += summary_lines(out, "Held out of the host constants' fit (70B class, A100, models read from config.json, "
                                "dense CI latency runs)")
    logo = leave_one_group_out(points, costmodel.fitted()) if "--logo" in argv else []
    if logo:
        lines += ["**Leave one group out** (the per-step host time, an MoE layer's two constants and the API "
                  "share refitted without the group, then the group predicted)", "",
                  "| left out | runs | E2E mean: median abs error | TTFT mean: median abs error | overloads |",
                  "|---|---|---|---|---|"]
        for key, value, n, rows in logo:
            e2e, ttft = np.abs(errors(rows, "E2E mean ms")), np.abs(errors(rows, "TTFT mean ms"))
            cell = lambda e: f"{np.median(e):.1%}" if len(e) else "-"  # noqa: E731
            note = " (the Ampere factor is fitted to these runs: the carried error is below)" \
                if (key, value[:4]) in (("GPU", "a100"), ("GPU family", "Ampe")) else ""
            lines.append(f"| {key} = {value}{note} | {n} | {cell(e2e)} | {cell(ttft)} | {len(false_overloads(rows))} |")
        lines.append("")
    carried = carried_rows(points)
    if carried:
        lines += summary_lines(carried, "GPU families the step times were not fitted on, with the fitted fractions "
                                        "carried unchanged (before the family's own factor, core/data/gpu_families"
                                        ".json, which the A100 runs above were fitted with: this is the error a "
                                        "family with no run of its own carries, by which the Lab widens its band)")
    family = family_check.replays()
    lines += family_check.lines(family)
    offline = family_check.replays(family_check.OFFLINE)
    lines += family_check.lines(offline, family_check.OFFLINE_HEADER)
    lines += moe_lines()
    lines += summary_lines(v0, "vLLM 0.6 ShareGPT runs (V0 engine, multi-step scheduling; not fitted)")
    lines += ["| run | metric | measured | simulated | error | set |", "|---|---|---|---|---|---|"]
    lines += [f"| {i} | {m} | {r:.2f} | {p:.2f} | {e:+.1%} | {'held out' if held_out(by_id[i]) else 'held in'}"
              f"{'' if stable else ', OVERLOAD'} |" for i, m, r, p, e, stable in table]
    if "--write" in argv:
        (ROOT / "calibration" / "VALIDATION.md").write_text("\n".join(lines) + "\n")
        (ROOT / "core" / "data" / "validation_errors.json").write_text(
            json.dumps(validation_errors(points, table, loads, logo, carried, family, offline), indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
