"""No import cycles over core/ and backends/.

Every ``import`` and ``from ... import`` statement counts, including those inside functions: a
lazy import is fine for loading a driver late, but it must not be a way around a circle between
two modules of the project.  Modules are found by parsing the sources (nothing is imported), the
edges resolved to the project's own modules, and the strongly connected components of the graph
listed: each component of more than one module is a cycle.
"""

from __future__ import annotations

import ast
import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: source roots: the folder that holds each top-level package
SOURCE_ROOTS = [ROOT / "core", *sorted(p for p in (ROOT / "backends").iterdir() if p.is_dir())]


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for src in SOURCE_ROOTS:
        for path in src.rglob("*.py"):
            rel = path.relative_to(src).with_suffix("")
            parts = list(rel.parts)
            if any(p.startswith(".") or p in ("build", "tests") for p in parts) or ".egg-info" in str(rel):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts:
                out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    is_pkg = path.name == "__init__.py"
    # no collection inside the parse: a finalizer that raises while CPython 3.11 builds the AST makes the parse
    # fail with "AST constructor recursion depth mismatch" (seen once in a fresh-clone run: another test's
    # half-built LiteRT Delegate collected here)
    enabled = gc.isenabled()
    gc.disable()
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    finally:
        if enabled:
            gc.enable()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield from _resolve(a.name, known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                if sub in known:  # ``from pkg import module``
                    yield sub
                else:
                    yield from _resolve(mod, known)


def _resolve(mod: str, known: set[str]) -> Iterator[str]:
    """The longest known module ``mod`` names (``a.b.c`` -> ``a.b`` when ``c`` is an attribute)."""
    parts = mod.split(".")
    while parts:
        m = ".".join(parts)
        if m in known:
            yield m
            return
        parts.pop()


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: {d for d in _imports(m, p, known) if d != m} for m, p in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _example_path(graph: dict[str, set[str]], comp: list[str]) -> str:
    """One circle inside a component, as ``a -> b -> a``, so the failure says where to cut."""
    members = set(comp)
    start = comp[0]
    path, seen = [start], {start}
    v = start
    while True:
        nxt = sorted(graph[v] & members)
        if start in nxt and len(path) > 1:
            return " -> ".join([*path, start])
        step = next((w for w in nxt if w not in seen), None)
        if step is None:
            return " <-> ".join(comp)
        path.append(step)
        seen.add(step)
        v = step


def test_the_checker_finds_a_cycle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_the_project():
    g = import_graph()
    assert "litegpu._plan" in g and "litegpu_opencl.plugin" in g and "litegpu_vulkan._device" in g
    assert "litegpu._partition" in g["litegpu._plan"]


def test_no_import_cycles_in_core_and_backends():
    g = import_graph()
    found = [_example_path(g, c) for c in cycles(g)]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_backend_plugin_modules_are_cheap_to_import():
    """``import litegpu_<api>.plugin`` (what the entry point loads) must not load a driver binding
    or the GPU executor: those load when a device is listed or a delegate created."""
    code = ("import sys, litegpu_opencl.plugin, litegpu_vulkan.plugin, litegpu_webgpu.plugin\n"
            "print(sorted(m for m in ('pyopencl', 'vulkan', 'wgpu', 'litegpu.gpu._runtime', 'numpy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "LITEGPU_DISABLE_PLUGIN_AUTOLOAD": "1"})
    loaded = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - a list literal printed above
    assert not set(loaded) - {"numpy"}, f"plugin modules loaded {loaded}"
