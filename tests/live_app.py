"""Helpers for tests and benchmarks that drive the real app in a browser: start `streamlit run`
on a free port, and launch Chromium through Playwright.

The browser is, in order: $CHROMIUM_PATH; the system's Chromium (Debian's /usr/bin/chromium, as
.ci/run installs); Playwright's own Chromium, downloaded with `python -m playwright install
chromium` on first use where the network allows.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def streamlit_server(timeout_s: float = 120):
    with streamlit_process(timeout_s) as (url, _proc):
        yield url


def as_nobody() -> list[str]:
    """The command prefix that runs a child of root, who may write anywhere, as nobody, so that a
    read-only folder is read-only to it (util-linux's setpriv, in every Debian and Ubuntu base image)."""
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []


@contextmanager
def streamlit_process(timeout_s: float = 120, cwd: Path = ROOT, env: dict | None = None, prefix: list | None = None,
                      poll_s: float = 0.2, python: str = sys.executable):
    """The server's URL and its process (for its memory); `cwd`: the project folder to run,
    `prefix`: a command to run it under (as_nobody()), `python`: the environment's interpreter."""
    port = free_port()
    # the server's output goes to a file: a pipe nobody reads fills at 64 KB and then stops the
    # server (and its planner workers) at their next line of log
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        (prefix or []) + [python, "-m", "streamlit", "run", "dashboard.py", "--server.headless", "true",
                          "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats",
                          "false", "--server.fileWatcherType", "none"],
        cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"streamlit did not start: {log.read().decode(errors='replace')[-2000:]}")
            time.sleep(poll_s)  # polling the health endpoint until the server answers
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def chromium_executable() -> str | None:
    """A system Chromium if there is one; None means Playwright's own (installed on demand)."""
    for candidate in (os.environ.get("CHROMIUM_PATH"), shutil.which("chromium"), shutil.which("chromium-browser"),
                      shutil.which("google-chrome")):
        if candidate and Path(candidate).exists():
            return candidate
    subprocess.run([sys.executable, "-m", "playwright", "install", "chromium"], check=True)
    return None


def launch(playwright):
    exe = chromium_executable()
    return playwright.chromium.launch(executable_path=exe, args=CHROME_ARGS) if exe else \
        playwright.chromium.launch(args=CHROME_ARGS)


@contextmanager
def served_browser():
    """A Lab server and a headless Chromium beside it, for a module of browser tests: (browser, url)."""
    from playwright.sync_api import sync_playwright
    with streamlit_server() as url, sync_playwright() as p:
        browser = launch(p)
        try:
            yield browser, url
        finally:
            browser.close()


def wait_idle(page, timeout_ms: float = 240_000) -> None:
    """The app has finished its script run and is connected."""
    page.wait_for_selector(f"{IDLE}[data-test-connection-state='CONNECTED']", timeout=timeout_ms)
