"""The numeric core of the LLM Serving Design Lab: catalogs, cost model, memory planner and the
per-step serving simulator. Usable without Streamlit: `python -m core --help`."""
import hashlib
import os
import tempfile
from pathlib import Path


def _source_digest() -> str:
    """Digest of the sources compiled into the engine: the modules with jitted functions (they
    import from .jit), the compilation settings and the table layouts their constants come from."""
    h = hashlib.sha1()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        text = path.read_bytes()
        if b"from .jit import" in text or path.name in ("jit.py", "layout.py"):
            h.update(path.name.encode() + text)
    return h.hexdigest()[:12]


# numba reads its cache location at import: point it at a writable folder (a hosted deploy may
# mount the package read-only), one per version of these sources, because numba's cache does
# not notice when a jitted function's callee in another module changes.
os.environ.setdefault("NUMBA_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "llm-serving-lab-numba", _source_digest()))

CORE_VERSION = "1"  # part of the dashboard's cache key: bump when results change
