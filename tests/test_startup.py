"""What a person waiting on the first start reads (ui/startup.py): what happens, for how long, and,
when the simulator cannot be compiled here, what to do instead of a traceback."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

from ui import startup

ROOT = Path(__file__).resolve().parent.parent


def status(**kw) -> dict:
    base = dict(folder="/tmp/llm-serving-lab-numba/abc-generic", writable=True, seeded=False, ready=False,
                shipped_problem=None, compile_s_where_built=96.0, built_on="2 cores")
    return {**base, **kw}


def test_a_cached_engine_is_a_load_not_a_compile():
    assert startup.first_start_message(status(ready=True)).startswith("Loading the compiled simulator")


def test_a_compile_says_why_and_how_long():
    text = startup.first_start_message(status(shipped_problem="it was compiled for Python 3.11, this is 3.12"))
    assert "Compiling" in text and "it took 96 s where it was built (2 cores)" in text and "Python 3.11, this is 3.12" in text
    assert "kept for later starts" in text


def test_without_a_writable_folder_every_start_compiles_and_the_page_says_how_to_fix_it():
    text = startup.first_start_message(status(writable=False, folder=None))
    assert "every start compiles again" in text and "LLM_LAB_CACHE_DIR" in text


def test_a_failed_compile_stops_the_page_with_what_to_do(monkeypatch):
    import core.serving.warmup
    import ui.cache

    def broken():
        raise RuntimeError("LLVM ERROR: Cannot select: intrinsic %llvm.x86.avx512\nmore lines")

    monkeypatch.setattr(core.serving.warmup, "compile_all", broken)
    monkeypatch.setattr(ui.cache, "engine", ui.cache.EngineLoad())  # a server process starting on this machine
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    at.run()
    assert not at.exception
    text = " ".join(e.value for e in at.error)
    assert "could not be compiled on this computer" in text and "LLVM ERROR: Cannot select" in text
    assert "delete that folder and restart" in text and "more lines" not in text
    assert not at.metric  # nothing pretends to be simulated


# ---------------------------------------------------------------- a server's warm-up (ui/prewarm.py)

def test_the_first_visitor_after_a_start_is_served_the_lab_the_warm_up_simulated(monkeypatch):
    import threading

    import core.lab.report
    from core import memo
    from ui import jobs, prewarm

    monkeypatch.setattr(jobs, "results", memo.Memo(jobs.RESULTS_BYTES, 400))  # a server just started
    monkeypatch.setattr(prewarm, "ready", threading.Event())
    prewarm.warm()
    assert prewarm.ready.is_set()

    def simulated_again(*_a, **_k):
        raise AssertionError("the first page simulated its workload again: the warm-up simulated another one")

    monkeypatch.setattr(core.lab.report, "lab_view", simulated_again)
    at = AppTest.from_file(str(ROOT / "navigation.py"), default_timeout=300)
    at.run()  # a link with no parameters: the sidebar's defaults
    assert not at.exception and not at.error
    assert any(m.label == "Throughput" for m in at.metric)


def test_a_server_that_must_compile_answers_at_once_and_lets_the_page_explain(monkeypatch):
    import threading
    from types import SimpleNamespace

    import ui.cache
    from ui import prewarm

    compiling = SimpleNamespace(done=threading.Event(), problem=None, status={"ready": False})
    monkeypatch.setattr(ui.cache, "engine", compiling)
    monkeypatch.setattr(prewarm, "ready", threading.Event())
    warm = threading.Thread(target=prewarm.warm, daemon=True)
    warm.start()
    try:
        assert prewarm.ready.wait(timeout=30)  # while the engine is still compiling
        assert not compiling.done.is_set()
    finally:
        compiling.problem = "stopped by the test"
        compiling.done.set()
        warm.join(timeout=30)
