"""A hosted start (Streamlit Community Cloud): the project folder is read-only and the temporary
folder is new and empty. The first page still shows simulated figures, from the compiled engine
that ships with the code (copied into the temporary folder, not compiled again)."""
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from live_app import as_nobody, launch, streamlit_process, wait_idle

ROOT = Path(__file__).resolve().parent.parent
THROUGHPUT = "[data-testid='stMetric']:has-text('Throughput') [data-testid='stMetricValue']"


def test_the_first_page_works_from_a_read_only_folder_with_an_empty_temporary_folder():
    base = Path(tempfile.mkdtemp(prefix="llm-lab-hosted-"))
    project, tmp = base / "app", base / "tmp"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (project / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, project / f)
    tmp.mkdir()
    base.chmod(0o755)
    for p in project.rglob("*"):
        p.chmod(0o555 if p.is_dir() else 0o444)
    project.chmod(0o555)
    os.chown(tmp, 65534, 65534) if os.geteuid() == 0 else None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "LLM_LAB_"))}
    env.update(TMPDIR=str(tmp), HOME=str(base / "nohome"))
    try:
        assert not os.access(project, os.W_OK) or os.geteuid() == 0
        with streamlit_process(cwd=project, env=env, prefix=as_nobody()) as (url, _proc), \
                sync_playwright() as p:
            browser = launch(p)
            page = browser.new_page(viewport={"width": 1400, "height": 1200})
            page.goto(url)
            page.wait_for_selector(THROUGHPUT, timeout=240_000)
            wait_idle(page)
            assert page.locator("[data-testid='stException']").count() == 0
            assert "tok/s" in page.locator(THROUGHPUT).inner_text()
            browser.close()
        cache = list((tmp / "llm-serving-lab-numba").iterdir())
        assert [c.name.endswith("-generic") for c in cache] == [True]  # the shipped engine, copied
        assert not list(project.rglob("__pycache__/*.nbi"))  # nothing written into the project
    finally:
        for p in [base, *base.rglob("*")]:
            p.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)
