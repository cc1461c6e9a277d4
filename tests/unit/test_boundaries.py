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
