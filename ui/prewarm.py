"""A server's start, done before its first visitor: the simulator's compiled engine loaded, the
Lab's default workload simulated into the cache every session shares, the pages' modules imported
and a first chart built (altair loads its schema on the first one). Without it the first page after
a start or a restart pays for all of that itself, with a person watching (bench/first_visit.py).

The server holds back its first answer until then, at most READY_WAIT_S: a load balancer, a host's
"waking up" screen or a browser opened at the start waits a few seconds more for the server, which
then serves a whole page at once, instead of a page that sits behind a spinner while the same
work competes with the browser for the CPU. A compile is never waited for: it takes a minute or
more, and the page that waits for it says why and how long (ui.startup). Whatever fails here is
left to the pages, which compute on demand and say what went wrong.
"""
from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import pkgutil
import threading
from contextlib import asynccontextmanager

READY_WAIT_S = 30  # the longest the server holds back its first answer
ready = threading.Event()  # the server may answer: the warm-up is over, or a compile is under way


def warm() -> None:
    try:
        from ui import cache, state  # imports core and starts loading the engine

        if not cache.engine.status["ready"]:  # a compile: answer at once, the page explains
            ready.set()
        cache.engine.done.wait()
        if cache.engine.problem:
            return
        view = cache.prefill_lab_view(state.inputs({}))  # a first visit with no link parameters
        import ui
        for module in pkgutil.iter_modules(ui.__path__):
            importlib.import_module(f"ui.{module.name}")
        from ui import charts
        charts.queue_and_batch(view["result"]).to_dict()
        # what the start built lives as long as the server: out of the collector's sight, a full
        # collection walks only what sessions made since (0.1 s with the GIL held becomes ~0)
        gc.freeze()
    except Exception:  # noqa: BLE001 (the pages compute on demand and report what goes wrong)
        logging.getLogger(__name__).exception("warming the server up failed; the pages compute on demand")
    finally:
        ready.set()


@asynccontextmanager
async def lifespan(_app):
    """st.App's start and stop: the warm-up runs in a thread of its own, so that waiting for it
    never holds the event loop."""
    threading.Thread(target=warm, name="lab-prewarm", daemon=True).start()
    await asyncio.to_thread(ready.wait, READY_WAIT_S)
    yield
