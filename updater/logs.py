"""structlog on stderr: readable on a terminal, JSON lines with ``--log-json``.

stdout is reserved for the command's output (one JSON object with ``--json``).
"""

from __future__ import annotations

import logging
import sys
from typing import Final

import structlog

_LEVELS: Final = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


class _StderrLogger:
    """Writes each rendered line to whatever ``sys.stderr`` is at that moment.

    Binding the stream at configuration time breaks when it is replaced later
    (an app redirecting stderr, pytest's capture), so it is looked up per line.
    """

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warning = warn = error = critical = exception = fatal = msg


def _stderr_logger_factory(*_args: object) -> _StderrLogger:
    return _StderrLogger()


def configure_logging(*, json_lines: bool = False, level: str = "warning") -> None:
    """Send structlog output to stderr at ``level`` and above."""
    processors: list[structlog.typing.Processor] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if json_lines:
        processors.append(structlog.processors.JSONRenderer())
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.WARNING)),
        logger_factory=_stderr_logger_factory,
        cache_logger_on_first_use=False,
    )
