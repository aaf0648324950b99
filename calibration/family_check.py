"""Public runs on GPU families the step times were not measured on, replayed through the command line.

usage: python calibration/family_check.py

Each run of calibration/family_runs.json that carries a `replay` is simulated with the command it
gives (`python -m core simulate ...`, exactly as a user would type it: the run's GPU, model, dtype,
tp, lengths and load, and the engine settings the run used, or vLLM's own defaults for that GPU
where the source says none) and each measured metric is set beside the simulated one. Nothing here
is fitted: the AMD MI300X runs check the CDNA 3 factors of core/data/gpu_families.json, which come
from microbenchmarks (calibration/CAUSES.md section 7). calibration/real_runs.py --write adds the
table to calibration/VALIDATION.md.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.cli.main import simulation_of  # noqa: E402
from core.serving.simulate import simulate  # noqa: E402

RUNS = ROOT / "calibration" / "family_runs.json"

# a replay's metric: how to read it from a simulation's summary
METRICS = {
    "E2E mean ms": lambda s: s["e2e_s"]["mean"] * 1000.0,
    "TTFT mean ms": lambda s: s["ttft_ms"]["mean"],
    "TPOT mean ms": lambda s: s["tpot_ms"]["mean"],
    "throughput req/s": lambda s: s["throughput_req_s"],
}


def replays(path: Path = RUNS) -> list[dict]:
    """Every replayed metric: run id, GPU, engine version, command, metric, measured, simulated and
    the signed error (simulated / measured - 1)."""
    rows = []
    for run in json.loads(path.read_text())["entries"]:
        for r in run.get("replay", []):
            cfg = simulation_of(r["command"])
            summary = simulate(cfg).summary
            measured = float(run["measured"][r["measured"]])
            simulated = float(METRICS[r["metric"]](summary))
            users = cfg.workload.concurrency
            rows.append(dict(id=run["id"], gpu=run["gpu"], engine=run["engine_version"], command=r["command"],
                             metric=r["metric"], measured=measured, simulated=simulated,
                             error=simulated / measured - 1.0, label=r.get("label", ""), source=run["source"],
                             engine_name=run["engine"], gpu_id=cfg.gpu, model_id=cfg.model, tp=cfg.tp,
                             workload=(f"offline batch of {users}" if not cfg.api_server else f"{users} clients"),
                             load=float(summary["utilisation"]), stable=bool(summary["stable"])))
    return rows


def lines(rows: list[dict]) -> list[str]:
    """The section calibration/VALIDATION.md shows: one line a replayed metric, and the worst error."""
    if not rows:
        return []
    worst = max(rows, key=lambda r: abs(r["error"]))
    out = ["**Public runs on AMD MI300X (vLLM on ROCm; calibration/family_runs.json, replayed by "
           "`python calibration/family_check.py` with the command each gives; nothing fitted to them)**", "",
           f"{len(rows)} metrics; worst {worst['error']:+.1%} ({worst['id']}, {worst['metric']}).", "",
           "| run | metric | measured | simulated | error | engine |", "|---|---|---|---|---|---|"]
    for r in rows:
        engine = r["engine"].split(" (")[0] if not r["engine"].startswith("unknown") else "vLLM, build not pinned"
        out.append(f"| {r['id']}{' ' + r['label'] if r['label'] else ''} | {r['metric']} | {r['measured']:.2f} | "
                   f"{r['simulated']:.2f} | {r['error']:+.1%} | {engine} |")
    return out + [""]


def main() -> int:
    rows = replays()
    for r in rows:
        print(f"{r['id'][:62]:62s} {r['label']:4s} {r['metric']:16s} measured {r['measured']:10.2f} "
              f"simulated {r['simulated']:10.2f} {r['error']:+7.1%}")
        print(f"    {r['command']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
