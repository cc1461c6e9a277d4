"""The contract between dynalab's processes, beside `core/` so that no service imports another.

`ops` and `transactions` (the operations and their typed payloads), `codec` (errors across
gRPC), `transport` (the one interface a service calls a node through) with its two
implementations, `client` (`NodeClient`, a node's gRPC stream) and `local` (in-process, with
seeded faults), `changefeed` (the change feed's client), `partition_metrics` (Prometheus families
of a throughput reply), the generated gRPC code for proto/rpc/ (regenerate with `make proto`,
`generate`), and the small pieces every service shares: `addresses`, `background`, `ratelog` and
`lifeline` (how a child process of `dynalab up` dies with it).
"""
