"""Generated gRPC code for proto/dynalab/rpc/node.proto (regenerate with `make proto`)."""
