"""Which process is our server: ``server.json`` and the children this process started.

Invariants:

* ``server.json`` is written atomically, so a file we cannot parse was not
  written by us; its pid is never signalled (a pid from an untrusted file can
  name any process, and pid 0 or -1 would signal whole process groups).
* The process creation time is recorded next to the pid; a live pid with a
  different creation time is a recycled pid, not our server.
* A child this object launched is judged by its own handle: the only way to
  reap it (a zombie still answers ``kill(pid, 0)``) and to see its exit on
  every OS.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from llama_runtime.runtime.listen import DEFAULT_HOST
from llama_runtime.runtime.procinfo import MAX_PID, pid_alive, process_start_ticks
from llama_runtime.runtime.record import parse_record, write_record

STATE_NAME: Final = "server.json"
STATE_SCHEMA: Final = 1
#: Process start times in clock ticks since boot fit in 63 bits for millennia.
MAX_START_TICKS: Final = 2**63 - 1


@dataclass(frozen=True)
class ServerState:
    """The parsed, trusted content of ``server.json``."""

    pid: int
    binary: Path
    args: list[str]
    host: str
    port: int | None
    started_at: str
    runtime_name: str | None
    proc_start: int | None
    cwd: Path | None = None


class ServerRecord:
    """``<server_dir>/server.json`` plus the children started through this object.

    Args:
        server_dir: ``home.server_dir``.
    """

    def __init__(self, server_dir: Path) -> None:
        self.path = Path(server_dir) / STATE_NAME
        #: Children this process launched, by pid (dicts keep insertion order: the last is the newest).
        self.children: dict[int, subprocess.Popen[bytes]] = {}

    def read(self) -> ServerState | None:
        """The record, or None when there is none or it is not ours."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        return parse_state(raw)

    def write(
        self,
        child: subprocess.Popen[bytes],
        *,
        binary: Path,
        args: list[str],
        listen: tuple[str, int | None],
        runtime_name: str | None,
        cwd: Path,
    ) -> None:
        """Adopt ``child`` and record it as the server (stamped now, with its creation time).

        Args:
            child: The process just started.
            binary: Its executable.
            args: Its full arguments.
            listen: The first address it listens on: host (or socket path) and port.
            runtime_name: The installed runtime the binary belongs to.
            cwd: Its working directory.
        """
        self.children[child.pid] = child
        host, port = listen
        write_record(
            self.path,
            {
                "schema_version": STATE_SCHEMA,
                "pid": child.pid,
                "binary": str(binary),
                "args": args,
                "host": host,
                "port": port,
                "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "runtime_name": runtime_name,
                "cwd": str(cwd),
                "proc_start": process_start_ticks(child.pid),
            },
        )

    def alive(self, state: ServerState) -> bool:
        """Whether the recorded process lives and is still the one recorded."""
        child = self.children.get(state.pid)
        if child is not None:
            return child.poll() is None
        if not pid_alive(state.pid):
            return False
        current = process_start_ticks(state.pid)
        if current is None:
            return True  # the OS would not say when it started: the pid is all there is
        # Every record we write has a creation time: a record without it
        # (hand-written, planted) proves nothing, and a different one means the
        # pid was recycled by an unrelated process. Neither may be signalled.
        return state.proc_start == current

    def running(self) -> ServerState | None:
        """The record when its process is alive, else None."""
        state = self.read()
        return state if state is not None and self.alive(state) else None

    def forget(self, pid: int) -> None:
        """Drop the record of ``pid``'s server (only once the process is gone)."""
        self.children.pop(pid, None)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def newest_exit_status(self) -> int | None:
        """The exit status of the newest child started here, once it ended (else None)."""
        if not self.children:
            return None
        return list(self.children.values())[-1].poll()


def parse_state(raw: bytes) -> ServerState | None:
    """The trusted content of ``server.json``, or None when it is not ours."""
    try:
        payload = parse_record(raw, what="server.json")
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    pid, binary, args = payload.get("pid"), payload.get("binary"), payload.get("args")
    if type(pid) is not int or not 0 < pid <= MAX_PID or not isinstance(binary, str) or not binary:
        return None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return None
    proc_start = payload.get("proc_start")
    if proc_start is not None and (type(proc_start) is not int or not 0 <= proc_start <= MAX_START_TICKS):
        return None  # a start time we cannot compare cannot prove the pid is ours
    host, port, cwd = payload.get("host"), payload.get("port"), payload.get("cwd")
    name, started = payload.get("runtime_name"), payload.get("started_at")
    return ServerState(
        pid=pid,
        binary=Path(binary),
        args=list(args),
        host=host if isinstance(host, str) and host else DEFAULT_HOST,
        port=port if type(port) is int and 0 < port < 65536 else None,
        started_at=started if isinstance(started, str) else "",
        runtime_name=name if isinstance(name, str) else None,
        proc_start=proc_start,
        cwd=Path(cwd) if isinstance(cwd, str) and os.path.isabs(cwd) else None,
    )
