"""dynalab's command line (`dynalab up`, `dynalab bench`) and the RPC contract of its services."""
