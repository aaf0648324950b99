"""Simulations that the sessions of one server share, and long ones off the page's thread.

Results: one cache per server process for every session, bounded by memory (core.memo): a
second person asking the same question gets the same answer at once.

Light work (simulations of a few thousand requests, well under a second) runs on the page's own
thread, behind a spinner that says what it does once it takes more than half a second. Heavy
work (more than HEAVY_REQUEST_RUNS simulated requests in all: a 100,000-request run, a sweep of
20,000-request runs) runs on a pool of WORKERS threads, fewer than the cores, so that one core
always serves the light work of every other session, the health check and the event loop (the
engine releases Python's lock while it runs). The page shows a progress bar, what the run is doing
and its place in the queue, and a "Stop this run" button (a click that lands as its run ends stops the
page's next run); when the person moves a slider, opens another page
or closes the tab, the script is interrupted at the bar's next update and the run is cancelled
within one engine step (core.progress). A session's script waits on one piece of work at a time,
so a session holds at most one worker; sessions asking for the same result wait on one run, which
is cancelled only when the last of them leaves.
"""
from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Callable

import streamlit as st

from core import memo, progress

HEAVY_REQUEST_RUNS = 50_000  # about half a second of simulation on one core (bench/results/load.json)
WORKERS = max(1, (os.cpu_count() or 2) - 1)
# results of every session: 256 MB holds about 20 Lab views of 100,000 requests, hundreds of small ones
RESULTS_BYTES = 256 << 20
POLL_S = 0.25  # how often a waiting page redraws its bar (and notices that its person moved on)

_pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="lab-sim")
results = memo.Memo(max_bytes=RESULTS_BYTES, max_entries=400)
_lock = threading.Lock()
_order = itertools.count()
_STOPPED = "_jobs_stopped"  # session state: the key of the work this session's person stopped
_RUN = "_jobs_script_run"  # session state: how many times this session's script has started
_STOP_AT = "_jobs_stop_at"  # session state: the script run that a "Stop this run" click started


@dataclass(eq=False)
class _Run:
    job: progress.Job
    future: Future = field(default_factory=Future)
    seq: int = field(default_factory=lambda: next(_order))
    started: bool = False
    waiters: int = 0


_inflight: dict = {}


def heavy(requests: int, runs: int) -> bool:
    return requests * runs > HEAVY_REQUEST_RUNS


def compute(key: tuple, what: str, fn: Callable, *args, is_heavy: bool = False):
    """fn(*args), shared by every session under `key`; `what` says what it does, in words."""
    hit, value = results.get(key)
    if hit:
        return value
    if not is_heavy:
        with st.spinner(f"{what}...", show_time=True):
            return prefill(key, fn, *args)
    return _wait(key, what, fn, args)


def prefill(key: tuple, fn: Callable, *args):
    """fn(*args), kept in the shared results under `key`; on its own (no spinner), from a thread that
    is no page's: a server's warm-up (ui/prewarm.py)."""
    hit, value = results.get(key)
    if not hit:
        value = fn(*args)
        results.put(key, value)
    return value


def _submit(key, run: _Run, fn: Callable, args: tuple) -> None:
    """Queue `run` on the pool; its future is the run's own, so that a page that finds the run in
    flight waits on it before the pool has it. Called without _lock held: the work may be over
    before submit returns (a run refused on the spot), and its end takes _lock."""
    def work():
        if not run.future.set_running_or_notify_cancel():  # cancelled while queued: nobody waits
            return
        try:
            _lower_priority()
            run.started = True
            value = run.job.run(fn, *args)
            results.put(key, value)
            run.future.set_result(value)
        except BaseException as e:  # noqa: BLE001 (the waiting page raises it: a ValueError is shown)
            run.future.set_exception(e)
        finally:
            with _lock:
                if _inflight.get(key) is run:
                    del _inflight[key]

    _pool.submit(work)


def _lower_priority() -> None:
    """A worker thread yields the CPU to page threads and the event loop when both want it (Linux:
    a thread's own nice value); elsewhere it runs at the server's priority."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


def _ahead(run: _Run) -> int:
    with _lock:
        return sum(1 for r in _inflight.values() if not r.started and r.seq < run.seq)


def script_started() -> None:
    """Count this session's script runs (navigation.py, first thing on every run)."""
    st.session_state[_RUN] = st.session_state.get(_RUN, 0) + 1


def _stop() -> None:
    # a callback runs before the script it reruns: that run is the next one
    st.session_state[_STOP_AT] = st.session_state.get(_RUN, 0) + 1


def _wait(key, what: str, fn: Callable, args: tuple):
    label = f"lab-job-{abs(hash(key))}"
    if st.session_state.get(_STOP_AT) == st.session_state.get(_RUN):
        # the click's rerun stops the first run it has still to wait for: the one the button showed,
        # or, when that one ended as the click landed, the page's next
        del st.session_state[_STOP_AT]
        st.session_state[_STOPPED] = key
    if st.session_state.get(_STOPPED) == key:
        st.info(f"Stopped: {what}. Nothing below this point was simulated.", icon=":material/stop_circle:")
        if not st.button("Run it again", key=f"{label}-again"):
            st.stop()
        st.session_state.pop(_STOPPED, None)
    with _lock:
        run = _inflight.get(key)
        new = run is None or run.job.cancelled
        if new:
            run = _inflight[key] = _Run(progress.Job(what))
        run.waiters += 1
    if new:
        _submit(key, run, fn, args)
    box = st.empty()
    try:
        with box.container():
            bar = st.progress(0.0, text=f"{what}...")
            st.button("Stop this run", key=f"{label}-stop", on_click=_stop, icon=":material/stop:",
                      help="Stop this run; moving a slider or opening another page stops it too")
        while True:
            try:
                return run.future.result(timeout=POLL_S)
            except FutureTimeout:
                pass
            if run.started:
                share, text = run.job.progress()
            else:
                n = _ahead(run)
                share, text = 0.0, (f"{what}: waiting for a free simulator ({WORKERS} in use"
                                    + (f", {n} run{'s' if n != 1 else ''} queued before this one)" if n else ")"))
            bar.progress(share, text=text)  # raises here when the person has moved on
    finally:
        with _lock:
            run.waiters -= 1
            if run.waiters == 0 and not run.future.done():  # nobody waits for it any more
                run.job.cancel()
                run.future.cancel()
                if _inflight.get(key) is run:
                    del _inflight[key]
        box.empty()
