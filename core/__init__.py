"""The numeric core of the LLM Serving Design Lab, usable without Streamlit (`python -m core --help`).

Its packages are its layers; each imports only from the ones listed before it:

  text, jit   formatting for people; the engine's compilation settings (jitcache: where it is kept)
  physics     GPUs and models, the time of one engine step, what a GPU's memory holds
  engine      the jitted step loop over paged KV blocks on a cluster
  serving     a configuration in, a simulated run and its metrics out
  planner     sizing by search: the cheapest deployment that meets the targets, and the frontier
  lab         what the runs mean: stages, recommendation, gauges, trade-offs, sweeps, tutorial
  cli         the command line
"""
from pathlib import Path

PACKAGE = Path(__file__).parent
DATA = PACKAGE / "data"  # catalogs, fitted constants, rules, scenarios, tutorial text

# numba reads where its cache lives and which CPU to compile for before anything compiles: the
# engine's compiled code is kept per version of its sources, compiled for a generic x86-64 CPU,
# and a fresh clone starts from the copy that ships in core/compiled/ (jitcache.py says why that is sound)
from . import jitcache  # noqa: E402

jitcache.install()

CORE_VERSION = "1"  # part of the dashboard's cache key: bump when results change
