"""The GSI replicator: a separate service that keeps every global secondary index eventually
consistent with its table by following the base partitions' change feeds (`replicator.py`)."""
