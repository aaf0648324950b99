"""A link is a set of inputs: the sidebar's values in the URL, by catalog id (`model=llama-3.1-405b`,
`gpu=h100`), with the walkthrough's stage.

The sidebar does not bind its widgets to the URL itself: a link is read once, on a session's first
run, and every parameter is checked against the one table of ranges (core/bounds.py) before any
widget reads it. A bad value (`seed=inf`, `rate=-5`, `rate=abc`, an unknown model) becomes a notice
that names the parameter, the value and what the Lab used instead, never a traceback. Old links that
held display labels (`model=Llama 3.1 8B (8B)`) still open. After each run the URL is written back
from the sidebar, holding only what differs from the defaults.
"""
from __future__ import annotations

import math

import streamlit as st

from core import bounds
from core.lab.inputs import LOADS, LabInputs
from core.physics import catalog, speculative
from core.serving import engines
from core.serving.workload import LENGTH_DISTS
from ui import widgets

READ = "_link_read"  # set once the session's link has been read
NOTICES = "_link_notices"
CUSTOM = "Custom size (slider)"  # the model list's entry for the size slider (ui.state)
ROUTERS = {"lor": "least outstanding requests", "rr": "round robin", "kv": "least KV load",
           "prefix": "prefix-aware (cached prefix and load)"}
TP_CHOICES = {0: "auto (the planner's choice)", 2: "2", 4: "4", 8: "8", 16: "16"}
PP_CHOICES = {0: "auto (across nodes only)", 1: "1", 2: "2", 4: "4", 8: "8"}
EXPERTS = {"tp": "sliced by tensor parallelism", "ep": "expert parallel", "ep_dp": "expert parallel + DP attention",
           "ep_dp_overlap": "expert parallel + DP attention + two-batch overlap"}
ENGINES = {e: engines.label(e) for e in engines.SERVING}
DTYPES = ("bf16", "fp8", "fp4", "mxfp4", "int4")  # weights (fp16 is bf16's size and speed)
SPEC_METHODS = ("off",) + speculative.METHODS

# URL parameter (= widget key) -> input of the table; the sidebar offers a list of values
OPTIONS = {"prompt": "prompt", "output": "output", "gpus": "gpus", "ttft": "ttft", "budget": "budget",
           "max_seqs": "max_seqs", "block": "block", "tpot": "tpot", "requests": "requests", "size_b": "size_b",
           "sys_prompts": "system_prompts", "sys_tokens": "system_prompt_tokens", "turns": "turns", "turn_gap": "turn_gap",
           "users": "concurrency", "think": "think_time", "spec_k": "spec_tokens_choice",
           "spec_a": "spec_acceptance_choice", "offload": "kv_offload_gb"}
# ... or a range (a slider, a number field)
RANGES = {"rate": "rate", "seed": "seed", "price": "price", "stage": "stage"}
BOOLS = ("cb", "tp_on", "chunked", "prefix_cache", "eplb")
CHOICES = ("dist", "dtype", "kv_dtype", "router", "tp", "pp", "model", "gpu", "load", "spec", "experts", "engine")
# set by Streamlit itself, or by widgets that bind their own parameter (the Lab's chart tabs)
OTHERS = ("embed", "embed_options", "chart")


# widget key -> LabInputs field (ui.state.load sets whole workloads through it)
FIELDS = {"rate": "rate", "prompt": "prompt_tokens", "output": "output_tokens", "gpus": "gpus", "gpu": "gpu",
          "ttft": "ttft_p99_ms", "cb": "continuous_batching", "tp_on": "tensor_parallel", "chunked": "chunked_prefill",
          "budget": "max_batched_tokens", "max_seqs": "max_seqs", "block": "block_size", "tp": "tp", "pp": "pp",
          "dist": "length_dist", "tpot": "tpot_ms", "requests": "requests", "seed": "seed", "router": "router",
          "dtype": "dtype", "kv_dtype": "kv_dtype", "prefix_cache": "prefix_caching", "sys_prompts": "system_prompts",
          "sys_tokens": "system_prompt_tokens", "turns": "turns", "turn_gap": "turn_gap_s", "load": "load",
          "users": "users", "think": "think_s", "spec": "spec_method", "spec_k": "spec_tokens",
          "spec_a": "spec_acceptance", "offload": "kv_offload_gb", "experts": "experts", "eplb": "eplb",
          "engine": "engine"}


def defaults() -> dict:
    """Each parameter's value when the link does not set it."""
    base = LabInputs()
    out = {key: getattr(base, field) for key, field in FIELDS.items()}
    out.update(size_b=70, price=0.0, stage=1, model=base.model)
    out["ttft"], out["tpot"], out["turn_gap"] = int(out["ttft"]), int(out["tpot"]), int(out["turn_gap"])
    return out


def _code(text: str) -> str:
    """A link's own text, shortened and shown as typed (never as Markdown, HTML or a link)."""
    text = str(text)
    return widgets.literal(text[:60] + ("..." if len(text) > 60 else ""))


def _num(v) -> str:
    return f"{v:,g}" if isinstance(v, float) and not float(v).is_integer() else f"{int(v):,}"


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _read_one(key: str, raw: str, default):
    """(value the sidebar takes, notice or None) for parameter `key` given as `raw`."""
    if key in OPTIONS:
        name = OPTIONS[key]
        options = bounds.sidebar_options(name)
        rng = f"{bounds.TABLE[name]['what']} must be one of the sidebar's values from {_num(options[0])} to " \
              f"{_num(options[-1])}"
        try:
            x = float(raw)
        except ValueError:
            x = math.nan
        if not math.isfinite(x) or x < options[0]:
            return default, (rng, _fmt(default) + " (the default)")
        nearest = min(options, key=lambda o: abs(o - x))
        if nearest != x:
            return nearest, (rng, _fmt(nearest) + " (the nearest)")
        return nearest, None
    if key in RANGES:
        name = RANGES[key]
        lo, hi = bounds.sidebar_range(name)
        is_int = bounds.TABLE[name]["type"] == "int"
        unit = f" {bounds.TABLE[name]['unit']}" if bounds.TABLE[name]["unit"] else ""
        rng = f"{bounds.TABLE[name]['what']} must be {'a whole number' if is_int else 'a number'} from {_num(lo)} " \
              f"to {_num(hi)}{unit}"
        try:
            x = float(raw)
        except ValueError:
            x = math.nan
        if not math.isfinite(x) or x < lo:  # below the range: no nearer intent than the default
            return default, (rng, _fmt(default) + " (the default)")
        used = min(x, hi)
        used = int(round(used)) if is_int else float(used)
        if used != x:
            return used, (rng, _fmt(used) + " (the nearest)")
        return used, None
    if key in BOOLS:
        if raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true", None
        return default, ("a switch must be true or false", f"{str(default).lower()} (the default)")
    return _read_choice(key, raw, default)


def _read_choice(key: str, raw: str, default):
    text = raw.strip()
    if key == "dist":
        known = {d: d for d in LENGTH_DISTS}
    elif key == "load":
        known = {d: d for d in LOADS}
    elif key == "spec":
        known = {d: d for d in SPEC_METHODS}
    elif key == "dtype":
        known = {d: d for d in DTYPES}
    elif key == "kv_dtype":
        known = {d: d for d in catalog.KV_DTYPES}
    elif key == "router":
        known = {**{k: k for k in ROUTERS}, **{v: k for k, v in ROUTERS.items()}}
    elif key == "experts":
        known = {**{k: k for k in EXPERTS}, **{v: k for k, v in EXPERTS.items()}}
    elif key == "engine":
        known = {**{k: k for k in ENGINES}, **{v: k for k, v in ENGINES.items()}}
    elif key in ("tp", "pp"):
        labels = TP_CHOICES if key == "tp" else PP_CHOICES
        known = {**{str(k): k for k in labels}, **{v: k for k, v in labels.items()}}
    elif key == "model":
        known = {m: m for m in catalog.model_ids()}
        known.update({model_label(m): m for m in catalog.model_ids()})
        known[CUSTOM] = CUSTOM
    else:  # gpu: a catalog id, a label of old links, or a GPU this server has registered
        known = {g: g for g in catalog.gpu_ids()}
        known.update({gpu_label(g): g for g in catalog.gpu_ids()})
    if text in known:
        return known[text], None
    lowered = {k.lower(): v for k, v in known.items()}
    if text.lower() in lowered:
        return lowered[text.lower()], None
    if key == "model" and text.lower().startswith("dense-"):  # the model-size slider's models
        try:
            size = bounds.check("size_b", float(text.lower()[len("dense-"):].rstrip("b")))
            return ("dense", size), None
        except ValueError:
            pass
    if key in ("gpu", "model"):  # a GPU or a model (config.json) this server has registered
        try:
            return (catalog.get_gpu(text).id if key == "gpu" else catalog.get_model(text).id), None
        except (ValueError, KeyError, AttributeError):
            pass
    ids = [str(k) for k in known.values()]
    names = f"one of {', '.join(dict.fromkeys(ids))}" if len(set(ids)) <= 8 else \
        f"a catalog id ({', '.join(ids[:3])}, ...)"
    return default, (f"it must be {names}", f"{_fmt(default)} (the default)")


def model_label(mid: str) -> str:
    if mid == CUSTOM:
        return CUSTOM
    m = catalog.get_model(mid)
    return f"{m.name} ({m.params() / 1e9:.0f}B{' MoE' if m.is_moe else ''})"


def gpu_label(gid: str) -> str:
    g = catalog.get_gpu(gid)
    return f"{g.name} ({g.memory_gib:g} GiB)"


def read() -> None:
    """On a session's first run, before any widget is drawn: the link's parameters, checked, into
    the sidebar's state; a notice for each that could not be used as given."""
    ss = st.session_state
    if ss.get(READ):
        return
    ss[READ] = True
    given = {k: st.query_params.get_all(k) for k in st.query_params.keys()}
    base = defaults()
    notices = []
    for key, values in given.items():
        raw = values[-1] if values else ""
        if key in OTHERS:
            continue
        if key not in base:
            notices.append(f"The link's parameter {_code(key)} is not one the Lab reads: it was ignored.")
            del st.query_params[key]
            continue
        value, problem = _read_one(key, raw, base[key])
        if problem:
            why, used = problem
            notices.append(f"The link's {_code(f'{key}={raw}')} cannot be used ({why}): the Lab uses {used} instead.")
        if key == "model" and isinstance(value, tuple):  # dense-<N>b: the size slider
            ss["model"], ss["size_b"] = CUSTOM, _nearest_size(value[1])
            continue
        ss["walk_stage" if key == "stage" else key] = value
    ss[NOTICES] = notices


def _nearest_size(size: float):
    return min(bounds.sidebar_options("size_b"), key=lambda o: abs(o - size))


def show_notices() -> None:
    for note in st.session_state.pop(NOTICES, None) or []:
        st.warning(note, icon=":material/link_off:")


def _url_value(key: str, value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return _fmt(value)


def write(page_path: str) -> None:
    """The URL from the sidebar: every parameter that differs from its default, by id; the stage
    only on the walkthrough."""
    ss = st.session_state
    base = defaults()
    want = {}
    for key in base:
        if key == "stage":
            if page_path == "walkthrough" and ss.get("walk_stage", 1) != 1:
                want["stage"] = str(ss["walk_stage"])
            continue
        if key in ss and ss[key] is not None and ss[key] != base[key]:
            want[key] = _url_value(key, ss[key])
    if ss.get("model") == CUSTOM:  # the size slider's model by its id
        want.pop("size_b", None)
        want["model"] = f"dense-{_fmt(ss.get('size_b', 70))}b"
    for key in list(st.query_params.keys()):
        if key in base and key not in want:
            del st.query_params[key]
    for key, v in want.items():
        if st.query_params.get(key) != v:
            st.query_params[key] = v
