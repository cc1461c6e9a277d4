"""The code blocks of README.md and docs/guide/ run as written, against one `dynalab up`.

Every fenced `python` and `bash` block of README.md, then of each guide page in GUIDE_PAGES'
order, runs in the order it appears, in a scratch directory where `dynalab up` runs (so
`./dynalab-data` is its data directory). Each document's python blocks share one namespace, as a
reader would paste one page into one session; each page makes its own client and its own tables
(no two documents create a table of the same name), so a page reads on its own. Three things
differ from a reader's terminal, all mechanical: the router listens on a free port rather than
8000 (the blocks' `127.0.0.1:8000` is rewritten to it, and `dynalab status` and `dynalab bench`,
whose endpoint defaults to that address, are given this one), `dynalab` runs this checkout's code
(`python -m dynalab`, like every other test here), and no `DYNALAB_` setting of the test run
reaches the cluster or the blocks (the docs describe the defaults). The bash lines that `SKIPPED`
names do not run here, each for the reason given beside it; any other line does, so a new example
cannot be left out by accident. Every block must succeed (a bash block exit 0 within
BLOCK_TIMEOUT_S).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dynalab.cluster import PROJECT_ROOT, answers_http, free_ports

README = PROJECT_ROOT / "README.md"
GUIDE = PROJECT_ROOT / "docs" / "guide"
# The guide's pages, in the order their blocks run after the README's: watching.md kills and
# pauses nodes (and starts them again), so it goes last, after the pages that only read and write.
GUIDE_PAGES = (
    "cluster.md",
    "tables-and-items.md",
    "gsi.md",
    "lsi.md",
    "ttl.md",
    "streams.md",
    "transactions.md",
    "partiql.md",
    "splits-and-moves.md",
    "throughput.md",
    "lab.md",
    "course.md",
    "differences.md",
    "watching.md",
)
BLOCK_TIMEOUT_S = 300.0
UP_TIMEOUT_S = 90.0
EXIT_TIMEOUT_S = 60.0
# Bash commands that are not run here, by how they start, and why.
SKIPPED = {
    "pip install": "installs packages; the test environment has them (`.[dev]`)",
    "python -m pytest": "runs this very test suite",
    "dynalab up": "the test runs it itself, as the README says, before the blocks",
    "docker": "containers: tests/deploy/test_compose_cluster.py runs these",
    "dynalab lab run": "a fault experiment with its own cluster: tests/integration/test_lab.py",
    "dynalab lab replay": "replays a `dynalab lab run`: tests/integration/test_lab.py",
}


@dataclass
class Block:
    document: str  # The file the block is in, relative to the checkout, for messages.
    language: str
    line: int  # Where the block starts in its document.
    code: str


def documents() -> list[Path]:
    return [README, *(GUIDE / name for name in GUIDE_PAGES)]


def code_blocks(path: Path) -> list[Block]:
    text = path.read_text()
    name = str(path.relative_to(PROJECT_ROOT))
    blocks = []
    for match in re.finditer(r"^```(\w+)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        line = text.count("\n", 0, match.start()) + 1
        blocks.append(Block(name, match.group(1), line, match.group(2)))
    return blocks


def bash_commands(code: str) -> list[str]:
    """The commands of a bash block, continuation lines joined, comment lines dropped."""
    commands: list[str] = []
    pending = ""
    for raw in code.splitlines():
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        pending += raw + "\n"
        if not raw.rstrip().endswith("\\"):
            commands.append(pending)
            pending = ""
    assert not pending, f"a block ends in a continuation line: {pending!r}"
    return commands


def runnable(command: str) -> str:
    """`command` without the parts SKIPPED names (a line may chain `pip install ... && ...`)."""
    parts = [part.strip() for part in command.split("&&")]
    kept = [part for part in parts if not any(part.startswith(skip) for skip in SKIPPED)]
    return " && ".join(kept)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, dict[str, str]]]:
    """A scratch directory with `dynalab up` running in it, and the environment for the blocks."""
    directory = tmp_path_factory.mktemp("readme")
    (port,) = free_ports(1)
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    # `dynalab` on PATH runs this checkout, as `python -m dynalab` does; the commands whose
    # endpoint defaults to the README's 127.0.0.1:8000 get this cluster's instead.
    shim = bin_dir / "dynalab"
    shim.write_text(
        "#!/bin/sh\n"
        'case "$1 $*" in\n'
        "  status*--endpoint*|bench*--endpoint*) ;;\n"
        f'  status*|bench*) set -- "$@" --endpoint http://127.0.0.1:{port} ;;\n'
        "esac\n"
        f'exec "{sys.executable}" -m dynalab "$@"\n'
    )
    shim.chmod(0o755)
    environment = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(
            [str(PROJECT_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "COLUMNS": "200",
    }
    for variable in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
    ):
        environment.pop(variable, None)  # What the README says to export is all there is.
    for variable in [name for name in environment if name.startswith("DYNALAB_")]:
        # The docs describe the defaults (throughput enforced, say), not a test run's settings.
        del environment[variable]
    output = directory / "up.out"
    with output.open("wb") as sink:
        up = subprocess.Popen(
            [str(shim), "up", "--port", str(port)],
            cwd=directory,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while not (answers_http(port) and "Press Ctrl-C" in output.read_text()):
            assert up.poll() is None, f"dynalab up exited:\n{output.read_text()}"
            assert time.monotonic() < deadline, f"dynalab up not ready:\n{output.read_text()}"
            time.sleep(0.2)
        yield directory, port, environment
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait(EXIT_TIMEOUT_S)


# Runs the blocks in order in one interpreter, as a reader pasting each page into one session
# would: a document's python blocks share one namespace (a later one uses the client an earlier
# one made), and bash blocks run in between, each with its own deadline.
DRIVER = """
import json, subprocess, sys
blocks = json.load(open(sys.argv[1]))
namespaces = {}
for block in blocks:
    where = f"{block['document']}:{block['line']}"
    print(f"=== {where} ({block['language']})", flush=True)
    if block["language"] == "python":
        namespace = namespaces.setdefault(block["document"], {"__name__": "__main__"})
        exec(compile(block["code"], where, "exec"), namespace)
    else:
        subprocess.run(["bash", "-e", "-c", block["code"]], check=True, timeout=float(sys.argv[2]))
    sys.stdout.flush()
"""


def test_every_code_block_runs_as_written(workdir: tuple[Path, int, dict[str, str]]) -> None:
    directory, port, environment = workdir
    blocks = [block for path in documents() for block in code_blocks(path)]
    assert {block.language for block in blocks} <= {"python", "bash"}, "a block nobody runs"
    runs = []
    for block in blocks:
        code = block.code.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        if block.language == "bash":
            commands = [runnable(command) for command in bash_commands(code)]
            code = "".join(f"{command}\n" for command in commands if command)
            if not code:
                continue
        runs.append(
            {
                "document": block.document,
                "language": block.language,
                "line": block.line,
                "code": code,
            }
        )
    assert len(runs) >= 20, f"only {len(runs)} blocks to run"
    plan = directory / "blocks.json"
    plan.write_text(json.dumps(runs))
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, str(plan), str(BLOCK_TIMEOUT_S)],
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S * len(runs),
    )
    assert run.returncode == 0, f"--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"
    assert len(re.findall(r"^=== ", run.stdout, re.MULTILINE)) == len(runs)


def test_every_guide_page_runs_and_is_linked_from_the_readme() -> None:
    """A new page cannot be left out of the run, nor be more than a click away from the README."""
    assert sorted(GUIDE_PAGES) == sorted(path.name for path in GUIDE.glob("*.md"))
    readme = README.read_text()
    for name in GUIDE_PAGES:
        assert f"](docs/guide/{name})" in readme, f"README.md does not link docs/guide/{name}"


def test_the_skipped_commands_are_the_ones_named() -> None:
    assert runnable("pip install '.[client]' && dynalab up") == ""
    assert runnable("pip install '.[lab]'") == ""
    assert runnable("dynalab lab list") == "dynalab lab list"
    assert runnable("aws dynamodb list-tables") == "aws dynamodb list-tables"
    assert bash_commands("a \\\n  b\n# note\nc  # trailing\n") == ["a \\\n  b\n", "c  # trailing\n"]
