"""A CUDA companion is fetched once: an installed runtime's verified copy serves the next build.

Upstream's Linux CUDA builds ship with every build a ~594 MB
``cudart-llama-bN-bin-ubuntu-cuda-<v>-<arch>.tar.gz``: NVIDIA's redistributable
CUDA runtime for that CUDA version, repacked under a new top directory, so its
digest changes every build (b11130 ``edad9908…``, b11425 ``efe82ad6…``) and the
digest cache never hits (the Releases API's asset digests of ggml-org/llama.cpp
b11130 and b11425; Linux CUDA builds since about 2026-09-14, llama.cpp PRs #28186
and #29202; the same shapes are published by tests/upstream_today.py). The
companion is chosen by ``choice.choose._companions``.
A companion whose name names the same platform, CUDA version and archive kind
as one an installed runtime took along is therefore not downloaded: that
runtime's files are reused.

Invariants:

* Only files an install recorded as the companion's (its ``extra_assets``
  entry: ``files`` and ``links`` by path beside ``llama-server``) are reused,
  each matching the size and sha256 the donor's marker recorded for it, hashed now.
* Provenance is the donor's: ``verified`` only when the donor's own install
  verified it; where provenance is required, only such donors serve.
* The new runtime is verified as any install is (device check, completion
  check); when it fails with reused files, the pipeline downloads the fresh
  companion and tries once more before the update fails.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from llama_runtime.runtime.errors import IntegrityError
from llama_runtime.runtime.layout import InstalledRuntime
from llama_runtime.runtime.marker import FileRecord, install_order
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.release.assetnames import parse_asset_name
from llama_runtime.updater.release.release import Asset
from llama_runtime.updater.stage.archive_rules import check_links_inside
from llama_runtime.updater.stage.staged import Staged
from llama_runtime.updater.verify.provenance import Provenance

__all__ = ["ReusedCompanion", "companion_entry", "companion_key", "find_reusable", "place_reused"]

log = get_logger("llama_runtime.companions")

#: Hard links fail with these where a copy still works (another filesystem, no links, no permission).
_COPY_INSTEAD: Final = frozenset({errno.EXDEV, errno.EPERM, errno.EACCES, errno.EMLINK, errno.ENOTSUP, errno.ENOSYS})


@dataclass(frozen=True)
class ReusedCompanion:
    """A companion asset of the new release whose files an installed runtime already holds.

    Attributes:
        asset: The new release's companion (not downloaded).
        donor: The installed runtime whose files serve.
        name: The donor's companion asset name.
        files: The companion's files, by path beside ``llama-server``, as the donor recorded them.
        links: Its symlinks, by path beside ``llama-server``, and their targets.
    """

    asset: Asset
    donor: InstalledRuntime
    name: str
    files: dict[str, FileRecord]
    links: dict[str, str]

    def provenance(self) -> Provenance:
        """The donor's provenance, said of these files."""
        status = self.donor.marker.provenance.get("status")
        reason = f"files reused from {self.donor.marker.tag}'s install of {self.name}, whose provenance was {status}"
        if status == "verified":
            return Provenance("verified", reason)
        return Provenance("absent" if status == "absent" else "unverified", reason)

    def facts_entry(self) -> dict[str, object]:
        """The new marker's ``extra_assets`` entry: the asset named, and where its files came from.

        The donor's recorded attestation of the archive travels with it, so an
        export that carries that archive can be judged against its own bundle.
        """
        return {
            "name": self.asset.name,
            "size": self.asset.size,
            "sha256": self.asset.sha256,
            "from": self.donor.marker.tag,
            "from_asset": self.name,
            **companion_entry(self.files, self.links),
            **self._donor_attestation(),
        }

    def _donor_attestation(self) -> dict[str, object]:
        for entry in self.donor.marker.extra_assets:
            recorded = entry.get("provenance")
            if entry.get("name") == self.name and isinstance(recorded, dict):
                return {"provenance": recorded}
        return {}


def companion_key(name: str) -> tuple[str, str, str] | None:
    """What makes two companions the same runtime libraries: platform, CUDA version, archive kind."""
    info = parse_asset_name(name)
    if info is None or not info.is_companion or info.backend_version is None:
        return None
    return (info.platform, info.backend_version, info.archive)


def companion_entry(files: Mapping[str, FileRecord], links: Mapping[str, str]) -> dict[str, object]:
    """The ``files``/``links`` keys an ``extra_assets`` entry records (paths beside ``llama-server``)."""
    return {
        "files": {rel: {"size": r.size, "sha256": r.sha256} for rel, r in sorted(files.items())},
        "links": dict(sorted(links.items())),
    }


def find_reusable(
    assets: Sequence[Asset],
    runtimes: Iterable[InstalledRuntime],
    digest: Callable[[Path], str],
    *,
    require_verified: bool,
) -> list[ReusedCompanion]:
    """The companions among ``assets`` an installed runtime holds intact (newest donor first).

    Args:
        assets: The choice's companion assets.
        runtimes: Installed runtimes (donors).
        digest: A file's sha256 (``HomeSnapshot.sha256``).
        require_verified: Only donors whose provenance was verified (``--require-provenance``).
    """
    donors = sorted(runtimes, key=lambda r: (install_order(r.marker), r.name), reverse=True)
    found: list[ReusedCompanion] = []
    for asset in assets:
        key = companion_key(asset.name)
        if key is None:
            continue
        for donor in donors:
            if require_verified and donor.marker.provenance.get("status") != "verified":
                continue
            reuse = _from_donor(asset, key, donor, digest)
            if reuse is not None:
                found.append(reuse)
                break
    return found


def _from_donor(
    asset: Asset, key: tuple[str, str, str], donor: InstalledRuntime, digest: Callable[[Path], str]
) -> ReusedCompanion | None:
    for entry in donor.marker.extra_assets:
        name = entry.get("name")
        if not isinstance(name, str) or companion_key(name) != key:
            continue
        parsed = _recorded(entry)
        if parsed is not None and _intact(donor, parsed[0], digest):
            return ReusedCompanion(asset, donor, name, *parsed)
    return None


def _recorded(entry: Mapping[str, Any]) -> tuple[dict[str, FileRecord], dict[str, str]] | None:
    """The entry's files and links; ``None`` for entries written before they were recorded, or damaged."""
    files, links = entry.get("files"), entry.get("links", {})
    if not isinstance(files, dict) or not files or not isinstance(links, dict):
        return None
    records: dict[str, FileRecord] = {}
    for rel, info in files.items():
        if not _safe(rel) or not isinstance(info, dict):
            return None
        size, sha = info.get("size"), info.get("sha256")
        if type(size) is not int or not isinstance(sha, str):
            return None
        records[rel] = FileRecord(size, sha)
    if not all(_safe(rel) and isinstance(target, str) for rel, target in links.items()):
        return None
    return records, dict(links)


def _safe(rel: object) -> bool:
    """A path beside ``llama-server`` that stays there (a tampered marker must not name ``../..``)."""
    return isinstance(rel, str) and bool(rel) and not rel.startswith(("/", "\\")) and ".." not in rel.split("/")


def _intact(donor: InstalledRuntime, files: Mapping[str, FileRecord], digest: Callable[[Path], str]) -> bool:
    """Every file is what the donor's marker recorded at its install: same record, same bytes now."""
    bin_dir = donor.binary.parent
    for rel, record in files.items():
        path = bin_dir / rel
        try:
            recorded = donor.marker.files.get(path.relative_to(donor.path).as_posix())
            if recorded != record or path.is_symlink() or path.stat().st_size != record.size:
                return False
            if digest(path) != record.sha256:
                log.warning("companion file damaged; not reused", path=str(path))
                return False
        except (OSError, ValueError):
            return False
    return True


def place_reused(reused: ReusedCompanion, staged: Staged) -> tuple[dict[str, FileRecord], dict[str, str]]:
    """Put the donor's companion files beside the staged ``llama-server`` (hard links, else copies).

    Returns:
        The records of the files placed and the links made, by their path in the staging directory.

    Raises:
        IntegrityError: A companion file would overwrite one of the main archive.
    """
    bin_dir, source_dir = staged.binary.parent, reused.donor.binary.parent
    records: dict[str, FileRecord] = {}
    links: dict[str, str] = {}
    for rel, record in reused.files.items():
        target = _free(bin_dir / rel, reused)
        try:
            os.link(source_dir / rel, target)
        except OSError as exc:
            if exc.errno not in _COPY_INSTEAD:
                raise
            shutil.copy2(source_dir / rel, target)
        records[target.relative_to(staged.directory).as_posix()] = record
    for rel, pointee in reused.links.items():
        target = _free(bin_dir / rel, reused)
        os.symlink(pointee, target)
        links[target.relative_to(staged.directory).as_posix()] = pointee
    check_links_inside(staged.directory, links, reused.name)
    return records, links


def _free(target: Path, reused: ReusedCompanion) -> Path:
    if target.exists() or target.is_symlink():
        raise IntegrityError(f"{reused.name} (reused from {reused.donor.marker.tag}) would overwrite {target.name}.")
    target.parent.mkdir(parents=True, exist_ok=True)
    return target
