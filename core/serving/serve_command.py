"""The commands that run a deployment on real GPUs: each pool's serving line on the engine it was
simulated with (`vllm serve` here, with vLLM's own flag names from EngineArgs in
vllm/engine/arg_utils.py; SGLang's in serve_sglang.py, TensorRT-LLM's in serve_trtllm.py), and a
Kubernetes manifest for many replicas (an apps/v1 Deployment per pool, GPUs as nvidia.com/gpu
limits, a split's pools labelled as llm-d's inference scheduler selects them).

This is not the Lab's own `python -m core simulate` line (command.py), which re-runs the
simulation: these run the engine the simulation models. What a command cannot say exactly (an int4
checkpoint is the user's choice; static batching has no engine setting) is a trailing shell comment.
"""
from __future__ import annotations

import json
import shlex

from ..engine.layout import PAGED_POLICIES
from ..physics import catalog, speculative
from . import engines, offload, serve_sglang, serve_trtllm
from .checkpoints import (checkpoint, eagle_head, hf_repos, recipes, release_dtype, release_note, repo_of,  # noqa: F401
                          released_formats)
from .simulate import SimConfig, _budget, prefill_gpu_of
from .yamltext import to_yaml


# the program each engine's server starts with, and its container's command
PROGRAMS = {"vllm": ["vllm", "serve"], "sglang": ["python3", "-m", "sglang.launch_server"], "trtllm": ["trtllm-serve"]}


def pools(cfg: SimConfig) -> list[dict]:
    """Each pool of the deployment: its role, GPU type, replicas, tp, pp and the serving line of the
    engine it was simulated with (`vllm serve`, `python3 -m sglang.launch_server`, `trtllm-serve`
    after its options file)."""
    max_len = cfg.max_model_len
    budget = _budget(cfg, max_len) if max_len else cfg.max_batched_tokens
    gpus = cfg.gpus if cfg.gpus is not None else cfg.tp * cfg.pp
    if cfg.disagg:
        ptp, dtp = cfg.prefill_tp or cfg.tp, cfg.decode_tp or cfg.tp
        shape = [("prefill", prefill_gpu_of(cfg).id, cfg.prefill_gpus // ptp, ptp, 1),
                 ("decode", catalog.get_gpu(cfg.gpu).id, (gpus - cfg.prefill_gpus) // dtp, dtp, 1)]
    else:
        shape = [("serving", catalog.get_gpu(cfg.gpu).id, gpus // (cfg.tp * cfg.pp), cfg.tp, cfg.pp)]
    engine, out = engines.served_by(cfg), []
    for role, gpu, replicas, tp, pp in shape:
        options = None
        if engine == "sglang":
            args, notes = serve_sglang.sglang_args(cfg, tp, pp, max_len, role, decodes=role != "prefill")
        elif engine == "trtllm":
            args, notes, options = serve_trtllm.trtllm_args(cfg, tp, pp, budget, max_len, role,
                                                            decodes=role != "prefill")
        else:
            args, notes = serve_args(cfg, tp, pp, budget, max_len, disagg=cfg.disagg, decodes=role != "prefill")
        if cfg.policy in PAGED_POLICIES and cfg.no_evict != (engine == "trtllm"):  # admission as no flag sets it
            notes.append(admission_note(cfg, engine))
        line = " ".join(PROGRAMS[engine]) + " " + " ".join(shlex.quote(a) for a in args)
        if notes:
            line += "  # " + "; ".join(notes)
        if options is not None:  # the options file first, written where the line reads it
            line = (f"cat > {serve_trtllm.OPTIONS_FILE} <<'EOF'\n{to_yaml(options).rstrip()}\nEOF\n" + line)
        out.append(dict(role=role, gpu=gpu, replicas=replicas, tp=tp, pp=pp, gpus_per_replica=tp * pp,
                        args=args, command=line, options=options))
    return out


def serve_args(cfg: SimConfig, tp: int, pp: int, budget: int, max_len: int | None,
               disagg: bool = False, decodes: bool = True) -> tuple[list[str], list[str]]:
    """The arguments of one replica's `vllm serve` (the model first) and notes on what they cannot say;
    a replica that decodes (not a prefill pool's) speculates as the deployment does."""
    repo, quant, notes = checkpoint(cfg.model, cfg.dtype)
    gpu, fmt = catalog.get_gpu(cfg.gpu), catalog.weight_format(cfg.dtype)
    if fmt.on(gpu) is not fmt:  # no tensor cores for it: vLLM picks a weight-only kernel
        notes.append(f"{gpu.name} runs these weights as {fmt.on(gpu).label}; vLLM picks that kernel itself, no "
                     f"flag asks for it.")
    if cfg.ep > 1 and cfg.dp_attention:  # vLLM: data-parallel ranks of one GPU, the experts over all of them
        args = [repo, "--tensor-parallel-size", "1", "--data-parallel-size", str(tp), "--enable-expert-parallel"]
        if cfg.micro_batch_overlap:  # vLLM's dual-batch overlap
            args += ["--enable-dbo"]
        if gpu.hosts(tp) > 1:
            notes.append(f"{tp} data-parallel ranks span {gpu.hosts(tp)} nodes: start one `vllm serve` a node with "
                         f"--data-parallel-size-local {gpu.host_gpus} and --data-parallel-address of the first, the "
                         f"others also with --headless and --data-parallel-start-rank "
                         f"{' / '.join(str(i * gpu.host_gpus) for i in range(1, gpu.hosts(tp)))}")
            # across nodes the experts' all-to-all is DeepEP's (vLLM's guide), as the simulation prices it: the
            # low-latency kernels where the pool decodes, the high-throughput ones in a pool of prompts alone
            args += ["--all2all-backend", "deepep_low_latency" if decodes else "deepep_high_throughput"]
            if decodes and not disagg:
                notes.append("vLLM runs one DeepEP mode a server: its prompts' steps here were priced with DeepEP's "
                             "normal kernels, which a pool of prompts alone runs (--disagg)")
    elif cfg.ep > 1:
        args = [repo, "--tensor-parallel-size", str(tp), "--enable-expert-parallel"]
    else:
        args = [repo, "--tensor-parallel-size", str(tp)]
    if cfg.eplb and cfg.ep > 1 and tp > 1:  # vLLM's expert-parallel load balancer, its redundant copies
        args += ["--enable-eplb"]
        if cfg.redundant_experts:
            args += ["--eplb-config", json.dumps({"num_redundant_experts": cfg.redundant_experts}, separators=(",", ":"))]
    if pp > 1:
        args += ["--pipeline-parallel-size", str(pp)]
    seqs = 1 if cfg.policy == "serial" else cfg.max_seqs
    args += ["--max-num-seqs", str(seqs), "--max-num-batched-tokens", str(budget)]
    if cfg.policy == "sarathi":
        args += ["--enable-chunked-prefill"]
    else:  # whole prompts in one step: the budget holds the longest (vLLM's own rule)
        args += ["--no-enable-chunked-prefill"]
    if cfg.policy == "static":
        notes.append("static batching has no vLLM setting: vLLM batches continuously, so this runs the "
                     "continuous-batching twin of the simulated deployment")
    args += quant
    if cfg.kv_dtype == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    args += ["--enable-prefix-caching" if cfg.prefix_caching else "--no-enable-prefix-caching",
             "--gpu-memory-utilization", f"{cfg.mem_util:g}", "--block-size", str(cfg.block_size)]
    if max_len:
        args += ["--max-model-len", str(max_len)]
    if cfg.kv_offload_gb > 0:  # vLLM's native OffloadingConnector: GiB summed over the replica's ranks
        args += ["--kv-offloading-backend", "native", "--kv-offloading-size", f"{cfg.kv_offload_gb:g}"]
        notes.append("vLLM's CPU tier stores every block as it is computed (write-through) where the simulated "
                     "one takes the blocks the GPU evicts: the same blocks are kept when the tier is much larger "
                     "than the GPU's cache")
    if disagg:
        args += ["--kv-transfer-config", json.dumps(recipes()["vllm"]["kv_transfer_config"], separators=(",", ":"))]
    if cfg.spec_method is not None and decodes:
        config, note = speculative_config(cfg, repo)
        args += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
        notes += [note] if note else []
    return args, notes


VLLM_METHODS = {"draft": "draft_model", "eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp", "ngram": "ngram"}


def speculative_config(cfg: SimConfig, repo: str) -> tuple[dict, str | None]:
    """vLLM's --speculative-config for the run's proposer (vllm/config/speculative.py's keys), and a
    note when the Lab knows no checkpoint of it for this model."""
    spec = speculative.for_config(cfg, catalog.get_model(cfg.model))
    config = dict(method=VLLM_METHODS[spec.method], num_speculative_tokens=spec.tokens)
    note = None
    if spec.method == "draft":
        config["model"] = repo_of(spec.draft.id)
    elif spec.method in ("eagle", "eagle3"):
        config["model"], note = eagle_head(spec.method, repo)
    elif spec.method == "ngram":
        config["prompt_lookup_max"] = 5  # vLLM's own when unset (min = max = 5)
    return config, note


def commands(cfg: SimConfig) -> str:
    """The shell lines that run the deployment: one serving line per replica of each pool (the
    replica counts said above each), and for a split how requests reach the two pools."""
    lines = []
    ps, engine = pools(cfg), engines.served_by(cfg)
    for p in ps:
        g = catalog.get_gpu(p["gpu"])
        n, hosts = p["gpus_per_replica"], g.hosts(p["gpus_per_replica"])
        # vLLM's data-parallel ranks and SGLang start a server a node, TensorRT-LLM one MPI job (the note
        # on the line says how); vLLM's wider tp, a Ray cluster
        launcher = ("one MPI job" if engine == "trtllm" else
                    "one server a node" if engine == "sglang" or "--data-parallel-size" in p["args"] else
                    "a Ray cluster across them")
        where = (f"{n} {g.name} GPU{'s' if n > 1 else ''} of one node" if hosts == 1 else
                 f"{n} {g.name} GPUs over {hosts} nodes ({launcher})")
        if hosts > 1 and n <= g.gpus_per_node:
            where += f", one NVLink domain of {g.gpus_per_node} GPUs"
        pool = f"{p['role']} pool: " if cfg.disagg else ""
        lines.append(f"# {pool}{p['replicas']} replica{'s' if p['replicas'] > 1 else ''}, each on {where}")
        lines.append(p["command"])
    if engine == "sglang" and (cfg.disagg or ps[0]["replicas"] > 1):
        lines.append("# requests reach the replicas through SGLang's router, as simulated:")
        lines += serve_sglang.router_lines(cfg, ps[0]["replicas"])
    elif engine == "trtllm" and cfg.disagg:
        lines += serve_trtllm.disagg_lines((ps[0]["replicas"], ps[1]["replicas"]))
    elif cfg.disagg:
        lines.append("# requests reach a prefill replica, then a decode replica, through a P/D router: llm-d's "
                     "inference scheduler, or vLLM's disaggregated-serving proxy example")
    elif ps[0]["replicas"] > 1 and cfg.router == "prefix":
        lines.append("# route requests with a prefix-aware scheduler, as simulated: llm-d's inference scheduler, "
                     f"its scorers weighted {offload.router_weights()}")
    elif ps[0]["replicas"] > 1:
        lines.append("# spread requests over the replicas with a least-outstanding-requests router, as simulated "
                     "(llm-d's inference scheduler" + (" or vLLM's production stack router)" if engine == "vllm" else ")"))
    return "\n".join(lines)


def manifest(cfg: SimConfig, name: str | None = None) -> str:
    """A Kubernetes manifest (YAML) of the deployment: an apps/v1 Deployment per pool, each pod one
    replica with its GPUs as nvidia.com/gpu limits, and a Service in front of each pool (and for
    TensorRT-LLM a ConfigMap holding each pool's options file)."""
    engine = engines.served_by(cfg)
    v, name = recipes()[engine], name or engine
    docs = []
    for p in pools(cfg):
        app = f"{name}-{p['role']}" if cfg.disagg else name
        labels = {"app": app}
        if cfg.disagg:
            labels["llm-d.ai/role"] = p["role"]
        g = catalog.get_gpu(p["gpu"])
        mounts, volumes, args = [{"name": "shm", "mountPath": "/dev/shm"}], [], p["args"]
        if p["options"] is not None:  # the options file from a ConfigMap of its own
            docs.append(to_yaml({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{app}-options"},
                                 "data": {serve_trtllm.OPTIONS_FILE: to_yaml(p["options"])}}))
            mounts.append({"name": "options", "mountPath": "/config"})
            volumes.append({"name": "options", "configMap": {"name": f"{app}-options"}})
            args = [f"/config/{a}" if a == serve_trtllm.OPTIONS_FILE else a for a in args]
        container = {"name": engine, "image": v["image"], "command": PROGRAMS[engine], "args": args,
                     "ports": [{"containerPort": v["port"]}],
                     "resources": {"limits": {"nvidia.com/gpu": p["gpus_per_replica"]}}, "volumeMounts": mounts}
        spec = {"replicas": p["replicas"], "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels},
                             "spec": {"containers": [container],
                                      # tensor parallel workers share tensors through /dev/shm
                                      "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}] + volumes}}}
        head = [f"# {p['role']} pool: {p['replicas']} replica(s) of {p['gpus_per_replica']} {g.name}; schedule it onto "
                f"{g.name} nodes with your cluster's node selector for that GPU type"]
        if g.hosts(p["gpus_per_replica"]) > 1:
            head.append("# a replica spans nodes: run it as a LeaderWorkerSet (llm-d's multi-node form), one pod per node")
        docs.append("\n".join(head) + "\n" + to_yaml({"apiVersion": "apps/v1", "kind": "Deployment",
                                                       "metadata": {"name": app, "labels": labels}, "spec": spec}))
        # a Service per pool: the router (or clients) reach the pool's replicas through it
        docs.append(to_yaml({"apiVersion": "v1", "kind": "Service", "metadata": {"name": app},
                             "spec": {"selector": labels, "ports": [{"port": v["port"], "targetPort": v["port"]}]}}))
    return "---\n".join(d if d.endswith("\n") else d + "\n" for d in docs)


def admission_note(cfg, engine: str) -> str:
    """Where the simulated admission is not the engine's own: what the engine does instead."""
    if engine == "trtllm":
        return ("the simulation admitted each prompt as its blocks fit, preempting when the cache filled: "
                "TensorRT-LLM's MAX_UTILIZATION capacity scheduler policy, not its default GUARANTEED_NO_EVICT")
    return (f"the simulation admitted a request only while the KV cache held it whole (no-evict); "
            f"{engines.name(engine)} admits a prompt as its blocks fit and preempts when the cache fills")

