"""``status``: what is active, what is installed, whether an override is in force.

It reads the home only (no network, no installer), so it starts fast.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from llama_runtime.updater.cli.common import home_for, provenance_line, read_active, settings_from_args

if TYPE_CHECKING:
    from llama_runtime.runtime.layout import InstalledRuntime
    from llama_runtime.updater.cli.main import AddParser, Handler, Output


def register(add: AddParser) -> dict[str, Handler]:
    """Add ``status``."""
    add("status", "what is active, what is installed, whether an override is in force")
    return {"status": cmd_status}


def cmd_status(args: argparse.Namespace, out: Output) -> int:
    """``status``: the active and previous runtimes, the installed ones, speeds, skipped builds."""
    from llama_runtime.runtime.failed_builds import load_failed
    from llama_runtime.runtime.lock import UpdateLock
    from llama_runtime.updater.cli.gateopts import speed_table

    settings = settings_from_args(args)
    home = home_for(settings)
    pointer, active = read_active(home)
    installed = home.installed()
    previous = next((r for r in installed if r.name == pointer.previous), None)
    override = override_info()
    busy = home.lock_path.exists() and UpdateLock(home.lock_path).is_held()
    speeds, speed_lines = speed_table(active, previous)
    skipped = load_failed(home.root)
    payload = {
        "active": active.to_json() if active else None,
        "previous": previous.to_json() if previous else None,
        "installed": [r.to_json() for r in installed],
        "override": override["path"] if override else None,
        "override_info": override,
        "update_running": busy,
        "home": str(home.root),
        "speeds": speeds,
        "skipped_builds": [dataclasses.asdict(b) for b in skipped],
    }
    lines = [_runtime_line("active", active)]
    if active is None:
        lines.append("Nothing is installed yet. Run `llama-runtime update` to install the latest llama.cpp.")
    else:
        lines.append(f"binary: {active.binary}")
        lines.append(provenance_line(active))
    if previous:
        lines.append(_runtime_line("previous", previous) + "  (`llama-runtime rollback` goes back to it)")
    lines.append(f"installed runtimes: {len(installed)} in {home.runtimes_dir}")
    lines += speed_lines
    if override:
        lines.append(
            f"override: LLAMA_SERVER_PATH={override['path']} ({override['version'] or 'does not run'}) is in force; "
            "apps run that binary, not the managed one."
        )
    if busy:
        lines.append("An update is running right now.")
    for build in skipped:
        lines.append(f"skipped (failed here; `update --tag {build.tag}` retries): {build.describe()}")
    out.result(payload, lines)
    return 0


def _runtime_line(label: str, runtime: InstalledRuntime | None) -> str:
    if runtime is None:
        return f"{label}: none"
    m = runtime.marker
    named = f"{m.release_version} (build {m.tag})" if m.release_version else m.tag
    return f"{label}: {m.repo} {named} ({m.backend}) at {runtime.path}"


def override_info() -> dict[str, Any] | None:
    """The ``LLAMA_SERVER_PATH`` override in force: its path, whether it exists, its version line."""
    from llama_runtime.runtime.binary import VERSION_TIMEOUT_SECONDS, run_process, server_override, version_line

    path = server_override()
    if path is None:
        return None
    version = None
    if path.is_file():
        done = run_process([str(path), "--version"], VERSION_TIMEOUT_SECONDS, None)
        version = version_line(done.output) if done.returncode == 0 else None
    return {"path": str(path), "exists": path.is_file(), "version": version}
