"""`python -m core plan`: the cheapest deployment that meets latency targets at a traffic level,
found by searching deployments with the simulator."""
from __future__ import annotations

import sys

from ..planner.executors import EXECUTORS
from ..planner.plan import highest_load, plan
from ..planner.space import HEADROOM, DEFAULT_DTYPES, DEFAULT_KV_DTYPES, DTYPES, KV_DTYPES, Budget, Engine, Targets, Workload
from ..serving.command import DEFAULTS
from ..serving.workload import LENGTH_DISTS, WorkloadSpec
from ..text import fmt_ms
from ..serving import engines, export
from .. import bounds
from ..physics import catalog
from .args import acceptance_arg, add_client_args, bounded, client_fields, emit
from .yourdata import add_hardware_args


def _ids(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _prices(items: list[str]) -> tuple[tuple[str, float], ...]:
    out = []
    for item in items or ():
        gpu, sep, price = item.partition("=")
        if not sep:
            raise ValueError(f"--price takes GPU=DOLLARS_PER_HOUR (h100=2.49), not '{item}'")
        out.append((gpu.strip(), bounds.parse("price", price, f"--price {gpu.strip()}")))
    return tuple(out)


def register(sub) -> None:
    p = sub.add_parser("plan", help="search deployments for the cheapest that meets the targets")
    p.add_argument("--gpu", default=None, help="GPU ids to search, comma-separated (h100,h200); prefill/decode splits "
                                              "are searched over every pair of them, a pool each")
    p.add_argument("--model", default=None, help="model id, or dense-<N>b for a parametric model (or --model-config)")
    p.set_defaults(model_required=True)
    p.add_argument("--rate", type=bounded("rate"), default=None,
                   help="mean request rate, req/s (an open loop; or give --concurrency)")
    add_client_args(p)
    p.add_argument("--prompt", type=bounded("prompt"), default=None, help="mean prompt tokens")
    p.add_argument("--output", type=bounded("output"), default=None, help="mean output tokens")
    p.add_argument("--length-dist", default=DEFAULTS["length_dist"], choices=LENGTH_DISTS,
                   help="prompt and output lengths around --prompt/--output (default lognormal, as `simulate` and "
                        "the Lab: no real workload sends one length; fixed: every request the same)")
    p.add_argument("--spread", type=bounded("spread"), default=DEFAULTS["spread"],
                   help="uniform: +-fraction; lognormal: sigma (default 0.5, as `simulate`)")
    p.add_argument("--requests", type=bounded("requests"), default=DEFAULTS["requests"],
                   help="requests simulated per candidate (default 2000, as `simulate`)")
    p.add_argument("--seed", type=bounded("seed"), default=0)
    p.add_argument("--ttft-p99-ms", type=bounded("ttft"), default=1000.0)
    p.add_argument("--tpot-p99-ms", type=bounded("tpot"), default=100.0)
    p.add_argument("--attainment", type=bounded("attainment"), default=0.99,
                   help="share of requests that must meet both targets (0.99: 99%%)")
    p.add_argument("--headroom", type=bounded("headroom"), default=HEADROOM,
                   help="a deployment meets the targets when it still meets them at the rate x (1 + HEADROOM) with "
                        "every engine step at the trust band's slower edge (default 0.2: 20%%; 0 allowed)")
    p.add_argument("--spare-replicas", type=bounded("spare_replicas"), default=0, metavar="N",
                   help="N+1 redundancy: N replicas beyond what meets the targets (of each pool, in a prefill/decode "
                        "split), so that it still meets them with N lost (default 0)")
    p.add_argument("--max-gpus", type=bounded("max_gpus"), default=16)
    p.add_argument("--dtypes", "--weights", dest="dtypes", default=",".join(DEFAULT_DTYPES),
                   help=f"weight dtypes to search, comma-separated, of {','.join(DTYPES)} (fp4: NVFP4 and mxfp4 on FP4 tensor cores, {catalog.fp4_gpus()}. int4: AWQ/GPTQ, group 128)")
    p.add_argument("--kv-dtypes", default=",".join(DEFAULT_KV_DTYPES),
                   help=f"KV cache dtypes to search, comma-separated, of {','.join(KV_DTYPES)} (fp8: twice the blocks)")
    p.add_argument("--no-disagg", action="store_true", help="leave prefill/decode splits out of the search")
    p.add_argument("--price", action="append", metavar="GPU=USD_PER_HOUR", help="override a list price (repeatable)")
    p.add_argument("--max-seqs", type=bounded("max_seqs"), default=None,
                   help="most sequences a step under vLLM (default 256, as the Lab runs it); another engine runs its own")
    p.add_argument("--engine", default="vllm", choices=engines.SERVING,
                   help="the engine that serves: vLLM V1 (its schedules searched), or SGLang or TensorRT-LLM as each "
                        "runs out of the box (its own rule, chunk and batch limits for the GPU); the commands are its own")
    p.add_argument("--system-prompts", type=bounded("system_prompts"), default=0,
                   help="distinct system prompts the prompts start with (0: none shared)")
    p.add_argument("--system-prompt-tokens", type=bounded("system_prompt_tokens"), default=0, help="tokens of each system prompt")
    p.add_argument("--turns", type=bounded("turns"), default=1, help="turns per conversation (each holds the earlier ones)")
    p.add_argument("--turn-gap", type=bounded("turn_gap"), default=30.0, help="seconds from one turn to the next")
    p.add_argument("--no-prefix-caching", action="store_true", help="recompute every prompt")
    p.add_argument("--kv-offload-gb", type=bounded("kv_offload_gb"), default=0.0, metavar="GIB",
                   help="host memory per replica a KV offload tier may take: where prompts share prefixes, the search "
                        "tries prefix-aware routing and, with this, a host tier (default 0: routing alone)")
    p.add_argument("--spec-method", "--spec-methods", dest="spec_methods", default="", metavar="M[,M]",
                   help="speculative decoding's proposers to search beside plain decoding, one or a list (draft, "
                        "eagle, eagle3, mtp, ngram; default: none)")
    p.add_argument("--draft-model", default=None, metavar="ID",
                   help="the draft model of --spec-method draft (default: the catalog's smallest with the model's "
                        "tokenizer)")
    p.add_argument("--spec-tokens", type=bounded("spec_tokens"), default=None, metavar="K",
                   help="draft tokens a step of a speculating deployment (default: its method's)")
    p.add_argument("--spec-acceptance", type=acceptance_arg, default=None, metavar="A",
                   help="a speculating deployment's acceptance rate, or one per draft (default: its method's)")
    p.add_argument("--executor", default="local", choices=EXECUTORS,
                   help="local: a process pool on this machine; inline: this process; ray: a Ray cluster")
    p.add_argument("--address", default=None, help="Ray cluster address (with --executor ray; default: start one)")
    p.add_argument("--workers", type=bounded("workers"), default=None, help="local pool size (default: the CPU count)")
    p.add_argument("--csv", default=None, metavar="DIR", help="write the searched deployments as CSV and the plan as JSON")
    add_hardware_args(p, many=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args) -> None:
    if args.engine != "vllm" and args.max_seqs is not None:
        raise ValueError(f"--max-seqs sets vLLM's batch limit; {engines.name(args.engine)} runs its own "
                         f"({engines.max_seqs(args.engine, 0):,} sequences): drop --max-seqs, or plan with --engine vllm")
    if not args.spec_methods and (args.spec_tokens is not None or args.spec_acceptance is not None
                                  or args.draft_model is not None):
        raise ValueError("--spec-tokens, --spec-acceptance and --draft-model tune speculating deployments: name their "
                         "proposers (--spec-method eagle, or a list: eagle,ngram)")
    spec = WorkloadSpec(n_requests=args.requests, **client_fields(args, default_rate=None), prompt_mean=args.prompt, output_mean=args.output,
                        length_dist=args.length_dist, spread=args.spread, seed=args.seed,
                        prefix_groups=args.system_prompts, prefix_tokens=args.system_prompt_tokens, turns=args.turns,
                        turn_gap_s=args.turn_gap)
    w = Workload(args.model, spec, Targets(args.ttft_p99_ms, args.tpot_p99_ms, args.attainment, args.headroom),
                 Engine(max_seqs=args.max_seqs or engines.max_seqs(args.engine, DEFAULTS["max_seqs"]),
                        name=args.engine, prefix_caching=not args.no_prefix_caching, spec_tokens=args.spec_tokens,
                        spec_acceptance=args.spec_acceptance, draft_model=args.draft_model))
    budget = Budget(gpu_types=_ids(args.gpu), max_gpus=args.max_gpus, prices=_prices(args.price),
                    dtypes=_ids(args.dtypes), kv_dtypes=_ids(args.kv_dtypes), disaggregation=not args.no_disagg,
                    spare_replicas=args.spare_replicas, speculative=_ids(args.spec_methods) if args.spec_methods else (),
                    kv_offload_gb=args.kv_offload_gb)

    def progress(done, total):
        if not args.json and sys.stderr.isatty():
            sys.stderr.write(f"\rsearched {done}/{total} deployment shapes")
            sys.stderr.flush()

    p = plan(w, budget, args.executor, args.workers, args.address, progress)
    if not args.json and sys.stderr.isatty():
        sys.stderr.write("\n")
    c = p.counts
    lines = [f"{c['deployments']:,} deployments in {c['shapes']} shapes: {c['pruned_memory']:,} refused by the memory "
             f"planner, {c['pruned_roofline']:,} ruled out by the roofline, {c['not_needed']:,} larger than a passing "
             f"size, {c['simulated']} simulated (+{c['rate_search_runs']} for the highest rates) in {c['wall_s']:.1f} s"]
    best = p.cheapest
    if best is None:
        lines.append(f"No deployment within the budget meets the targets: raise --max-gpus, add a GPU type, add fp8, fp4 ({catalog.fp4_gpus()}) or int4 "
                     "to --dtypes, fp8 to --kv-dtypes, or relax the targets.")
    else:
        r = p.row(best)
        lines.append(f"Cheapest: {r['deployment']} at ${r['usd_per_hour']:.2f}/h, ${r['usd_per_1m_output_tokens']:.3f} "
                     f"per 1M output tokens; p99 TTFT {fmt_ms(r['ttft_p99_ms'])}, p99 TPOT {r['tpot_p99_ms']:.1f} ms; "
                     f"within the targets up to {highest_load(r)}")
        lines.append(f"  checked {r['checked']}")
        rec = p.recipe_json()
        if rec is not None and not rec["is_cheapest"]:
            conv = rec["row"]
            lines.append(f"Vendor recipe: {conv['deployment'] if conv and conv['meets'] else rec['shape']}"
                         + (f" at ${conv['usd_per_hour']:.2f}/h, within the targets up to {highest_load(conv)}"
                            if conv and conv["meets"] else "") + f". {rec['why']}")
        elif rec is not None:
            lines.append(rec["why"])
        lines.append("Run it:")
        lines += ["  " + x for x in r["serve"].splitlines()]
        lines.append("Frontier (cost against p99 TTFT and TPOT):")
        for r in map(p.row, p.frontier):
            lines.append(f"  ${r['usd_per_hour']:7.2f}/h  TTFT {fmt_ms(r['ttft_p99_ms']):>8}  TPOT "
                         f"{r['tpot_p99_ms']:6.1f} ms  up to {highest_load(r):>18}  {r['deployment']}")
    if args.csv:
        inputs = {k: v for k, v in vars(args).items() if k != "func"}
        files = {"deployments.csv": export.table_csv([{k: v for k, v in r.items() if k not in ("serve", "kubernetes")}
                                                      for r in p.rows()], f"planner search for {args.model}"),
                 "plan.json": export.to_json({"version": export.project_version(), "inputs": inputs, "plan": p.to_json()})}
        if best is not None:  # the cheapest answer's commands, ready to run
            files["serve.sh"] = p.row(best)["serve"] + "\n"
            files["kubernetes.yaml"] = p.row(best)["kubernetes"]
        export.write_dir(args.csv, files)
        lines.append(f"wrote {', '.join(files)} to {args.csv}")
    emit(p.to_json(), args.json, lines)
