"""What a person waiting on the first start is told: what is happening, for how long, and, when
the simulator cannot be compiled here, what to do. From core.jitcache.status()."""
from __future__ import annotations

import platform


def first_start_message(status: dict) -> str:
    if status["ready"]:
        return "Loading the compiled simulator (about a second)..."
    took = status.get("compile_s_where_built")
    how_long = (f"it took {took:.0f} s where it was built ({status['built_on']}), longer on a busy machine"
                if took else "about a minute on one laptop core")
    why = status.get("shipped_problem") or "no compiled copy is kept here yet"
    keep = ("first start only: it is kept for later starts" if status["writable"] else
            "there is no writable folder to keep it in, so every start compiles again: set LLM_LAB_CACHE_DIR "
            "(or TMPDIR) to a writable folder")
    return (f"Compiling the simulator for this computer ({how_long}; {keep}). Why: {why}. "
            f"Every page waits for it once.")


def compile_failed_message(error: Exception, status: dict) -> str:
    first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
    where = status.get("folder")
    clear = (f"If the compiled copy in {where} is damaged (an interrupted copy, a full disk), delete that folder and "
             f"restart. " if where else "")
    return (f"The simulator could not be compiled on this computer ({platform.machine()}, Python "
            f"{platform.python_version()}): {type(error).__name__}: {first}. {clear}"
            f"It needs Python 3.11 with the pinned packages (pip install -r requirements.txt) on an x86-64 or arm64 "
            f"CPU; set NUMBA_CPU_NAME=generic if this CPU is not recognised. Nothing on this page can be simulated "
            f"until then.")
