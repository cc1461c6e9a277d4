"""Container health probe for every dynalab service, chosen by DYNALAB_ROLE.

The image runs one service per container and Docker's HEALTHCHECK needs one command for all of them,
so this script asks the service the way its clients do: a storage node through the standard gRPC
health service (grpc.health.v1, overall status ""), a router with `GET /`, which answers 200 once it
serves DynamoDB requests, and a GSI replicator with `GET /` on its metrics port, likewise. It
exits 0 when healthy and 1 otherwise, always within DYNALAB_HEALTH_TIMEOUT_S seconds (default 2),
so a hung service reads as unhealthy, never as a hang.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

HEALTH_TIMEOUT_S_DEFAULT = 2.0
DEFAULT_PORT_BY_ROLE = {"storagenode": 7001, "router": 8000, "gsi_replicator": 8100}


def listen_port(listen: str, default: int) -> int:
    """The port of a listen address such as `0.0.0.0:7001`, `[::]:7001` or `:7001`."""
    _, sep, port = listen.rpartition(":")
    return int(port) if sep and port.isdigit() else default


def storagenode_healthy(port: int, timeout_s: float) -> bool:
    # Imported here so that the router's probe does not pay for loading grpc.
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        except grpc.RpcError as error:
            print(f"storagenode health check failed: {error.code()}", file=sys.stderr)
            return False
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    if not serving:
        status_name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        print(f"storagenode reports {status_name}", file=sys.stderr)
    return serving


def http_healthy(port: int, timeout_s: float) -> bool:
    """A router or a GSI replicator: `GET /` answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=timeout_s) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError) as error:
        print(f"health check failed: {error}", file=sys.stderr)
        return False


def main() -> int:
    role = os.environ.get("DYNALAB_ROLE", "")
    if role not in DEFAULT_PORT_BY_ROLE:
        print(
            f"DYNALAB_ROLE must be one of {sorted(DEFAULT_PORT_BY_ROLE)}, not {role!r}",
            file=sys.stderr,
        )
        return 1
    port = listen_port(os.environ.get("DYNALAB_LISTEN", ""), DEFAULT_PORT_BY_ROLE[role])
    timeout_s = float(os.environ.get("DYNALAB_HEALTH_TIMEOUT_S", HEALTH_TIMEOUT_S_DEFAULT))
    probe = storagenode_healthy if role == "storagenode" else http_healthy
    return 0 if probe(port, timeout_s) else 1


if __name__ == "__main__":
    sys.exit(main())
