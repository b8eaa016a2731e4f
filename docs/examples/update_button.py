"""An app's "Update" button in Python without importing llama-runtime: run the CLI with ``--events``.

    python update_button.py [llama-runtime] [extra args…]

Reads one JSON object per line, shows phase, percent and ETA, and cancels with SIGTERM once
``LLAMA_RUNTIME_CANCEL_AFTER_BYTES`` bytes arrived (what a Cancel button does). An app started from
a desktop does not get a terminal's PATH: pass the CLI's absolute path (the first argument, or
``LLAMA_RUNTIME_CLI``). When the CLI cannot be started it says so and exits 127, without a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

#: The exit status of a shell whose command was not found: what this script exits with then.
NOT_FOUND_EXIT = 127


def run_update(command: str, args: list[str]) -> int:
    """Run one update and print what a progress bar would show; returns the CLI's exit code."""
    cancel_after = int(os.environ.get("LLAMA_RUNTIME_CANCEL_AFTER_BYTES", "0"))
    try:
        child = subprocess.Popen([command, "update", "--events", *args], stdout=subprocess.PIPE, text=True)
    except OSError as exc:  # not found, not executable: the app shows this, it does not crash
        where = "no such file" if os.path.isabs(command) else "it is not on this app's PATH"
        print(
            f"cannot start {command}: {where} ({exc.strerror}); pass the CLI's absolute path "
            "as the first argument or in LLAMA_RUNTIME_CLI",
            file=sys.stderr,
        )
        return NOT_FOUND_EXIT
    assert child.stdout is not None
    cancelled = False
    for line in child.stdout:
        event = json.loads(line)
        if event["type"] == "phase":
            print(f"phase {event['phase']}" + (f": {event['message']}" if event["message"] else ""))
        elif event["type"] == "progress":
            total = event["total_bytes"]
            percent = event["done_bytes"] * 100 // total if total else None
            eta = "?" if event["eta"] is None else f"{round(event['eta'])}s"
            print(f"progress {percent}% eta {eta}")
            if cancel_after and event["done_bytes"] >= cancel_after and not cancelled:
                cancelled = True
                child.send_signal(signal.SIGTERM)  # on Windows: CTRL_BREAK_EVENT, or terminate()
        elif event["type"] == "warning":
            print(f"warning {event['message']}")
        elif event["type"] == "result":
            print(f"done {event['result']} {event['active']['tag']}")
        elif event["type"] == "error":
            print(f"error {event['error']['code']}: {event['error']['message']}")
    return child.wait()


if __name__ == "__main__":
    command, *rest = sys.argv[1:] or [os.environ.get("LLAMA_RUNTIME_CLI") or "llama-runtime"]
    raise SystemExit(run_update(command, rest))
