"""Where things live in the llama-runtime home, and the active pointer.

Layout (everything on one filesystem, so every rename below is atomic)::

    <home>/
      active.json          the pointer: {"active": NAME, "previous": NAME}
      runtimes/NAME/       one directory per installed runtime, never modified
                           after activation; NAME = <repo>-<tag>-<backend>-<id>
      staging/             runtimes being built; never referenced by the pointer
      downloads/           partial and finished downloads, kept for resume
      locks/update.lock    the cross-process lock, outside swapped directories
      locks/switch.lock    held while a running server switches runtimes (and by `server` verbs)
      jobs/                state of the update job (for progress and resume)
      cache/               ETags and release JSON
      server/              pidfile and log of the managed llama-server

Invariant: the pointer only ever names directories under ``runtimes/`` that
hold a complete, verified runtime. Activation and rollback are a single
:func:`os.replace` of ``active.json`` (works on Windows, unlike symlink swaps),
so readers see the old pointer or the new one, never a missing one.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from llama_runtime.runtime.errors import CorruptStateError, UserInputError
from llama_runtime.runtime.fsutil import MAX_RECORD_BYTES, parse_record, read_regular, write_record
from llama_runtime.runtime.marker import (
    MARKER_NAME,
    InstallMarker,
    install_order,
    marker_path,
    provenance_summary,
    read_marker,
)

__all__ = ["UnsafeHomeError", "check_home", "find_foreign_link"]


# -- home_safety: The home is the tool's: refuse a home that someone else could rearrange. -----------------------

_MOVE_HINT = (
    "Point --home (or LLAMA_RUNTIME_HOME) at a directory you own on the disk you want, "
    "instead of linking directories inside the home."
)


_HOME_HINT = "Point --home (or LLAMA_RUNTIME_HOME) at a directory, or at a path where one may be created."


class UnsafeHomeError(UserInputError):
    """The home, or a directory in it, is not safely the tool's own."""

    code = "unsafe_home"


def check_home(root: Path, subdirs: Iterable[Path], *, deep: Iterable[Path] = ()) -> None:
    """Refuse a home that is not safely ours (see the module docstring).

    A home or subdirectory that does not exist yet is fine: it will be created.
    Below the home, no entry of the home itself or of a subdirectory is a link,
    and nothing at any depth of the ``deep`` ones (:func:`find_foreign_link`).

    Raises:
        UnsafeHomeError: The home is a file (or under one), a subdirectory is a
            symlink or not a directory, a link lies where the tool never makes
            one, or the home or a subdirectory is owned by another user or
            world-writable.
    """
    if os.name == "nt":  # not sys.platform: mypy then checks what follows under every --platform
        return
    try:
        st = os.stat(root)  # the home itself may be a link to where the user wants it
    except FileNotFoundError:
        if os.path.islink(root):  # a link to a moved or unmounted directory: creating it would fail later
            raise UnsafeHomeError(
                f"The llama-runtime home {root} is a symbolic link to {os.readlink(root)}, which does not exist.",
                hint=_HOME_HINT,
            ) from None
        return
    except OSError as exc:
        if not isinstance(exc, NotADirectoryError):  # a loop of links, a path too long
            raise UnsafeHomeError(
                f"The llama-runtime home {root} cannot be reached: {exc.strerror or exc}.", hint=_HOME_HINT
            ) from None
        raise UnsafeHomeError(
            f"The llama-runtime home {root} cannot exist: a part of its path is a file.", hint=_HOME_HINT
        ) from None
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeHomeError(f"The llama-runtime home {root} is a file, not a directory.", hint=_HOME_HINT)
    _check_owner_and_mode(root, st, "The llama-runtime home")
    for sub in subdirs:
        try:
            st = os.lstat(sub)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeHomeError(
                f"{sub} is a symbolic link (to {os.readlink(sub)}); llama-runtime deletes and replaces "
                "things in its home and does not follow links there.",
                hint=_MOVE_HINT,
            )
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafeHomeError(f"{sub} is not a directory; move it out of the llama-runtime home.")
        _check_owner_and_mode(sub, st, "The directory")
    deep_dirs = set(deep)
    for top in (root, *(sub for sub in subdirs if sub not in deep_dirs)):
        _refuse_link(find_foreign_link(top, max_depth=1))
    for sub in deep_dirs:
        _refuse_link(find_foreign_link(sub))


def find_foreign_link(top: Path, *, max_depth: int | None = None) -> Path | None:
    """The first symbolic link below ``top`` (``max_depth`` levels down; ``None``: every level), or ``None``.

    The tool makes links only inside the runtime trees it extracts (a build's
    ``libX.so -> libX.so.0`` chain, in ``staging/``, ``runtimes/NAME/`` and a
    streamed ``downloads/*.unpacking/``), never elsewhere: any other link was
    put there by someone else, and a write, rename or delete through it would
    reach outside the home (``cache/assets`` linked to a blob store, and
    ``gc`` deleted its files). The walk never follows a link; a directory that
    vanishes meanwhile is skipped.
    """
    pending: list[tuple[Path, int]] = [(top, 0)]
    while pending:
        folder, depth = pending.pop()
        try:
            with os.scandir(folder) as entries:
                listed = list(entries)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in listed:
            if entry.is_symlink():
                return Path(entry.path)
            if (max_depth is None or depth + 1 < max_depth) and entry.is_dir(follow_symlinks=False):
                pending.append((Path(entry.path), depth + 1))
    return None


def _refuse_link(link: Path | None) -> None:
    if link is None:
        return
    try:
        target = os.readlink(link)
    except OSError:
        target = "?"
    raise UnsafeHomeError(
        f"{link} is a symbolic link (to {target}); llama-runtime writes, replaces and deletes things in its "
        "home and does not follow links it did not make there.",
        hint=f"Move {link} out of the llama-runtime home (or replace it with a real directory). " + _MOVE_HINT,
    )


def _check_owner_and_mode(path: Path, st: os.stat_result, what: str) -> None:
    if sys.platform != "win32" and st.st_uid != os.geteuid():
        raise UnsafeHomeError(
            f"{what} {path} belongs to user id {st.st_uid}, not to you (user id {os.geteuid()}); "
            "another user could change which llama-server runs.",
            hint=_MOVE_HINT,
        )
    if st.st_mode & stat.S_IWOTH:
        raise UnsafeHomeError(
            f"{what} {path} is writable by every user, so anyone on this machine could plant the "
            "llama-server your apps run.",
            hint=f"Run `chmod o-w {path}`.",
        )


# -- layout ------------------------------------------------------------------------------------------------------

#: The directory of installed runtimes inside a home.
RUNTIMES_DIR_NAME: Final = "runtimes"

POINTER_NAME: Final = "active.json"
POINTER_SCHEMA: Final = 1
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Pointer:
    """Names (not paths) of the active and the previous runtime directories."""

    active: str | None = None
    previous: str | None = None


@dataclass(frozen=True)
class InstalledRuntime:
    """A runtime directory together with its (valid) marker."""

    name: str
    path: Path
    marker: InstallMarker

    @property
    def binary(self) -> Path:
        """Absolute path of ``llama-server`` in this runtime."""
        return self.path / self.marker.binary

    def describe(self) -> str:
        """``owner/name bNNNN (backend)``: the runtime in words, as messages name it."""
        return f"{self.marker.repo} {self.marker.tag} ({self.marker.backend})"

    @property
    def provenance(self) -> dict[str, Any]:
        """The contract's ``provenance`` object: ``status`` (verified, absent, unverified), ``reason``, the signer."""
        return provenance_summary(self.marker)

    def to_json(self) -> dict[str, object]:
        """The runtime object of the CLI contract."""
        return {
            "name": self.name,
            "repo": self.marker.repo,
            "tag": self.marker.tag,
            "backend": self.marker.backend,
            "backend_request": self.marker.backend_request,
            "runtime_dir": str(self.path),
            "binary": str(self.binary),
            "marker_path": str(marker_path(self.path)),
            "installed_at": self.marker.installed_at,
            "version": self.marker.release_version,
            "binary_version": self.marker.version,
            "reported_build": self.marker.reported_build,
            "build_check": self.marker.build_check or None,
            "channel": self.marker.channel or None,
            "digest_verified": self.marker.digest_verified,
            "asset": self.marker.asset,
            "source": self.marker.source,  # where the bytes came from: download, file, oci://host/name@sha256:…
            "provenance": self.provenance,
            "device_warning": self.marker.device_warning or None,
        }


def runtime_name_of(binary: Path) -> str | None:
    """The installed runtime (its directory name under ``runtimes/``) that ``binary`` belongs to, if any."""
    for parent in Path(binary).parents:
        if parent.parent.name == RUNTIMES_DIR_NAME and (parent / MARKER_NAME).is_file():
            return parent.name
    return None


def default_home() -> Path:
    """The platform's user data directory for llama-runtime."""
    import platformdirs  # deferred: costs ~10 ms at start-up, only needed here

    return Path(platformdirs.user_data_dir("llama-runtime", appauthor=False))


class Home:
    """The directory llama-runtime owns, and the paths inside it.

    Args:
        root: The home directory (``--home`` / ``LLAMA_RUNTIME_HOME``).
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().absolute()
        self.runtimes_dir = self.root / RUNTIMES_DIR_NAME
        self.staging_dir = self.root / "staging"
        self.downloads_dir = self.root / "downloads"
        self.locks_dir = self.root / "locks"
        self.jobs_dir = self.root / "jobs"
        self.cache_dir = self.root / "cache"
        self.server_dir = self.root / "server"
        #: What the updater accepted, outside every runtime folder (:mod:`llama_runtime.runtime.trust`).
        self.trust_dir = self.root / "trust"
        self.pointer_path = self.root / POINTER_NAME
        self.lock_path = self.locks_dir / "update.lock"
        # Held only while a running server is switched between runtimes, so the
        # `server` verbs are never blocked by a download that holds update.lock.
        self.switch_lock_path = self.locks_dir / "switch.lock"

    @property
    def subdirs(self) -> tuple[Path, ...]:
        """Every directory of the home the tool writes, deletes or runs from."""
        return (
            self.runtimes_dir,
            self.staging_dir,
            self.downloads_dir,
            self.locks_dir,
            self.jobs_dir,
            self.cache_dir,
            self.server_dir,
            self.trust_dir,
        )

    def check_safe(self) -> None:
        """Refuse a home someone else could rearrange (``runtime.layout``).

        Raises:
            UnsafeHomeError: A subdirectory is a symlink, or the home or a
                subdirectory is another user's or writable by everyone.
        """
        # Deep: the tool makes no link at any depth there. runtimes/, staging/ and downloads/ hold
        # extracted trees with links of their own; their entries are checked, not what is inside.
        check_home(
            self.root,
            self.subdirs,
            deep=(self.locks_dir, self.jobs_dir, self.cache_dir, self.server_dir, self.trust_dir),
        )

    def ensure(self) -> None:
        """Check the home is safely ours, then create the directories (idempotent).

        Raises:
            UnsafeHomeError: See :meth:`check_safe`; nothing was created.
        """
        self.check_safe()
        for directory in self.subdirs:
            directory.mkdir(parents=True, exist_ok=True)

    # -- pointer -----------------------------------------------------------

    def read_pointer(self) -> Pointer:
        """The active pointer; an absent pointer means nothing is active.

        Raises:
            CorruptStateError: The pointer file exists but is not valid.
            UnsafeHomeError: The home is not safely ours (a pointer there proves nothing).
        """
        self.check_safe()
        try:
            raw = read_regular(self.pointer_path, MAX_RECORD_BYTES + 1)
        except FileNotFoundError:
            return Pointer()
        except OSError:  # a directory or FIFO in its place, an unreadable file: damaged all the same
            raw = b""
        try:
            payload = parse_record(raw, what=str(self.pointer_path))
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            if self.pointer_path.is_dir() and not self.pointer_path.is_symlink():
                raise self.pointer_is_directory()
            raise CorruptStateError(
                f"The active-runtime pointer {self.pointer_path} is damaged.",
                hint="Run `llama-runtime doctor --repair` to point it at a verified runtime.",
            )
        names = [payload.get("active"), payload.get("previous")]
        for name in names:
            if name is not None and (not isinstance(name, str) or not _is_plain_name(name)):
                raise CorruptStateError(
                    f"The active-runtime pointer {self.pointer_path} names an invalid directory.",
                    hint="Run `llama-runtime doctor --repair` to point it at a verified runtime.",
                )
        return Pointer(active=names[0], previous=names[1])

    def pointer_is_directory(self) -> CorruptStateError:
        """The error for a directory standing where the pointer belongs (no write can replace it)."""
        return CorruptStateError(
            f"The active-runtime pointer {self.pointer_path} is a directory, not a file.",
            hint="Run `llama-runtime doctor --repair`: it moves the directory aside (keeping what is in it) "
            "and points at a verified runtime.",
        )

    def write_pointer(self, pointer: Pointer) -> None:
        """Replace the pointer atomically and durably.

        Raises:
            CorruptStateError: A directory stands where the pointer belongs.
            OSError: The pointer is unchanged.
        """
        if self.pointer_path.is_dir() and not self.pointer_path.is_symlink():
            raise self.pointer_is_directory()
        write_record(
            self.pointer_path,
            {"schema_version": POINTER_SCHEMA, "active": pointer.active, "previous": pointer.previous},
        )

    # -- runtimes ----------------------------------------------------------

    def runtime_path(self, name: str) -> Path:
        """The directory of the runtime called ``name``."""
        return self.runtimes_dir / name

    def new_runtime_name(self, repo: str, tag: str, backend: str) -> str:
        """A fresh directory name that says what it holds and never collides."""
        label = _UNSAFE_NAME_CHARS.sub("_", f"{repo.replace('/', '_')}-{tag}-{backend}")
        return f"{label}-{os.urandom(4).hex()}"

    def load(self, name: str) -> InstalledRuntime:
        """The runtime ``name`` with its validated marker.

        Raises:
            CorruptStateError: Missing directory or bad marker.
        """
        path = self.runtime_path(name)
        if not path.is_dir():
            raise CorruptStateError(
                f"The runtime directory {path} is missing.",
                hint="Run `llama-runtime doctor --repair` or install the release again.",
            )
        return InstalledRuntime(name=name, path=path, marker=read_marker(path))

    def describe_active(self) -> str:
        """Which runtime the pointer names right now, as words for a message; never raises.

        Used after an interruption: what is active is read, never assumed.
        """
        try:
            pointer = self.read_pointer()
            if not pointer.active:
                return "no runtime is active"
            return f"{self.load(pointer.active).describe()} is active"
        except Exception as exc:  # the interruption is the news; this is only context
            reason = getattr(exc, "message", None) or type(exc).__name__
            return f"the active runtime could not be read ({reason}); `llama-runtime status` shows it"

    def installed(self) -> list[InstalledRuntime]:
        """Every runtime directory with a valid marker, oldest first."""
        found: list[InstalledRuntime] = []
        if not self.runtimes_dir.is_dir():
            return found
        for entry in os.scandir(self.runtimes_dir):
            if not entry.is_dir(follow_symlinks=False):
                continue
            try:
                found.append(self.load(entry.name))
            except CorruptStateError:
                continue
        found.sort(key=lambda r: (install_order(r.marker), r.name))
        return found


def is_runtime_name(name: str) -> bool:
    """Whether ``name`` can be a directory under ``runtimes/`` (one plain component, never ``..``)."""
    return _is_plain_name(name)


def _is_plain_name(name: str) -> bool:
    return bool(name) and name not in {".", ".."} and _UNSAFE_NAME_CHARS.search(name) is None
