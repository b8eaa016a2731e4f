"""Is the active runtime ready to start? The cheap, offline answer start-up and the check share.

A runtime counts as ready when the pointer names it, its marker is valid and
every file it records (the binary included) exists with the recorded size and
the stat fingerprint it had when its bytes last matched the marker
(``runtime.fingerprint``): stat calls only while nothing changed, a hash of
just the files whose stat did, no network, no lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from llama_runtime.runtime.errors import CorruptStateError
from llama_runtime.runtime.fingerprint import check_runtime
from llama_runtime.runtime.layout import Home, InstalledRuntime, UnsafeHomeError

if TYPE_CHECKING:
    from llama_runtime.runtime.marker import InstallMarker

__all__ = [
    "EnsureResult",
    "NotReady",
    "Ready",
    "active_marker",
    "check_active",
    "damage_seen",
    "diagnose_active",
    "ensure_result",
    "trial_on_record",
]


@dataclass(frozen=True)
class Ready:
    """Start-up found a verified runtime: ``binary`` is the ``llama-server`` to run.

    Check ``result.ready`` and a type checker narrows :data:`EnsureResult` to
    this class, where ``binary`` is a ``Path``, never ``None``.

    Attributes:
        runtime: The active, cheaply verified runtime.
        update_running: Another caller is updating right now (start-up did not wait).
        installed: This call installed the runtime (``install_if_missing``).
        trial: The runtime on trial, when a switch's check has no verdict yet (``runtime`` is then
            the last checked one, active before that switch).
    """

    runtime: InstalledRuntime
    update_running: bool
    installed: bool = False
    trial: str | None = None
    ready: Literal[True] = field(default=True, init=False)
    problem: None = field(default=None, init=False)
    code: None = field(default=None, init=False)

    @property
    def binary(self) -> Path:
        """The ``llama-server`` to run."""
        return self.runtime.binary

    def to_json(self) -> dict[str, Any]:
        """The start-up answer as a JSON object: ``ready``, ``binary``, the ``runtime`` object (``status``'s)."""
        return {
            "ready": True,
            "binary": str(self.binary),
            "runtime": self.runtime.to_json(),
            "update_running": self.update_running,
            "installed": self.installed,
            "trial": self.trial,
            "code": None,
            "problem": None,
        }


#: ``NotReady.code`` when the home has no runtime yet.
NOTHING_INSTALLED: Final[str] = "nothing_installed"
#: ``NotReady.code`` when the active runtime's files differ from what was installed.
DAMAGED: Final[str] = "damaged"


@dataclass(frozen=True)
class NotReady:
    """Start-up found no usable runtime; ``code`` says why for programs, ``problem`` for people.

    Attributes:
        update_running: Another caller is updating right now (start-up did not wait).
        problem: Why there is no usable runtime, one sentence.
        code: Why, for programs: ``nothing_installed`` (install one), ``damaged`` (its files
            differ: ``doctor(repair=True)``), or the error code of what stopped the look
            (``corrupt_state``, ``foreign_marker``, ``unsafe_home``).
    """

    update_running: bool
    problem: str
    code: str = "corrupt_state"
    ready: Literal[False] = field(default=False, init=False)
    runtime: None = field(default=None, init=False)
    installed: bool = field(default=False, init=False)

    @property
    def binary(self) -> None:
        """Nothing to run."""
        return None

    def to_json(self) -> dict[str, Any]:
        """The start-up answer as a JSON object, with the keys of :meth:`Ready.to_json`."""
        return {
            "ready": False,
            "binary": None,
            "runtime": None,
            "update_running": self.update_running,
            "installed": False,
            "trial": None,
            "code": self.code,
            "problem": self.problem,
        }


#: What :meth:`~updater.api.service.RuntimeUpdater.ensure` returns; ``if result.ready:`` tells the two apart.
EnsureResult: TypeAlias = Ready | NotReady


def ensure_result(
    runtime: InstalledRuntime | None,
    running: bool,
    problem: str | None,
    *,
    code: str | None = None,
    installed: bool = False,
    trial: str | None = None,
) -> EnsureResult:
    """:class:`Ready` for a runtime, else :class:`NotReady` saying why (``problem``, ``code``; ``trial``: see Ready)."""
    if runtime is not None:
        return Ready(runtime, running, installed=installed, trial=trial)
    return NotReady(running, problem or "No usable llama.cpp runtime is active.", code or NOTHING_INSTALLED)


def diagnose_active(home: Home) -> tuple[InstalledRuntime | None, str | None, str | None]:
    """The active runtime if it is ready, else ``None``, why for programs (a code) and why for people."""
    from llama_runtime.runtime.trial import checked_pointer

    try:
        # A runtime on trial is not handed out: the last checked one is (runtime.trial; one small read).
        pointer, _trial = checked_pointer(home, home.read_pointer())
        if not pointer.active:
            return None, NOTHING_INSTALLED, "No llama.cpp runtime is installed yet."
        runtime = home.load(pointer.active)
    except (CorruptStateError, UnsafeHomeError) as exc:  # start-up reports, it does not raise
        return None, exc.code, exc.message

    problems = damage_seen(home, runtime)
    if problems:
        shown = "; ".join(problems[:3])
        where = f"The active runtime {runtime.marker.tag} in {runtime.path}"
        return None, DAMAGED, f"{where} differs from what was installed: {shown}."
    return runtime, None, None


def check_active(home: Home) -> tuple[InstalledRuntime | None, str | None]:
    """The active runtime if it is ready, else ``None`` and why, for people."""
    runtime, _code, problem = diagnose_active(home)
    return runtime, problem


def damage_seen(home: Home, runtime: InstalledRuntime) -> list[str]:
    """What differs in ``runtime`` from its marker, seen by stat calls and confirmed by hashing what changed.

    A truncated or same-size rewritten ``llama-server`` is not "ready"; a touched
    or restored file whose bytes are intact is, and its fingerprint is refreshed.
    """
    return list(check_runtime(home.root, runtime.name, runtime.path, runtime.marker).damage)


def trial_on_record(home: Home) -> str | None:
    """The runtime on trial in ``home`` (a switch whose check has no verdict yet), or None."""
    from llama_runtime.runtime.trial import read_trial

    trial = read_trial(home)
    return trial.runtime if trial else None


def active_marker(home: Home) -> tuple[InstallMarker | None, str | None]:
    """The active runtime's marker, also when its binary is damaged, and what is wrong."""
    runtime, problem = check_active(home)
    if runtime is not None:
        return runtime.marker, None
    try:
        pointer = home.read_pointer()
        if not pointer.active:
            return None, None  # nothing installed is no problem for a check
        return home.load(pointer.active).marker, problem
    except CorruptStateError as exc:
        return None, exc.message
