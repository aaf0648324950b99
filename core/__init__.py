"""The numeric core of the LLM Serving Design Lab: catalogs, cost model, memory planner and the
per-step serving simulator. Usable without Streamlit: `python -m core --help`."""
import os
import tempfile

# numba reads its cache location at import: point it at a writable folder, since a hosted
# deploy may mount the package read-only (numba then fails to import cached functions).
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(tempfile.gettempdir(), "llm-serving-lab-numba"))

CORE_VERSION = "1"  # part of the dashboard's cache key: bump when results change
