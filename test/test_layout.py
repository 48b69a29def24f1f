"""The package layout keeps itself honest: no file of amf_ros imports one that imports it back, and the layering
written in docs/contracts.md is the one `lint-imports` checks (.importlinter).

Why a test beside lint-imports: import-linter checks the layers between packages, not cycles between the files of
one package, and nothing else would notice when the documented order and the checked one drift apart.
"""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "amf_ros"


def _modules(root: Path, package: str) -> dict[str, Path]:
    """``{dotted name: file}``: ``amf_ros/core/criterion.py`` -> ``amf_ros.core.criterion``, a package's
    ``__init__.py`` -> the package."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The file an imported dotted name lives in: the longest prefix of ``name`` that is a module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path = REPO, package_name: str = PACKAGE) -> dict[str, dict[str, int]]:
    """``{module: {imported module of the package: line of the first import}}`` from every ``import`` and ``from``
    statement anywhere in the file (module level, function-local, under ``if TYPE_CHECKING``), relative imports
    resolved.

    ``from pkg import name`` is an edge to the submodule ``pkg.name`` when that is a module, else to ``pkg`` itself.
    Parent packages that Python initialises on the way (``amf_ros/__init__.py`` for every import) are not edges:
    a cycle here is one file needing another that needs it back.
    """
    modules = _modules(root, package_name)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            else:
                continue
            for target in targets:
                if target == package_name or target.startswith(package_name + "."):
                    owner = _owner(target, modules)
                    if owner is not None and owner != module:
                        edges.setdefault(owner, node.lineno)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle ``[a, b, ..., a]`` through each strongly connected group of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(group, graph) for group in groups]


def _cycle_in(group: list[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A shortest cycle through the group's first module, found by breadth-first search inside the group."""
    start, members = group[0], set(group)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w in members and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    return [*group, group[0]]  # pragma: no cover - a strongly connected group always has a cycle through start


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return " -> ".join(f"{a} (l.{graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)) + f" -> {cycle[-1]}"


def _layers(text: str, where: str) -> list[frozenset[str]]:
    """Layer lines (highest first; ``a | b`` = independent siblings) -> one set of names per layer."""
    layers = [frozenset(name.strip() for name in line.split("|")) for line in text.splitlines() if line.strip()]
    if not layers or any("" in layer for layer in layers):
        raise ValueError(f"{where}: no layers, or an empty name in {text!r}")
    return layers


def importlinter_layers() -> list[frozenset[str]]:
    """The layers of the one ``layers`` contract in .importlinter, container amf_ros."""
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter", encoding="utf-8")
    contracts = [s for s in config.sections() if config.get(s, "type", fallback="") == "layers"]
    assert len(contracts) == 1, f".importlinter must hold exactly one layers contract, got {contracts}"
    contract = config[contracts[0]]
    containers = contract.get("containers", contract.get("container", "")).split()
    assert containers == [PACKAGE], f"the layers contract must be over container {PACKAGE}, got {containers}"
    return _layers(contract["layers"], ".importlinter")


def documented_layers() -> list[frozenset[str]]:
    """The first fenced block under docs/contracts.md's "## Layers" heading."""
    text = (REPO / "docs" / "contracts.md").read_text(encoding="utf-8")
    match = re.search(r"^## Layers\b.*?^```[a-z]*\n(.*?)^```", text, re.S | re.M)
    assert match, 'docs/contracts.md needs a "## Layers" section with the order in a fenced block'
    return _layers(match.group(1), "docs/contracts.md")


def test_no_import_cycles_between_files():
    graph = import_graph()
    assert "amf_ros.core.criterion" in graph and graph["amf_ros.core.criterion"], "the scan found no imports"
    cycles = find_cycles(graph)
    assert not cycles, "import cycles between files of amf_ros (function-local imports count too):\n" + "\n".join(
        _describe(c, graph) for c in cycles)


def test_cycle_finder_names_a_cycle_through_relative_and_function_local_imports(tmp_path: Path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for name, text in {
        "__init__.py": "",
        "a.py": "from pkg.sub import b\n",
        "sub/__init__.py": "X = 1\n",
        "sub/b.py": "import os\n\n\ndef f():\n    from ..c import g\n    return g\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\nfrom .sub import X\n",
        "d.py": "import pkg.c\n",
    }.items():
        (pkg / name).write_text(text)
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.sub.b"] == {"pkg.c": 5}  # relative and function-local
    assert graph["pkg.c"] == {"pkg.a": 3, "pkg.sub": 4}  # under TYPE_CHECKING; a name of a package's __init__
    assert graph["pkg.d"] == {"pkg.c": 1}
    cycles = find_cycles(graph)
    assert cycles == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
    assert _describe(cycles[0], graph) == "pkg.a (l.1) -> pkg.sub.b (l.5) -> pkg.c (l.3) -> pkg.a"
    assert find_cycles({"a": {"b": 1}, "b": {}}) == []


def test_core_is_numpy_only():
    """core/ is the AMF maths without torch, JAX or ROS (docs/contracts.md): what needs a policy's head lives in
    policies/ (e.g. the peer-rule scores in policies/peer_scores.py)."""
    heavy = ("torch", "jax", "flax", "tensorflow", "rclpy")
    found = []
    for path in sorted((REPO / PACKAGE / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names if n.split(".")[0] in heavy]
    assert not found, f"core/ imports heavy backends: {found}"


def test_documented_layers_are_the_checked_ones():
    checked, documented = importlinter_layers(), documented_layers()
    assert documented == checked, (
        "docs/contracts.md's layers differ from .importlinter's (highest first):\n"
        f"  docs:         {[' | '.join(sorted(layer)) for layer in documented]}\n"
        f"  .importlinter: {[' | '.join(sorted(layer)) for layer in checked]}")
    names = {name for layer in checked for name in layer}
    packages = {p.name for p in (REPO / PACKAGE).iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in (REPO / PACKAGE).glob("*.py") if p.stem != "__init__"}
    assert names == packages | modules, (
        f"every top-level package and module of {PACKAGE} is in exactly one layer: missing "
        f"{sorted((packages | modules) - names)}, unknown {sorted(names - packages - modules)}")
