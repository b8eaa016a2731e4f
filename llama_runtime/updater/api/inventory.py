"""What a home holds, and what this machine could install: the answers of ``status`` and ``list``.

Both read the home (``status`` without the network, without a lock); ``list(available=True)``
also asks the release source which builds fit this host. The results are typed to the leaf
and their ``to_json()`` is the CLI's ``--json`` object of the same verb.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.errors import CorruptStateError, ForeignMarkerError

if TYPE_CHECKING:
    from llama_runtime.runtime.failed_builds import FailedBuild
    from llama_runtime.runtime.fingerprint import RuntimeCheck
    from llama_runtime.runtime.layout import Home, InstalledRuntime, Pointer
    from llama_runtime.runtime.pin import Pin
    from llama_runtime.runtime.sandbox import SandboxSupport
    from llama_runtime.runtime.snapshot import HomeSnapshot
    from llama_runtime.runtime.trial import Trial
    from llama_runtime.updater.choice.decide import Available
    from llama_runtime.updater.choice.host import HostFacts
    from llama_runtime.updater.config import Settings
    from llama_runtime.updater.sources.source import BuildSource

__all__ = [
    "DamagedRuntime",
    "ListResult",
    "RuntimeEntry",
    "ServerOverride",
    "StatusResult",
    "TrialInfo",
    "available_for",
    "list_home",
    "read_active",
    "server_override_info",
    "speed_figures",
    "status_of",
]

#: Rounds of builds ``list(available=True)`` looks through at most (100 each, one API request each on
#: GitHub): upstream publishes a dozen builds a day but a stable release only now and then.
AVAILABLE_MAX_PAGES: Final[int] = 3
#: Builds asked for per round (GitHub's page size: one API request each).
RELEASES_PER_PAGE: Final[int] = 100

REPAIR_HINT: Final[str] = (
    "Run `llama-runtime doctor --repair` to point at a verified runtime, "
    "or `llama-runtime update` to install one again."
)


@dataclass(frozen=True)
class RuntimeEntry:
    """One installed runtime as ``status`` and ``list`` show it.

    Attributes:
        runtime: The runtime and its marker.
        own_bytes: Bytes only this runtime holds.
        shared_bytes: Bytes stored once with other runtimes (hard links).
        active: The pointer names it as active (the last checked one while a switch is on trial).
        previous: It is the rollback target.
        size_bytes: Its files' total size (``list`` only, else ``None``).
        damage: How its files differ from its marker (``list`` only).
        suspect: Files whose stat changed but whose bytes still match (``list`` only).
    """

    runtime: InstalledRuntime
    own_bytes: int
    shared_bytes: int
    active: bool = False
    previous: bool = False
    size_bytes: int | None = None
    damage: tuple[str, ...] = ()
    suspect: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The runtime object with its bytes (``status``), and its flags and checks (``list``)."""
        payload: dict[str, Any] = {
            **self.runtime.to_json(),
            "own_bytes": self.own_bytes,
            "shared_bytes": self.shared_bytes,
        }
        if self.size_bytes is not None:
            payload.update(
                size_bytes=self.size_bytes,
                active=self.active,
                previous=self.previous,
                damage=list(self.damage),
                suspect=list(self.suspect),
            )
        return payload


@dataclass(frozen=True)
class DamagedRuntime:
    """A runtime directory whose marker cannot be used: never chosen, listed with why.

    Attributes:
        name: Its directory name under ``runtimes/``.
        path: The directory.
        code: The error code of what is wrong (``corrupt_state``, ``foreign_marker``).
        reason: What is wrong, for people.
    """

    name: str
    path: Path
    code: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        """An item of ``list``'s ``damaged``."""
        return {"name": self.name, "path": str(self.path), "code": self.code, "reason": self.reason}


@dataclass(frozen=True)
class ServerOverride:
    """``LLAMA_SERVER_PATH`` in force: apps run this binary, not the managed one.

    Attributes:
        path: The binary it names.
        exists: Whether that is a file.
        version: Its ``--version`` line, ``None`` when it does not run.
    """

    path: Path
    exists: bool
    version: str | None

    def to_json(self) -> dict[str, Any]:
        """``status``'s ``override_info``."""
        return {"path": str(self.path), "exists": self.exists, "version": self.version}


@dataclass(frozen=True)
class TrialInfo:
    """A switch whose check has no verdict yet: apps are handed the last checked runtime meanwhile.

    Attributes:
        runtime: The runtime on trial (its directory name).
        name: How people call it (``b7001 (vulkan)``).
        before_name: How people call the last checked runtime, the one a revert brings back.
        pid: The process carrying the switch out.
        since: When the trial began (seconds since the epoch).
        owner_running: Whether that process still runs (``status`` only, else ``None``).
        server_down: The managed server this switch stopped is still down, and its owner is gone
            (nothing brought it back yet: ``server restart`` or the next update, use, rollback or gc does).
        record: The stored trial record (the ``trial`` object of ``status``/``list`` output).
    """

    runtime: str
    name: str
    before_name: str
    pid: int
    since: float
    owner_running: bool | None
    record: Mapping[str, Any] = dataclasses.field(repr=False)
    server_down: bool = False

    @classmethod
    def of(cls, trial: Trial, *, owner_running: bool | None = None, server_down: bool = False) -> TrialInfo:
        """The public view of a stored trial."""
        return cls(
            runtime=trial.runtime,
            name=trial.name,
            before_name=trial.before_name,
            pid=trial.pid,
            since=trial.since,
            owner_running=owner_running,
            record=MappingProxyType(trial.to_json()),
            server_down=server_down,
        )

    def describe(self) -> str:
        """``b7001 (vulkan) is on trial (pid 42); b7000 (vulkan) is the last checked runtime``."""
        return f"{self.name} is on trial (pid {self.pid}); {self.before_name} is the last checked runtime"

    def to_json(self) -> dict[str, Any]:
        """The stored record, with ``owner_running`` where it is known."""
        payload = dict(self.record)
        if self.owner_running is not None:
            payload["owner_running"] = self.owner_running
            payload["server_down"] = self.server_down
        return payload


@dataclass(frozen=True)
class StatusResult:
    """What is active, what is installed, whether an override is in force (``status``).

    Attributes:
        home: The home's directory.
        active: The active runtime (the last checked one while a switch is on trial), if any.
        previous: The rollback target, if any.
        installed: Every installed runtime, with its bytes.
        home_bytes: Bytes the home uses on disk (files shared by runtimes counted once).
        override: ``LLAMA_SERVER_PATH`` in force, if set.
        update_running: Another process holds the update lock now.
        speeds: Each model's measured speeds (tokens/s): ``{"active": {model: figures}, "previous": …}``.
        skipped_builds: Builds that failed verification here; ``update`` skips them.
        trial: The switch on trial, if any.
        pinned: The build the home is pinned to, if any.
        pin_problem: Why the pin file could not be read (damaged), if so.
        sandbox: The sandbox a new build's first runs get on this host (``runtime.sandbox``).
    """

    home: Path
    active: InstalledRuntime | None
    previous: InstalledRuntime | None
    installed: tuple[RuntimeEntry, ...]
    home_bytes: int
    override: ServerOverride | None
    update_running: bool
    speeds: Mapping[str, Mapping[str, Any]]
    skipped_builds: tuple[FailedBuild, ...]
    trial: TrialInfo | None
    pinned: Pin | None = None
    pin_problem: str | None = None
    sandbox: SandboxSupport | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``status --json`` object."""
        return {
            "active": self.active.to_json() if self.active else None,
            "previous": self.previous.to_json() if self.previous else None,
            "installed": [entry.to_json() for entry in self.installed],
            "home_bytes": self.home_bytes,
            "override": str(self.override.path) if self.override else None,
            "override_info": self.override.to_json() if self.override else None,
            "update_running": self.update_running,
            "home": str(self.home),
            "speeds": {key: dict(value) for key, value in self.speeds.items()},
            "skipped_builds": [dataclasses.asdict(b) for b in self.skipped_builds],
            "trial": self.trial.to_json() if self.trial else None,
            "pinned": self.pinned.to_json() if self.pinned else None,
            "sandbox": self.sandbox.to_json() if self.sandbox else None,
        }


@dataclass(frozen=True)
class ListResult:
    """The installed runtimes, their files checked, and (``available``) what fits this host (``list``).

    Attributes:
        installed: Every installed runtime, flagged active/previous, with its checks.
        damaged: Runtime directories whose marker cannot be used.
        home_bytes: Bytes the home uses on disk (files shared by runtimes counted once).
        trial: The switch on trial, if any.
        available: Newest first, the releases with an asset for this host; ``None`` unless asked.
        repo: The repository ``available`` comes from.
    """

    installed: tuple[RuntimeEntry, ...]
    damaged: tuple[DamagedRuntime, ...]
    home_bytes: int
    trial: TrialInfo | None
    available: tuple[Available, ...] | None
    repo: str

    def to_json(self) -> dict[str, Any]:
        """The ``list --json`` object (``available`` only when asked for)."""
        payload: dict[str, Any] = {
            "installed": [entry.to_json() for entry in self.installed],
            "damaged": [d.to_json() for d in self.damaged],
            "home_bytes": self.home_bytes,
            "trial": self.trial.to_json() if self.trial else None,
        }
        if self.available is not None:
            payload["available"] = [a.to_json() for a in self.available]
        return payload


def read_active(home: Home) -> tuple[Pointer, InstalledRuntime | None]:
    """The pointer and the intact active runtime.

    Raises:
        CorruptStateError: The pointer or the active runtime is damaged (the message names the repair).
    """
    from llama_runtime.runtime.trial import checked_pointer
    from llama_runtime.updater.api.ready import damage_seen

    try:
        # While a switch is on trial, readers are handed the last checked runtime (runtime.trial).
        pointer, _trial = checked_pointer(home, home.read_pointer())
        active = home.load(pointer.active) if pointer.active else None
    except ForeignMarkerError:
        raise
    except CorruptStateError as exc:
        # An update cannot replace a directory standing at the pointer: then only doctor --repair helps.
        hint = exc.hint if home.pointer_path.is_dir() else REPAIR_HINT
        raise CorruptStateError(exc.message, hint=hint) from None
    # Stat fingerprints, with a hash of only what changed: a same-size garbage llama-server is damage.
    problems = damage_seen(home, active) if active else []
    if active and problems:
        shown = "; ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")
        raise CorruptStateError(
            f"The active runtime {active.marker.tag} ({active.marker.backend}) in {active.path} is damaged: {shown}.",
            hint=REPAIR_HINT,
        )
    return pointer, active


def server_override_info() -> ServerOverride | None:
    """The ``LLAMA_SERVER_PATH`` override in force: its path, whether it exists, its version line."""
    from llama_runtime.runtime.binary import VERSION_TIMEOUT_SECONDS, run_process, server_override, version_line

    path = server_override()
    if path is None:
        return None
    version = None
    if path.is_file():
        done = run_process([str(path), "--version"], VERSION_TIMEOUT_SECONDS, None)
        version = version_line(done.output) if done.returncode == 0 else None
    return ServerOverride(path=path, exists=path.is_file(), version=version)


def status_of(home: Home) -> StatusResult:
    """``status``: read the home, the lock's probe and the override; no network, no lock taken.

    Raises:
        CorruptStateError: The pointer or the active runtime is damaged.
    """
    from llama_runtime.runtime.sandbox import sandbox_probe

    # bubblewrap's trial run (a few ms of namespaces made and torn down) overlaps the reading of the home.
    with sandbox_probe() as sandbox:
        return _status_of(home, sandbox)


def _status_of(home: Home, sandbox: Callable[[], SandboxSupport]) -> StatusResult:
    from llama_runtime.runtime.diskuse import home_disk_use
    from llama_runtime.runtime.failed_builds import load_failed
    from llama_runtime.runtime.lock import UpdateLock
    from llama_runtime.runtime.trial import owner_alive, read_trial

    pointer, active = read_active(home)
    trial = read_trial(home)
    installed = home.installed()
    previous = next((r for r in installed if r.name == pointer.previous), None)
    disk = home_disk_use(home.root, [r.path for r in installed])
    entries = tuple(
        RuntimeEntry(r, disk.runtimes[r.name].own_bytes, disk.runtimes[r.name].shared_bytes) for r in installed
    )
    return StatusResult(
        home=home.root,
        active=active,
        previous=previous,
        installed=entries,
        home_bytes=disk.home_bytes,
        override=server_override_info(),
        update_running=home.lock_path.exists() and UpdateLock(home.lock_path).is_held(),
        speeds=speed_figures(active, previous, home.root),
        skipped_builds=load_failed(home.root),
        trial=(
            TrialInfo.of(trial, owner_running=owner_alive(trial), server_down=server_down_after(home, trial))
            if trial
            else None
        ),
        **_pin_of(home),
        sandbox=sandbox(),
    )


def server_down_after(home: Home, trial: Trial) -> bool:
    """Whether the managed server a dead switch stopped is still down (nothing brought it back yet)."""
    from llama_runtime.runtime.server import ManagedServer
    from llama_runtime.runtime.trial import owner_alive

    if trial.server is None or not trial.server.managed or owner_alive(trial):
        return False
    return not ManagedServer(home.server_dir).is_running()


def _pin_of(home: Home) -> dict[str, Any]:
    """``pinned`` and ``pin_problem`` of :class:`StatusResult`: a damaged pin file is said, never a failed status."""
    from llama_runtime.runtime.errors import CorruptStateError
    from llama_runtime.runtime.pin import load_pin

    try:
        return {"pinned": load_pin(home.root)}
    except CorruptStateError as exc:
        return {"pin_problem": f"{exc.message} {exc.hint or ''}".rstrip()}


def list_home(home: Home) -> tuple[ListResult, InstalledRuntime | None, list[InstalledRuntime]]:
    """``list`` without ``available``: every runtime, its files checked against its marker.

    Returns:
        The result, the active runtime (``available`` keeps its request), and the installed runtimes.

    Raises:
        CorruptStateError: The pointer cannot be read.
    """
    from llama_runtime.runtime.diskuse import home_disk_use
    from llama_runtime.runtime.fsutil import tree_size
    from llama_runtime.runtime.snapshot import HomeSnapshot
    from llama_runtime.runtime.trial import checked_pointer

    snapshot = HomeSnapshot.read(home)
    if snapshot.pointer_error is not None:
        raise snapshot.pointer_error
    # While a switch is on trial, the last checked runtime is listed as active (runtime.trial).
    pointer, trial = checked_pointer(snapshot.home, snapshot.pointer)
    installed = list(snapshot.runtimes)
    checks = _file_checks(snapshot)
    disk = home_disk_use(snapshot.home.root, [r.path for r in installed])
    entries = tuple(
        RuntimeEntry(
            runtime,
            disk.runtimes[runtime.name].own_bytes,
            disk.runtimes[runtime.name].shared_bytes,
            active=runtime.name == pointer.active,
            previous=runtime.name == pointer.previous,
            size_bytes=tree_size(runtime.path),
            damage=tuple(checks[runtime.name].damage),
            suspect=tuple(checks[runtime.name].suspect),
        )
        for runtime in installed
    )
    damaged = tuple(DamagedRuntime(d.name, d.path, d.error.code, d.reason) for d in snapshot.damaged.values())
    result = ListResult(
        installed=entries,
        damaged=damaged,
        home_bytes=disk.home_bytes,
        trial=TrialInfo.of(trial) if trial else None,
        available=None,
        repo="",
    )
    active = next((r for r in installed if r.name == pointer.active), None)
    return result, active, installed


def speed_figures(
    active: InstalledRuntime | None, previous: InstalledRuntime | None, home_root: Path
) -> dict[str, dict[str, object]]:
    """``status``'s ``speeds``: each model's figures of the active and the previous runtime.

    The smoke model's figures come from the markers; the server gate's, newer, from the home's state.
    """
    return {"active": _figures(active, home_root), "previous": _figures(previous, home_root)}


def _figures(runtime: InstalledRuntime | None, home_root: Path) -> dict[str, object]:
    """``runtime``'s figures per model: its marker's (smoke model), then the gate's measurements."""
    from llama_runtime.updater.verify.measures import measures_of

    if runtime is None:
        return {}
    figures: dict[str, object] = dict(runtime.marker.speeds)
    for measure in sorted(measures_of(home_root, runtime.name), key=lambda m: m.measured_at):
        if measure.speed is not None:
            figures[measure.model] = {
                **measure.speed.to_json(),
                "args": measure.args,
                "measured_at": measure.measured_at,
                "samples": len(measure.samples),
                "answer": measure.answer,
            }
    return figures


def _file_checks(snapshot: HomeSnapshot) -> dict[str, RuntimeCheck]:
    """Every installed runtime's files against its marker: stat fingerprints, a hash of what changed."""
    from llama_runtime.runtime.fingerprint import Fingerprints

    stamps = Fingerprints.load(snapshot.home.root)
    checks = {r.name: stamps.check(r.name, r.path, r.marker, snapshot.sha256) for r in snapshot.runtimes}
    stamps.keep_only(checks)
    stamps.save()
    return checks


def available_for(
    settings: Settings,
    source: BuildSource,
    host: HostFacts,
    installed: list[InstalledRuntime],
    active: InstalledRuntime | None,
    limit: int,
) -> tuple[Available, ...]:
    """The newest builds with an asset for ``host`` and the backend asked for (or the active one's).

    The source's newest builds are looked through a hundred more at a time until ``limit`` fit
    or :data:`AVAILABLE_MAX_PAGES` hundreds were: upstream cuts a stable release far less often
    than it publishes builds, so the newest hundred hold few of them.
    """
    from llama_runtime.updater.choice.decide import available_builds
    from llama_runtime.updater.release.channel import ResolvedRelease, parse_channel

    backend = settings.backend if settings.backend_explicit else (active.marker.backend_request if active else "auto")
    stored = active.marker.channel if active and active.marker.channel else None
    channel = parse_channel(settings.channel or stored or "stable")
    have = {(r.marker.tag, r.marker.asset) for r in installed if r.marker.repo.lower() == settings.repo.lower()}
    found: list[Available] = []
    seen = 0
    for page in range(1, AVAILABLE_MAX_PAGES + 1):
        builds = source.builds(page * RELEASES_PER_PAGE)
        offered = [
            ResolvedRelease(b.tag, b.versions[0] if b.versions else None, b.release)
            for b in builds
            if channel == "nightly" or b.stable
        ]
        found = available_builds(offered, host, backend, installed=have, limit=limit)
        if len(found) >= limit or len(builds) <= seen:
            break
        seen = len(builds)
    return tuple(found)
