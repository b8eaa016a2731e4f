"""Named points in the install transaction where a crash test can kill us.

Setting ``LLAMA_RUNTIME_TEST_KILL_AT=<name>`` makes the process SIGKILL itself
when it reaches that checkpoint (rustup's ``kill_at_checkpoint``). It exists
only so tests can prove that a crash at any point leaves a working runtime.
``LLAMA_RUNTIME_TEST_HANG_AT=<name>`` makes it hang there instead (a wedge on
demand), and ``LLAMA_RUNTIME_TEST_STACKS=<file>`` makes SIGUSR1 append every
thread's stack to that file, so a watchdog (``scripts/killloop.py``) can ask a
command that outlived its signal where it is stuck.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Final, TextIO

KILL_AT_ENV: Final = "LLAMA_RUNTIME_TEST_KILL_AT"
HANG_AT_ENV: Final = "LLAMA_RUNTIME_TEST_HANG_AT"
STACKS_ENV: Final = "LLAMA_RUNTIME_TEST_STACKS"
#: The file SIGUSR1's stack dumps go to, open for the process's life (faulthandler writes to its descriptor).
_stacks_sink: TextIO | None = None

#: Every checkpoint, in the order a successful install passes them.
CHECKPOINTS: Final = (
    "after_download",
    "after_extract",
    "during_share",
    "after_marker",
    "before_pointer_flip",
    "after_pointer_flip",
    "during_gc",
)
#: The checkpoint of ``export``: the bundle written to its temp file, not yet renamed into place.
EXPORT_CHECKPOINTS: Final = ("during_export",)
#: Checkpoints inside the switch of a running server, in order (passed only when a server runs):
#: the trial recorded, the old server about to stop and stopped, the new one waited on, its completion check begun.
SWITCH_CHECKPOINTS: Final = (
    "after_trial_begins",
    "before_server_stop",
    "after_server_stop",
    "during_health_wait",
    "during_completion_check",
)


def checkpoint(name: str) -> None:
    """Die here, uncleanly, if a crash test asked for it; or hang here, if a watchdog test did."""
    if os.environ.get(KILL_AT_ENV) == name:
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
    if os.environ.get(HANG_AT_ENV) == name:
        print(f"{HANG_AT_ENV}: hanging at {name}", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)


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
