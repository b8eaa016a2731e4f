"""The home is the tool's: refuse a home that someone else could rearrange.

llama-runtime deletes things in its home (leftovers, old runtimes) and runs
the binary its pointer names. So:

* a **subdirectory** (``runtimes/``, ``staging/`` …) that is a symlink is
  refused: clean-up would act behind it, on the user's own files (issue 12,
  finding 5). Moving the whole home (``--home``/``LLAMA_RUNTIME_HOME``, or a
  symlink *as* the home) is the supported way to use a bigger disk;
* a home or subdirectory **owned by another user** is refused: that user can
  swap the runtime our apps run;
* a home or subdirectory **writable by every user** is refused, not merely
  warned about: any local account could plant a runtime and a pointer, and
  the apps (or a root cron job) would run that binary. A warning on stderr of
  a scheduled job is read by nobody, so it protects nobody. Group-writable is
  accepted: with per-user groups (the default umask 002 of many distributions)
  it is normal and grants no one else anything.

The checks use ``lstat`` on the subdirectories (never following a link) and
are POSIX only: Windows has no mode bits or uids of this kind.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

from llama_runtime.runtime.errors import UserInputError

__all__ = ["UnsafeHomeError", "check_home"]

_MOVE_HINT = (
    "Point --home (or LLAMA_RUNTIME_HOME) at a directory you own on the disk you want, "
    "instead of linking directories inside the home."
)


_HOME_HINT = "Point --home (or LLAMA_RUNTIME_HOME) at a directory, or at a path where one may be created."


class UnsafeHomeError(UserInputError):
    """The home, or a directory in it, is not safely the tool's own."""

    code = "unsafe_home"


def check_home(root: Path, subdirs: Iterable[Path]) -> None:
    """Refuse a home that is not safely ours (see the module docstring).

    A home or subdirectory that does not exist yet is fine: it will be created.

    Raises:
        UnsafeHomeError: The home is a file (or under one), a subdirectory is a
            symlink or not a directory, or the home or a subdirectory is owned
            by another user or world-writable.
    """
    if sys.platform == "win32":
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


def _check_owner_and_mode(path: Path, st: os.stat_result, what: str) -> None:
    if st.st_uid != os.geteuid():
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
