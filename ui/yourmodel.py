"""Your model, in the sidebar's Advanced section: a Hugging Face config.json, uploaded or pasted,
becomes a model of this session's list (core.physics.hfconfig reads it as data; nothing in it runs)."""
from __future__ import annotations

import streamlit as st

from core.physics import catalog, hfconfig

KEY = "custom_models"  # ids this session registered
INFO = "custom_model_info"  # id -> (parameter line, notes, dtype, modelled) to show while that model is chosen
MESSAGE = "model_message"


def options(catalog_ids: list[str], custom: str) -> list[str]:
    """The model list: the catalog's, this session's own, the current one when a link names it, then
    the custom-size choice."""
    out = list(catalog_ids) + [m for m in st.session_state.get(KEY, []) if m not in catalog_ids]
    current = str(st.session_state.get("model") or "")
    if current and current not in out and current != custom:
        try:
            catalog.get_model(current)
            out.append(current)
        except ValueError:
            pass
    return out + [custom]


def _add(text: str | bytes, name: str | None) -> None:
    ss = st.session_state
    try:
        parsed = hfconfig.parse(text, name)
    except ValueError as e:
        ss[MESSAGE] = str(e)
        return
    model = catalog.register_model(parsed.model)
    held = ss.setdefault(KEY, [])
    if model.id not in held:
        held.append(model.id)
    ss.setdefault(INFO, {})[model.id] = (parsed.params_line(), parsed.notes, parsed.suggested_dtype, parsed.modelled)
    ss["model"] = model.id
    ss[MESSAGE] = None


def _upload() -> None:
    f = st.session_state.get("model_upload")
    if f is not None:
        _add(f.getvalue(), f.name)


def _paste() -> None:
    text = st.session_state.get("model_paste") or ""
    if text.strip():
        _add(text, None)


def section() -> None:
    """Draw inside the sidebar's Advanced expander."""
    st.file_uploader("Your model: its config.json (Hugging Face)", type=["json"], key="model_upload",
                     on_change=_upload, max_upload_size=1,  # MB, the least it takes; the parser refuses above 256 KB
                     help="Llama, Mistral, Qwen2/2.5/3, Mixtral, Qwen-MoE, DeepSeek-V2/V3, Kimi K2, gpt-oss, Llama 4, "
                          "Gemma and Phi-3 configs. The file is read as data (JSON), never run.")
    # drawn only while open, as the GPU datasheet's form is (ui/yourgpu.py)
    with st.popover("Paste a config.json", icon=":material/content_paste:", key="model_paste_open",
                    on_change="rerun") as pop:
        if pop.open:
            with st.form("model_paste_form", border=False):
                st.text_area("config.json", key="model_paste", height=200,
                             placeholder='{"model_type": "llama", "hidden_size": 4096, ...}')
                st.form_submit_button("Use this model", on_click=_paste)
    if st.session_state.get(MESSAGE):
        st.error(f"That config cannot be used: {st.session_state[MESSAGE]}", icon=":material/block:")


def caption() -> str | None:
    """What the sidebar says under the model list while a model of one's own is chosen: its
    parameter count against its model card's, what is left out, the format its checkpoint names."""
    info = st.session_state.get(INFO, {}).get(st.session_state.get("model"))
    if info is None:
        return None
    line, notes, dtype, modelled = info
    text = line + "."
    if modelled:
        text += " Modelled: " + "; ".join(modelled) + "."
    if dtype:
        text += f" Its checkpoint is quantised: choose {dtype} weights under Advanced to serve it as stored."
    if notes:
        text += " Not modelled: " + "; ".join(notes) + "."
    return text
