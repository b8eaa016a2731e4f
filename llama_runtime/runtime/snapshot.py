"""One look at the home: the pointer, every runtime and its marker, read once under the lock.

Apart from ``runtime.layout`` so that start-up (``ensure()``) and ``status``, which read the
pointer and one runtime, do not build what a whole-home operation needs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from llama_runtime.runtime.errors import CorruptStateError, ForeignMarkerError
from llama_runtime.runtime.fsutil import sha256_file
from llama_runtime.runtime.layout import Home, InstalledRuntime, Pointer
from llama_runtime.runtime.marker import Level, file_problems, install_order, read_marker

__all__ = ["DamagedRuntime", "HomeSnapshot"]


@dataclass(frozen=True)
class DamagedRuntime:
    """A directory of ``runtimes/`` that is no installed runtime, and why.

    ``error`` is what reading its marker raised: :class:`ForeignMarkerError` when
    a newer llama-runtime wrote it (``foreign``), else :class:`CorruptStateError`
    (missing, unreadable, not JSON, not a marker).
    """

    name: str
    path: Path
    error: CorruptStateError

    @property
    def reason(self) -> str:
        """The sentence that says what is wrong with it."""
        return self.error.message

    @property
    def foreign(self) -> bool:
        """Whether a newer llama-runtime wrote its marker (not damage this version may repair over)."""
        return isinstance(self.error, ForeignMarkerError)


@dataclass
class HomeSnapshot:
    """The home as one locked operation sees it (read with :meth:`read`).

    Attributes:
        home: The home it was read from.
        pointer: The pointer (empty when absent or damaged; see ``pointer_error``).
        pointer_error: Why the pointer could not be read, if it could not.
        runtimes: Every directory with a valid marker, oldest install first.
        damaged: Every other directory of ``runtimes/``, by name, with the reason.
    """

    home: Home
    pointer: Pointer
    pointer_error: CorruptStateError | None
    runtimes: tuple[InstalledRuntime, ...]
    damaged: dict[str, DamagedRuntime]
    _digests: dict[Path, str] = field(default_factory=dict, repr=False)
    _problems: dict[tuple[str, Level, bool], list[str]] = field(default_factory=dict, repr=False)

    @classmethod
    def read(cls, home: Home) -> HomeSnapshot:
        """Read the pointer once and every runtime directory's marker once (the caller holds the lock).

        Raises:
            UnsafeHomeError: The home is not safely ours (see :meth:`Home.read_pointer`).
        """
        pointer_error: CorruptStateError | None = None
        try:
            pointer = home.read_pointer()
        except CorruptStateError as exc:  # what the operation does about it is its own decision
            pointer, pointer_error = Pointer(), exc
        runtimes: list[InstalledRuntime] = []
        damaged: dict[str, DamagedRuntime] = {}
        try:
            entries = sorted(os.scandir(home.runtimes_dir), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            entries = []
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            path = Path(entry.path)
            try:
                runtimes.append(InstalledRuntime(name=entry.name, path=path, marker=read_marker(path)))
            except CorruptStateError as exc:
                damaged[entry.name] = DamagedRuntime(entry.name, path, exc)
        runtimes.sort(key=lambda r: (install_order(r.marker), r.name))
        return cls(home, pointer, pointer_error, tuple(runtimes), damaged)

    # -- what is there -----------------------------------------------------

    def find(self, name: str | None) -> InstalledRuntime | None:
        """The installed runtime ``name`` (a valid marker), else ``None``."""
        return next((r for r in self.runtimes if r.name == name), None) if name else None

    def load(self, name: str) -> InstalledRuntime:
        """The runtime ``name``, as :meth:`Home.load` answers it but from this snapshot.

        Raises:
            CorruptStateError: Missing directory or bad marker (:class:`ForeignMarkerError`: a newer one's).
        """
        found = self.find(name)
        if found is not None:
            return found
        if name in self.damaged:
            raise self.damaged[name].error
        raise CorruptStateError(
            f"The runtime directory {self.home.runtime_path(name)} is missing.",
            hint="Run `llama-runtime doctor --repair` or install the release again.",
        )

    def active(self) -> InstalledRuntime | None:
        """The runtime the pointer names, or ``None`` when nothing is active.

        Raises:
            CorruptStateError: The pointer or the active runtime is damaged.
        """
        if self.pointer_error is not None:
            raise self.pointer_error
        return self.load(self.pointer.active) if self.pointer.active else None

    def previous(self) -> InstalledRuntime | None:
        """The rollback target when it is still an installed runtime (its files are not checked)."""
        return self.find(self.pointer.previous)

    def others(self, active: InstalledRuntime | None) -> list[InstalledRuntime]:
        """The installed runtimes other than ``active``, oldest first."""
        return [r for r in self.runtimes if active is None or r.name != active.name]

    def next_sequence(self) -> int:
        """One more than any installed runtime's install sequence (the order no clock can upset)."""
        return 1 + max((r.marker.sequence for r in self.runtimes), default=0)

    # -- is it intact -------------------------------------------------------

    def sha256(self, path: Path) -> str:
        """The sha256 of ``path``, computed at most once per snapshot.

        Raises:
            OSError: The file cannot be read.
        """
        key = Path(path)
        if key not in self._digests:
            self._digests[key] = sha256_file(key)
        return self._digests[key]

    def problems(self, runtime: InstalledRuntime, level: Level = "size", *, hash_binary: bool = False) -> list[str]:
        """:func:`runtime.marker.file_problems` of ``runtime``, checked once per level and kept."""
        key = (runtime.name, level, hash_binary)
        if key not in self._problems:
            self._problems[key] = file_problems(
                runtime.path, runtime.marker, level, hash_binary=hash_binary, digest=self.sha256
            )
        return list(self._problems[key])

    def intact(self, name: str | None) -> str | None:
        """``name`` when it is an installed runtime whose recorded files are all there in size, else ``None``."""
        runtime = self.find(name)
        return name if runtime is not None and not self.problems(runtime) else None

    def without(self, names: set[str]) -> HomeSnapshot:
        """This snapshot less the runtime directories ``names`` (just removed under the same lock)."""
        return HomeSnapshot(
            self.home,
            self.pointer,
            self.pointer_error,
            tuple(r for r in self.runtimes if r.name not in names),
            {n: d for n, d in self.damaged.items() if n not in names},
            self._digests,
            {k: v for k, v in self._problems.items() if k[0] not in names},
        )
