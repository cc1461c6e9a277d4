"""The storage node: holds partitions in one RocksDB database and serves them over gRPC.

`server` turns `rpc` messages into calls of `node.StorageNode`, whose writes go through the group
commit (`commit`) and the one apply hook (`replica`) into the store (`store`, `layout`); splits
(`split`), moves (`move`, `index_move`), transactions, TTL (`expiry`, `sweeper`), the change feed
(`changefeed`, `stream_retention`) and throughput (`throughput`) each have a module of their own.
"""
