"""The commands that run a deployment on real GPUs: the `vllm serve` line of each pool, with vLLM's
own flag names (EngineArgs in vllm/engine/arg_utils.py), and a Kubernetes manifest for many
replicas (an apps/v1 Deployment per pool, GPUs as nvidia.com/gpu limits, a split's pools labelled
as llm-d's inference scheduler selects them).

This is not the Lab's own `python -m core simulate` line (command.py), which re-runs the
simulation: these run the engine the simulation models. What a command cannot say exactly (an int4
checkpoint is the user's choice; static batching has no vLLM setting) is a trailing shell comment.
"""
from __future__ import annotations

import json
import shlex
from functools import lru_cache

from .. import DATA
from ..physics import catalog, speculative
from . import offload
from .simulate import SimConfig, _budget, prefill_gpu_of


@lru_cache(maxsize=1)
def recipes() -> dict:
    return json.loads((DATA / "recipes.json").read_text())


@lru_cache(maxsize=1)
def hf_repos() -> dict[str, str]:
    """The Hugging Face release of each catalog model (data/models.json hf_repo)."""
    return {m["id"]: m["hf_repo"] for m in json.loads((DATA / "models.json").read_text())["models"] if m.get("hf_repo")}


def released_formats(model_id: str) -> tuple[str, ...]:
    """The weight format a catalog model is released in where it has no 16-bit release: its
    checkpoint in data/recipes.json is the model's own Hugging Face repo (gpt-oss, DeepSeek)."""
    model = catalog.get_model(model_id).id
    own = hf_repos().get(model)
    if own is None:
        return ()
    return tuple(d for d in ("mxfp4", "fp8") if recipes()[f"{d}_checkpoints"].get(model, {}).get("repo") == own)


def release_dtype(model_id: str | None) -> str:
    """The weights' format a model is served in as released, as vLLM and SGLang read it from the
    checkpoint: what a quantised repo's name says (catalog.checkpoint_format), else a catalog model's
    only release (gpt-oss's MXFP4 experts, DeepSeek's fp8), else 16-bit."""
    if not model_id:
        return "bf16"
    named = catalog.checkpoint_format(model_id)
    if named:
        return named
    try:
        released = released_formats(model_id)
    except ValueError:  # an unknown model: the simulation says so in its own words
        return "bf16"
    return released[0] if released else "bf16"


def release_note(model_id: str, dtype: str) -> str | None:
    """One sentence where `dtype` is not the format the model is released in (it has no 16-bit
    release): what the release holds and how to serve it as released."""
    released = released_formats(model_id)
    if not released or dtype in released:
        return None
    fmt = catalog.weight_format(released[0])
    held = "its experts in MXFP4" if fmt.experts_only else f"{released[0]} weights"
    return (f"{catalog.get_model(model_id).name} is released with {held} only: choose the weights "
            f"'{fmt.label}' under Advanced to serve it as released (another format needs a conversion of it); "
            f"the recommendation searches that format whatever you choose.")


def checkpoint(model_id: str, dtype: str) -> tuple[str, list[str], list[str]]:
    """(the Hugging Face repo to serve, the quantisation flags, notes) for a model in a weight dtype:
    an fp8 release where the model ships one (vLLM reads its quantisation from the checkpoint),
    else the 16-bit release quantised to fp8 as it loads (--quantization fp8)."""
    model = catalog.get_model(model_id)
    repo = hf_repos().get(model.id, model.id)
    shipped = recipes()["fp8_checkpoints"].get(model.id)
    notes = [] if model.id in hf_repos() else [f"{model.id} has no Hugging Face release in the catalog: serve your "
                                               f"own checkpoint of it in place of '{model.id}'"]
    released = released_formats(model.id)
    if dtype == "fp8":
        if shipped:
            return shipped["repo"], [], notes
        if released:  # no 16-bit release to quantise as it loads
            notes.append(f"{repo} is released in {released[0]}: fp8 weights need a 16-bit conversion of it, "
                         f"quantised as it loads")
        return repo, ["--quantization", "fp8"], notes
    if dtype == "int4":
        return repo, [], notes + [f"int4: serve an AWQ or GPTQ (int4, group 128) checkpoint of {repo} in its place; "
                                  f"vLLM reads the method from its config"]
    if dtype == "fp4":
        return repo, [], notes + [f"fp4: serve an NVFP4 checkpoint of {repo} in its place (NVIDIA ModelOpt or "
                                  f"llm-compressor quantise one); vLLM reads the method from its config"]
    if dtype == "mxfp4":
        if "mxfp4" in released:  # the release itself carries MXFP4 experts: vLLM reads the method from its config
            return repo, [], notes
        return repo, [], notes + [f"mxfp4: serve an MXFP4 checkpoint of {repo} in its place (gpt-oss ships its "
                                  f"experts in MXFP4); vLLM reads the method from its config"]
    if released:  # the release itself is quantised: 16-bit weights are a conversion
        notes.append(f"{repo} is released in {released[0]}: bf16 weights need a bf16 conversion of it")
    return repo, [], notes


def pools(cfg: SimConfig) -> list[dict]:
    """Each pool of the deployment: its role, GPU type, replicas, tp, pp and `vllm serve` line."""
    max_len = cfg.max_model_len
    budget = _budget(cfg, max_len) if max_len else cfg.max_batched_tokens
    gpus = cfg.gpus if cfg.gpus is not None else cfg.tp * cfg.pp
    if cfg.disagg:
        ptp, dtp = cfg.prefill_tp or cfg.tp, cfg.decode_tp or cfg.tp
        shape = [("prefill", prefill_gpu_of(cfg).id, cfg.prefill_gpus // ptp, ptp, 1),
                 ("decode", catalog.get_gpu(cfg.gpu).id, (gpus - cfg.prefill_gpus) // dtp, dtp, 1)]
    else:
        shape = [("serving", catalog.get_gpu(cfg.gpu).id, gpus // (cfg.tp * cfg.pp), cfg.tp, cfg.pp)]
    out = []
    for role, gpu, replicas, tp, pp in shape:
        args, notes = serve_args(cfg, tp, pp, budget, max_len, disagg=cfg.disagg, decodes=role != "prefill")
        line = "vllm serve " + " ".join(shlex.quote(a) for a in args)
        if notes:
            line += "  # " + "; ".join(notes)
        out.append(dict(role=role, gpu=gpu, replicas=replicas, tp=tp, pp=pp, gpus_per_replica=tp * pp,
                        args=args, command=line))
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
        config["model"] = hf_repos().get(spec.draft.id, spec.draft.id)
    elif spec.method in ("eagle", "eagle3"):
        family = repo.lower().removesuffix("-instruct").removesuffix("-fp8")
        heads = [c["draft"] for c in speculative.data()["vllm"]["checkpoints"]
                 if c["method"].split()[0] == spec.method and c["target"].lower().removesuffix("-instruct") == family]
        config["model"] = heads[0] if heads else f"<{spec.method} head for {repo}>"
        if not heads:
            note = f"no published {spec.method} head for {repo} in data/speculative.json: name one you trained"
    elif spec.method == "ngram":
        config["prompt_lookup_max"] = 5  # vLLM's own when unset (min = max = 5)
    return config, note


def commands(cfg: SimConfig) -> str:
    """The shell lines that run the deployment: one `vllm serve` per replica of each pool (the
    replica counts said above each), and for a split how requests reach the two pools."""
    lines = []
    ps = pools(cfg)
    for p in ps:
        g = catalog.get_gpu(p["gpu"])
        n, hosts = p["gpus_per_replica"], g.hosts(p["gpus_per_replica"])
        # data-parallel ranks start a server a node (the note on the line says how); a wider tp, a Ray cluster
        launcher = "one server a node" if "--data-parallel-size" in p["args"] else "a Ray cluster across them"
        where = (f"{n} {g.name} GPU{'s' if n > 1 else ''} of one node" if hosts == 1 else
                 f"{n} {g.name} GPUs over {hosts} nodes ({launcher})")
        if hosts > 1 and n <= g.gpus_per_node:
            where += f", one NVLink domain of {g.gpus_per_node} GPUs"
        pool = f"{p['role']} pool: " if cfg.disagg else ""
        lines.append(f"# {pool}{p['replicas']} replica{'s' if p['replicas'] > 1 else ''}, each on {where}")
        lines.append(p["command"])
    if cfg.disagg:
        lines.append("# requests reach a prefill replica, then a decode replica, through a P/D router: llm-d's "
                     "inference scheduler, or vLLM's disaggregated-serving proxy example")
    elif ps[0]["replicas"] > 1 and cfg.router == "prefix":
        lines.append("# route requests with a prefix-aware scheduler, as simulated: llm-d's inference scheduler, "
                     f"its scorers weighted {offload.router_weights()}")
    elif ps[0]["replicas"] > 1:
        lines.append("# spread requests over the replicas with a least-outstanding-requests router, as simulated "
                     "(llm-d's inference scheduler or vLLM's production stack router)")
    return "\n".join(lines)


def manifest(cfg: SimConfig, name: str = "vllm") -> str:
    """A Kubernetes manifest (YAML) of the deployment: an apps/v1 Deployment per pool, each pod one
    replica with its GPUs as nvidia.com/gpu limits, and a Service in front of each pool."""
    v = recipes()["vllm"]
    docs = []
    for p in pools(cfg):
        app = f"{name}-{p['role']}" if cfg.disagg else name
        labels = {"app": app}
        if cfg.disagg:
            labels["llm-d.ai/role"] = p["role"]
        g = catalog.get_gpu(p["gpu"])
        container = {"name": "vllm", "image": v["image"], "command": ["vllm", "serve"], "args": p["args"],
                     "ports": [{"containerPort": v["port"]}],
                     "resources": {"limits": {"nvidia.com/gpu": p["gpus_per_replica"]}},
                     "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}
        spec = {"replicas": p["replicas"], "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels},
                             "spec": {"containers": [container],
                                      # tensor parallel workers share tensors through /dev/shm
                                      "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}]}}}
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


def to_yaml(value, indent: int = 0) -> str:
    """YAML of plain dicts, lists, strings and numbers (strings quoted as JSON, which YAML reads)."""
    pad = "  " * indent
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            key = json.dumps(k) if any(c in k for c in ":./") else k
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{key}:\n{to_yaml(v, indent + 1)}")
            else:
                out.append(f"{pad}{key}: {_scalar(v)}\n")
        return "".join(out)
    if isinstance(value, list):
        out = []
        for v in value:
            if isinstance(v, (dict, list)) and v:
                body = to_yaml(v, indent + 1)
                out.append(f"{pad}- {body.lstrip()}")
            else:
                out.append(f"{pad}- {_scalar(v)}\n")
        return "".join(out)
    return f"{pad}{_scalar(value)}\n"


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (dict, list)):
        return "{}" if isinstance(v, dict) else "[]"
    return json.dumps(str(v))
