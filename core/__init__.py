"""The numeric core of the LLM Serving Design Lab: catalogs, cost model, memory planner and the
per-step serving simulator. Usable without Streamlit: `python -m core --help`."""
import hashlib
import os
import tempfile
from pathlib import Path


JITTED = ("jit", "layout", "kvcache", "queues", "cohort", "costmodel", "engine")  # modules with compiled code


def _source_digest() -> str:
    h = hashlib.sha1()
    for name in JITTED:
        h.update((Path(__file__).parent / f"{name}.py").read_bytes())
    return h.hexdigest()[:12]


# numba reads its cache location at import: point it at a writable folder (a hosted deploy may
# mount the package read-only), one per version of these sources, because numba's cache does
# not notice when a jitted function's callee in another module changes.
os.environ.setdefault("NUMBA_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "llm-serving-lab-numba", _source_digest()))

CORE_VERSION = "1"  # part of the dashboard's cache key: bump when results change
