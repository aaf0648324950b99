"""The code's layout is its architecture: imports point down the layers and never in a cycle, and
the numba cache's digest covers every module with compiled code. Read from the sources with ast."""
import ast
import importlib
import pkgutil
from pathlib import Path

import numba.core.registry

import core

ROOT = Path(__file__).parent.parent
# Each layer may import from the layers after it in this list, never from those before it.
LAYERS = ["views", "ui", "core.cli", "core.lab", "core.planner", "core.serving", "core.engine", "core.physics",
          "core.jit|core.jitcache|core.memo|core.progress|core.text|core.bounds"]


def layer(module: str) -> int | None:
    for i, names in enumerate(LAYERS):
        for name in names.split("|"):
            if module == name or module.startswith(name + "."):
                return i
    return None


def modules() -> dict[str, Path]:
    out = {}
    for folder in ("core", "ui", "views"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path) -> set[str]:
    """The project modules `name` imports, resolved to their full dotted names."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    known = modules()
    return {m for m in found if m in known and m != name}


def test_imports_point_down_the_layers():
    upward = []
    for name, path in modules().items():
        mine = layer(name)
        for target in imports(name, path):
            theirs = layer(target)
            if mine is not None and theirs is not None and theirs < mine:
                upward.append(f"{name} imports {target}")
    assert not upward, "imports pointing up the layers:\n" + "\n".join(upward)


def test_no_import_cycles():
    graph = {name: imports(name, path) for name, path in modules().items()}
    graph = {k: {t for t in v if not k.startswith(t + ".")} for k, v in graph.items()}  # a package's own __init__
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_layer_checker_sees_an_upward_import():
    # the checker itself: the engine importing the Lab would be reported
    assert layer("core.engine.loop") > layer("core.lab.stages")
    assert "core.physics.catalog" in imports("core.physics.memory", ROOT / "core/physics/memory.py")


def test_core_never_imports_streamlit():
    for name, path in modules().items():
        if name.startswith("core"):
            tree = ast.parse(path.read_text())
            names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
            assert not any(x.split(".")[0] == "streamlit" for x in names), name


def test_every_module_with_compiled_code_is_in_the_cache_digest():
    digest = set(core.jitcache.sources())
    compiled = set()
    for info in pkgutil.walk_packages(core.__path__, "core."):
        if info.name == "core.__main__":  # runs the command line on import
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, numba.core.registry.CPUDispatcher):
                compiled.add(Path(obj.py_func.__code__.co_filename).resolve())
    assert compiled, "no jitted function found: the search is broken"
    missing = compiled - {p.resolve() for p in digest}
    assert not missing, f"modules with jitted code left out of the numba cache digest: {sorted(missing)}"
