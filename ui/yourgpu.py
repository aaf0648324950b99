"""Your GPU and your price, in the sidebar's Advanced section: a price per GPU-hour that replaces
the list price, and a GPU of your own (datasheet figures, a datasheet JSON or a calibrated hardware
profile) that joins the GPU list for this session."""
from __future__ import annotations

import streamlit as st

from core.physics import catalog, hardware
from ui import widgets

KEY = "custom_gpus"  # ids this session registered


def options() -> list[str]:
    """The GPU list: the catalog's, then this session's own, then the current one when a link names it."""
    out = catalog.gpu_ids() + [g for g in st.session_state.get(KEY, []) if g not in catalog.gpu_ids()]
    current = str(st.session_state.get("gpu") or "")
    if current and current not in out:
        try:
            catalog.get_gpu(current)
            out.append(current)
        except ValueError:
            pass
    return out


def add(gpu: catalog.GPU, select: bool = True) -> None:
    """Add a registered GPU to this session's list (and select it on the next run)."""
    held = st.session_state.setdefault(KEY, [])
    if gpu.id not in held:
        held.append(gpu.id)
    if select:
        st.session_state["gpu"] = gpu.id


def priced(gpu_id: str, price: float | None) -> str:
    """The chosen GPU at the sidebar's price per GPU-hour, when one is set."""
    price = float(price or 0)
    return f"{gpu_id}@{price:g}" if price > 0 else gpu_id


def _upload() -> None:
    f = st.session_state.get("gpu_upload")
    if f is None:
        return
    try:
        add(hardware.register_datasheet(f.getvalue()))
        st.session_state["gpu_message"] = None
    except ValueError as e:
        st.session_state["gpu_message"] = str(e)


def section() -> None:
    """Draw inside the sidebar's Advanced expander."""
    st.number_input("Your price ($ per GPU-hour; 0: list price)", 0.0, 1000.0, step=0.1, format="%.2f", key="price",
                    help="Replaces the chosen GPU's list price in every cost figure (the Lab, the Planner, Compare).")
    st.file_uploader("Your GPU: datasheet or hardware profile (JSON)", type=["json"], key="gpu_upload", max_upload_size=1,
                     on_change=_upload,
                     help='A datasheet: {"name": "My GPU", "memory_gib": 80, "hbm_tbps": 3.35, "bf16_tflops": 989, '
                          '"fp8_tflops": 1979, "link_gbps_per_dir": 450, "price_usd_per_gpu_hour": 2.5}; a profile: '
                          'the file `python -m core calibrate --out` or the Benchmark view writes.')
    if st.session_state.get("gpu_message"):
        st.error(f"That GPU file cannot be used: {widgets.literal(st.session_state['gpu_message'])}",
                 icon=":material/block:")  # the message may quote the file
    # the form is drawn only while its popover is open: closed, its nine elements would be sent and drawn on
    # every page (entries not yet added are dropped when it closes, as a dialog's are)
    with st.popover("Enter a GPU's datasheet", icon=":material/edit:", key="datasheet_open",
                    on_change="rerun") as pop:
        if pop.open:
            with st.form("datasheet", border=False):
                st.text_input("Name", "My GPU", key="ds_name")
                a, b = st.columns(2)
                a.number_input("Memory (GiB)", 1.0, 2048.0, 80.0, key="ds_memory_gib")
                b.number_input("HBM bandwidth (TB/s)", 0.05, 100.0, 3.35, key="ds_hbm_tbps")
                a.number_input("Dense bf16 (TFLOP/s)", 1.0, 100000.0, 989.0, key="ds_bf16_tflops")
                b.number_input("Dense fp8 (TFLOP/s; 0: none)", 0.0, 200000.0, 1979.0, key="ds_fp8_tflops")
                a.number_input("Interconnect (GB/s per direction)", 1.0, 10000.0, 450.0, key="ds_link_gbps_per_dir")
                b.number_input("Price ($ per GPU-hour)", 0.01, 1000.0, 2.5, key="ds_price_usd_per_gpu_hour")
                st.form_submit_button("Add this GPU", on_click=_datasheet)


def _datasheet() -> None:
    ss = st.session_state
    figures = {k[3:]: ss[k] for k in ss if isinstance(k, str) and k.startswith("ds_")}
    figures["fp8_tflops"] = figures.get("fp8_tflops") or None
    try:
        add(hardware.register_datasheet(figures))
        ss["gpu_message"] = None
    except ValueError as e:
        ss["gpu_message"] = str(e)
