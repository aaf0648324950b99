"""Your benchmark: a vLLM or SGLang result file replayed on the simulator, metric by metric, and
the cost model calibrated to it as a hardware profile the Lab, the Planner and Compare can use."""
import json
import math
from dataclasses import replace

import streamlit as st

from core.lab.inputs import min_tp
from core.physics import catalog, hardware
from core.serving import benchfile, calibrate, engines, export, replay
from core.serving.simulate import SimConfig
from ui import benchmark as B
from ui import compare, state, widgets, yourgpu
from ui import export as dl

st.title("Your benchmark")
st.markdown("Bring the result of `vllm bench serve --save-result` (with or without `--save-detailed`) or of SGLang's "
            "`bench_serving --output-file`. The simulator rebuilds its workload (arrivals, prompt and output lengths), "
            "serves it on the deployment you confirm below, and puts its TTFT, TPOT, ITL, E2E and throughput beside "
            "yours. **Calibrate** then fits the cost model to your hardware and keeps it as a profile.")

# the uploader's own limit, not Streamlit's 200 MB default: Streamlit counts it in MiB and labels it 'MB', so
# the parser's 64 MiB is 64 here ('68MB per file' above '67 MB' below read as two limits, and let 71 MB through)
limit_mib = math.ceil(benchfile.MAX_BYTES / 1024**2)
upload = st.file_uploader("Benchmark result (JSON or JSON lines)", type=["json", "jsonl"], key="bench_file",
                          max_upload_size=limit_mib)
if upload is None:
    st.info(f"No file yet: upload one above. The file is read as data only, up to {limit_mib} MiB "
            f"({benchfile.MAX_BYTES / 1e6:.0f} MB).",
            icon=":material/upload_file:")
    st.stop()
data, name = upload.getvalue(), upload.name
try:
    runs = B.parse(data, name)
except ValueError as e:
    st.error(f"This file cannot be read: {widgets.literal(e)}", icon=":material/block:")  # it may quote the file
    st.stop()

run = runs[0]
if len(runs) > 1:
    run = st.selectbox("Run", runs, format_func=lambda r: r.label(), key="bench_run")
# the file's own words (its label, its model) as plain text, never Markdown or links
st.caption(widgets.literal(run.label()) + (f"; model {widgets.literal(run.model_id)}" if run.model_id else
                                           "; the file does not name its model")
           + f"; {run.duration_s:.0f} s; per-request data: {'yes' if run.detailed else 'no (summary only)'}.")

st.subheader("The deployment it ran on")
inputs = state.inputs()
models = catalog.model_ids()
guess = replay.guess_model(run.model_id) or inputs.model
gpus = yourgpu.options()
gpu0 = inputs.gpu.split("@")[0] if inputs.gpu.split("@")[0] in gpus else gpus[0]
# tp as the file's metadata or name says it ('..._tp8_...'); where they are silent, the fewest GPUs that
# hold the model, so that a 70B's first answer is a comparison, not "does not fit at tp=1"
said = replay.said_deployment(run)
need = min_tp(replace(inputs, model=guess if guess in models else models[0], gpu=gpu0)) or 1
TPS = sorted({1, 2, 4, 8, 16} | ({said["tp"][0]} if "tp" in said else set()))
tp0 = said["tp"][0] if "tp" in said else next((t for t in TPS if t >= need), TPS[-1])
tp_help = (f"{said['tp'][1].capitalize()} says tp {said['tp'][0]}." if "tp" in said else
           "The file does not record it: the default is the fewest GPUs of this type that hold the model.")
async0, async_help = said.get("async_scheduling", (True, None))
# an SGLang file replays with SGLang's profile (core/serving/engines.py): its rule, chunk and batch limit
engine0 = "sglang" if run.tool == "sglang" else "vllm"
profile0 = engines.sglang_defaults(catalog.get_gpu(gpu0), tp0) if engine0 == "sglang" else {}
if said:  # the file's own words, but only digits and the words matched in its name: safe as Markdown
    st.caption("From the file: " + "; ".join(
        f"tp {said['tp'][0]} ({said['tp'][1]})" if k == "tp" else
        f"{'async' if v[0] else 'synchronous'} scheduling ({v[1]})" for k, v in said.items()) + ".")
with st.form("bench_deployment"):
    a, b, c = st.columns(3)
    model = a.selectbox("Model", models, models.index(guess) if guess in models else 0,
                        format_func=lambda m: catalog.get_model(m).label())
    gpu = b.selectbox("GPU", gpus, gpus.index(gpu0), format_func=lambda g: catalog.get_gpu(g).name)
    tp = c.selectbox("Tensor parallelism (GPUs per replica)", TPS, TPS.index(tp0), help=tp_help + " Set the run's own.")
    a, b, c = st.columns(3)
    engine = a.selectbox("Engine", engines.ENGINES[1:], engines.ENGINES[1:].index(engine0),
                         format_func={"vllm": "vLLM V1", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}.get,
                         help="SGLang runs prompt chunks in steps of their own (decodes pause while prompts wait), "
                              "with its overlap scheduler and its own server. TensorRT-LLM (its PyTorch backend, "
                              "behind trtllm-serve) replays CUDA graphs of decode batches only, up to 128 "
                              "sequences, and issues a step with prompt tokens op by op; its chunked prefill is off "
                              "unless the run turned it on. The file's tool is the default.")
    chunked = a.toggle("Chunked prefill (vLLM V1's default; off in TensorRT-LLM unless enabled)", True,
                       disabled=engine == "sglang")
    asynchronous = a.toggle("Async scheduling (vLLM 0.14 and later)", async0,
                            help="The engine plans each step while the last one runs, so a new request waits one "
                                 "step more before its prefill; vLLM before 0.14 schedules each step after the last."
                                 + (f" {async_help.capitalize()} says vLLM {'0.14 or later' if async0 else 'before 0.14'}."
                                    if async_help else ""))
    budget = b.select_slider("Token budget per step", [512, 1024, 2048, 4096, 8192, 16384],
                             profile0.get("max_batched_tokens", 2048),
                             help="vLLM's max_num_batched_tokens; SGLang's chunked_prefill_size (its default for "
                                  "the GPU's memory when the file is SGLang's); TensorRT-LLM's max_num_tokens")
    max_seqs = c.select_slider("Max sequences per step", [32, 64, 128, 256, 512, 1024, 2048],
                               profile0.get("max_seqs", 256),
                               help="vLLM's max_num_seqs; SGLang's max_running_requests; TensorRT-LLM's max_batch_size")
    st.form_submit_button("Simulate this run", type="primary", icon=":material/play_arrow:")
base = SimConfig(gpu=gpu, model=model, tp=tp, policy="sglang" if engine == "sglang" else "sarathi" if chunked else "vllm",
                 max_batched_tokens=budget, max_seqs=max_seqs, async_scheduling=asynchronous, engine_overhead=engine)
try:
    cmp = B.compare(data, name, run.line, base)
except ValueError as e:
    widgets.show_error(e, "This deployment")
    st.stop()

st.subheader("Measured against simulated")
st.caption(f"Median |error| over the {len(cmp.rows)} figures: {cmp.median_abs_error:.0%}. Simulated: "
           f"{len(cmp.result.requests['arrival_s'])} requests on {base.tp} x {catalog.get_gpu(gpu).name}.")
for note in cmp.notes:
    st.caption(f":material/info: {note}")
st.dataframe(B.rows_frame(cmp.rows), hide_index=True, width="stretch", height="content", column_config=B.COLUMNS)
dl.table(cmp.rows, f"measured against simulated, {name} {run.label()}", "comparison", "Comparison (CSV)")
dl.downloads(cmp.result, {"result_file": name, "line": run.line},
             key="replayed")
compare.pin_button(dict(gpu=gpu, model=model, tp=tp, gpus=tp, policy=base.policy, max_batched_tokens=budget,
                        max_seqs=max_seqs, engine=engines.served_by(base), label=f"your run's deployment ({tp} x {gpu})"),
                   "bench")

st.subheader("Calibrate")
st.markdown(f"Fits the two factors a serving benchmark pins down: **{', '.join(calibrate.FACTORS)}**. "
            + " ".join(f"`{k}` from the median {'/'.join(m.upper() for m in v[0])} ({v[1]})."
                       for k, v in calibrate.FACTORS.items())
            + " The other constants keep their values fitted to measured step times.")
if st.button("Calibrate to this run", icon=":material/tune:", key="bench_fit") or st.session_state.get("bench_fitted") == (name, run.line, base):
    st.session_state["bench_fitted"] = (name, run.line, base)
    try:
        cal = B.fit(data, name, run.line, base)
    except ValueError as e:
        widgets.show_error(e, "This calibration")
        st.stop()
    st.markdown(" · ".join(f"`{k}` {cal.before[k]:.3f} → **{cal.after[k]:.3f}**"
                           + (f" (stopped at its {cal.bound[k]} bound)" if cal.bound.get(k) else "") for k in cal.after))
    for w in cal.warnings:
        st.warning(w, icon=":material/warning:")
    st.dataframe(B.rows_frame(cal.rows_before, cal.rows_after), hide_index=True, width="stretch", height="content",
                 column_config=B.COLUMNS)
    st.altair_chart(B.errors_chart(cal.rows_before, cal.rows_after), width="stretch")
    pname = st.text_input("Profile name", f"{catalog.get_gpu(gpu).name} calibrated", max_chars=60)
    try:
        prof = calibrate.profile(cal, pname)
    except ValueError as e:
        widgets.show_error(e, "This profile")
        st.stop()
    a, b = st.columns(2)
    a.download_button("Hardware profile (JSON)", export.to_json(prof), "profile.json", "application/json",
                      icon=":material/download:", on_click="ignore")
    if b.button("Use this profile in the Lab", icon=":material/science:", key="bench_use",
                on_click=lambda: yourgpu.add(hardware.load_profile(json.loads(export.to_json(prof))))):
        st.switch_page("views/lab.py")
