"""What every process a run starts gets between fork and exec: its death with ruizn's."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

__all__ = ["dying_with"]

_PR_SET_PDEATHSIG = 1


def dying_with(parent: int) -> Callable[[], None]:
    """For the child, between fork and exec: SIGKILL it when ruizn dies, and end it at once if
    ruizn already has. libc is looked up here, in ruizn: the forked child of a threaded process
    must not take the loader's locks."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return die_with_parent
