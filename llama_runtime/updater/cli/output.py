"""Where a command's one result and its error go: JSON, JSON Lines events, or sentences for people."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llama_runtime import LlamaRuntimeError
    from llama_runtime.updater.cli.events import EventStream

__all__ = ["Output"]


class Output:
    """Writes the one result of a command: JSON, JSON Lines events, or sentences for people."""

    def __init__(self, as_json: bool, events: EventStream | None = None, log_json: bool = False) -> None:
        self.as_json = as_json or events is not None
        #: With ``--events``: the JSON Lines stream; the result and the error are its last line.
        self.events = events
        #: With ``--log-json`` (and no ``--json``): errors as a JSON line on stderr.
        self.log_json = log_json

    def result(self, payload: dict[str, Any], lines: Sequence[str]) -> None:
        if self.events is not None:
            self.events.result(payload)
        elif self.as_json:
            sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True) + "\n")
        else:
            for line in lines:
                # Tags and names may come from a release server: show escapes, never send them.
                sys.stdout.write(_printable(line) + "\n")
        sys.stdout.flush()

    def error(self, exc: LlamaRuntimeError) -> None:
        if self.events is not None:
            self.events.error(exc)
        elif self.as_json:
            sys.stdout.write(json.dumps({"error": exc.to_json()}, indent=2, sort_keys=True) + "\n")
            sys.stdout.flush()
        elif self.log_json:  # one JSON line, like every other line on stderr
            line = {"level": "error", "event": exc.message, "error": exc.to_json(), "timestamp": _utc_timestamp()}
            sys.stderr.write(json.dumps(line, sort_keys=True) + "\n")
        else:
            sys.stderr.write(f"error: {_printable(exc.message)}\n")
            if exc.hint:
                sys.stderr.write(f"  next: {_printable(exc.hint)}\n")


def _utc_timestamp() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _printable(text: str) -> str:
    """``text`` with control characters shown as ``\\xNN`` (:meth:`Vocabulary.printable`)."""
    from llama_runtime import Vocabulary

    return Vocabulary.printable(text)
