"""Serving engines' profiles beyond vLLM V1's (data/engines.json): SGLang's scheduling rule on the
engine loop (policy "sglang": prompts in steps of their own, decodes paused while any wait), the
chunk, budget, CUDA-graph size and batch limit it picks for the GPU it runs on, its overlap
scheduler, its CUDA graphs (decode batches only: a prompt's step is issued op by op), and what its
server adds to a client's TTFT. Its small kernels and host issue of MoE and latent-attention layers
are fitted to its public runs (calibration/fit_moe.py); the host's time per step and per dense layer
are vLLM's fitted constants: no SGLang step times are public to fit them to.

TensorRT-LLM's PyTorch backend (engine "trtllm"): whole prompts in steps of their own (chunked
prefill off; its in-flight batching of them beside the decodes is policy "inflight", which reads its
offline runs further off at the eager issue borrowed from SGLang), admission that reserves each request whole, a KV
pool of 90% of what the weights leave, its LLM API's batch limits, CUDA graphs of decode batches only (up
to 128 sequences, or trtllm-bench's batch limit offline), a step with prompt tokens issued op by
op at SGLang's fitted host issue; a latent-attention layer's kernels at SGLang's fitted time too (on Blackwell
SGLang runs TensorRT-LLM's MLA kernel), its other kernels and host vLLM's; NVIDIA GPUs only.

The engine a person picks for a deployment (SERVING: the Lab's Serving engine, plan --engine) and
the words the pages say it in: its name, what it replaces of vLLM's knobs, how far its figures are
trusted (stepspread.engine_margin)."""
from __future__ import annotations

import json
from functools import lru_cache

from .. import DATA
from ..physics import catalog, vllm_host
from ..physics.memory import MEM_UTIL
from ..physics.costmodel import ENGINES  # noqa: F401 (engine_overhead: a bare forward pass, vLLM V1, SGLang, TRT-LLM)
from .stepspread import engine_margin


# the engines a deployment is served by (the Lab's choice, the planner's): vLLM V1 first, the default
SERVING = ("vllm", "sglang", "trtllm")


@lru_cache(maxsize=1)
def profiles() -> dict:
    return json.loads((DATA / "engines.json").read_text())


def served_by(cfg) -> str:
    """The engine a simulated deployment is served by: the one it was simulated with (a SimConfig's
    engine_overhead; vLLM for a bare forward pass)."""
    return cfg.engine_overhead if cfg.engine_overhead in SERVING else "vllm"


def name(engine: str) -> str:
    """The engine's name as its users write it ('SGLang'; vLLM's is 'vLLM')."""
    return "vLLM" if engine == "vllm" else profiles()[engine]["name"]


def _by_memory(table: list, gpu: catalog.GPU) -> list:
    """The row of a table keyed by a GPU's memory (GiB below each row's bound)."""
    return next(row[1:] for row in table if gpu.memory_gib < row[0])


def sglang_defaults(gpu: catalog.GPU, tp: int, dp_attention: bool = False, disagg: bool = False) -> dict:
    """SimConfig fields SGLang's own defaults set on `gpu` at `tp`: its engine and rule, its chunk
    (the prefill step's budget; data-parallel attention divides it by the ranks) and its
    running-request limit. Its prefill-first rule orders prompts against decodes in one server: in
    a prefill/decode split, whose servers each run one kind, the pools chunk at its chunk."""
    s = profiles()["sglang"]
    chunk = _by_memory(s["chunked_prefill_size"]["by_memory_gib"], gpu)[0]
    if dp_attention:
        chunk = max(1, chunk // tp)
    return dict(engine_overhead="sglang", policy="sarathi" if disagg else s["policy"]["value"],
                max_batched_tokens=chunk, chunk=chunk,
                max_seqs=max_seqs("sglang", 0))


def label(engine: str) -> str:
    """The engine as a choice names it."""
    return "vLLM V1" if engine == "vllm" else name(engine)


def choice_help() -> str:
    """What choosing an engine changes in the simulation, each rule from data/engines.json."""
    s, t = profiles()["sglang"], profiles()["trtllm"]
    return ("The engine that serves, as it runs out of the box: its rule on the loop, its token budget and batch "
            "limit for the GPU, its CUDA graphs and its server's time. vLLM V1: the Lab's default, the knobs "
            f"below. SGLang: {s['policy']['why']}; {s['cuda_graphs']['why'].split(':')[0]}; "
            f"{s['overlap_schedule']['why'].split(':')[0]}. TensorRT-LLM (its PyTorch backend): {t['policy']['why']}; "
            f"{t['admission']['why'].split(': ', 1)[1]}; the KV cache takes 90% of the memory the weights leave. "
            "The recommended deployment's commands are the engine's own (its launch line, flags and container image).")


def runs_on(engine: str, gpu: catalog.GPU) -> bool:
    """Whether an engine serves on the GPU's vendor (TensorRT-LLM: NVIDIA's only)."""
    vendors = profiles().get(engine, {}).get("vendors", {}).get("value")
    return not vendors or gpu.vendor in vendors


def check_gpu(engine: str, gpu: catalog.GPU) -> None:
    """Refuse, in one sentence naming the fix, an engine on a GPU it does not run on."""
    if not runs_on(engine, gpu):
        raise ValueError(f"{name(engine)} runs on {', '.join(profiles()[engine]['vendors']['value'])} GPUs only, not "
                         f"the {gpu.name}: choose vLLM or SGLang as the serving engine (Advanced; plan --engine), or "
                         f"another GPU")


def planned_on(engine: str) -> str:
    """What engine a plan is simulated and served on, in a sentence."""
    if engine == "vllm":
        return ("Served by vLLM V1 (Serving engine, under Advanced): the schedules searched are vLLM's, and the "
                "answers end in `vllm serve` lines.")
    return (f"Served by {name(engine)} (Serving engine, under Advanced): every deployment runs {name(engine)}'s own "
            f"schedule and limits for its GPU, and the answers end in its own serving lines." + unvalidated_note(engine))


def unvalidated_note(engine: str) -> str:
    """A sentence on how much slower the checks take an engine the constants were fitted to no run of ('' otherwise)."""
    margin, measured = engine_margin(engine)
    if not margin:
        return ""
    return (f" The simulator's constants were fitted to no {name(engine)} run, so every check takes each step a "
            f"further {margin:.1%} slower (the worst error of its {measured}).")


def own_limits_note(engine: str, gpu: catalog.GPU) -> str:
    """A sentence for the knobs an engine's own limits replace ('' under vLLM)."""
    if engine == "vllm":
        return ""
    if engine == "sglang":
        d = sglang_defaults(gpu, 1)
        own = (f"prompts in steps of their own, chunks of {d['chunk']:,} tokens on {gpu.name} (its "
               f"chunked_prefill_size), up to {d['max_seqs']:,} running requests")
    else:
        d = trtllm_defaults()
        own = (f"whole prompts in steps of their own, up to {d['max_batched_tokens']:,} tokens and {d['max_seqs']:,} "
               f"sequences a step (its max_num_tokens and max_batch_size)")
    return f" Under {name(engine)} its own apply instead: {own}."


def max_seqs(engine: str, vllm: int) -> int:
    """The sequences a step an engine runs when a deployment sets none: SGLang's running-request
    limit, TensorRT-LLM's LLM API's batch limit, else `vllm` (the Lab's for vLLM)."""
    if engine == "sglang":
        return profiles()["sglang"]["max_running_requests"]["value"]
    if engine == "trtllm":
        return profiles()["trtllm"]["batch_limits"]["value"][1]
    return vllm


def sglang_capture(gpu: catalog.GPU, tp: int) -> int:
    """The largest decode batch SGLang replays through a CUDA graph on `gpu` at `tp`."""
    small, large = _by_memory(profiles()["sglang"]["cuda_graph_max_bs"]["by_memory_gib"], gpu)
    return large if tp >= 4 else small


def trtllm_defaults() -> dict:
    """SimConfig fields TensorRT-LLM's LLM API and trtllm-serve set when a deployment sets none: its
    engine, whole prompts in steps of their own, its token budget and batch limit, and admission that
    reserves each request whole (GUARANTEED_NO_EVICT)."""
    t = profiles()["trtllm"]
    return dict(engine_overhead="trtllm", policy=t["policy"]["value"], max_batched_tokens=t["batch_limits"]["value"][0],
                chunk=None, max_seqs=max_seqs("trtllm", 0), no_evict=t["admission"]["value"] == "no_evict")


# how admission weighs a prompt against the KV cache: what it needs now (vLLM's, SGLang's; preempting
# when the cache fills), or the whole length of every admitted request (TensorRT-LLM's default)
ADMISSION = ("fits-now", "no-evict")


def kv_memory(engine: str, gpu: catalog.GPU, tp: int, pp: int = 1, dp_attention: bool = False, mem_util: float = MEM_UTIL,
              role: str = "serving") -> dict:
    """How the engine sizes its KV pool, as plan_memory's fields: whether it holds a sliding-window
    layer's last window only, set aside a sequence (vLLM's hybrid KV cache manager), or sizes a window
    layer's tokens with the pool's, at a share of a full layer's (SGLang's 0.8, TensorRT-LLM's whole context: 1);
    what its memory share is of and holds (memory.SHARES: vLLM's gpu_memory_utilization, TensorRT-LLM's
    free-memory fraction, SGLang's mem_fraction_static); and the share, SGLang's own for the GPU, shape
    and pool `role` ("serving", or a split's "prefill" or "decode") where a deployment keeps the default
    (data/engines.json kv_pool and kv_memory)."""
    p = profiles().get(engine, {})
    share = p.get("kv_memory", {}).get("value", "gpu")
    if share == "static" and mem_util == MEM_UTIL:
        mem_util = sglang_mem_fraction(gpu, tp, pp, dp_attention, role)
    pool = p.get("kv_pool", {})
    window_share = 1.0 if pool.get("value") == "every_layer_full" else pool.get("swa_full_tokens_ratio")
    return dict(mem_util=mem_util, share=share, window_share=window_share)


def sglang_mem_fraction(gpu: catalog.GPU, tp: int, pp: int = 1, dp_attention: bool = False,
                        role: str = "serving") -> float:
    """SGLang's default mem_fraction_static on `gpu`: the share of its memory left to the weights and
    the KV pool once a reserve for activations (its chunk; a decode server's, its decode batch) and
    decode CUDA graphs (none on a prefill server) is kept back."""
    r = profiles()["sglang"]["kv_memory"]["reserve_mib"]
    chunk = _by_memory(profiles()["sglang"]["chunked_prefill_size"]["by_memory_gib"], gpu)[0]
    graph_bs = sglang_capture(gpu, tp)
    # a decode server's activations are its running batch's (at most its graph's when unset), else a chunk's
    activation_tokens = max(graph_bs if role == "decode" else chunk, r["activation_tokens_min"])
    reserve = r["metadata"] + r["per_activation_token"] * activation_tokens + r["per_8_gpus_of_tp_x_pp"] * tp * pp / 8
    if role != "prefill":
        reserve += r["per_decode_graph_seq"] * graph_bs
    if dp_attention and role != "prefill":  # padding for the ranks' joined batches, more for a large graph
        reserve += r["dp_attention_per_graph_seq_and_rank"] * graph_bs * tp
        if graph_bs > r["dp_attention_large_graph_bs"]:
            reserve += r["dp_attention_large_graph_per_seq_and_rank"] * graph_bs * tp
    memory_mib = gpu.memory_gib * 1024
    if gpu.memory_gib > r["floor_above_gib"]:
        reserve = max(reserve, r["floor"])
    return round((memory_mib - reserve) / memory_mib, 3)


def trtllm_capture(max_seqs: int, offline: bool) -> int:
    """The largest decode batch TensorRT-LLM replays through a CUDA graph: its default, or under
    trtllm-bench (offline) its batch limit."""
    return max_seqs if offline else min(max_seqs, profiles()["trtllm"]["cuda_graph_max_bs"]["value"])


def cuda_graph_capture(engine: str, gpu: catalog.GPU, tp: int, max_seqs: int, budget: int, offline: bool) -> int:
    """The largest step an engine replays through a CUDA graph: SGLang's decode limit for the GPU,
    TensorRT-LLM's (trtllm-bench's offline), else vLLM's default capture sizes."""
    if engine == "sglang":
        return sglang_capture(gpu, tp)
    if engine == "trtllm":
        return trtllm_capture(max_seqs, offline)
    return vllm_host.capture_tokens(max_seqs, budget)


def vllm_batch_defaults(gpu: catalog.GPU, offline: bool = False) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM V1 picks on `gpu` when a deployment sets neither:
    its API server's, or its offline LLM class's (data/engines.json vllm.batch_defaults)."""
    d = profiles()["vllm"]["batch_defaults"]
    large = gpu.memory_gib >= d["large_gib"] and d["not_named"] not in f"{gpu.id} {gpu.name}".lower()
    budget, seqs = d["large" if large else "other"]["offline" if offline else "api_server"]
    return budget, seqs


def server_ttft_ms(engine: str, fitted_api_ms: float, gpu: catalog.GPU) -> float:
    """What an engine's server adds to a client's TTFT: vLLM's fitted API-server time (which
    trtllm-serve, an OpenAI-compatible server in Python too, takes), or SGLang's; on the GPU's host,
    whose CPU may take longer than the x86 servers they were measured on (GPU.host_time_factor)."""
    ms = profiles()["sglang"]["server_ttft_ms"]["value"] if engine == "sglang" else fitted_api_ms
    return ms * gpu.host_time_factor
