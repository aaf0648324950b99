"""Long work a person can stop, and caches that stay within their memory (core.progress, core.memo,
ui/jobs.py)."""
from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from core import memo, progress
from core.serving.simulate import SimConfig, simulate
from core.serving.workload import WorkloadSpec

ROOT = Path(__file__).resolve().parent.parent


class Watched(progress.Job):
    """A job that signals when its simulation is in flight and keeps its progress reader."""

    def __init__(self):
        super().__init__("a long run")
        self.started = threading.Event()

    def simulation(self, stop, finished, requests):
        self.finished = finished
        self.started.set()
        return super().simulation(stop, finished, requests)


def test_cancelling_a_job_stops_its_simulation_part_way():
    job = Watched()
    spec = WorkloadSpec(n_requests=100_000, rate=40, prompt_mean=512, output_mean=512, seed=1)
    outcome = {}

    def work():
        try:
            outcome["result"] = job.run(simulate, SimConfig(gpu="h100", model="llama-3.1-8b", workload=spec))
        except progress.Cancelled as e:
            outcome["cancelled"] = e

    t = threading.Thread(target=work)
    t.start()
    assert job.started.wait(120)
    job.cancel()
    t.join(120)
    assert "cancelled" in outcome and "result" not in outcome  # no partial result is returned
    assert job.finished() < 1.0  # the engine stopped with requests unserved


def test_a_simulation_outside_a_job_is_untouched():
    spec = WorkloadSpec(n_requests=200, rate=5, prompt_mean=128, output_mean=32, seed=2)
    alone = simulate(SimConfig(workload=spec)).summary
    within = progress.Job("x").run(simulate, SimConfig(workload=spec)).summary
    assert alone["ttft_ms"] == within["ttft_ms"] and alone["steps"] == within["steps"]


def test_a_job_reports_its_share_done_in_words():
    job = progress.Job("Sweeping the request rate")
    job.runs_expected, job.runs_done = 4, 1
    share, text = job.progress()
    assert share == pytest.approx(0.25) and "simulation 2 of about 4" in text


def test_a_job_of_unknown_length_says_which_simulation_its_bar_is_on():
    # a search runs as many simulations as it needs: the bar starts again with each one, and its
    # text says which one, so that a bar going back is not read as work undone
    job = progress.Job("Simulating the deployment")
    with job.simulation(stop=lambda: None, finished=lambda: 0.9, requests=30_000):
        assert job.progress()[1] == "Simulating the deployment: 90% of 30,000 requests served"
    with job.simulation(stop=lambda: None, finished=lambda: 0.2, requests=100_000):
        share, text = job.progress()
    assert share == pytest.approx(0.2)
    assert text == "Simulating the deployment: simulation 2, 20% of 100,000 requests served"


def test_the_memo_keeps_within_its_bytes_dropping_the_least_recent():
    m = memo.Memo(max_bytes=3_000_000, max_entries=100)
    for i in range(5):
        m.put(i, dict(a=np.zeros(125_000)))  # 1 MB each
    assert m.stats()["bytes"] <= 3_000_000 and m.stats()["entries"] == 3
    assert m.get(0) == (False, None) and m.get(4)[0]
    m.get(2)  # used: kept over 3
    m.put(5, np.zeros(125_000))
    assert m.get(2)[0] and not m.get(3)[0]
    m.put("huge", np.zeros(1_000_000))  # larger than the whole budget: not kept, nothing dropped for it
    assert not m.get("huge")[0] and m.get(5)[0]


def test_work_run_off_the_page_thread_shows_the_same_page(monkeypatch):
    # every simulation as heavy work (worker thread, progress bar, Stop button): the page a person
    # reads is the one the page thread draws
    def page(heavy: bool) -> tuple:
        import ui.jobs
        monkeypatch.setattr(ui.jobs, "HEAVY_REQUEST_RUNS", -1 if heavy else 10**12)
        ui.jobs.results.clear()
        at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
        at.query_params["rate"] = "6.5"
        at.run()
        assert not at.exception
        return tuple((m.label, m.value) for m in at.metric), tuple(h.value for h in at.subheader)

    heavy = page(heavy=True)
    assert any(label == "Throughput" for label, _ in heavy[0])
    assert heavy == page(heavy=False)


class AnswersAtOnce:
    """A simulator pool whose work is over before `submit` returns: the order a real pool takes
    when a run is refused on the spot (a sweep over the page's budget), here every time."""

    def submit(self, fn, *args):
        f = Future()
        f.set_result(fn(*args))
        return f


def test_heavy_work_that_ends_at_once_still_answers_the_page(monkeypatch):
    # the page registers its run and waits for it; the run may be over first: the page is drawn,
    # and the run is not left behind as in flight
    import ui.jobs
    monkeypatch.setattr(ui.jobs, "HEAVY_REQUEST_RUNS", -1)
    monkeypatch.setattr(ui.jobs, "_pool", AnswersAtOnce())
    ui.jobs.results.clear()
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=120)
    at.query_params["rate"] = "6.6"
    page = threading.Thread(target=at.run, daemon=True)  # a page that never answers fails, not hangs
    page.start()
    page.join(180)
    assert not page.is_alive(), "the page never answered: it waits on a run that is over"
    assert not at.exception
    assert any(m.label == "Throughput" for m in at.metric)
    assert ui.jobs._inflight == {}


def test_a_stop_that_lands_as_its_run_ends_stops_the_pages_next_run(monkeypatch):
    # the person clicks "Stop this run" as the deployment's run ends: the click's rerun finds that run
    # done and stops the page's next one (a sweep) instead of letting it run to its end
    import ui.jobs
    monkeypatch.setattr(ui.jobs, "HEAVY_REQUEST_RUNS", -1)
    monkeypatch.setattr(ui.jobs, "_pool", AnswersAtOnce())
    ui.jobs.results.clear()
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    at.query_params["rate"] = "6.7"
    at.run()  # the Lab: the deployment's run, done and kept
    assert not at.exception and not at.info
    at.session_state[ui.jobs._STOP_AT] = at.session_state[ui.jobs._RUN] + 1  # the button's callback
    at.switch_page("views/bottlenecks.py").run()  # the same deployment, then the page's sweeps
    assert not at.exception
    assert [i.value.split(".")[0] for i in at.info if i.value.startswith("Stopped")] == [
        "Stopped: Sweeping the request rate (2,000 requests per run)"]
    assert [b.label for b in at.button if b.label == "Run it again"] == ["Run it again"]
