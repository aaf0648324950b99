"""Where a deployment's weights come from: the Hugging Face release of each catalog model
(data/models.json), the format it is released in, and the checkpoint and quantisation flags a
weight format is served with (data/recipes.json), with notes on what no flag can say. Shared by
each engine's serving command (serve_command.py: vLLM's; serve_sglang.py; serve_trtllm.py).
"""
from __future__ import annotations

import json
from functools import lru_cache

from .. import DATA
from ..physics import catalog, speculative


@lru_cache(maxsize=1)
def recipes() -> dict:
    return json.loads((DATA / "recipes.json").read_text())


@lru_cache(maxsize=1)
def hf_repos() -> dict[str, str]:
    """The Hugging Face release of each catalog model (data/models.json hf_repo)."""
    return {m["id"]: m["hf_repo"] for m in json.loads((DATA / "models.json").read_text())["models"] if m.get("hf_repo")}


def repo_of(model_id: str) -> str:
    """The Hugging Face repo a catalog model is served from (its own id where the catalog knows none)."""
    return hf_repos().get(model_id, model_id)


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


def checkpoint(model_id: str, dtype: str, engine: str = "vLLM") -> tuple[str, list[str], list[str]]:
    """(the Hugging Face repo to serve, the quantisation flags, notes) for a model in a weight dtype:
    an fp8 release where the model ships one (`engine`, vLLM or SGLang, reads its quantisation from
    the checkpoint), else the 16-bit release quantised to fp8 as it loads (--quantization fp8)."""
    model = catalog.get_model(model_id)
    repo = repo_of(model.id)
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
                                  f"{engine} reads the method from its config"]
    if dtype == "fp4":
        return repo, [], notes + [f"fp4: serve an NVFP4 checkpoint of {repo} in its place (NVIDIA ModelOpt or "
                                  f"llm-compressor quantise one); {engine} reads the method from its config"]
    if dtype == "mxfp4":
        if "mxfp4" in released:  # the release itself carries MXFP4 experts: vLLM reads the method from its config
            return repo, [], notes
        return repo, [], notes + [f"mxfp4: serve an MXFP4 checkpoint of {repo} in its place (gpt-oss ships its "
                                  f"experts in MXFP4); {engine} reads the method from its config"]
    if released:  # the release itself is quantised: 16-bit weights are a conversion
        notes.append(f"{repo} is released in {released[0]}: bf16 weights need a bf16 conversion of it")
    return repo, [], notes


def eagle_head(method: str, repo: str) -> tuple[str, str | None]:
    """(the published EAGLE or EAGLE-3 head for the checkpoint `repo`, data/speculative.json; a
    placeholder and a note where none is known)."""
    family = repo.lower().removesuffix("-instruct").removesuffix("-fp8")
    heads = [c["draft"] for c in speculative.data()["vllm"]["checkpoints"]
             if c["method"].split()[0] == method and c["target"].lower().removesuffix("-instruct") == family]
    if heads:
        return heads[0], None
    return (f"<{method} head for {repo}>",
            f"no published {method} head for {repo} in data/speculative.json: name one you trained")
