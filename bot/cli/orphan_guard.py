"""The worker's first instruction: end with the ``kimi-ops serve`` that started it, at any moment of its life.

The worker used to watch its parent from a thread started once its app was built; a ``serve`` killed in the
seconds before that left a worker whose parent was already init, which it then took for its own, and whose nudge
pipe (now at end of file) woke it in a loop at 100% of a core, for ever. Linux's parent-death signal
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``) makes the kernel kill this process the moment its parent goes; set before
anything else runs, and followed by a look at whether the parent is still the one that started it (it may have
died before the call), it leaves no window. Where ``prctl`` is missing (not Linux), a thread polls the parent.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
ORPHANED_EXIT = 70


def die_with(parent: int, *, every_seconds: float = 0.5) -> None:
    """End this process when ``parent`` (the pid that started it) is gone, now or later."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if os.getppid() != parent:  # gone before the signal was armed: the kernel will not send it
        os._exit(ORPHANED_EXIT)
    if not armed:
        threading.Thread(target=_poll, args=(parent, every_seconds), name="kimi-worker-parent", daemon=True).start()


def _poll(parent: int, every_seconds: float) -> None:
    while os.getppid() == parent:
        time.sleep(every_seconds)
    os._exit(ORPHANED_EXIT)
