"""The fault-injection lab: seeded scenarios run against a local cluster while workloads record a
history of every operation, which pure checkers judge and a report draws (`docs/guide/lab.md`)."""
