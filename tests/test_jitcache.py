"""The compiled engine on disk (core/jitcache.py): the copy that ships with the code is fresh and
spares a fresh clone the compile; a stale or foreign cache never runs old code.

The staleness tests run the real jitcache.py and jit.py in a small package of the same shape as
core (a jitted function in one module inlining one from another), because compiling the real
engine takes a minute; each step runs in a fresh process, as a server start does."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import core
from core import jitcache

import live_app

ROOT = Path(__file__).resolve().parent.parent

STATS = """
import json, sys
sys.path.insert(0, {root!r})
{body}
from numba.core.registry import CPUDispatcher
import importlib, pkgutil, core
hits = misses = 0
for info in pkgutil.walk_packages(core.__path__, "core."):
    if info.name in ("core.__main__",) or info.name.startswith("core.cli"):
        continue
    for obj in vars(importlib.import_module(info.name)).values():
        if isinstance(obj, CPUDispatcher):
            hits += sum(obj.stats.cache_hits.values())
            misses += sum(obj.stats.cache_misses.values())
print(json.dumps(dict(result=result, hits=hits, misses=misses, status=core.jitcache.status())))
"""


def run_in_fresh_process(root: Path, body: str, tmp: Path, as_nobody: bool = False, **env) -> dict:
    """Run `body` (which sets `result`) in a new process whose temporary folder is `tmp`, and
    count the jitted functions loaded from disk and compiled."""
    full = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "LLM_LAB_CACHE_DIR", "NUMBA_CPU_NAME",
                                                              "NUMBA_CPU_FEATURES", jitcache.OFF)}
    full.update(TMPDIR=str(tmp), **env)
    prefix = live_app.as_nobody() if as_nobody else []
    out = subprocess.run(prefix + [sys.executable, "-c", STATS.format(root=str(root), body=body)], env=full,
                         capture_output=True, text=True, timeout=600, cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the real engine

def test_the_shipped_compiled_engine_is_built_from_these_sources():
    manifest = jitcache.shipped()
    assert manifest is not None, "core/compiled/ is missing: run `python -m core compile`"
    assert manifest["digest"] == jitcache.digest(), (
        "the engine's sources changed since core/compiled/ was built: run `python -m core compile` and commit it")
    assert manifest["cpu"] == "generic"
    pinned = (ROOT / "requirements.txt").read_text()
    assert f"numba=={manifest['numba']}" in pinned, "built with another numba than requirements.txt pins"


def test_a_fresh_clone_loads_the_engine_without_compiling(tmp_path):
    # an empty temporary folder, as on a fresh clone or a restarted host: the shipped engine is
    # copied there and every function the app calls loads from it
    got = run_in_fresh_process(ROOT, "from core.serving import warmup\nwarmup.compile_all()\nresult = 1", tmp_path)
    assert got["status"]["seeded"] and got["status"]["ready"] and got["status"]["shipped_problem"] is None
    assert got["misses"] == 0, "a specialisation the app uses is missing from core/compiled/: extend warmup.py"
    assert got["hits"] > 0


def test_every_module_the_engine_imports_from_the_package_is_in_the_digest():
    names = {p.relative_to(core.PACKAGE).as_posix() for p in jitcache.sources()}
    # loop.py imports costmodel, which imports catalog and the package's DATA: their constants
    # could be frozen into compiled code
    assert {"engine/loop.py", "engine/layout.py", "physics/costmodel.py", "physics/catalog.py", "jit.py"} <= names
    assert "lab/report.py" not in names  # not compiled, not imported by compiled code


# ---------------------------------------------------------------- staleness, in a small package

JITTED = '''from ..jit import engine_jit
from ..physics.consts import helper, K


@engine_jit
def f(x):
    return helper(x) + K
'''
CONSTS = '''from ..jit import step_jit

K = {k}


@step_jit
def helper(x):
    return 10 * x
'''
WARMUP = '''from ..engine.fn import f


def compile_all():
    f(1)
'''


@pytest.fixture
def package(tmp_path):
    """A package named core with the real jitcache.py and jit.py, one jitted function inlining a
    callee from another module, and a constant there."""
    root = tmp_path / "project"
    pkg = root / "core"
    for sub in ("engine", "physics", "serving"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from pathlib import Path\nPACKAGE = Path(__file__).parent\n"
                                     "from . import jitcache\njitcache.install()\n")
    for name in ("jitcache.py", "jit.py"):
        shutil.copy(core.PACKAGE / name, pkg / name)
    (pkg / "engine" / "layout.py").write_text("")
    (pkg / "engine" / "fn.py").write_text(JITTED)
    (pkg / "physics" / "consts.py").write_text(CONSTS.format(k=1))
    (pkg / "serving" / "warmup.py").write_text(WARMUP)
    return root


CALL = "from core.engine.fn import f\nresult = int(f(1))"


def test_a_change_in_another_module_recompiles(package, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    first = run_in_fresh_process(package, CALL, tmp)
    assert first["result"] == 11 and first["misses"] > 0
    again = run_in_fresh_process(package, CALL, tmp)
    assert again["result"] == 11 and again["hits"] > 0 and again["misses"] == 0  # from disk
    # the constant lives in the callee's module; the caller's file and bytecode are unchanged
    (package / "core" / "physics" / "consts.py").write_text(CONSTS.format(k=2))
    changed = run_in_fresh_process(package, CALL, tmp)
    assert (changed["result"], changed["hits"]) == (12, 0)


def test_a_stale_shipped_cache_is_never_loaded(package, tmp_path):
    env = dict(PYTHONPATH=str(package))
    built = subprocess.run([sys.executable, "-c", "from core import jitcache; jitcache.build()"], cwd=package,
                           env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    got = run_in_fresh_process(package, CALL, fresh)
    assert got["status"]["seeded"] and got["result"] == 11 and got["hits"] > 0 and got["misses"] == 0

    (package / "core" / "physics" / "consts.py").write_text(CONSTS.format(k=3))
    other = tmp_path / "other"
    other.mkdir()
    got = run_in_fresh_process(package, CALL, other)
    assert not got["status"]["seeded"] and "sources changed" in got["status"]["shipped_problem"]
    assert (got["result"], got["hits"]) == (13, 0)
    # even copied by hand into the folder of the new sources, the old code is not loaded
    folder = Path(got["status"]["folder"])
    shutil.rmtree(folder)
    shutil.copytree(package / "core" / "compiled" / "numba", folder)
    got = run_in_fresh_process(package, CALL, other)
    assert (got["result"], got["hits"]) == (13, 0)


def test_a_cache_for_another_cpu_is_not_loaded(package, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    run_in_fresh_process(package, CALL, tmp)
    cache = next((tmp / "llm-serving-lab-numba").iterdir())
    assert cache.name.endswith("-generic")
    # the same files, read by a process that compiles for a specific CPU
    shutil.copytree(cache, tmp / "x" / cache.name.replace("-generic", "-haswell"))
    got = run_in_fresh_process(package, CALL, tmp, NUMBA_CPU_NAME="haswell", LLM_LAB_CACHE_DIR=str(tmp / "x"))
    assert got["result"] == 11 and got["hits"] == 0 and got["misses"] > 0


def test_with_no_writable_folder_the_engine_still_runs(package, tmp_path):
    # nothing writable: not the temporary folder, not the home folder (compiled in memory instead)
    shared = Path(tempfile.mkdtemp(prefix="llm-lab-ro-"))
    try:
        shutil.copytree(package, shared / "project")
        ro = shared / "ro"
        ro.mkdir()
        for p in [shared, *shared.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        got = run_in_fresh_process(shared / "project", CALL, ro, as_nobody=True, HOME=str(ro))
    finally:
        for p in [shared, *shared.rglob("*")]:
            p.chmod(0o755)
        shutil.rmtree(shared)
    assert got["result"] == 11 and got["status"]["writable"] is False
