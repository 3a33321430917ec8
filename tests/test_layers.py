"""The house plan stays true: layers one way only, no import circles, small rooms.

An ``ast`` walk of the package (every import, module-level or inside a function, and
those under ``TYPE_CHECKING`` too) gives the import graph; docs/architecture.md draws it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"pfc": ROOT / "compiler", "pfc.backends": ROOT / "backends"}

# Lowest first. A module may import its own group and any group of a lower layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("pfc.grammar", "pfc.templates", "pfc.frontend"),
    ("pfc.passes",),
    ("pfc.oracle",),
    ("pfc.kernel",),
    ("pfc.backends",),
    ("pfc.build",),
    ("pfc.verifier", "pfc.bench", "pfc.deploy", "pfc.lsp", "pfc.prove", "pfc.importers",
     "pfc.decide"),
    ("pfc.api",),
    ("pfc.cli", "pfc.__main__"),
)
# Imports across groups of one layer that the plan allows: bench attaches the policy it
# measures through the deploy layer (the same code path as `pfc load`) and sends a whole
# firewall what `pfc verify` sends (verifier.traffic); `python -m pfc` is the command line.
ALLOWED_SIDEWAYS = {("pfc.bench", "pfc.deploy"), ("pfc.bench", "pfc.verifier"),
                    ("pfc.prove", "pfc.verifier"),
                    ("pfc.lsp", "pfc.prove"), ("pfc.__main__", "pfc.cli")}
MAX_MODULES_PER_FOLDER = 15
MAX_LINES = 450


def _module_files() -> Iterator[tuple[str, Path]]:
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if package == "pfc" and parts[:1] == ["backends"]:
                continue
            yield name, path


MODULES = dict(_module_files())


def _resolve(name: str) -> str | None:
    """The pfc module an imported name lives in (longest known prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name == "pfc" or name.startswith("pfc."):
                target = _resolve(name)
                if target and target != "pfc":
                    found.add(target)
    return found


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def _group(module: str) -> tuple[int, str]:
    for level, groups in enumerate(LAYERS):
        for group in groups:
            if module == group or module.startswith(group + "."):
                return level, group
    raise AssertionError(f"module {module} is in no layer: add it to LAYERS")


def test_every_module_is_in_a_layer():
    for module in MODULES:
        if module != "pfc":
            _group(module)


def test_layers_go_one_way():
    wrong = []
    for module, targets in GRAPH.items():
        if module == "pfc":
            continue
        level, group = _group(module)
        for target in targets:
            t_level, t_group = _group(target)
            sideways = t_level == level and t_group != group
            if t_level > level or (sideways and (group, t_group) not in ALLOWED_SIDEWAYS):
                wrong.append(f"{module} ({group}) imports {target} ({t_group})")
    assert not wrong, "layer violations:\n" + "\n".join(sorted(wrong))


def test_nothing_below_the_cli_imports_it():
    users = [m for m, targets in GRAPH.items()
             if not m.startswith(("pfc.cli", "pfc.__main__"))
             and any(t.startswith("pfc.cli") for t in targets)]
    assert users == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert _cycles(GRAPH) == []


def test_the_circle_finder_finds_circles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_rooms_are_small():
    folders: dict[Path, int] = {}
    for path in MODULES.values():
        if path.name != "__init__.py" and path.name != "__main__.py":
            folders[path.parent] = folders.get(path.parent, 0) + 1
    crowded = {str(f.relative_to(ROOT)): n for f, n in folders.items()
               if n > MAX_MODULES_PER_FOLDER}
    assert crowded == {}
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


@pytest.mark.parametrize("target", ["nft", "ir", "cbpf"])
def test_the_library_api_loads_no_cli_module(target):
    code = ("import sys, pfc\n"
            f"a = pfc.compile('drop udp dport 53', target={target!r})\n"
            "assert a.text, a\n"
            "print(','.join(m for m in sys.modules if m.startswith('pfc.cli')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd="/")
    assert out.stdout.strip() == ""
