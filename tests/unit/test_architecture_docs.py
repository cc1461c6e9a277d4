"""The architecture index (`docs/architecture/index.md`) stays true: its module table lists every
module of the services and `core/`, and nothing that is gone; each `path::name` reference of its
walks names a file that exists and a function or class still defined in it; and it stays short
enough to be read as a map (issue 29: at most 200 lines)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INDEX = ROOT / "docs" / "architecture" / "index.md"
PACKAGES = ("core", "rpc", "router", "storagenode", "gsi_replicator", "dynalab")
INDEX_LINES_MAX = 200
# A row of the module table: its first cell is one path in backticks.
TABLE_ROW = re.compile(r"^\| `([^`]+)` \|")
REFERENCE = re.compile(r"`([\w/]+\.py)::([\w.]+)`")


def tree_modules() -> set[str]:
    """Every module of the packages, as the table names it: a package by its directory."""
    found: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT)
            if path.name == "__init__.py":
                found.add(f"{relative.parent.as_posix()}/")
            else:
                found.add(relative.as_posix())
    return found


def listed_modules(text: str) -> list[str]:
    return [match.group(1) for line in text.splitlines() if (match := TABLE_ROW.match(line))]


def expand(listed: str) -> set[str]:
    """A listed entry as the modules it stands for. A glob stands for its files and may stand
    only for generated code (`*_pb2*.py`): a module written by hand gets a line of its own
    saying what it is for."""
    if not any(char in listed for char in "*?["):
        return {listed}
    found = {path.relative_to(ROOT).as_posix() for path in ROOT.glob(listed)}
    written = sorted(module for module in found if "_pb2" not in module)
    assert written == [], f"{listed} in the module table groups modules written by hand"
    return found


def defined_names(path: Path) -> set[str]:
    """Names of every function and class defined in a module, at any depth."""
    tree = ast.parse(path.read_text(), str(path))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def mapped_by_package(listed: str) -> set[str]:
    """The modules a package's row stands for besides the package: those its `__init__`
    docstring names (`tokens`, `parser`), for a package whose docstring is the map of its
    modules. Every other module needs a row of its own."""
    if not listed.endswith("/"):
        return set()
    init = ROOT / listed / "__init__.py"
    docstring = ast.get_docstring(ast.parse(init.read_text())) if init.is_file() else None
    named = set(MODULE_NAME.findall(docstring or ""))
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / listed).glob("*.py")
        if path.stem in named
    }


def test_the_module_table_lists_every_module_of_the_tree_and_nothing_else() -> None:
    listed = listed_modules(INDEX.read_text())
    assert len(listed) == len(set(listed)), "a module is listed twice"
    covered: set[str] = set()
    for entry in listed:
        modules = expand(entry) | mapped_by_package(entry)
        assert modules, f"{entry} in the module table matches no file"
        covered |= modules
    tree = tree_modules()
    missing = sorted(tree - covered)
    gone = sorted(covered - tree)
    assert missing == [], f"add these to the module table of {INDEX.relative_to(ROOT)}"
    assert gone == [], f"these are listed in {INDEX.relative_to(ROOT)} but no longer exist"


def test_each_walk_reference_names_an_existing_file_and_definition() -> None:
    references = REFERENCE.findall(INDEX.read_text())
    assert len(references) >= 20, "the five walks lost their references"
    stale = []
    for file, name in references:
        path = ROOT / file
        if not path.is_file():
            stale.append(f"{file} (no such file)")
            continue
        names = defined_names(path)
        stale.extend(f"{file}::{name}" for part in name.split(".") if part not in names)
    assert stale == []


def test_the_index_is_at_most_200_lines() -> None:
    assert len(INDEX.read_text().splitlines()) <= INDEX_LINES_MAX


def test_every_page_the_index_links_exists() -> None:
    links = re.findall(r"\]\(([^)#]+\.md)\)", INDEX.read_text())
    assert links
    assert [link for link in links if not (INDEX.parent / link).resolve().is_file()] == []


def test_a_package_row_covers_the_modules_its_docstring_maps() -> None:
    assert "core/partiql/parser.py" in mapped_by_package("core/partiql/")
    assert "core/expressions/legacy.py" in mapped_by_package("core/expressions/")
    assert mapped_by_package("core/limits.py") == set()


def test_the_table_check_sees_a_missing_and_a_gone_module(tmp_path: Path) -> None:
    text = "| module | what |\n| --- | --- |\n| `core/` | x |\n| `core/gone.py` | y |\n"
    listed = listed_modules(text)
    assert listed == ["core/", "core/gone.py"]
    assert "core/limits.py" in tree_modules() - set(listed)
    assert "core/gone.py" not in tree_modules()


# A module named in a package docstring: a lowercase dotted name in single backticks, such as
# `ops`, `router.protocol` or `replicator.py` (double backticks quote code, not modules).
MODULE_NAME = re.compile(r"(?<!`)`([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)`(?!`)")


def missing_modules(package: Path, docstring: str) -> list[str]:
    """The names in `docstring` that are neither a module of `package` (`ops`, `lab`) nor a
    module of the tree with, after it, optionally one name it defines (`router.protocol`,
    `core.catalog.split`)."""
    missing = []
    for name in MODULE_NAME.findall(docstring):
        parts = name.removesuffix(".py").split(".")
        if parts[0] not in PACKAGES:
            parts = [*package.relative_to(ROOT).parts, *parts]
        if not resolves(parts):
            missing.append(name)
    return missing


def resolves(parts: list[str]) -> bool:
    for length in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:length])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if module.is_file():
            rest = parts[length:]
            return not rest or (len(rest) == 1 and rest[0] in defined_names(module))
    return False


def package_docstrings() -> list[tuple[Path, str]]:
    found = []
    for package in PACKAGES:
        for init in sorted((ROOT / package).rglob("__init__.py")):
            docstring = ast.get_docstring(ast.parse(init.read_text()))
            assert docstring, f"{init.relative_to(ROOT)} has no docstring"
            found.append((init.parent, docstring))
    return found


def test_package_docstrings_name_only_modules_that_exist() -> None:
    named = {
        str(package.relative_to(ROOT)): missing_modules(package, docstring)
        for package, docstring in package_docstrings()
    }
    assert {package: names for package, names in named.items() if names} == {}


def test_the_docstring_check_sees_a_module_that_is_gone() -> None:
    rpc = ROOT / "rpc"
    assert missing_modules(rpc, "`ops`, `transport`, `rpc.local` and `core.catalog.split`") == []
    assert missing_modules(rpc, "`ops` and `lmdb_env`, ``names`` and `NodeClient`") == ["lmdb_env"]
    assert missing_modules(rpc, "`router.gone` and `core.catalog.no_such_name`") == [
        "router.gone",
        "core.catalog.no_such_name",
    ]
