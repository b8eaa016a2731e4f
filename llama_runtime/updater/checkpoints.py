"""Named points in the install transaction where a crash test can kill us.

Setting ``LLAMA_RUNTIME_TEST_KILL_AT=<name>`` makes the process SIGKILL itself
when it reaches that checkpoint (rustup's ``kill_at_checkpoint``). It exists
only so tests can prove that a crash at any point leaves a working runtime.
``LLAMA_RUNTIME_TEST_HANG_AT=<name>`` makes it hang there instead (a wedge on
demand; ``cli/watchdog.py`` lets a watchdog ask such a command where it is stuck).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Final

KILL_AT_ENV: Final = "LLAMA_RUNTIME_TEST_KILL_AT"
HANG_AT_ENV: Final = "LLAMA_RUNTIME_TEST_HANG_AT"

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
