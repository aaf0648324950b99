"""The `trtllm-serve` line of a pool (TensorRT-LLM's PyTorch backend) and the LLM API options file it
reads (--extra_llm_api_options), with TensorRT-LLM's own flag and key names
(tensorrt_llm/commands/serve.py, tensorrt_llm/llmapi/llm_args.py; data/recipes.json trtllm.sources
quotes each), for a deployment simulated with its profile (core/data/engines.json): whole prompts
beside the decodes, its token and batch limits. What neither can say is a note.
"""
from __future__ import annotations

from ..physics import catalog, speculative
from ..physics.memory import MEM_UTIL
from .checkpoints import checkpoint, eagle_head, recipes, repo_of
from .simulate import SimConfig

# speculative decoding's proposers by TensorRT-LLM's decoding types (its PyTorch backend runs EAGLE-3
# heads only, and reads `Eagle` as Eagle3)
DECODING_TYPES = {"draft": "Draft_Target", "eagle": "Eagle3", "eagle3": "Eagle3", "mtp": "MTP", "ngram": "NGram"}
OPTIONS_FILE = "llm-api-options.yaml"


def trtllm_options(cfg: SimConfig, repo: str, role: str, decodes: bool, notes: list[str]) -> dict:
    """The LLM API options of one replica (the YAML --extra_llm_api_options reads): attention data
    parallel, the KV cache's dtype, prefix reuse, block size and host tier, EPLB's slots, the
    proposer, and a split's KV transfer."""
    options: dict = {}
    if cfg.dp_attention:
        options["enable_attention_dp"] = True
    kv = {"enable_block_reuse": bool(cfg.prefix_caching), "tokens_per_block": cfg.block_size}
    if cfg.kv_dtype == "fp8":
        kv["dtype"] = "fp8"
    if cfg.kv_offload_gb > 0:  # bytes of host memory a rank's KV cache manager keeps
        kv["host_cache_size"] = int(cfg.kv_offload_gb * 2**30 // max(1, cfg.tp * cfg.pp))
    options["kv_cache_config"] = kv
    if cfg.eplb and cfg.ep > 1:  # every expert and the redundant copies, as slots over the ranks
        slots = catalog.get_model(cfg.model).experts + cfg.redundant_experts
        options["moe_config"] = {"load_balancer": {"num_slots": slots, "layer_updates_per_iter": 0}}
    if cfg.spec_method is not None and decodes:
        options["speculative_config"] = speculation_options(cfg, repo, notes)
    if role in ("prefill", "decode"):
        options["cache_transceiver_config"] = {"backend": "DEFAULT"}
    return options


def trtllm_args(cfg: SimConfig, tp: int, pp: int, budget: int, max_len: int | None, role: str,
                decodes: bool = True) -> tuple[list[str], list[str], dict]:
    """The arguments of one replica's `trtllm-serve` (the model first), notes on what they cannot say,
    and its options file's contents."""
    repo, quant, notes = checkpoint(cfg.model, cfg.dtype, "TensorRT-LLM")
    if quant:  # no flag quantises as it loads: the checkpoint carries its format (ModelOpt's hf_quant_config.json)
        notes.append(f"TensorRT-LLM quantises nothing as it loads: serve an FP8 checkpoint of {repo} in its place "
                     f"(NVIDIA ModelOpt quantises one)")
    gpu = catalog.get_gpu(cfg.gpu)
    args = [repo, "--backend", "pytorch", "--host", "0.0.0.0", "--port", str(recipes()["trtllm"]["port"]),
            "--tp_size", str(tp)]
    if cfg.ep > 1:
        args += ["--ep_size", str(tp)]
    if pp > 1:
        args += ["--pp_size", str(pp)]
    seqs = 1 if cfg.policy == "serial" else cfg.max_seqs
    args += ["--max_batch_size", str(seqs), "--max_num_tokens", str(budget)]
    if max_len:
        args += ["--max_seq_len", str(max_len)]
    if cfg.mem_util != MEM_UTIL:  # the simulated pool is its share of the memory the weights leave, as here
        args += ["--kv_cache_free_gpu_memory_fraction", f"{cfg.mem_util:g}"]
    args += ["--extra_llm_api_options", OPTIONS_FILE]
    if cfg.policy == "static":
        notes.append("static batching has no TensorRT-LLM setting: it batches in flight, so this runs the "
                     "continuous-batching twin of the simulated deployment")
    hosts = gpu.hosts(tp * pp)
    if hosts > 1:
        notes.append(f"a replica spans {hosts} nodes: start it as one MPI job over them (srun or mpirun, "
                     f"{tp * pp} ranks, each running trtllm-llmapi-launch before this line)")
    options = trtllm_options(cfg, repo, role, decodes, notes)
    return args, notes, options


def speculation_options(cfg: SimConfig, repo: str, notes: list[str]) -> dict:
    """TensorRT-LLM's speculative_config for the run's proposer: its decoding type, k draft tokens a
    step, the draft's weights where the method has one."""
    spec = speculative.for_config(cfg, catalog.get_model(cfg.model))
    config: dict = {"decoding_type": DECODING_TYPES[spec.method], "max_draft_len": spec.tokens}
    if spec.method == "draft":
        config["speculative_model"] = repo_of(spec.draft.id)
    elif spec.method in ("eagle", "eagle3"):
        config["speculative_model"], note = eagle_head("eagle3", repo)
        notes += [note] if note else []
        if spec.method == "eagle":
            notes.append("TensorRT-LLM's PyTorch backend runs EAGLE-3 heads only: an EAGLE-3 head in place of the "
                         "simulated EAGLE one")
    return config


def disagg_lines(replicas: tuple[int, int]) -> list[str]:
    """How requests reach a split's pools: trtllm-serve's disaggregated front end over the context
    (prefill) and generation (decode) servers."""
    port = recipes()["trtllm"]["port"]
    return [f"# requests reach a context (prefill) server, then a generation (decode) server, through "
            f"`trtllm-serve disaggregated -c disagg.yaml`: its context_servers ({replicas[0]} instances) and "
            f"generation_servers ({replicas[1]}), each with the urls (host:{port}) of the servers above"]
