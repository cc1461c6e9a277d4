"""Tie a service process's life to the `dynalab up` (or test) process that started it.

`LocalCluster` starts every node and router in its own process group, so that a Ctrl-C in the
terminal reaches only the parent, which then stops them in order. The price is that a parent killed
with SIGKILL would leave them running. Linux closes that gap with PR_SET_PDEATHSIG: the child asks
the kernel for SIGTERM when its parent goes away.

The child makes that request itself, first thing, rather than the parent doing it between fork and
exec (a `preexec_fn`): a `preexec_fn` forces a plain fork() of a parent that may have gRPC threads
running (the cluster's health checks use gRPC), and gRPC's fork handlers then abort the child. With
no `preexec_fn`, CPython spawns with vfork and exec, which runs none of them. The signal follows the
thread that spawned the child, so LocalCluster spawns from the thread that owns it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PARENT_PID_ENV = "DYNALAB_PARENT_PID"
_PR_SET_PDEATHSIG = 1  # From <linux/prctl.h>.


def tie_to_parent() -> None:
    """If started by LocalCluster, receive SIGTERM when that parent dies (Linux only)."""
    expected = os.environ.get(PARENT_PID_ENV)
    if not expected or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    # The parent may have died before the prctl call, in which case no signal will ever come.
    if os.getppid() != int(expected):
        raise SystemExit(f"parent process {expected} is gone; not starting")
