"""The storage node: hosts partition replicas in one LMDB environment and serves them over gRPC."""
