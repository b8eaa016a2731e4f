"""``llama-runtime server start [-- ARGS…] | stop | status``: the managed llama-server."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime.runtime.errors import UserInputError

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import Home
    from llama_runtime.runtime.process import ManagedServer
    from llama_runtime.updater.cli.main import AddParser, Handler, Output


def register(add: AddParser) -> dict[str, Handler]:
    """Add the ``server`` command."""
    p = add("server", "the managed llama-server: start [-- ARGS…], stop, status")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument(
        "--timeout", type=float, default=10.0, help="stop: seconds before SIGKILL; start: seconds to wait for /health"
    )
    return {"server": cmd_server}


def cmd_server(args: argparse.Namespace, out: Output) -> int:
    from llama_runtime.runtime.lock import BUTTON_WAIT_SECONDS, UpdateLock
    from llama_runtime.runtime.process import ManagedServer
    from llama_runtime.updater.cli.main import home_for, settings_from_args

    home = home_for(settings_from_args(args))
    server = ManagedServer(home.server_dir)
    if args.action == "start":
        return _start(args, out, home, server)
    if args.action == "stop":
        was = server.status()
        # The switch lock, not the update lock: a download must not block this.
        with UpdateLock(home.switch_lock_path).hold("server stop", timeout=BUTTON_WAIT_SECONDS):
            server.stop(args.timeout)
        lines = [f"Stopped llama-server (pid {was.pid})." if was.running else "No managed llama-server was running."]
        out.result({"stopped": was.running, "pid": was.pid}, lines)
        return 0
    return _status(out, home, server)


def _start(args: argparse.Namespace, out: Output, home: Home, server: ManagedServer) -> int:
    from llama_runtime.runtime.binary import server_override
    from llama_runtime.runtime.lock import BUTTON_WAIT_SECONDS, UpdateLock

    server_args = list(getattr(args, "server_args", []))
    # Under the switch lock, which an update holds only while it switches runtimes (never
    # while it downloads): the switch must not miss this server, nor this start its pointer.
    with UpdateLock(home.switch_lock_path).hold("server start", timeout=BUTTON_WAIT_SECONDS):
        pointer = home.read_pointer()
        if not pointer.active:
            raise UserInputError("No runtime is active yet; run `llama-runtime update` first.")
        runtime = home.load(pointer.active)
        # The caller's directory: relative paths in the arguments mean what they meant there.
        server.start(runtime.binary, server_args, runtime_name=runtime.name, cwd=Path.cwd())
    healthy = server.wait_healthy(args.timeout)
    status = server.status()
    lines = [
        f"Started llama-server {runtime.marker.tag} ({runtime.marker.backend}), pid {status.pid}, "
        f"on {_where(status.host, status.port)}" + ("" if healthy else " (not healthy yet; see its log)"),
        f"log: {server.log_path}",
    ]
    override = server_override()
    if override is not None:
        lines.append(f"warning: LLAMA_SERVER_PATH={override} is set; apps using it run that binary instead.")
    payload = status.to_json()
    payload["healthy"] = healthy
    payload["runtime"] = runtime.to_json()
    out.result(payload, lines)
    return 0 if healthy else 6


def _status(out: Output, home: Home, server: ManagedServer) -> int:
    from llama_runtime.runtime.errors import CorruptStateError

    status = server.status()
    payload = status.to_json()
    runtime = None
    if status.running and status.runtime_name:
        try:
            runtime = home.load(status.runtime_name)
        except CorruptStateError:
            runtime = None
    payload["runtime"] = runtime.to_json() if runtime else None
    if not status.running:
        lines = ["No managed llama-server is running. Start one with `llama-runtime server start -- ARGS`."]
    else:
        what = f"{runtime.marker.tag} ({runtime.marker.backend})" if runtime else str(status.binary)
        health = "healthy" if status.healthy else f"not healthy ({status.health_detail})"
        lines = [f"llama-server {what} runs as pid {status.pid} on {_where(status.host, status.port)}: {health}."]
    out.result(payload, lines)
    return 0


def _where(host: str | None, port: int | None) -> str:
    """``http://127.0.0.1:8080``, ``http://[::1]:8080`` or ``unix:/run/llama.sock`` for people."""
    if host is None or port is None:
        return f"unix:{host}"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
