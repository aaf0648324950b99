"""Load (or compile) every specialisation of the jitted code that the app and the command line
call from Python: the engine's one entry point, and the cost model's with integer and with float
token counts. `python -m core compile` runs this to build the shipped cache; the dashboard and
the planner's workers run it once per process so that no page waits for a compile."""
from __future__ import annotations

from ..physics import catalog, costmodel
from .simulate import SimConfig, simulate
from .workload import WorkloadSpec


def compile_all() -> None:
    simulate(SimConfig(workload=WorkloadSpec(n_requests=4, rate=10, prompt_mean=16, output_mean=4)))
    gpu, model = catalog.get_gpu("h100"), catalog.get_model("llama-3.1-8b")
    costmodel.steptime(gpu, model, 1, decode_batch=8, context=512, prefill_tokens=256)
    costmodel.steptime(gpu, model, 1, prefill_tokens=256)
    costmodel.steptime(gpu, model, 2, decode_batch=8.0, context=512.5, prefill_tokens=256.0, prefill_cached=1.0)
