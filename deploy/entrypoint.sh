#!/bin/sh
# Start the dynalab service named by DYNALAB_ROLE (storagenode, router or gsi_replicator); the
# service reads the rest of its configuration from its own DYNALAB_* variables. Given arguments, run
# those instead, e.g.
#   docker run --rm dynalab python -m storagenode --help
# exec keeps the service as the container's main process, so `docker stop` and `docker kill` reach it.
set -eu
# A StatefulSet names its pods <set>-<ordinal> (0, 1, ...), which is also their hostname. With
# DYNALAB_NODE_ID_FROM_ORDINAL=1 a storage pod's node id is node-<ordinal + 1>: the node-N form a
# member of replication groups takes, N its member id (`storagenode.raft_host.member_id`).
if [ "${DYNALAB_NODE_ID_FROM_ORDINAL:-}" = 1 ]; then
  ordinal="${HOSTNAME##*-}"
  case "$ordinal" in
    '' | *[!0-9]*)
      echo "dynalab: DYNALAB_NODE_ID_FROM_ORDINAL needs a hostname ending in -<ordinal> (got '${HOSTNAME:-}')" >&2
      exit 64
      ;;
  esac
  DYNALAB_NODE_ID="node-$((ordinal + 1))"
  export DYNALAB_NODE_ID
fi
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
