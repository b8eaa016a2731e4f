"""An app's "Update" button in Python without importing llama-runtime: run the CLI with ``--events``.

    python update_button.py [llama-runtime] [extra args…]

Reads one JSON object per line, shows phase, percent and ETA, and cancels with SIGTERM once
``LLAMA_RUNTIME_CANCEL_AFTER_BYTES`` bytes arrived (what a Cancel button does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys


def run_update(command: str, args: list[str]) -> int:
    """Run one update and print what a progress bar would show; returns the CLI's exit code."""
    cancel_after = int(os.environ.get("LLAMA_RUNTIME_CANCEL_AFTER_BYTES", "0"))
    child = subprocess.Popen([command, "update", "--events", *args], stdout=subprocess.PIPE, text=True)
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
    command, *rest = sys.argv[1:] or ["llama-runtime"]
    raise SystemExit(run_update(command, rest))
