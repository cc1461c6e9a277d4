"""Deterministic simulation: a whole cluster in one process, on virtual time, from one seed.

Its module, `cluster`, builds the cluster (`SimCluster`: real storage nodes on memory stores and
real routers, joined by the seeded in-process network) and runs a scenario on it on a loop whose
clock is virtual. It ships in the package because `dynalab lab sweep` runs the lab's scenarios
on it (`dynalab.lab.simulated`); the seeded tests of `tests/sim` build on it too.
"""
