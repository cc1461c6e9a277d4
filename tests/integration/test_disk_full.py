"""A full disk: a node keeps a reserve, refusing writes that add data with a clear 503 while
deletes and reads go on, and a node restarted on a disk filled by something else serves reads.

The cluster's data directory is a small tmpfs this test mounts itself (it needs root, as CI and
this project's machines have; elsewhere it is skipped), so filling it touches nothing else.
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, dynamodb_client

DISK_BYTES = 128 * 1024 * 1024
# Half the disk: the reserve must also hold what a compaction writes before it deletes its inputs,
# which at this scale is most of the data (see docs/architecture/storage.md).
RESERVE_BYTES = 64 * 1024 * 1024
ITEM_BYTES = 300 * 1024  # Items of about 300 KB fill the disk in about a hundred puts.
PUTS_MAX = 2 * DISK_BYTES // ITEM_BYTES


def incompressible(size: int) -> str:
    """Random text, so the engine's compression does not shrink what fills the disk."""
    return base64.b64encode(os.urandom(size * 3 // 4)).decode()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def error_of(call: object) -> dict[str, str]:
    try:
        call()  # type: ignore[operator]
    except ClientError as error:
        return {
            "code": error.response["Error"]["Code"],
            "message": error.response["Error"]["Message"],
            "status": str(error.response["ResponseMetadata"]["HTTPStatusCode"]),
        }
    raise AssertionError("the call succeeded")


def test_a_node_keeps_its_disk_reserve_and_restarts_on_a_full_disk(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYNALAB_DISK_RESERVE_BYTES", str(RESERVE_BYTES))
    monkeypatch.setenv("DYNALAB_THROTTLING", "off")  # 300 KB puts in a row, as fast as they go.
    cluster = LocalCluster(small_disk / "cluster", nodes=1, replicators=0)
    with cluster:
        client = dynamodb_client(cluster.router_url)
        create_active_table(client, "Full")
        written: list[str] = []
        refusal: dict[str, str] | None = None
        for number in range(PUTS_MAX):
            key = f"k{number:04d}"
            try:
                pad = {"S": incompressible(ITEM_BYTES)}
                client.put_item(TableName="Full", Item={"pk": {"S": key}, "pad": pad})
            except ClientError as error:
                refusal = {
                    "code": error.response["Error"]["Code"],
                    "message": error.response["Error"]["Message"],
                }
                break
            written.append(key)
        assert refusal is not None, f"{PUTS_MAX} puts of 300 KB fit in {DISK_BYTES} B"
        assert refusal["code"] == "ServiceUnavailable", refusal
        assert "disk is full" in refusal["message"]
        assert written, "the disk was full before the first put"

        # Deletes and reads go on at the reserve.
        client.delete_item(TableName="Full", Key={"pk": {"S": written.pop()}})
        got = client.get_item(TableName="Full", Key={"pk": {"S": written[0]}}, ConsistentRead=True)
        assert got["Item"]["pk"] == {"S": written[0]}

        # Something else fills the disk; the node restarts on it and serves reads, read-only.
        node = cluster.nodes[0]
        node.stop()
        filler = small_disk / "filler"
        with filler.open("wb") as file:
            try:
                while True:
                    file.write(b"\0" * (1024 * 1024))
                    file.flush()
            except OSError:
                pass
        node.start()
        got = client.get_item(TableName="Full", Key={"pk": {"S": written[-1]}}, ConsistentRead=True)
        assert got["Item"]["pk"] == {"S": written[-1]}
        refused = error_of(
            lambda: client.delete_item(TableName="Full", Key={"pk": {"S": written[0]}})
        )
        assert refused["code"] == "ServiceUnavailable" and "read-only" in refused["message"]

        # Space freed and the node restarted: it takes writes again.
        filler.unlink()
        node.stop()
        node.start()
        client.delete_item(TableName="Full", Key={"pk": {"S": written[0]}})
