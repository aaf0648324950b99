"""The compiled engine on disk: where numba keeps it, when it may be reused, and the copy that
ships with the code, so that a fresh clone starts without compiling (about a minute on a laptop
core; core/compiled/manifest.json says how long it took where it was built).

When compiled code may run. Only with the sources it was compiled from. numba's own check looks
at the function's file alone (and its key holds the function's bytecode, not its constants),
while the engine's functions inline callees from other modules and freeze their constants. Here
every cached function's stamp is one digest of every module compiled into the engine and of
every package module they import (whose constants numba freezes into the code): a change to any
of them makes every entry stale and numba compiles again. numba's index key adds its own version,
the Python version, the target triple, CPU name and CPU features, so a cache built elsewhere is
loaded only where the same code runs; anywhere else numba compiles instead.

Where. A writable folder, one per digest: $LLM_LAB_CACHE_DIR, else $NUMBA_CACHE_DIR, else the
system's temporary folder, else ~/.cache; the project folder may be read-only (a hosted app).
The cache files are named by their place in the package, not by the checkout's absolute path
(numba's default), so a cache built in one clone is found in another.

Portable code. The engine is compiled for a generic x86-64 CPU (numba: NUMBA_CPU_NAME=generic,
no extra features), so the shipped cache runs on any x86-64 machine; this scalar, branchy code
measured no slower than code built for the host CPU (bench/results/compile.json). On another
architecture (arm64) the triple differs and the engine compiles on first use.

`python -m core compile` rebuilds core/compiled/ after the engine changes; tests/test_jitcache.py
fails while it is stale.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
SHIPPED = PACKAGE / "compiled"  # the cache that ships with the code, and its manifest
MANIFEST = SHIPPED / "manifest.json"
CPU_NAME = "generic"
OFF = "LLM_LAB_SHIPPED_CACHE"  # "0": never copy the shipped cache (to time a cold compile)

_state: dict = {}


# ---------------------------------------------------------------- what the engine is made of

def _statements(tree: ast.AST):
    """Every statement in `tree`, however nested (an import is a statement: the expressions, most of
    a module's nodes, need no visit)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.stmt, ast.excepthandler, ast.match_case)):
            yield node
            yield from _statements(node)


def _imports(path: Path) -> set[Path]:
    """The package's modules that `path` imports (relative or `core.` imports)."""
    out = set()
    pkg_dir = path.parent
    for node in _statements(ast.parse(path.read_bytes())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_dir
                for _ in range(node.level - 1):
                    base = base.parent
                parts = node.module.split(".") if node.module else []
            elif node.module and node.module.split(".")[0] == PACKAGE.name:
                base, parts = PACKAGE, node.module.split(".")[1:]
            else:
                continue
            target = base.joinpath(*parts)
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == PACKAGE.name:
                    out |= _module_files(PACKAGE.joinpath(*a.name.split(".")[1:]))
            continue
        else:
            continue
        out |= _module_files(target)
        for name in names:  # `from . import cohort` names a module
            if (target / f"{name}.py").exists() or (target / name / "__init__.py").exists():
                out |= _module_files(target / name)
    return {p for p in out if PACKAGE in p.parents}


def _module_files(target: Path) -> set[Path]:
    if target.with_suffix(".py").exists() and target != PACKAGE:
        return {target.with_suffix(".py")}
    if (target / "__init__.py").exists():
        return {target / "__init__.py"}
    return set()


def _uses_jit(path: Path) -> bool:
    data = path.read_bytes()
    if b"jit" not in data:  # most modules: no need to parse them (a start reads every module here)
        return False
    return any(isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[-1] == "jit"
               for n in _statements(ast.parse(data)))


def sources() -> list[Path]:
    """Every module compiled into the engine (those that use the compilation settings, the
    settings themselves, the table layouts) and every package module they import, directly or not."""
    todo = [p for p in sorted(PACKAGE.rglob("*.py"))
            if p in (PACKAGE / "jit.py", PACKAGE / "engine" / "layout.py") or _uses_jit(p)]
    seen: set[Path] = {Path(__file__).resolve()}  # this file decides where code is kept, not what it computes
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo.extend(_imports(p) - seen)
    return sorted(seen - {Path(__file__).resolve()})


def digest() -> str:
    if "digest" not in _state:
        h = hashlib.sha256()
        for path in sources():
            h.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
        _state["digest"] = h.hexdigest()[:16]
    return _state["digest"]


# ---------------------------------------------------------------- where it lives

def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
        return True
    except OSError:
        return False


def _roots() -> list[Path]:
    out = [Path(p) for p in (os.environ.get("LLM_LAB_CACHE_DIR"), os.environ.get("NUMBA_CACHE_DIR")) if p]
    try:
        out.append(Path(tempfile.gettempdir()) / "llm-serving-lab-numba")
    except (FileNotFoundError, OSError):  # no usable temporary folder at all
        pass
    out.append(Path.home() / ".cache" / "llm-serving-lab-numba")
    return out


def _platform() -> dict:
    import llvmlite.binding as ll
    import numba
    return dict(numba=numba.__version__, python=f"{sys.version_info[0]}.{sys.version_info[1]}",
                triple=ll.get_process_triple(), cpu=CPU_NAME)


def shipped() -> dict | None:
    try:
        return json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return None


def why_not_shipped() -> str | None:
    """Why the shipped compiled engine cannot serve this process (None when it can)."""
    m = shipped()
    if m is None:
        return "no compiled engine ships with this copy (python -m core compile builds one)"
    if m.get("digest") != digest():
        return ("the simulator's sources changed since the shipped engine was compiled "
                "(python -m core compile rebuilds it)")
    cpu = os.environ.get("NUMBA_CPU_NAME", CPU_NAME)
    if cpu != CPU_NAME:
        return f"NUMBA_CPU_NAME asks for code for the {cpu} CPU; the shipped engine is for a generic one"
    here = _platform()
    for key, what in (("python", "Python"), ("numba", "numba"), ("triple", "platform")):
        if m.get(key) != here[key]:
            return f"it was compiled for {what} {m.get(key)}, this is {here[key]}"
    return None


def _seed(folder: Path) -> bool:
    """Copy the shipped cache into `folder` when it was built from these sources for this platform:
    each file the folder lacks, data before indexes (numba reaches data only through an index),
    each appearing at once or not at all (a rename), never overwriting what is there. A folder
    numba created or partly filled meanwhile keeps its own entries; every entry is still checked
    against the sources' digest when loaded."""
    if os.environ.get(OFF) == "0" or why_not_shipped():
        return False
    src_root = SHIPPED / "numba"
    copied = 0
    for src in sorted(src_root.rglob("*"), key=lambda p: (p.suffix == ".nbi", str(p))):
        dst = folder / src.relative_to(src_root)
        if not src.is_file() or dst.exists():
            continue
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(f".{dst.name}.{os.getpid()}.seed")
            shutil.copyfile(src, tmp)  # contents only: the shipped files may be read-only, the copy must not be
            os.replace(tmp, dst)
            copied += 1
        except OSError:  # a full disk: what is missing compiles
            return copied > 0
    return copied > 0


def install() -> None:
    """Point numba at this package's cache (before anything compiles). Idempotent."""
    if _state.get("installed"):
        return
    os.environ.setdefault("NUMBA_CPU_NAME", CPU_NAME)
    if os.environ["NUMBA_CPU_NAME"] == CPU_NAME:
        os.environ.setdefault("NUMBA_CPU_FEATURES", "")
    folder = None
    for root in _roots():
        if _writable(root):
            folder = root / f"{digest()}-{os.environ['NUMBA_CPU_NAME']}"
            os.environ["NUMBA_CACHE_DIR"] = str(root)  # child processes (the planner's pool) use the same
            break
    seeded = _seed(folder) if folder else False
    _state.update(installed=True, folder=folder, seeded=seeded, t0=time.time())
    from numba.core import caching, config
    config.reload_config()  # numba may have been imported before these variables were set
    if _Locator not in caching.CacheImpl._locator_classes:
        caching.CacheImpl._locator_classes.insert(0, _Locator)


def caching_on() -> bool:
    """Whether compiled code is kept on disk (False: no writable folder; every start compiles)."""
    install()
    return _state["folder"] is not None


def status() -> dict:
    """What the first start will do, for the page that waits on it."""
    install()
    folder = _state["folder"]
    m = shipped() or {}
    ready = bool(folder and any(folder.rglob("loop.run-*.nbi")))  # the engine's entry point is kept
    return dict(folder=str(folder) if folder else None, writable=folder is not None, seeded=_state["seeded"],
                ready=ready, shipped_problem=why_not_shipped(), compile_s_where_built=m.get("compile_s"),
                built_on=m.get("built_on"))


# ---------------------------------------------------------------- numba's side

def _locator_base():
    from numba.core.caching import _CacheLocator
    return _CacheLocator


class _Locator(_locator_base()):
    """numba cache locator for this package: files under <folder>/<subpackage>/, stamped with the
    digest of the engine's sources."""

    def __init__(self, py_func, py_file):
        self._lineno = py_func.__code__.co_firstlineno
        rel = Path(py_file).resolve().parent.relative_to(PACKAGE).as_posix()
        self._path = str(_state["folder"] / (rel if rel != "." else "_"))

    def get_cache_path(self):
        return self._path

    def get_source_stamp(self):
        return digest()

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        if _state.get("folder") is None or PACKAGE not in Path(py_file).resolve().parents:
            return None
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        return self


# ---------------------------------------------------------------- building the shipped cache

def build() -> dict:
    """Compile the engine from scratch, in a fresh process and folder, and make it the shipped cache."""
    import subprocess
    staged = Path(tempfile.mkdtemp(prefix="llm-lab-compile-"))
    env = dict(os.environ, LLM_LAB_CACHE_DIR=str(staged), NUMBA_CPU_NAME=CPU_NAME, NUMBA_CPU_FEATURES="")
    env[OFF] = "0"
    env.pop("NUMBA_CACHE_DIR", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE.parent), env.get("PYTHONPATH")]))
    code = ("import time; t0, c0 = time.perf_counter(), time.process_time(); from core.serving import warmup; "
            "warmup.compile_all(); print(time.perf_counter() - t0, time.process_time() - c0)")
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800)
        if out.returncode:
            raise ValueError(f"the engine did not compile: {out.stderr.strip().splitlines()[-1:]}")
        wall, cpu = map(float, out.stdout.split()[-2:])
        folder = staged / f"{digest()}-{CPU_NAME}"
        for f in folder.rglob("*.tmp.*"):
            f.unlink()
        manifest = dict(digest=digest(), **_platform(), compile_s=round(wall, 1), compile_cpu_s=round(cpu, 1),
                        built_on=f"{os.cpu_count()} cores",
                        built_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                        sources=[p.relative_to(PACKAGE).as_posix() for p in sources()],
                        rebuild="python -m core compile")
        shutil.rmtree(SHIPPED, ignore_errors=True)
        shutil.copytree(folder, SHIPPED / "numba")
        MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return manifest
