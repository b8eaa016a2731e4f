"""``llama-runtime export``: the active runtime and its marker as one bundle (marker first).

The bundle carries only what the marker records (``install-file`` elsewhere
refuses anything else), and appears at its path only when complete.
"""

from __future__ import annotations

import gzip
import os
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from llama_runtime.runtime.errors import CorruptStateError, UserInputError
from llama_runtime.runtime.fsutil import SHARED_FILE_MODE, fsync_directory
from llama_runtime.runtime.layout import Home, InstalledRuntime
from llama_runtime.runtime.marker import MARKER_NAME

__all__ = ["ExportResult", "export_bundle", "unrecorded_files"]

# Write in 1 MiB pieces: few syscalls, bounded memory.
_CHUNK_BYTES: Final[int] = 1024 * 1024
# gzip level of `export`: the one `tar czf` (gzip -6) uses; see _write_bundle.
_EXPORT_COMPRESSLEVEL: Final[int] = 6


@dataclass(frozen=True)
class ExportResult:
    """A bundle written by :func:`export_bundle`."""

    path: Path
    runtime: InstalledRuntime
    size: int

    def to_json(self) -> dict[str, object]:
        """The ``export`` object of the CLI."""
        return {"output": str(self.path), "size": self.size, "runtime": self.runtime.to_json()}


def _bundle_members(runtime_dir: Path) -> Iterator[Path]:
    """Every entry under ``runtime_dir`` except the marker, parents before children."""
    for dirpath, dirnames, filenames in os.walk(runtime_dir):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(dirnames):
            yield base / name
        for name in sorted(filenames):
            path = base / name
            if path.parent != runtime_dir or name != MARKER_NAME:
                yield path


def unrecorded_files(runtime: InstalledRuntime) -> list[str]:
    """Regular files in ``runtime`` that its marker does not record (links and folders are layout).

    A bundle may carry only what the marker records: ``install-file`` elsewhere
    refuses anything else, so export says so first.
    """
    recorded = set(runtime.marker.files)
    strays: list[str] = []
    for path in _bundle_members(runtime.path):
        if path.is_file() and not path.is_symlink():
            rel = path.relative_to(runtime.path).as_posix()
            if rel not in recorded:
                strays.append(rel)
    return strays


def _plain_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _write_bundle(raw: IO[bytes], runtime: InstalledRuntime) -> None:
    """The marker, then every file of ``runtime``, as a gzip'd tar stream.

    gzip level 6 (what ``tar czf`` uses) instead of tarfile's 9: on the real
    72 MB Vulkan build level 9 took 3.6x as long as ``tar czf`` for a bundle
    only 1% smaller (``scripts/bench_export.py``).
    """
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=_EXPORT_COMPRESSLEVEL, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w|", bufsize=_CHUNK_BYTES) as tf,
    ):
        tf.add(runtime.path / MARKER_NAME, arcname=MARKER_NAME, filter=_plain_owner)
        for path in _bundle_members(runtime.path):
            rel = path.relative_to(runtime.path).as_posix()
            tf.add(path, arcname=rel, recursive=False, filter=_plain_owner)


def export_bundle(home: Home, output: Path) -> ExportResult:
    """Write the active runtime and its marker as one ``.tar.gz`` (marker first).

    The bundle appears at ``output`` only when complete (temp file, fsync, rename).

    Raises:
        UserInputError: Nothing is active, or ``output`` cannot be written there.
        CorruptStateError: The active runtime's files differ from its marker.
        BusyError: An update is running.
    """
    from llama_runtime.runtime.lock import UpdateLock
    from llama_runtime.updater.verify.installed import verify_files

    output = output.expanduser().absolute()
    if output.is_dir():
        raise UserInputError(f"--output {output} is a directory; give a file name such as runtime.tar.gz.")
    if not output.parent.is_dir():
        raise UserInputError(f"The directory of --output {output} does not exist.")
    with UpdateLock(home.lock_path).hold_for_reading("export"):
        pointer = home.read_pointer()
        if not pointer.active:
            raise UserInputError("Nothing is active to export; install a runtime first.")
        runtime = home.load(pointer.active)
        problems = verify_files(runtime)
        if problems:
            raise CorruptStateError(
                f"The active runtime {runtime.marker.tag} is damaged ({problems[0]}); refusing to export it.",
                hint="Run `llama-runtime doctor` and reinstall the release.",
            )
        strays = unrecorded_files(runtime)
        if strays:
            shown = ", ".join(strays[:3]) + (f" (and {len(strays) - 3} more)" if len(strays) > 3 else "")
            raise CorruptStateError(
                f"The active runtime {runtime.marker.tag} holds {shown}, which its marker does not record "
                "(written there after the install?); refusing to export it, since no other machine would "
                "accept the bundle.",
                hint=f"Move those files out of {runtime.path} and export again.",
            )
        fd, tmp_name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
        tmp = Path(tmp_name)
        try:
            os.chmod(tmp, SHARED_FILE_MODE)  # a bundle is made to be copied elsewhere
            with os.fdopen(fd, "wb", buffering=_CHUNK_BYTES) as raw:
                _write_bundle(raw, runtime)
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, output)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_directory(output.parent)
    return ExportResult(output, runtime, output.stat().st_size)
