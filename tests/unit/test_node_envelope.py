"""The request envelope: a node refuses a stale request from it, without reading the body."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from core.errors import InternalServerError, StaleEpoch
from rpc import codec, node_pb2, ops
from rpc.client import NodeClient
from storagenode.commit import GroupCommitter
from storagenode.move import Mover
from storagenode.node import StorageNode
from storagenode.replica_move import ReplicaMover
from storagenode.server import NodeServicer
from storagenode.split import Splitter
from storagenode.store import Store
from tests import envelope

TABLE = {"id": "d4" * 16, "name": "Envelope", "key_schema": {"hash": ["pk", "S"], "range": None}}
PARTITION = {"id": "p0", "start": "", "end": None, "epoch": 2, "node": "n1"}
UNDECODABLE = b"\xff this is not JSON"


@pytest.fixture
def servicer(tmp_path: Path) -> Iterator[NodeServicer]:
    store = Store(tmp_path)
    node = StorageNode(store)
    envelope.apply(node, [(ops.CREATE_PARTITION, {"table": TABLE, "partition": PARTITION})])
    # Never started: a request refused before it reaches the committer (or the splitter) needs
    # none.
    committer = GroupCommitter(node)

    splitter = Splitter(node, committer.submit, NodeClient)
    yield NodeServicer(
        node, committer, splitter, Mover(splitter, "n1"), ReplicaMover(splitter, "n1", {}.get)
    )
    store.close()


def answer(servicer: NodeServicer, op: str, partition_id: str, epoch: int) -> node_pb2.Response:
    request = node_pb2.Request(
        id=7,
        op=codec.OP_TO_WIRE[op],
        table_id=TABLE["id"],
        partition_id=partition_id,
        epoch=epoch,
        body=UNDECODABLE,
    )
    answers: list[node_pb2.Response] = []
    servicer.dispatch(request, answers.append)
    (response,) = answers
    assert response.id == 7
    return response


@pytest.mark.parametrize("op", sorted(ops.DATA_OPS))
@pytest.mark.parametrize(("partition_id", "epoch"), [("p0", 1), ("p0", 3), ("p9", 2)])
def test_a_stale_request_is_refused_without_decoding_its_body(
    servicer: NodeServicer, op: str, partition_id: str, epoch: int
) -> None:
    with pytest.raises(StaleEpoch):
        codec.reply_from_response(answer(servicer, op, partition_id, epoch))


def test_a_current_request_does_decode_its_body(servicer: NodeServicer) -> None:
    # The same undecodable body at the partition's epoch fails in decoding: the refusals above
    # came before it.
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(UNDECODABLE)
    with pytest.raises(InternalServerError):
        codec.reply_from_response(answer(servicer, ops.GET, "p0", 2))
