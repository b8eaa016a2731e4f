"""The first code of the ``llama-runtime`` executable: signals are answered before the command loads.

Importing the command (the parser, every command module's imports) takes a noticeable part of a
second; a SIGINT or SIGTERM in that time used to end as Python's uncaught ``KeyboardInterrupt`` (a
traceback, killed by SIGINT) or SIGTERM's default action (killed, nothing said). Here the two
signals end the process with the shell's exit status for them, silently, since nothing has been done
yet: SIGINT 130, SIGTERM 143. Once the command runs, :func:`llama_runtime.updater.cli.main.main`
owns them (Ctrl-C and SIGTERM cancel with its clean-up, exit 130); once it has returned, they are
ignored, so the exit status is the command's.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Final

__all__ = ["run"]

#: A shell reports a command ended by signal N as 128 + N.
SIGNAL_EXIT_BASE: Final = 128
#: The signals a person (Ctrl-C) or a service manager (systemd's stop, ``timeout``) sends.
_HANDLED: Final = (signal.SIGINT, signal.SIGTERM)


def _exit_for_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(SIGNAL_EXIT_BASE + signum)


def run() -> int:
    """``llama-runtime``: the console script's entry point (and ``python -m llama_runtime``'s)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        from llama_runtime.updater.cli.main import main

        return main()
    for signum in _HANDLED:
        signal.signal(signum, _exit_for_signal)
    from llama_runtime.updater.cli.main import main

    signal.signal(signal.SIGINT, signal.default_int_handler)  # main turns Ctrl-C into its clean-up
    try:
        code = main()
    except KeyboardInterrupt:  # between main's start and its own handling: nothing was done
        code = SIGNAL_EXIT_BASE + signal.SIGINT
    for signum in _HANDLED:
        signal.signal(signum, signal.SIG_IGN)  # the command is over: its status stands
    return code
