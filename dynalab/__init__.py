"""dynalab's command line and what it runs beside the services: the local cluster (`cluster`,
`nodes`), `dynalab status` (`status`), the load generator (`bench`), the offline and GSI checkers
(`checkers`, `convergence`, `violations`) and the fault-injection lab (`lab`). The RPC contract
between the services is the `rpc` package."""
