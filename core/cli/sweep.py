"""`python -m core sweep --concurrency 1,2,4,...`: the throughput-interactivity frontier of one or
several deployments (core/serving/frontier.py), as benchmarks sweep `--max-concurrency`."""
from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import replace

from .. import bounds
from ..physics import catalog
from ..serving import export, frontier
from ..serving.simulate import simulate
from .args import bounded, emit
from .simulate import add_args, config_from_args


def _list(name: str, parse):
    def read(text: str):
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"give at least one {name}")
        try:
            return tuple(parse(x) for x in items)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    read.__name__ = name
    return read


def _levels(text: str) -> tuple[int, ...]:
    try:
        return frontier.parse_levels(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_levels.__name__ = "concurrency levels"


def _dtype(text: str) -> str:
    if text not in catalog.WEIGHT_DTYPES:
        raise ValueError(f"unknown weight dtype '{text[:20]}': choose {', '.join(catalog.WEIGHT_DTYPES)}")
    return text


def register(sub) -> None:
    p = sub.add_parser("sweep", help="a concurrency sweep: output tok/s per GPU against tok/s per user")
    p.add_argument("--concurrency", type=_levels, required=True, metavar="N1,N2,...",
                   help="concurrent users at each point, increasing (1,2,4,8,16,32,64,128,256,512)")
    p.add_argument("--think-time", type=bounded("think_time"), default=0.0, metavar="S",
                   help="seconds a user waits after an answer before its next request")
    p.add_argument("--think-dist", default="fixed", choices=("fixed", "exponential"))
    p.add_argument("--gpu", type=_list("GPU", str), default=None, help="GPU ids, comma-separated: one deployment each")
    p.add_argument("--tp", type=_list("tp", lambda x: bounds.parse("tp", x)), default=(1,),
                   help="tensor-parallel degrees, comma-separated: one deployment each")
    p.add_argument("--gpus", type=bounded("gpus"), default=None, help="GPUs in all (default: tp x pp, one replica)")
    p.add_argument("--dtype", "--weights", dest="dtype", type=_list("weight dtype", _dtype), default=None,
                   help="weight dtypes, comma-separated: one deployment each (default: as the model is released)")
    add_args(p)
    p.set_defaults(requests=500)  # each level sends at least 10 a user (frontier.REQUESTS_PER_USER)
    p.add_argument("--csv", default=None, metavar="DIR", help="write sweep.csv and sweep.json here")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep)


def deployments(args) -> list:
    """One simulation config per combination of the listed GPUs, tp degrees and weight dtypes."""
    if args.gpu is None:
        raise ValueError("give --gpu (a catalog id, e.g. h100, or several: h100,h200)")
    levels = args.concurrency
    out = []
    dtypes = (args.dtype,) if isinstance(args.dtype, str) else args.dtype  # one, as released (weights_as_released)
    for gpu, tp, dtype in itertools.product(args.gpu, args.tp, dtypes):
        one = argparse.Namespace(**vars(args))
        one.gpu, one.tp, one.dtype, one.concurrency = gpu, tp, dtype, levels[0]
        out.append(config_from_args(one))
    return out


def label(cfg) -> str:
    gpus = cfg.gpus or cfg.tp * cfg.pp
    return (f"{gpus} {catalog.get_gpu(cfg.gpu).name} tp{cfg.tp}" + (f"×pp{cfg.pp}" if cfg.pp > 1 else "")
            + f" {cfg.dtype}")


def cmd_sweep(args) -> None:
    configs = deployments(args)
    for cfg in configs:  # a deployment that cannot run says so before any sweep starts
        simulate_check(cfg)
    tty = not args.json and sys.stderr.isatty()
    results, rows = [], []
    for cfg in configs:
        name = label(cfg)

        def progress(done, total, name=name):
            if tty:
                sys.stderr.write(f"\r{name}: {done}/{total} concurrency levels")
                sys.stderr.flush()

        r = frontier.sweep(cfg, args.concurrency, progress)
        if tty:
            sys.stderr.write("\n")
        results.append(dict(deployment=name, **r))
        rows += frontier.rows(r, deployment=name)
    lines = []
    for r in results:
        lines.append(f"{r['deployment']}: {r['knee_words']}")
        lines.append(f"  {'users':>6} {'tok/s/GPU':>10} {'tok/s/user':>10} {'TTFT p50':>10} {'TTFT p99':>10} "
                     f"{'TPOT p99':>9}  saturates")
        for i, p in enumerate(r["points"]):
            mark = " <- knee" if i == r["knee"] else ""
            lines.append(f"  {p['users']:>6,} {p['output_tok_s_per_gpu']:>10,.0f} {p['tok_s_per_user']:>10,.1f} "
                         f"{p['ttft_p50_ms']:>8,.0f}ms {p['ttft_p99_ms']:>8,.0f}ms {p['tpot_p99_ms']:>7.1f}ms  "
                         f"{(p['saturates'] or '-').split(':')[0]}{mark}")
    out = dict(version=export.project_version(), tpot_slo_ms=configs[0].tpot_slo_ms, deployments=results)
    if args.csv:
        paths = export.write_dir(args.csv, {"sweep.csv": export.table_csv(rows, "concurrency sweep"),
                                            "sweep.json": export.to_json(out)})
        lines.append(f"wrote {', '.join(p.name for p in paths)} to {args.csv}")
    emit(out, args.json, lines)


def simulate_check(cfg) -> None:
    """Simulate two requests of the deployment: one that cannot be simulated says why here."""
    simulate(replace(cfg, workload=replace(cfg.workload, n_requests=2)))
