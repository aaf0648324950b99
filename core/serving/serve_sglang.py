"""The `python -m sglang.launch_server` line of a pool, with SGLang's own flag names
(python/sglang/srt/server_args.py; data/recipes.json sglang.sources quotes each), for a deployment
simulated with SGLang's profile (core/data/engines.json): its rule, chunk and running-request
limit are SGLang's own for the GPU, so no flag sets them; what a flag cannot say is a note.
"""
from __future__ import annotations

import math

from ..physics import catalog, speculative
from ..physics.memory import MEM_UTIL
from .checkpoints import checkpoint, eagle_head, recipes, repo_of
from .simulate import SimConfig

# speculative decoding's proposers by SGLang's names: DeepSeek's MTP runs as EAGLE (its NEXTN is
# rewritten to EAGLE), a separate small model as STANDALONE
ALGORITHMS = {"draft": "STANDALONE", "eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "EAGLE", "ngram": "NGRAM"}
GB = 1e9  # --hicache-size counts decimal gigabytes


def sglang_args(cfg: SimConfig, tp: int, pp: int, max_len: int | None, role: str,
                decodes: bool = True) -> tuple[list[str], list[str]]:
    """The arguments of one replica's `python -m sglang.launch_server` and notes on what they cannot
    say. `role` is the pool's ("serving", "prefill" or "decode"); a replica that decodes speculates
    as the deployment does."""
    repo, quant, notes = checkpoint(cfg.model, cfg.dtype, "SGLang")
    gpu = catalog.get_gpu(cfg.gpu)
    port = recipes()["sglang"]["port"]
    args = ["--model-path", repo, "--host", "0.0.0.0", "--port", str(port), "--tp-size", str(tp)]
    if cfg.ep > 1:  # SGLang's expert parallelism spans the tensor-parallel group
        args += ["--ep-size", str(tp)]
        if cfg.dp_attention:  # DeepEP's dispatch and combine, its low-latency kernels where a batch decodes
            args += ["--enable-dp-attention", "--dp-size", str(tp), "--moe-a2a-backend", "deepep"]
        if cfg.micro_batch_overlap:
            args += ["--enable-two-batch-overlap"]
        if cfg.eplb and tp > 1:
            args += ["--enable-eplb"] + (["--ep-num-redundant-experts", str(cfg.redundant_experts)]
                                         if cfg.redundant_experts else [])
    if pp > 1:
        args += ["--pp-size", str(pp)]
    hosts = gpu.hosts(tp * pp)
    if hosts > 1:
        notes.append(f"a replica spans {hosts} nodes: start this line on each with --nnodes {hosts} --node-rank "
                     f"0..{hosts - 1} and --dist-init-addr of the first node (host:port)")
    if cfg.policy == "static":
        notes.append("static batching has no SGLang setting: SGLang batches continuously, so this runs the "
                     "continuous-batching twin of the simulated deployment")
    elif cfg.policy == "serial":
        args += ["--max-running-requests", "1"]
    args += quant
    if cfg.kv_dtype == "fp8":
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    if cfg.mem_util != MEM_UTIL:  # SGLang's static share (weights and KV pool), else its own for the GPU
        args += ["--mem-fraction-static", f"{cfg.mem_util:g}"]
    args += ["--page-size", str(cfg.block_size)]
    if not cfg.prefix_caching:
        args += ["--disable-radix-cache"]
    if max_len:
        args += ["--context-length", str(max_len)]
    if cfg.kv_offload_gb > 0:  # HiCache: a host pool per rank, in decimal GB
        per_rank = max(1, math.floor(cfg.kv_offload_gb * 2**30 / GB / (tp * pp)))
        args += ["--enable-hierarchical-cache", "--hicache-size", str(per_rank)]
        notes.append("SGLang's host tier writes every block through as it is computed where the simulated one takes "
                     "the blocks the GPU evicts: the same blocks are kept when the tier is much larger than the "
                     "GPU's cache")
    if role in ("prefill", "decode"):
        args += ["--disaggregation-mode", role]
    if cfg.spec_method is not None and decodes:
        args += speculation_args(cfg, repo, notes)
        if pp > 1:
            notes.append("SGLang runs no speculative decoding with pipeline stages: drop --pp-size or the proposer")
        if cfg.spec_method == "draft" and cfg.dp_attention:
            notes.append("SGLang's STANDALONE draft model does not run with --enable-dp-attention: drop one of them")
    return args, notes


def speculation_args(cfg: SimConfig, repo: str, notes: list[str]) -> list[str]:
    """SGLang's --speculative-* flags for the run's proposer: k draft tokens a step as k steps of one
    token each (topk 1, k + 1 tokens verified), the draft's weights where the method has one."""
    spec = speculative.for_config(cfg, catalog.get_model(cfg.model))
    args = ["--speculative-algorithm", ALGORITHMS[spec.method]]
    if spec.method == "draft":
        args += ["--speculative-draft-model-path", repo_of(spec.draft.id)]
    elif spec.method in ("eagle", "eagle3"):
        head, note = eagle_head(spec.method, repo)
        args += ["--speculative-draft-model-path", head]
        notes += [note] if note else []
    if spec.method != "ngram":
        args += ["--speculative-num-steps", str(spec.tokens), "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", str(spec.tokens + 1)]
    else:
        args += ["--speculative-num-draft-tokens", str(spec.tokens + 1)]
    return args


def router_lines(cfg: SimConfig, replicas: int) -> list[str]:
    """How requests reach the replicas: SGLang's router, with prefill and decode servers paired for a
    split (their bootstrap port its default), cache-aware where the simulation routes by prefix,
    round robin where it does, else the less loaded of two replicas."""
    port = recipes()["sglang"]["port"]
    if cfg.disagg:
        return [f"python -m sglang_router.launch_router --pd-disaggregation --prefill http://PREFILL_HOST:{port} "
                f"--decode http://DECODE_HOST:{port} --host 0.0.0.0 --port 8000  # one --prefill and --decode "
                f"a replica"]
    if replicas > 1:
        # the simulated router by SGLang's policies: the less loaded of two for least outstanding or least KV
        policy = {"prefix": "cache_aware", "rr": "round_robin"}.get(cfg.router, "power_of_two")
        return [f"python -m sglang_router.launch_router --worker-urls http://HOST_1:{port} ... --policy {policy} "
                f"--host 0.0.0.0 --port 8000  # one URL a replica"]
    return []
