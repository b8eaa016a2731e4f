"""The JSON install marker: what a runtime directory holds and how it got there.

Invariants:

* The marker is the last file written into a staged runtime, atomically
  (:func:`runtime.fsutil.write_record`), before activation. A directory
  without a valid marker is not an installed runtime.
* The reader tolerates unknown extra fields (a newer version may add some),
  but a marker whose backend this version does not know is refused with
  :class:`ForeignMarkerError`: its backend is never silently re-detected.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from llama_runtime.runtime.errors import CorruptStateError, ForeignMarkerError, UnknownBackendError
from llama_runtime.runtime.fsutil import MAX_RECORD_BYTES, parse_record, read_regular, sha256_file, write_record

__all__ = [
    "CONCRETE_BACKENDS",
    "LEVELS",
    "MARKER_NAME",
    "SCHEMA_VERSION",
    "FileRecord",
    "ForeignMarkerError",
    "InstallMarker",
    "Level",
    "file_problems",
    "install_order",
    "marker_path",
    "parse_marker",
    "provenance_summary",
    "read_marker",
    "write_marker",
]


# -- backends: The backend vocabulary: the one place that knows backend names. -----------------------------------

AUTO: Final = "auto"

#: Concrete backends, in the order they are listed to people.
CONCRETE_BACKENDS: Final[tuple[str, ...]] = (
    "cpu",
    "cuda",
    "vulkan",
    "rocm",
    "metal",
    "sycl",
    "openvino",
    "opencl",
    "cann",
)

#: Every valid request: ``auto`` plus the concrete backends.
BACKEND_CHOICES: Final[tuple[str, ...]] = (AUTO, *CONCRETE_BACKENDS)

#: Other spellings people and older tools use for the same backend.
ALIASES: Final[dict[str, str]] = {
    "hip": "rocm",
    "amd": "rocm",
    "cublas": "cuda",
    "nvidia": "cuda",
    "vk": "vulkan",
    "mps": "metal",
    "oneapi": "sycl",
    "ascend": "cann",
    "none": "cpu",
}

#: GPU backends: a build must hold their library, and a host that has such a
#: device must see it in ``--list-devices``.
GPU_BACKENDS: Final[frozenset[str]] = frozenset(
    {"cuda", "vulkan", "rocm", "metal", "sycl", "openvino", "opencl", "cann"}
)

# "cuda12", "cuda-12.4", "rocm7.2": a backend followed by a version line.
_VERSIONED = re.compile(r"^(?P<name>[a-z]+)[-_ ]?(?:cu)?(?P<version>\d+(?:\.\d+)*)$")


def _choices_text(choices: tuple[str, ...] = BACKEND_CHOICES) -> str:
    return ", ".join(choices)


def parse_backend(value: object, *, allow_auto: bool = True, source: str = "") -> str:
    """Normalise a backend name to its canonical spelling.

    Args:
        value: What the caller gave: a flag, an environment value, a marker field.
        allow_auto: Whether ``auto`` is acceptable here (it is not in a marker).
        source: Where the value came from, for the message ("LLAMA_RUNTIME_BACKEND").

    Returns:
        The canonical name, e.g. ``"rocm"`` for ``" HIP "``.

    Raises:
        UnknownBackendError: The name is not known; the message lists the
            valid names and a did-you-mean when one is close.
    """
    choices = BACKEND_CHOICES if allow_auto else CONCRETE_BACKENDS
    raw = value if isinstance(value, str) else repr(value)
    name = raw.strip().lower()
    name = ALIASES.get(name, name)
    if name in choices:
        return name
    where = f" (from {source})" if source else ""
    message = f"Unknown backend '{raw.strip()}'{where}. Choose one of: {_choices_text(choices)}."
    suggestion = suggest_backend(name)
    hint = None
    if suggestion is not None:
        backend, version = suggestion
        message += f" Did you mean '{backend}'?"
        if version is not None and backend == "cuda":
            hint = f"Pick the CUDA line separately: --backend cuda --cuda-version {version}"
        elif version is not None:
            hint = f"Backend versions are chosen from the release; use --backend {backend}"
    raise UnknownBackendError(message, hint=hint)


def suggest_backend(name: str) -> tuple[str, str | None] | None:
    """A close backend name for a typo, with any version line that was glued on.

    Returns:
        ``(backend, version)`` or ``None`` when nothing is close.
    """
    match = _VERSIONED.match(name)
    if match:
        base = ALIASES.get(match["name"], match["name"])
        if base in CONCRETE_BACKENDS:
            return base, match["version"]
    import difflib  # deferred: only a misspelled backend needs it

    close = difflib.get_close_matches(name, [*BACKEND_CHOICES, *ALIASES], n=1, cutoff=0.6)
    if close:
        return ALIASES.get(close[0], close[0]), None
    return None


def is_gpu_backend(backend: str) -> bool:
    """Whether ``backend`` (canonical) drives an accelerator."""
    return backend in GPU_BACKENDS


# -- marker ------------------------------------------------------------------------------------------------------

MARKER_NAME: Final = "llama-runtime.json"
SCHEMA_VERSION: Final = 1
#: Install sequence numbers are counters, never near this; a larger one is not ours.
MAX_SEQUENCE: Final = 2**63 - 1
#: An update tries at most six builds (``updater.activate.attempts``); more entries are not ours.
MAX_ATTEMPTS: Final = 16
#: Each text of a recorded try is one sentence for people; a binary's output can be huge.
MAX_ATTEMPT_TEXT: Final = 1000


@dataclass(frozen=True)
class FileRecord:
    """Size and sha256 of one regular file of a runtime."""

    size: int
    sha256: str


@dataclass(frozen=True)
class InstallMarker:
    """What was installed, from where, and what the binary said about itself.

    ``binary`` and the keys of ``files`` are paths relative to the runtime
    directory, with ``/`` separators. ``tag`` is the build whose binaries
    these are; ``release_version`` the semver release (``v0.3.0``) it was
    installed as, if any; ``version`` what ``--version`` printed, with the
    build number read from it in ``reported_build`` and the outcome of
    comparing it with ``tag`` in ``build_check`` (``verified`` or
    ``unverifiable``). ``channel`` is the stored channel request
    (``stable``/``nightly``; empty for runtimes installed before channels).
    """

    repo: str
    tag: str
    backend: str
    backend_request: str
    asset: str
    size: int
    sha256: str
    digest_verified: bool
    installed_at: str
    binary: str
    version: str = ""
    devices: tuple[str, ...] = ()
    files: dict[str, FileRecord] = field(default_factory=dict)
    source: str = "download"
    extra_assets: tuple[dict[str, Any], ...] = ()
    host: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    #: Inference speeds measured on this machine, per model (see ``runtime.inference``):
    #: model key -> {"prompt_per_second", "predicted_per_second", "args", "measured_at", ...}.
    speeds: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Build provenance: ``status`` (verified/absent/unverified), ``reason``, the signer
    #: when verified, and the verified Sigstore ``bundle`` (so an export re-verifies offline).
    #: Empty for runtimes installed before provenance was checked.
    provenance: dict[str, Any] = field(default_factory=dict)
    #: The home's install counter at install time: "newest" means the highest one
    #: (gc, doctor --repair), whatever the clock said. 0 for older markers.
    sequence: int = 0
    release_version: str | None = None
    channel: str = ""
    reported_build: int | None = None
    build_check: str = ""
    #: The candidate builds the update that installed this runtime tried, in order, this one
    #: last: {"asset", "backend", "outcome", "stage", "reason"} each (``updater.activate.attempts``).
    #: Empty for runtimes installed before updates recorded them.
    attempts: tuple[dict[str, Any], ...] = ()
    #: The build whose install supplied this runtime's CUDA companion files (reused, not
    #: downloaded: ``updater.activate.companions``); empty when they came from their own archive.
    companion_from: str = ""
    #: Why this build serves its requested GPU backend with no device of it (installed with
    #: ``--allow-no-device``); empty when it lists one, or was not asked for by name.
    device_warning: str = ""
    #: What the compute check did before this build was accepted (``updater.verify.compute``): the
    #: model, its answer and time, or ``{"skipped": why}``. Empty for runtimes installed before it.
    compute_check: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """The marker as a JSON-ready dictionary."""
        payload = asdict(self)
        payload["devices"] = list(self.devices)
        payload["extra_assets"] = list(self.extra_assets)
        payload["attempts"] = list(self.attempts)
        return payload


# The commit ``llama-server --version`` names: ``version: 0.6.0-dev (build N, commit abcdef0)``
# or the older ``version: 7000 (abcdef0)`` (the forms updater.verify.verify parses).
_VERSION_COMMIT: Final = r"version:[^(]*\((?:\s*build\s+\d+\s*,\s*commit)?\s*([0-9a-f]{7,40})\s*\)"


def provenance_summary(marker: InstallMarker) -> dict[str, Any]:
    """The contract's ``provenance`` object of a runtime: its status and signer, without the bundle.

    ``build_commit`` is the built commit: the release's ``target_commitish`` when
    it was a commit hash (``build_commit_from: "release"``), else what the
    binary's ``--version`` printed (``"binary"``). The certificate's own commit
    is ``signer_commit``: under ``workflow_run`` that is the publisher's.
    """
    if not isinstance(marker.provenance.get("status"), str):
        summary: dict[str, Any] = {
            "status": "unverified",
            "reason": "not checked: installed before llama-runtime checked provenance",
        }
    else:
        summary = {k: v for k, v in marker.provenance.items() if k != "bundle"}
    if "signer_commit" not in summary and isinstance(summary.get("commit"), str):
        summary["signer_commit"] = summary["commit"]  # markers written before signer_commit existed
    if not isinstance(summary.get("build_commit"), str) and (found := re.search(_VERSION_COMMIT, marker.version)):
        summary["build_commit"], summary["build_commit_from"] = found[1], "binary"
    return summary


def marker_path(runtime_dir: Path) -> Path:
    """Where the marker of ``runtime_dir`` lives."""
    return runtime_dir / MARKER_NAME


def write_marker(runtime_dir: Path, marker: InstallMarker) -> Path:
    """Write the marker atomically and durably; returns its path.

    Raises:
        OSError: The marker could not be written; no partial marker remains.
    """
    path = marker_path(runtime_dir)
    write_record(path, marker.to_json())
    return path


def _field(payload: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path) -> Any:
    value = payload.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise CorruptStateError(
            f"The install marker {path} is damaged: field '{key}' is missing or invalid.",
            hint="Run `llama-runtime doctor --repair` or install the release again.",
        )
    return value


def _files(raw: object, path: Path) -> dict[str, FileRecord]:
    if not isinstance(raw, dict):
        raise CorruptStateError(f"The install marker {path} is damaged: 'files' is not an object.")
    records: dict[str, FileRecord] = {}
    for name, info in raw.items():
        if (
            not isinstance(info, dict)
            or not isinstance(info.get("size"), int)
            or not isinstance(info.get("sha256"), str)
        ):
            raise CorruptStateError(f"The install marker {path} is damaged: entry for '{name}'.")
        records[_inside(str(name), path, "file")] = FileRecord(size=info["size"], sha256=info["sha256"])
    return records


def _speeds(raw: object) -> dict[str, dict[str, Any]]:
    """The speed records; a damaged one is dropped, never fatal (they are measurements, not trust)."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): dict(v) for k, v in raw.items() if isinstance(v, dict)}


def _attempts(raw: object) -> tuple[dict[str, Any], ...]:
    """The recorded tries; a damaged one is dropped, never fatal (a history, not trust), and they are bounded."""
    if not isinstance(raw, list):
        return ()
    kept: list[dict[str, Any]] = []
    for entry in raw[:MAX_ATTEMPTS]:
        if not isinstance(entry, dict):
            continue
        texts = {k: entry.get(k) for k in ("asset", "backend", "outcome", "reason")}
        stage = entry.get("stage")
        if not all(isinstance(v, str) for v in texts.values()) or not (stage is None or isinstance(stage, str)):
            continue
        bounded = {k: str(v)[:MAX_ATTEMPT_TEXT] for k, v in texts.items()}
        kept.append({**bounded, "stage": stage if stage is None else stage[:MAX_ATTEMPT_TEXT]})
    return tuple(kept)


def _inside(rel: str, path: Path, what: str) -> str:
    """A marker path must stay inside its runtime directory (a tampered marker must not name /bin/sh)."""
    parts = rel.replace("\\", "/").split("/")
    if not rel or rel.startswith(("/", "\\")) or ":" in parts[0] or ".." in parts:
        raise CorruptStateError(f"The install marker {path} is damaged: {what} '{rel}' leaves the runtime directory.")
    return rel


def _optional_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_marker(payload: object, path: Path) -> InstallMarker:
    """Validate decoded marker JSON.

    Raises:
        CorruptStateError: Not a marker of a known shape.
        ForeignMarkerError: Written by a newer llama-runtime.
    """
    if not isinstance(payload, dict):
        raise CorruptStateError(f"The install marker {path} is damaged: not a JSON object.")
    schema = payload.get("schema_version")
    if isinstance(schema, int) and schema > SCHEMA_VERSION:
        raise ForeignMarkerError(
            f"The runtime at {path.parent} was installed by a newer llama-runtime "
            f"(marker schema {schema}); this version will not replace it.",
            hint="Upgrade llama-runtime-updater to manage this runtime.",
        )
    backend_raw = _field(payload, "backend", str, path)
    request_raw = _field(payload, "backend_request", str, path)
    try:
        backend = parse_backend(backend_raw, allow_auto=False)
        request = parse_backend(request_raw)
    except UnknownBackendError:
        raise ForeignMarkerError(
            f"The runtime at {path.parent} records backend '{backend_raw}' "
            f"(request '{request_raw}'), which this version of llama-runtime does not know "
            f"(known: {', '.join(BACKEND_CHOICES)}); refusing to replace it.",
            hint="Upgrade llama-runtime-updater, or remove that runtime deliberately.",
        ) from None
    devices = payload.get("devices", [])
    extra = payload.get("extra_assets", [])
    host = payload.get("host", {})
    return InstallMarker(
        repo=_field(payload, "repo", str, path),
        tag=_field(payload, "tag", str, path),
        backend=backend,
        backend_request=request,
        asset=_field(payload, "asset", str, path),
        size=_field(payload, "size", int, path),
        sha256=_field(payload, "sha256", str, path),
        digest_verified=_field(payload, "digest_verified", bool, path),
        installed_at=_field(payload, "installed_at", str, path),
        binary=_inside(_field(payload, "binary", str, path), path, "binary"),
        version=payload.get("version", "") if isinstance(payload.get("version"), str) else "",
        devices=tuple(str(d) for d in devices) if isinstance(devices, list) else (),
        files=_files(payload.get("files", {}), path),
        source=str(payload.get("source", "download")),
        extra_assets=tuple(e for e in extra if isinstance(e, dict)) if isinstance(extra, list) else (),
        host=host if isinstance(host, dict) else {},
        reason=str(payload.get("reason", "")),
        speeds=_speeds(payload.get("speeds", {})),
        provenance=provenance if isinstance(provenance := payload.get("provenance"), dict) else {},
        sequence=_sequence(payload.get("sequence")),
        release_version=_optional_str(payload.get("release_version")),
        channel=str(payload.get("channel") or ""),
        reported_build=_optional_int(payload.get("reported_build")),
        build_check=str(payload.get("build_check") or ""),
        attempts=_attempts(payload.get("attempts")),
        companion_from=str(payload.get("companion_from") or ""),
        device_warning=str(payload.get("device_warning") or "")[:_MAX_DEVICE_WARNING_CHARS],
        compute_check=compute if isinstance(compute := payload.get("compute_check"), dict) else {},
        schema_version=schema if isinstance(schema, int) else SCHEMA_VERSION,
    )


#: One sentence for people; a longer one is not ours.
_MAX_DEVICE_WARNING_CHARS: Final = 500


def _sequence(raw: object) -> int:
    # Markers older than the field (and hostile ones) count as installed before any with one.
    return raw if type(raw) is int and 0 <= raw <= MAX_SEQUENCE else 0


def install_order(marker: InstallMarker) -> tuple[int, str]:
    """Sort key, oldest install first: the home's install sequence, then the (wall-clock) time.

    The sequence is what orders installs of this version and later; a clock that
    was wrong at install time (a box that read 2000-01-01) cannot reorder them.
    """
    return (marker.sequence, marker.installed_at)


def read_marker(runtime_dir: Path) -> InstallMarker:
    """Read and validate the marker of ``runtime_dir``.

    Raises:
        CorruptStateError: Missing, unreadable, not JSON, or not a marker.
        ForeignMarkerError: Written by a newer llama-runtime.
    """
    path = marker_path(runtime_dir)
    try:
        raw = read_regular(path, MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        raise CorruptStateError(
            f"{runtime_dir} has no install marker ({MARKER_NAME}); it is not a complete runtime.",
            hint="Install the release again with `llama-runtime update`.",
        ) from None
    except OSError as exc:
        raise CorruptStateError(f"Cannot read the install marker {path}: {exc.strerror}.") from None
    try:
        payload = parse_record(raw, what=str(path))
    except ValueError:
        raise CorruptStateError(
            f"The install marker {path} is not valid JSON.",
            hint="Run `llama-runtime doctor --repair` or install the release again.",
        ) from None
    return parse_marker(payload, path)


# -- integrity: Is an installed runtime still what its marker records? One check, three levels. ------------------

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
        digest: Computes a file's sha256 (``runtime.layout`` passes one that hashes each file once).

    Returns:
        One sentence fragment per problem (``"bin/llama-server has 0 bytes, expected 6712"``).
    """
    depth = LEVELS.index(level)
    hasher = digest or sha256_file
    problems: list[str] = []
    linked = _LinkedParents(root)
    if not (root / marker.binary).is_file():
        problems.append(f"{marker.binary} is missing")
    for rel, record in marker.files.items():
        path = root / rel
        try:
            # Recorded files are the regular files the extraction wrote, at their real paths: one
            # reached through a link (itself, or a folder above it) is not that file.
            through = linked.first_link(rel)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                st = None
            if through is None and st is not None and stat.S_ISLNK(st.st_mode):
                through = rel
            if through is not None:
                problems.append(f"{rel} is reached through the symbolic link {through}, not recorded as one")
                continue
            if st is None or not stat.S_ISREG(st.st_mode):
                if rel != marker.binary:  # already reported above
                    problems.append(f"{rel} is missing")
                continue
            if depth < 1:
                continue
            size = st.st_size
            if size != record.size:
                problems.append(f"{rel} has {size} bytes, expected {record.size}")
            elif (depth >= 2 or (hash_binary and rel == marker.binary)) and hasher(path) != record.sha256:
                problems.append(f"{rel} does not match its recorded sha256")
        except OSError as exc:
            problems.append(f"{rel} cannot be read ({exc.strerror or exc})")
    return problems


class _LinkedParents:
    """Which components of recorded paths below ``root`` are symbolic links (each folder looked at once)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._folders: dict[str, bool] = {}

    def _is_link(self, rel: str) -> bool:
        try:
            return stat.S_ISLNK(os.lstat(self.root / rel).st_mode)
        except OSError:
            return False  # missing: the caller reports it

    def first_link(self, rel: str) -> str | None:
        """The first folder above ``rel`` that is a link, or ``None``."""
        parts = rel.split("/")
        for n in range(1, len(parts)):
            folder = "/".join(parts[:n])
            if folder not in self._folders:
                self._folders[folder] = self._is_link(folder)
            if self._folders[folder]:
                return folder
        return None
