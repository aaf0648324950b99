"""The numeric core of the LLM Serving Design Lab, usable without Streamlit (`python -m core --help`).

Its packages are its layers; each imports only from the ones listed before it:

  text, jit   formatting for people; the engine's compilation settings
  physics     GPUs and models, the time of one engine step, what a GPU's memory holds
  engine      the jitted step loop over paged KV blocks on a cluster
  serving     a configuration in, a simulated run and its metrics out
  planner     sizing by search: the cheapest deployment that meets the targets, and the frontier
  lab         what the runs mean: stages, recommendation, gauges, trade-offs, sweeps, tutorial
  cli         the command line
"""
import ast
import hashlib
import os
import tempfile
from pathlib import Path

PACKAGE = Path(__file__).parent
DATA = PACKAGE / "data"  # catalogs, fitted constants, rules, scenarios, tutorial text


def jitted_sources() -> list[Path]:
    """The sources compiled into the engine: every module that uses the compilation settings
    (it imports from jit), the settings themselves and the table layouts the engine's constants
    come from."""
    def uses_jit(path: Path) -> bool:
        return any(isinstance(node, ast.ImportFrom) and node.level and (node.module or "").split(".")[-1] == "jit"
                   for node in ast.walk(ast.parse(path.read_bytes())))

    return [path for path in sorted(PACKAGE.rglob("*.py"))
            if path in (PACKAGE / "jit.py", PACKAGE / "engine" / "layout.py") or uses_jit(path)]


def _source_digest() -> str:
    h = hashlib.sha1()
    for path in jitted_sources():
        h.update(path.relative_to(PACKAGE).as_posix().encode() + path.read_bytes())
    return h.hexdigest()[:12]


# numba reads its cache location at import: point it at a writable folder (a hosted deploy may
# mount the package read-only), one per version of these sources, because numba's cache does
# not notice when a jitted function's callee in another module changes.
os.environ.setdefault("NUMBA_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "llm-serving-lab-numba", _source_digest()))

CORE_VERSION = "1"  # part of the dashboard's cache key: bump when results change
