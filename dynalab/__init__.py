"""dynalab's command line (`dynalab up`, `dynalab bench`) and the RPC contract shared by its services."""
