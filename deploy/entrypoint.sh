#!/bin/sh
# Start the dynalab service named by DYNALAB_ROLE (storagenode, router or gsi_replicator); the
# service reads the rest of its configuration from its own DYNALAB_* variables. Given arguments, run
# those instead, e.g.
#   docker run --rm dynalab python -m storagenode --help
# exec keeps the service as the container's main process, so `docker stop` and `docker kill` reach it.
set -eu
if [ "$#" -gt 0 ]; then
  exec "$@"
fi
case "${DYNALAB_ROLE:-}" in
  storagenode | router | gsi_replicator) exec python -m "$DYNALAB_ROLE" ;;
  *)
    echo "dynalab: set DYNALAB_ROLE to storagenode, router or gsi_replicator (got '${DYNALAB_ROLE:-}')" >&2
    exit 64
    ;;
esac
