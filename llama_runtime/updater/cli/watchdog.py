"""A test watchdog's view into a stuck command: ``LLAMA_RUNTIME_TEST_STACKS=<file>`` arms SIGUSR1.

A watchdog (``scripts/killloop.py``) runs every child with the variable set and, when a
command outlives its signal, asks it where it is stuck.
"""

from __future__ import annotations

import os
import signal
from typing import Final, TextIO

__all__ = ["STACKS_ENV", "arm_stack_dump"]

STACKS_ENV: Final = "LLAMA_RUNTIME_TEST_STACKS"
#: The file SIGUSR1's stack dumps go to, open for the process's life (faulthandler writes to its descriptor).
_stacks_sink: TextIO | None = None


def arm_stack_dump() -> None:
    """With ``LLAMA_RUNTIME_TEST_STACKS=<file>``, SIGUSR1 appends every thread's stack to that file.

    faulthandler writes from the signal handler itself, so the dump comes even
    while the main thread is blocked in a system call. Nothing happens without
    the variable, on a platform without SIGUSR1, or when the file cannot be opened.
    """
    global _stacks_sink
    path = os.environ.get(STACKS_ENV, "").strip()
    if not path or not hasattr(signal, "SIGUSR1") or _stacks_sink is not None:
        return
    import faulthandler

    try:
        _stacks_sink = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the process's life
    except OSError:
        return
    faulthandler.register(signal.SIGUSR1, file=_stacks_sink, all_threads=True)
