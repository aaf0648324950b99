"""One download row for any view: the run's requests and steps as CSV, and the run as JSON
(inputs, deployment, summary, version), built only when clicked."""
from __future__ import annotations

import streamlit as st

from core.serving import engines, export
from core.serving.command import simulate_command
from core.serving.simulate import SimResult


def downloads(result: SimResult, inputs: dict | None = None, key: str = "run", steps: bool = True,
              extra: dict | None = None) -> None:
    """Download buttons for one simulated run (CSV per request, per step where `steps`, JSON)."""
    cols = st.columns(3 if steps else 2)
    cols[0].download_button("Requests (CSV)", lambda: export.requests_csv(result), f"{key}-requests.csv", "text/csv",
                            key=f"dl-{key}-requests", on_click="ignore", icon=":material/download:",
                            help="One row per simulated request: arrival, lengths, queueing, TTFT, TPOT, E2E (ms).")
    if steps:
        cols[1].download_button("Step timeline (CSV)", lambda: export.steps_csv(result), f"{key}-steps.csv",
                                "text/csv", key=f"dl-{key}-steps", on_click="ignore", icon=":material/download:",
                                help="The engine's steps: time, length, prefill and decode tokens, KV blocks, queue.")
    cols[-1].download_button("Run (JSON)", lambda: export.to_json(export.run_dict(result, inputs, extra)),
                             f"{key}.json", "application/json", key=f"dl-{key}-json", on_click="ignore",
                             icon=":material/download:",
                             help="Inputs, deployment and summary, with the project's version and the python -m core simulate "
                                  "command that reproduces its figures (\"reproduce\").")


def command(cfg, trace_note: str = "the trace you uploaded") -> None:
    """The `python -m core simulate ...` line that gives this run's figures headless, to copy."""
    with st.expander("Reproduce on the command line", icon=":material/terminal:"):
        st.code(simulate_command(cfg, trace_note), language="bash", wrap_lines=True)


def table(rows: list[dict], what: str, key: str, label: str = "Table (CSV)") -> None:
    """A download button for a table of flat rows."""
    st.download_button(label, lambda: export.table_csv(rows, what), f"{key}.csv", "text/csv", key=f"dl-{key}",
                       on_click="ignore", icon=":material/download:")


def json_rows(rows: list[dict], key: str, label: str = "Table (JSON)", inputs: dict | None = None) -> None:
    """A download button for a table of flat rows as JSON, with the inputs and the project's version."""
    st.download_button(label, lambda: export.to_json({"version": export.project_version(), "inputs": inputs or {},
                                                      "rows": rows}),
                       f"{key}.json", "application/json", key=f"dl-{key}-json", on_click="ignore",
                       icon=":material/download:")


def runs(named: dict[str, SimResult], inputs: dict | None, key: str, label: str = "Runs (JSON)") -> None:
    """One JSON of several runs of the same inputs (stages, an A/B, pinned deployments), each with its
    deployment and summary."""
    st.download_button(label, lambda: export.to_json({"inputs": inputs or {}, "runs": {
        name: export.run_dict(result) for name, result in named.items()}}), f"{key}.json", "application/json",
        key=f"dl-{key}-json", on_click="ignore", icon=":material/download:",
        help="Each run's deployment and summary, with the inputs and the project's version: enough to reproduce them.")


FLAG_SOURCES = {"vllm": "its EngineArgs", "sglang": "its server_args.py",
                "trtllm": "trtllm-serve's options and its LLM API's, in the file written before the line"}


def serve_commands(serve: str, manifest: str, key: str, engine: str = "vllm", label: str | None = None) -> None:
    """The serving lines that run a deployment on `engine` and its Kubernetes manifest
    (core.serving.serve_command), copyable (st.code has a copy button) and downloadable."""
    with st.expander(label or f"Run it with {engines.name(engine)}", icon=":material/terminal:"):
        st.code(serve, language="bash")
        st.caption(f"One line per pool, with {engines.name(engine)}'s own flag names ({FLAG_SOURCES[engine]}); the "
                   f"comments say how many replicas of each to start and how requests reach them.")
        a, b = st.columns(2)
        a.download_button("serve.sh", serve + "\n", "serve.sh", "text/x-shellscript", key=f"{key}_sh",
                          icon=":material/download:")
        b.download_button("kubernetes.yaml", manifest, "kubernetes.yaml", "application/yaml", key=f"{key}_k8s",
                          icon=":material/download:")
        st.code(manifest, language="yaml")
        st.caption("A Kubernetes apps/v1 Deployment per pool (each pod one replica, its GPUs as nvidia.com/gpu "
                   "limits) and a Service in front of each; a split's pools carry the llm-d.ai/role labels llm-d's "
                   "inference scheduler selects them by.")
