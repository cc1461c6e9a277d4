"""Checkers: functions that read what a process stored and list every invariant it breaks.

Each returns a list of problems (empty: consistent), so a test can assert on it and print them
all, and each reads a stopped node's store (`storagenode.store.Store` on its data directory) or a
`MemoryStore`, so the same checker serves unit tests, simulations and kill -9 tests.
"""
