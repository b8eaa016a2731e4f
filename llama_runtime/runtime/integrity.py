"""Is an installed runtime still what its marker records? One check, three levels.

Levels, cheapest first (each includes the ones before it):

* ``stat``: the binary and every recorded file exist as regular files;
* ``size``: every recorded file, the binary included, has its recorded size;
* ``sha256``: every recorded file has its recorded sha256.

``hash_binary`` adds the binary's sha256 to a cheaper level: the binary is
what runs and is a few MB, so the "nothing to do" short-circuits of ``update``,
``use`` and ``install-file`` can afford it where hashing a multi-GB CUDA
runtime would not be cheap.

Invariant: a file the marker records is never exempt. A truncated or rewritten
``llama-server`` is damage at ``size`` (truncated) or with ``hash_binary``
(same size) however the runtime is reached.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

from llama_runtime.runtime.fsutil import sha256_file
from llama_runtime.runtime.marker import InstallMarker

__all__ = ["LEVELS", "Level", "file_problems"]

Level = Literal["stat", "size", "sha256"]
LEVELS: Final[tuple[Level, ...]] = ("stat", "size", "sha256")


def file_problems(
    root: Path,
    marker: InstallMarker,
    level: Level = "size",
    *,
    hash_binary: bool = False,
    digest: Callable[[Path], str] | None = None,
) -> list[str]:
    """What differs between the runtime directory ``root`` and ``marker`` (empty: intact).

    Args:
        root: The runtime directory.
        marker: Its (validated) install marker.
        level: How deep to look (see the module docstring).
        hash_binary: Also compare the binary's sha256 when ``level`` is below ``sha256``.
        digest: Computes a file's sha256 (``runtime.snapshot`` passes one that hashes each file once).

    Returns:
        One sentence fragment per problem (``"bin/llama-server has 0 bytes, expected 6712"``).
    """
    depth = LEVELS.index(level)
    hasher = digest or sha256_file
    problems: list[str] = []
    if not (root / marker.binary).is_file():
        problems.append(f"{marker.binary} is missing")
    for rel, record in marker.files.items():
        path = root / rel
        try:
            if not path.is_file():
                if rel != marker.binary:  # already reported above
                    problems.append(f"{rel} is missing")
                continue
            if depth < 1:
                continue
            size = path.stat().st_size
            if size != record.size:
                problems.append(f"{rel} has {size} bytes, expected {record.size}")
            elif (depth >= 2 or (hash_binary and rel == marker.binary)) and hasher(path) != record.sha256:
                problems.append(f"{rel} does not match its recorded sha256")
        except OSError as exc:
            problems.append(f"{rel} cannot be read ({exc.strerror or exc})")
    return problems
