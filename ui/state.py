"""The sidebar: the seed's workload inputs, its two toggles and an Advanced section.

Every widget is keyed, so the sidebar survives page changes; ui.links reads a shared link into it
(checked first) and writes it back to the URL, so a link reproduces the view. The values each widget
offers come from the one table of ranges (core/bounds.py). `inputs()` reads the widgets into a LabInputs;
`load()` sets them (scenario cards, rule buttons), to take effect on the next run.
"""
from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

from core import bounds
from core.physics import catalog, speculative
from core.lab import sweeps
from core.lab.inputs import LabInputs, with_trace_lengths
from core.serving import engines, offload, serve_command
from core.serving.workload import LENGTH_DISTS, TRACE_MAX_BYTES, TRACE_MAX_ROWS
from ui import links, widgets, yourgpu, yourmodel

DEFAULTS = LabInputs()
LOAD_LABELS = {"rate": "request rate", "users": "concurrent users"}
TOKENS = bounds.sidebar_options("prompt")
TARGETS_MS = bounds.sidebar_options("ttft")
SIZES_B = bounds.sidebar_options("size_b")
CUSTOM = links.CUSTOM
MODEL_CHOICES = catalog.model_ids() + [CUSTOM]
WEIGHT_CHOICES = list(links.DTYPES)  # fp16 is bf16's size and speed: not a choice of its own
GPU_COUNTS = bounds.sidebar_options("gpus")  # every count a planned deployment may need
TRACE_KEY = "trace_csv"
TRACE_MAX_MB = TRACE_MAX_BYTES // 2**20  # the uploader's own limit: the parser's
UPLOAD_GENERATION = "trace_upload_generation"


def _model_label(mid: str) -> str:
    if mid == CUSTOM:
        return CUSTOM
    m = catalog.get_model(mid)
    if mid.startswith(catalog.MODEL_PREFIX):
        return f"{m.name} (your config.json, {m.params() / 1e9:.3g}B{' MoE' if m.is_moe else ''})"
    return f"{m.name} ({m.params() / 1e9:.0f}B{' MoE' if m.is_moe else ''})"


def weights_label(dtype: str) -> str:
    return catalog.weight_format(dtype).label


def kv_label(kv_dtype: str) -> str:
    return catalog.kv_format(kv_dtype).label


gpu_label = links.gpu_label


def _start(key: str, default):
    """The value a sidebar widget is declared with: the session's own where it has one (a link's, a
    scenario's, the last run's). Streamlit's frontend draws a widget at its declared value first and
    puts the session's in a render later, so a shared link showed the defaults for a moment
    (50 ms on an idle machine, 0.2 s on a loaded one) before its own values."""
    return st.session_state.get(key, default)


def _start_index(key: str, options: list, default) -> int:
    """_start for a select box: the index of the session's value among its options."""
    value = _start(key, default)
    return options.index(value) if value in options else options.index(default)


def sidebar() -> None:
    """Draw the inputs (call once per run, from navigation.py)."""
    sb = st.sidebar
    sb.header("Workload")
    sb.caption("These are inputs, not preset architecture stages.")
    sb.segmented_control("Load", list(LOAD_LABELS), default=_start("load", DEFAULTS.load), key="load",
                         format_func=LOAD_LABELS.get, required=True,
                         help="An open loop: requests arrive at a rate, whatever the server does (production "
                              "traffic). Or a closed loop: a fixed number of users, each sending its next request "
                              "when its answer is complete, as benchmarks run (vllm bench serve --max-concurrency).")
    if st.session_state.get("load", DEFAULTS.load) == "users":
        sb.select_slider("Concurrent users", bounds.sidebar_options("concurrency"), _start("users", DEFAULTS.users),
                         key="users", persist_state="session",
                         help="Users in a closed loop: at most this many requests are in flight. A closed loop "
                              "cannot overload the server; past its batch slots, users wait in the queue.")
        sb.select_slider("Think time (s)", bounds.sidebar_options("think_time"), _start("think", DEFAULTS.think_s),
                         key="think", persist_state="session",
                         help="Seconds a user waits after an answer before its next request (0: a benchmark "
                              "client, which sends at once).")
    else:
        # a typed number, not a slider: the range runs to fleet scale (100,000 req/s), where a slider's steps
        # would be either too coarse for one GPU or too many to drag through
        sb.number_input("Request rate (req/s)", *map(float, bounds.sidebar_range("rate")),
                        float(_start("rate", DEFAULTS.rate)), 0.1, key="rate", format="%g", persist_state="session",
                        help=f"New generation requests arriving per second (up to "
                             f"{bounds.sidebar_range('rate')[1]:,.0f}: a fleet's traffic). Each runs "
                             f"autoregressively until its output is complete.")
    sb.select_slider("Avg prompt tokens", TOKENS, _start("prompt", DEFAULTS.prompt_tokens), key="prompt",
                     help="Input length processed in the prefill phase; sets the starting size of each KV cache. "
                          "With shared system prompts or conversations (Advanced), the user's own message of each "
                          "turn.")
    sb.select_slider("Avg output tokens", bounds.sidebar_options("output"), _start("output", DEFAULTS.output_tokens),
                     key="output",
                     help="Tokens generated one at a time in the decode phase; the KV cache grows for each.")
    choices = yourmodel.options(catalog.model_ids(), CUSTOM)
    sb.selectbox("Model size", choices, _start_index("model", choices, DEFAULTS.model), format_func=_model_label,
                 key="model",
                 help="Parameter count. Weights at 16-bit take ~2 bytes each and must fit in GPU memory before "
                      "any KV cache. Your own model: upload or paste its config.json under Advanced.")
    model = st.session_state.get("model", DEFAULTS.model)
    own = yourmodel.caption() or (serve_command.release_note(model, st.session_state.get("dtype", DEFAULTS.dtype))
                                  if model in catalog.model_ids() else None)
    if own:
        sb.caption(own)
    if st.session_state.get("model") == CUSTOM:
        sb.select_slider("Parameters (billions)", SIZES_B, _start("size_b", 70), key="size_b",
                         help="A dense model of this size, shaped by interpolating the Llama-3 family (layers, "
                              "hidden size, 8 KV heads): an interpolation, not a released model.")
    sb.select_slider("GPU count", GPU_COUNTS, _start("gpus", DEFAULTS.gpus), key="gpus",
                     help="GPUs available to serve the model. More GPUs add memory and compute, via replicas or "
                          "tensor-parallel shards.")
    gpu_choices = yourgpu.options()
    sb.selectbox("GPU type", gpu_choices, _start_index("gpu", gpu_choices, DEFAULTS.gpu), format_func=gpu_label,
                 key="gpu")
    sb.select_slider("p99 time-to-first-token (ms)", TARGETS_MS, _start("ttft", int(DEFAULTS.ttft_p99_ms)), key="ttft",
                     help="Latency budget from request arrival to the first streamed token; the prefill phase "
                          "must fit inside it.")
    sb.toggle("Continuous batching + paged attention", _start("cb", DEFAULTS.continuous_batching), key="cb",
              help="In-flight batching admits and retires requests every step; paged attention stores the KV "
                   "cache in fixed pages to avoid fragmentation.")
    sb.toggle("Tensor-parallel sharding", _start("tp_on", DEFAULTS.tensor_parallel), key="tp_on",
              help="Split each layer across GPUs so a model larger than one GPU can run, at the cost of per-step "
                   "collective communication.")
    # the knobs are drawn only while the section is open: closed, their 18 widgets would cost the browser
    # about half a second on every page (bench/first_visit.py)
    with sb.expander("Advanced", key="advanced", on_change="rerun") as advanced:
        if advanced.open:
            _knobs()
        upload = st.file_uploader(f"Replay a trace (CSV: arrival_s,prompt_tokens,output_tokens; optionally "
                                  f"conversation_id, prefix_id, prefix_tokens; at most {TRACE_MAX_ROWS:,} requests "
                                  f"and {TRACE_MAX_MB} MB)", type=["csv"],
                                  key=f"trace_upload_{st.session_state.get(UPLOAD_GENERATION, 0)}",
                                  max_upload_size=TRACE_MAX_MB)
        st.session_state[TRACE_KEY] = (upload.getvalue().decode("utf-8", errors="replace")
                                       if upload is not None else None)
        if st.session_state[TRACE_KEY] is not None:
            try:
                st.caption(sweeps.trace_replaces(st.session_state[TRACE_KEY]))
            except ValueError as e:
                st.caption(f"This trace cannot be replayed: {widgets.message(e)}")
        yourgpu.section()
        yourmodel.section()



def _knobs() -> None:
    """The Advanced section's engine and workload knobs. Each keeps its value while it is not drawn (a
    closed section): persist_state="session"."""
    st.selectbox("Serving engine", list(links.ENGINES), 0, key="engine", persist_state="session",
                 format_func=links.ENGINES.get, help=engines.choice_help())
    engine = st.session_state.get("engine", DEFAULTS.engine)
    own = engines.own_limits_note(engine, catalog.get_gpu(st.session_state.get("gpu", DEFAULTS.gpu)))
    st.toggle("Chunked prefill (Sarathi-Serve)", DEFAULTS.chunked_prefill, key="chunked", persist_state="session",
              disabled=not st.session_state.get("cb", DEFAULTS.continuous_batching) or engine != "vllm",
              help="Split long prompts into chunks that share steps with the decodes, under a token budget. "
                   "Off: vLLM's prefill-first scheduling, whole prompts in steps of their own. Needs continuous "
                   "batching: a static batch prefills its members together." + own)
    # vLLM's own pair on the GPUs it gives more (data/engines.json), beside the Lab's one for all
    budget, seqs = engines.vllm_batch_defaults(catalog.get_gpu("h100"))
    st.select_slider("Token budget per step", bounds.sidebar_options("budget"),
                     DEFAULTS.max_batched_tokens, key="budget", persist_state="session", disabled=engine != "vllm",
                     help=f"Most tokens one engine step processes (vLLM's max_num_batched_tokens); with chunked "
                          f"prefill a prompt's chunk is as large as the budget allows, as vLLM V1 and "
                          f"Sarathi-Serve run it. Default {DEFAULTS.max_batched_tokens:,}: vLLM V1's online-serving "
                          f"default on A100s and GPUs under 70 GiB (it uses {budget:,} on H100-class GPUs; "
                          f"EngineArgs.get_batch_defaults)." + own)
    st.select_slider("Max batch (sequences per step)", bounds.sidebar_options("max_seqs"),
                     DEFAULTS.max_seqs, key="max_seqs", persist_state="session", disabled=engine != "vllm",
                     help=f"Most sequences one engine step runs (vLLM's max_num_seqs, SGLang's "
                          f"max_running_requests). Default {DEFAULTS.max_seqs:,}: vLLM V1's online-serving default on "
                          f"A100s and GPUs under 70 GiB (it uses {seqs:,} on H100-class GPUs; "
                          f"EngineArgs.get_batch_defaults)." + own)
    st.select_slider("KV block size (tokens)", bounds.sidebar_options("block"), DEFAULTS.block_size, key="block",
                     persist_state="session")
    st.selectbox("Tensor-parallel degree", list(links.TP_CHOICES), 0, key="tp", persist_state="session",
                 format_func=links.TP_CHOICES.get)
    st.selectbox("Pipeline stages per replica", bounds.sidebar_options("pp_choice"), 0, key="pp",
                 persist_state="session", format_func=links.PP_CHOICES.get,
                 help="Each stage holds layers / stages of the model on its own tp GPUs; as many batches are "
                      "in flight as there are stages (vLLM's pipeline_parallel_size). Auto: a replica larger "
                      "than a node runs tensor parallel within each node and one stage per node.")
    st.selectbox("Experts of a mixture of experts", list(links.EXPERTS), 0, key="experts", persist_state="session",
                 format_func=links.EXPERTS.get,
                 help="How a sharded MoE model's experts split over a replica's GPUs. Sliced: every GPU holds a "
                      "slice of every expert (tensor parallelism). Expert parallel: each GPU holds experts / tp "
                      "whole experts, and the busiest GPU's routed tokens set the pace (vLLM's "
                      "--enable-expert-parallel). + DP attention: each GPU also runs attention and its own "
                      "sequences' KV cache for 1/tp of the batch, and an all-to-all sends each token to its "
                      "experts' GPUs and back (vLLM's --data-parallel-size, SGLang's --enable-dp-attention; "
                      "DeepSeek-V3's deployment). + two-batch overlap: each step as two micro-batches, one's "
                      "all-to-all under the other's compute, each streaming the weights (vLLM's --enable-dbo, "
                      "SGLang's --enable-two-batch-overlap). Under prefill/decode disaggregation each pool splits its experts "
                      "over its own replica, the decode pool as wide as the prefill pool or wider. A dense "
                      "model, or one GPU, has no experts to split.")
    st.toggle("Expert load balancer (EPLB)", DEFAULTS.eplb, key="eplb", persist_state="session",
              disabled=st.session_state.get("experts", DEFAULTS.experts) == "tp",
              help="With the experts split: vLLM's --enable-eplb places them, and a redundant copy of a popular "
                   "expert on every GPU, so that each GPU receives about the mean of the routed tokens (the "
                   "busiest of 32 at 1.11x the mean, TensorRT-LLM measured, where it is 2.56x without). Each "
                   "copy costs a whole expert's memory on every GPU.")
    st.toggle("Prefix caching", DEFAULTS.prefix_caching, key="prefix_cache", persist_state="session",
              disabled=not st.session_state.get("cb", DEFAULTS.continuous_batching),
              help="Reuse the KV blocks of a prompt's prefix that an earlier request computed (a shared "
                   "system prompt, a conversation's earlier turns) instead of prefilling them again; cached "
                   "blocks no request holds are evicted least recently used when memory is needed. vLLM V1 "
                   "turns it on by default. Needs paged KV (continuous batching).")
    st.select_slider("Shared system prompts", bounds.sidebar_options("system_prompts"),
                     DEFAULTS.system_prompts, key="sys_prompts", persist_state="session",
                     help="Distinct system prompts the requests start with, each request one of them at random "
                          "(0: no prompt shares a prefix). The prompt length above is then the user's own "
                          "message, after the system prompt.")
    st.select_slider("System prompt tokens", bounds.sidebar_options("system_prompt_tokens"),
                     DEFAULTS.system_prompt_tokens, key="sys_tokens", persist_state="session",
                     disabled=not st.session_state.get("sys_prompts", DEFAULTS.system_prompts),
                     help="Length of each shared system prompt.")
    st.select_slider("Turns per conversation", bounds.sidebar_options("turns"), DEFAULTS.turns, key="turns",
                     persist_state="session",
                     help="A chat sends each turn's prompt with every earlier turn and answer in it, so a later "
                          "turn's prompt starts with what the cache may still hold. 1: single requests.")
    st.select_slider("Seconds between turns", bounds.sidebar_options("turn_gap"), int(DEFAULTS.turn_gap_s),
                     key="turn_gap", persist_state="session", disabled=st.session_state.get("turns", 1) <= 1,
                     help="From one turn of a conversation to the next (the Lab's assumption: a person reading "
                          "and typing; the next turn does not wait for a slow answer).")
    st.selectbox("Length distribution", LENGTH_DISTS, LENGTH_DISTS.index(DEFAULTS.length_dist), key="dist",
                 persist_state="session",
                 help="How prompt and output lengths vary around their averages. sharegpt and longprompt are "
                      "presets with cited statistics (their shapes; the averages above still apply).")
    st.select_slider("p99 time-per-output-token target (ms)", bounds.sidebar_options("tpot"),
                     int(DEFAULTS.tpot_ms), key="tpot", persist_state="session")
    st.select_slider("Simulated requests", bounds.sidebar_options("requests"),
                     DEFAULTS.requests, key="requests", persist_state="session")
    st.number_input("Seed", *bounds.sidebar_range("seed"), DEFAULTS.seed, key="seed", persist_state="session")
    st.selectbox("Router", list(links.ROUTERS), 0, key="router", persist_state="session", format_func=links.ROUTERS.get,
                 help="How the gateway picks a replica. Prefix-aware scores each replica by the share of the "
                      "request's prompt it holds cached, against its queue and its free KV (llm-d's scheduler's "
                      f"default weights: {offload.router_weights()}): a conversation's next turn goes where its "
                      "earlier turns are. Needs prefix caching.")
    cache_on = st.session_state.get("prefix_cache", DEFAULTS.prefix_caching) and st.session_state.get(
        "cb", DEFAULTS.continuous_batching)
    st.select_slider("KV offload to host memory (GiB per replica)", bounds.sidebar_options("kv_offload_gb"),
                     DEFAULTS.kv_offload_gb, key="offload", persist_state="session", disabled=not cache_on,
                     format_func=lambda gb: "off" if gb == 0 else f"{gb:g} GiB",
                     help="A tier of host memory under the prefix cache (vLLM's --kv-offloading-size, LMCache's "
                          "CPU store): blocks the GPU evicts go there, and a later prompt that finds them loads "
                          f"them back over PCIe ({offload.host_links()}) instead of computing them again, "
                          "waiting while the copy runs. Needs prefix caching.")
    st.selectbox("Weights", WEIGHT_CHOICES, 0, key="dtype", persist_state="session", format_func=weights_label,
                 help="fp8 halves the weight bytes and runs the GEMMs on FP8 tensor cores; int4 (4-bit with "
                      "a scale per 128 weights, as AWQ and GPTQ store them) takes about a quarter and multiplies "
                      "at the 16-bit rate; mxfp4 (gpt-oss's experts) takes a mixture's routed experts only. On a GPU "
                      "without FP8 support (the A100) fp8 weights run weight-only, as vLLM's FP8 Marlin runs them: "
                      "half the bytes, multiplied at the 16-bit rate.")
    st.selectbox("KV cache", list(catalog.KV_DTYPES), 0, key="kv_dtype", persist_state="session", format_func=kv_label,
                 help="An fp8 cache stores a token in half the bytes of a 16-bit one: twice the blocks in the "
                      "same memory, and half the bytes each decode step reads. Needs FP8 support.")
    _speculation()


SPEC_LABELS = {"off": "off", "draft": "draft model", "eagle": "EAGLE head", "eagle3": "EAGLE-3 head",
               "mtp": "MTP module (DeepSeek)", "ngram": "n-gram prompt lookup"}


def _speculation() -> None:
    """Speculative decoding's knobs; the counts default to the chosen method's published ones."""
    st.selectbox("Speculative decoding", list(links.SPEC_METHODS), 0, key="spec", persist_state="session",
                 format_func=SPEC_LABELS.get, disabled=not st.session_state.get("cb", DEFAULTS.continuous_batching),
                 help="A proposer guesses the next tokens; the model checks them all in one step and keeps them up "
                      "to the first it disagrees with, plus one of its own. Fewer steps per token when batches are "
                      "small (memory-bound steps); little or nothing when large batches make steps compute-bound. "
                      "A draft model is the catalog's smallest with this model's tokenizer; MTP is DeepSeek-V3's. "
                      "Needs continuous batching: it is a rule of iteration-level scheduling.")
    method = st.session_state.get("spec", "off")
    off = method == "off"
    defaults = speculative.method_defaults(method) if not off else None
    st.select_slider("Draft tokens a step", bounds.sidebar_options("spec_tokens_choice"), 0, key="spec_k",
                     persist_state="session", disabled=off,
                     format_func=lambda k: (f"the method's ({defaults['spec_tokens']})" if defaults else "the method's")
                     if k == 0 else str(k),
                     help="vLLM's num_speculative_tokens: drafts proposed and verified each step.")
    st.select_slider("Draft acceptance rate", bounds.sidebar_options("spec_acceptance_choice"), -1, key="spec_a",
                     persist_state="session", disabled=off,
                     format_func=lambda a: (f"the method's ({defaults['acceptance']:.0%})" if defaults else "the method's")
                     if a < 0 else f"{a:.0%}",
                     help="Chance that a draft token is accepted, given the ones before it were: it depends on the "
                          "proposer and the text (code and summaries repeat more than chat). The default is the "
                          "method's published rate (its source: the Rules page).")

def inputs(ss: Mapping | None = None) -> LabInputs:
    """The current inputs, from the widgets (defaults where a widget is not drawn; with a replayed trace,
    the trace's mean lengths in place of the sliders'); `ss`: widget values in place of this session's."""
    ss = st.session_state if ss is None else ss
    model = ss.get("model", DEFAULTS.model)
    if model == CUSTOM:
        model = f"dense-{ss.get('size_b', 70):g}b"
    return with_trace_lengths(LabInputs(
        rate=float(ss.get("rate", DEFAULTS.rate)), load=ss.get("load") or DEFAULTS.load,
        users=int(ss.get("users", DEFAULTS.users)), think_s=float(ss.get("think", DEFAULTS.think_s)),
        prompt_tokens=int(ss.get("prompt", DEFAULTS.prompt_tokens)),
        output_tokens=int(ss.get("output", DEFAULTS.output_tokens)), model=model, gpus=int(ss.get("gpus", DEFAULTS.gpus)),
        gpu=yourgpu.priced(ss.get("gpu", DEFAULTS.gpu), ss.get("price")), ttft_p99_ms=float(ss.get("ttft", DEFAULTS.ttft_p99_ms)),
        continuous_batching=bool(ss.get("cb", DEFAULTS.continuous_batching)),
        tensor_parallel=bool(ss.get("tp_on", DEFAULTS.tensor_parallel)),
        chunked_prefill=bool(ss.get("chunked", DEFAULTS.chunked_prefill)), tp=int(ss.get("tp", 0)),
        pp=int(ss.get("pp", 0)),
        block_size=int(ss.get("block", DEFAULTS.block_size)), max_seqs=int(ss.get("max_seqs", DEFAULTS.max_seqs)),
        max_batched_tokens=int(ss.get("budget", DEFAULTS.max_batched_tokens)),
        length_dist=ss.get("dist", DEFAULTS.length_dist), tpot_ms=float(ss.get("tpot", DEFAULTS.tpot_ms)),
        requests=int(ss.get("requests", DEFAULTS.requests)), seed=int(ss.get("seed", DEFAULTS.seed)),
        router=ss.get("router", DEFAULTS.router), dtype=ss.get("dtype", DEFAULTS.dtype),
        kv_dtype=ss.get("kv_dtype", DEFAULTS.kv_dtype),
        prefix_caching=bool(ss.get("prefix_cache", DEFAULTS.prefix_caching)),
        system_prompts=int(ss.get("sys_prompts", DEFAULTS.system_prompts)),
        system_prompt_tokens=int(ss.get("sys_tokens", DEFAULTS.system_prompt_tokens)),
        turns=int(ss.get("turns", DEFAULTS.turns)), turn_gap_s=float(ss.get("turn_gap", DEFAULTS.turn_gap_s)),
        spec_method=ss.get("spec", DEFAULTS.spec_method), spec_tokens=int(ss.get("spec_k", DEFAULTS.spec_tokens)),
        spec_acceptance=float(ss.get("spec_a", DEFAULTS.spec_acceptance)),
        kv_offload_gb=float(ss.get("offload", DEFAULTS.kv_offload_gb)), experts=ss.get("experts", DEFAULTS.experts),
        eplb=bool(ss.get("eplb", DEFAULTS.eplb)), engine=ss.get("engine", DEFAULTS.engine), trace_csv=ss.get(TRACE_KEY)))


def valid_inputs() -> LabInputs:
    """The current inputs, or, when they cannot be simulated, a message saying what to change and the page ends."""
    current = inputs()
    try:
        current.validate()
    except ValueError as e:
        widgets.show_error(e, "This workload")
        st.stop()
    return current


FIELDS = links.FIELDS  # widget key -> LabInputs field


def apply(values: dict) -> None:
    """Set only the sidebar fields `values` names (LabInputs fields), keeping every other: a button
    that adopts a deployment (a widget callback, so it takes effect on the run it starts)."""
    ss = st.session_state
    for key, field in FIELDS.items():
        if field in values:
            ss[key] = values[field]


def load(values: dict) -> None:
    """Set the sidebar to a whole workload (a scenario card, a rule's demo): the fields `values`
    gives, and the defaults for every other, so that what the card promised is what the Lab runs.
    A replayed trace would replace that workload, so it is put down too."""
    ss = st.session_state
    whole = {**DEFAULTS.to_dict(), **values}
    for key, field in FIELDS.items():
        v = whole[field]
        if key in ("ttft", "tpot", "turn_gap"):
            v = int(v)
        ss[key] = v
    m = whole["model"]
    if m.startswith("dense-"):
        ss["model"] = CUSTOM
        ss["size_b"] = float(m[len("dense-"):-1]) if m.endswith("b") else 70
    else:
        ss["model"] = m
    ss[TRACE_KEY] = None
    ss[UPLOAD_GENERATION] = ss.get(UPLOAD_GENERATION, 0) + 1  # a new uploader key: an empty uploader
