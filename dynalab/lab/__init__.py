"""The fault-injection lab: seeded scenarios run against a local cluster while workloads record a
history of every operation, which pure checkers judge and a report draws (`docs/guide/lab.md`).

Its modules:

- `scenarios`: the experiments (`dynalab/scenarios/*.toml`) and the fault schedule each draws
  from a seed;
- `history`: every operation, when it was invoked and completed, and its outcome;
- `workloads` and `indexed`: clients issuing requests and recording each operation (`indexed`:
  the table with a global secondary index);
- `checkers`: pure verdicts over a history, with counterexamples;
- `linearizable`: a register key's linearizability search, the smallest set of its operations
  that cannot be ordered, and the anomaly in words;
- `nemesis`, `network` and `compose`: the faults, played on a `LocalCluster`'s processes, with
  the kernel's tools in a private network namespace, or through Docker on a compose cluster;
- `run` and `command`: one experiment from start to verdict, its replay, and `dynalab lab`;
- `report`: the report page (report.html), a run over time with its fault windows shaded;
- `timeline`: a simulated run's messages between its processes, which the report draws as a
  Lamport diagram (its script: ``timeline.js``);
- `simulated` and `sweep`: a scenario on the in-process cluster of `dynalab.sim`, on virtual time,
  and many seeds of it in parallel processes (`dynalab lab sweep`);
- `shrink`: a smaller schedule on which a failing simulated run still fails (`dynalab lab
  shrink`), written as a scenario file with its schedule fixed;
- `exercises`: the course's exercises, each a bug of `core.planted` to find from the reports
  (`dynalab lab exercise`, docs/guide/course.md).
"""
