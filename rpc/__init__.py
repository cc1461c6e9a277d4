"""The contract between dynalab's processes, beside `core/` so that no service imports another.

`ops` (the operations and their typed payloads), `codec` (errors across gRPC), `client`
(`NodeClient`, the router's side of a node's stream), the generated gRPC code for
proto/rpc/node.proto (regenerate with `make proto`), and `lifeline` (how a child process of
`dynalab up` dies with it).
"""
