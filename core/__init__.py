"""The shared core of dynalab: pure logic used by the router, the storage nodes and the replicator.

Nothing in this package does IO: no sockets, no files, no clocks (time is passed in), no asyncio.
Attribute values, item sizes, the order-preserving key encoding, the expression language, capacity
arithmetic, placement and every DynamoDB limit live here, so each is written once and tested in
microseconds.
"""
