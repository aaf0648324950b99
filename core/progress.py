"""Long work that a person watches and may stop: a sweep, a search, a 100,000-request run.

The code that runs the work (a worker thread of the dashboard) makes a Job current; the
simulations inside it report the share of their requests finished, and stop within one engine
step when the job is cancelled: the engine reads its step limit every step, and cancelling sets
that limit to zero (the run then ends as if it had reached it, and simulate raises Cancelled
instead of returning a partial result). Work run without a Job (the command line, tests, short
page runs) is untouched."""
from __future__ import annotations

import contextvars
import threading
from contextlib import contextmanager
from typing import Callable


class Cancelled(Exception):
    """The person stopped the work, or left the page that asked for it."""


_current: contextvars.ContextVar["Job | None"] = contextvars.ContextVar("job", default=None)


def current() -> "Job | None":
    return _current.get()


def expect(runs: int) -> None:
    """The work about to start runs about `runs` simulations (for the progress bar)."""
    job = current()
    if job is not None:
        job.runs_expected += runs


class Job:
    def __init__(self, what: str):
        self.what = what
        self.runs_done = 0
        self.runs_expected = 0
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._running: list[tuple[Callable[[], None], Callable[[], float], int]] = []

    def run(self, fn: Callable, *args):
        """fn(*args) with this job current (in the calling thread)."""
        token = _current.set(self)
        try:
            return fn(*args)
        finally:
            _current.reset(token)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            for stop, _, _ in self._running:
                stop()

    def check(self) -> None:
        if self.cancelled:
            raise Cancelled(self.what)

    @contextmanager
    def simulation(self, stop: Callable[[], None], finished: Callable[[], float], requests: int):
        """A simulation in flight: stop() ends it within a step, finished() is its share done."""
        entry = (stop, finished, requests)
        with self._lock:
            self.check()
            self._running.append(entry)
        try:
            yield
        finally:
            with self._lock:
                self._running.remove(entry)
                self.runs_done += 1
        self.check()

    def progress(self) -> tuple[float, str]:
        """The share done (0..1) and what is happening, in words."""
        with self._lock:
            running = list(self._running)
        now = sum(f() for _, f, _ in running)
        if self.runs_expected > 1:
            share = min(1.0, (self.runs_done + now) / self.runs_expected)
            return share, (f"{self.what}: simulation {min(self.runs_done + 1, self.runs_expected)} of about "
                           f"{self.runs_expected}")
        if running:  # how many runs follow is unknown (a search): the bar starts again with each, and says so
            n = running[0][2]
            run = f"simulation {self.runs_done + 1}, " if self.runs_done else ""
            return min(1.0, now), f"{self.what}: {run}{now:.0%} of {n:,} requests served"
        return 0.0, f"{self.what}..."
