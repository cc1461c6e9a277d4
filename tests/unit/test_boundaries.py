"""Import boundaries: services import `core/` and the contract (`rpc/`), never each other, and
never the command line's package; the contract imports only `core/`; `core/` imports no service."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "rpc", "router", "storagenode", "gsi_replicator", "dynalab")
# What each package may import of the others.
ALLOWED = {
    "core": {"core"},
    "rpc": {"core", "rpc"},
    "router": {"core", "rpc", "router"},
    "storagenode": {"core", "rpc", "storagenode"},
    "gsi_replicator": {"core", "rpc", "gsi_replicator"},
    "dynalab": set(PACKAGES),
}


def imported_packages(path: Path) -> set[str]:
    """The top-level packages of this repository that a module imports, at any depth."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found.update(name.split(".")[0] for name in names if name.split(".")[0] in PACKAGES)
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_its_layer_allows(package: str) -> None:
    modules = sorted((ROOT / package).rglob("*.py"))
    assert modules, f"no modules under {package}/"
    crossings = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) - ALLOWED[package])
        for path in modules
    }
    assert {module: bad for module, bad in crossings.items() if bad} == {}


def test_the_scan_sees_an_import_of_another_service(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom storagenode.metrics import watch\nimport rpc.ops\n")
    assert imported_packages(module) == {"storagenode", "rpc"}


def storagenode_imports(path: Path) -> tuple[set[str], set[tuple[str, str]]]:
    """The `storagenode` modules a module imports, at any depth (under TYPE_CHECKING too), and
    the (module, name) pairs it imports by `from storagenode.X import name`."""
    modules: set[str] = set()
    names: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(
                alias.name.split(".")[1]
                for alias in node.names
                if alias.name.startswith("storagenode.")
            )
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "storagenode":
                modules.update(alias.name for alias in node.names)
            elif node.module.startswith("storagenode."):
                module = node.module.split(".")[1]
                modules.add(module)
                names.update((module, alias.name) for alias in node.names)
    return modules, names


def _storagenode_graph() -> dict[str, set[str]]:
    return {
        path.stem: storagenode_imports(path)[0] - {path.stem}
        for path in sorted((ROOT / "storagenode").glob("*.py"))
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (module -> the modules it imports), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done or module not in graph:
            return None
        path.append(module)
        for imported in sorted(graph[module]):
            found = visit(imported)
            if found is not None:
                return found
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module)
        if found is not None:
            return found
    return None


def test_storagenode_modules_import_each_other_without_a_cycle() -> None:
    assert _cycle(_storagenode_graph()) is None


def test_no_module_imports_a_private_name_of_the_node() -> None:
    private = {
        str(path.relative_to(ROOT)): sorted(
            name
            for module, name in storagenode_imports(path)[1]
            if module == "node" and name.startswith("_")
        )
        for path in sorted(ROOT.rglob("*.py"))
        if ".venv" not in path.parts
    }
    assert {module: names for module, names in private.items() if names} == {}


def test_the_scan_sees_a_cycle_through_a_type_checking_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from storagenode import changefeed\n"
        "if TYPE_CHECKING:\n"
        "    from storagenode.node import _WriteGroup\n"
    )
    modules, names = storagenode_imports(module)
    assert modules == {"changefeed", "node"}
    assert names == {("node", "_WriteGroup")}
    assert _cycle({"node": {"m"}, "m": modules}) == ["m", "node", "m"]
    assert _cycle({"node": {"changefeed"}, "changefeed": set()}) is None
