"""Where the planner's per-shape searches run: in this process, in a local process pool (the
default: each worker loads the compiled engine once and is kept for the next search), or on a Ray
cluster for searches bigger than one machine. The same function runs in each, so the answers are
the same; Ray is imported only when asked for."""
from __future__ import annotations

import os
import sys
import threading
import types
from contextlib import contextmanager
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import connection, get_context, parent_process
from pathlib import Path
from typing import Callable

EXECUTORS = ("local", "inline", "ray")
ROOT = Path(__file__).resolve().parents[2]  # the project folder, which holds the core package

_pools: dict[int, ProcessPoolExecutor] = {}


def _warm() -> None:
    """A worker's first task: outlive its parent by nothing, then load the compiled engine (from
    numba's disk cache)."""
    _exit_with_parent()
    from ..serving import warmup
    warmup.compile_all()


def _exit_with_parent() -> None:
    """A worker whose parent is gone (a dashboard killed, or stopped by its host) exits at once: an
    idle worker waits on its task queue, which its parent's death does not close, and would hold
    its loaded engine, some 180 MB, for good. A thread waits on the parent's sentinel, ready when it
    exits."""
    parent = parent_process()
    if parent is None:
        return

    def watch():
        connection.wait([parent.sentinel])
        os._exit(0)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def local_pool(workers: int) -> ProcessPoolExecutor:
    # spawn, not fork: the caller may be a threaded server (the dashboard), and a forked child of a
    # threaded process can inherit a held lock
    if workers not in _pools:
        _pools[workers] = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_warm)
    return _pools[workers]


@contextmanager
def _nothing_to_run_as_main():
    """While workers start. A spawned worker first runs its parent's __main__ again (multiprocessing's
    spawn), and in the dashboard that is the page script being run: every planner worker ran the
    Planner page, in Streamlit's bare mode, and wrote some 350 warnings to the server's log a start.
    Workers start lazily, at a submit, so this is held around the submits."""
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")  # no file, no spec: nothing to run
    try:
        yield
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def prestart(workers: int | None = None) -> None:
    """Start the local pool's workers now (each loads the compiled engine), so that the first
    search does not wait for them."""
    n = workers or default_workers()
    pool = local_pool(n)
    with _nothing_to_run_as_main():
        for _ in range(n):
            pool.submit(_idle)


def _idle() -> None:
    pass


def run_tasks(fn: Callable, tasks: list, executor: str = "local", workers: int | None = None,
              address: str | None = None, progress: Callable[[int, int], None] | None = None) -> list:
    """fn(task) for every task, in order, on the chosen executor; progress(done, total) as they end."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor '{executor}': choose {', '.join(EXECUTORS)}")
    total = len(tasks)
    tick = progress or (lambda done, total: None)
    if executor == "inline" or total <= 1:
        out = []
        for i, t in enumerate(tasks):
            out.append(fn(t))
            tick(i + 1, total)
        return out
    if executor == "ray":
        return _run_ray(fn, tasks, address, tick)
    n = workers or default_workers()
    pool = local_pool(n)
    futures: dict = {}
    try:
        with _nothing_to_run_as_main():
            futures = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
        out = [None] * total
        for done, f in enumerate(as_completed(futures), 1):
            out[futures[f]] = f.result()
            tick(done, total)
    except BrokenProcessPool:
        _pools.pop(n, None)  # the next search starts a fresh pool
        raise
    except BaseException:  # the caller stopped (a person left the Planner): drop the shapes not started
        for f in futures:
            f.cancel()
        raise
    return out


def _run_ray(fn: Callable, tasks: list, address: str | None, tick) -> list:
    try:
        import ray
    except ImportError:
        raise ValueError("the ray executor needs Ray: pip install -r requirements-test.txt (it pins ray)") from None
    if not ray.is_initialized():
        # a local Ray finds the project on PYTHONPATH; a remote cluster is sent the project folder
        env = ({"env_vars": {"PYTHONPATH": str(ROOT)}} if address is None else
               {"working_dir": str(ROOT), "excludes": [".venv", ".git", "bench", "docs", "tests"]})
        ray.init(address=address, runtime_env=env, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(fn)
    refs = [remote.remote(t) for t in tasks]
    pending, done = list(refs), 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        done += len(ready)
        tick(done, len(refs))
    return ray.get(refs)
