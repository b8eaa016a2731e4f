"""The one exception tree of llama-runtime, split by who is at fault.

Every error a user can see derives from :class:`LlamaRuntimeError` and carries
the sentence a person reads (``message``), a stable machine ``code`` and the
CLI ``exit_code`` promised by the command-line contract. Under the root: ``UserInputError``
(exit 2), ``LocalError`` (this machine: busy 3, disk 4, corrupt state 6, cancelled 130 …),
``BackendUnavailableError`` (5), ``VerificationError`` (6), ``RemoteError`` (7) and
``IntegrityError`` (8). docs/api.md draws the whole tree, the classes other modules derive
included, and tests/test_docs_contract.py fails when it differs from these classes.

Invariant: raising any of these never changes the active runtime; the code
that raises them is responsible for discarding what it staged first.
"""

from __future__ import annotations

import re
from typing import ClassVar, Final, Literal

__all__ = ["printable"]


# -- errors ------------------------------------------------------------------------------------------------------

Fault = Literal["bug", "user", "local", "remote"]


class LlamaRuntimeError(Exception):
    """Base of every error llama-runtime reports to a caller.

    Args:
        message: One human sentence saying what happened (and what to do).
        hint: Optional next step, shown on its own line to people.
    """

    exit_code: ClassVar[int] = 1
    code: ClassVar[str] = "internal_error"
    fault: ClassVar[Fault] = "bug"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def to_json(self) -> dict[str, object]:
        """The ``error`` object of the CLI contract."""
        payload: dict[str, object] = {"code": self.code, "message": self.message}
        if self.hint:
            payload["hint"] = self.hint
        payload["exit_code"] = self.exit_code
        return payload


class UserInputError(LlamaRuntimeError):
    """Bad input: usage, unknown backend, malformed tag or repo, bad path."""

    exit_code = 2
    code = "bad_input"
    fault = "user"


class UnknownBackendError(UserInputError):
    """A backend name that this version does not know."""

    code = "unknown_backend"


class LocalError(LlamaRuntimeError):
    """Something about this machine prevents the operation."""

    fault = "local"

    @staticmethod
    def from_os_failure(exc: OSError) -> LocalError:
        """The error for an ``OSError`` raised outside the front door: a full disk (exit 4), else a refused file."""
        return os_failure(exc)


class BusyError(LocalError):
    """Another process holds the update lock."""

    exit_code = 3
    code = "busy"


class DiskSpaceError(LocalError):
    """Not enough free space to stage the runtime."""

    exit_code = 4
    code = "disk_full"


class CorruptStateError(LocalError):
    """The pointer, a marker or a runtime directory on disk is unusable."""

    exit_code = 6
    code = "corrupt_state"


class ForeignMarkerError(CorruptStateError):
    """A marker written by a newer llama-runtime (unknown backend or schema)."""

    code = "foreign_marker"


class CancelledError(LocalError):
    """The caller cancelled the job; nothing was activated."""

    exit_code = 130
    code = "cancelled"


class ServerStopError(LocalError):
    """The managed llama-server could not be stopped; its record is kept.

    Args:
        message: The sentence for people.
        reason: Short machine-readable cause (``permission_denied``, ``survived_kill``).
    """

    exit_code = 6
    code = "server_stop_failed"

    def __init__(self, message: str, *, reason: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


class ServerStartError(LocalError):
    """llama-server could not be launched (missing or non-executable binary)."""

    exit_code = 6
    code = "server_start_failed"


class ServerAlreadyRunningError(BusyError):
    """The home already runs a managed llama-server."""

    code = "server_running"


class PortInUseError(BusyError):
    """Another process already listens where llama-server was asked to (exit 3)."""

    code = "port_in_use"


class SwitchError(LocalError):
    """A running server could not be stopped around a switch.

    ``new_still_running`` is true when it was the new runtime's server that
    would not stop: its directory must then be kept.
    """

    exit_code = 6
    code = "switch_failed"
    new_still_running: bool = False


class FileSystemError(LocalError):
    """The operating system refused a file operation (not a bug in llama-runtime)."""

    code = "io_error"

    @classmethod
    def from_os_error(cls, exc: OSError) -> FileSystemError:
        """The sentence for an ``OSError`` no layer below turned into a better error."""
        where = f" ({exc.filename})" if exc.filename else ""
        return cls(
            f"A file operation failed: {exc.strerror or exc}{where}. The active runtime is unchanged.",
            hint="Check permissions and the health of the disk, then try again.",
        )


def os_failure(exc: OSError) -> LocalError:
    """The error for an ``OSError`` no layer below turned into a better one, naming the file.

    A full disk or quota (ENOSPC, EDQUOT) is exit 4 wherever it happens; any
    other refusal of the system is :class:`FileSystemError` (exit 1).
    """
    from llama_runtime.runtime.fsutil import is_disk_full  # deferred: this module is the leaf every layer loads

    if not is_disk_full(exc):
        return FileSystemError.from_os_error(exc)
    where = f"write {exc.filename}" if exc.filename else "write a file"
    return DiskSpaceError(
        f"Not enough disk space to {where}: {exc.strerror or exc}. The active runtime is unchanged.",
        hint="Free some space (`llama-runtime gc` works on a full disk) and try again.",
    )


class BackendUnavailableError(LlamaRuntimeError):
    """No asset for this platform/backend, or the host cannot run it."""

    exit_code = 5
    code = "backend_unavailable"
    fault = "remote"


class MacOSTooOldError(BackendUnavailableError):
    """The build declares a newer minimum macOS than this Mac runs (dyld would refuse it)."""

    code = "macos_too_old"


class NothingActiveError(BackendUnavailableError):
    """No runtime is active, so there is no ``llama-server`` to run (exit 5 per the contract)."""

    code = "nothing_active"


class VerificationError(LlamaRuntimeError):
    """The staged runtime failed verification; the previous one stays active.

    ``stage`` names the check that rejected it (``device check``, ``build check``,
    ``completion check``, ``health check`` …) where the raiser knows it; empty otherwise.
    """

    exit_code = 6
    code = "verification_failed"
    fault = "remote"
    stage: str = ""


class RemoteError(LlamaRuntimeError):
    """GitHub, a mirror or the network failed or answered nonsense."""

    exit_code = 7
    code = "remote_error"
    fault = "remote"


class ReleaseNotFoundError(RemoteError):
    """The release or tag does not exist in the repository."""

    code = "release_not_found"


class ReleaseIncompleteError(RemoteError):
    """The release is still being uploaded: its preferred asset is not complete yet.

    A retryable remote condition (exit 7), never a reason to install a lower backend.
    """

    code = "release_incomplete"


class RateLimitError(RemoteError):
    """The API refused the request because of a rate limit.

    Args:
        message: The sentence for people.
        reset_at: Epoch seconds (UTC) when the limit resets, if known.
        retry_after: Seconds to wait, if the server said so.
    """

    code = "rate_limited"

    def __init__(
        self,
        message: str,
        *,
        reset_at: float | None = None,
        retry_after: float | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.reset_at = reset_at
        self.retry_after = retry_after


class NetworkError(RemoteError):
    """Timeouts, refused connections, resets, truncated bodies, 5xx.

    Args:
        message: The sentence for people.
        retry_after: Seconds the server asked to wait before the next try (its ``Retry-After``), if it did.
    """

    code = "network_error"

    def __init__(self, message: str, *, hint: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, hint=hint)
        self.retry_after = retry_after


class RegistryAuthError(RemoteError):
    """An OCI registry refused the credential or the scope (401, 403), or its credential helper failed."""

    code = "registry_auth"


class IntegrityError(LlamaRuntimeError):
    """The downloaded or supplied bytes cannot be trusted."""

    exit_code = 8
    code = "integrity_error"
    fault = "remote"


class RemoteDataError(IntegrityError):
    """The release server sent data that breaks the rules (a name that is not a plain name)."""

    code = "remote_data_invalid"


class DigestMismatchError(IntegrityError):
    """sha256 of the bytes differs from the published digest."""

    code = "digest_mismatch"


class SizeMismatchError(IntegrityError):
    """The byte count differs from the published size, or exceeds a cap."""

    code = "size_mismatch"


class UnsafeArchiveError(IntegrityError):
    """An archive member would escape the extraction root or is not allowed."""

    code = "unsafe_archive"


class ProvenanceError(IntegrityError):
    """A published build attestation does not verify (signature, trust root, log, subject or signer)."""

    code = "provenance_failed"


class ProvenanceMissingError(IntegrityError):
    """No verified build attestation, and the caller required one."""

    code = "provenance_missing"


# -- text: Text for a terminal: what came from outside is shown, never interpreted. ------------------------------

# C0 controls, DEL and C1 controls (ESC, CSI …): what a terminal would interpret.
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters (ESC, CSI, BEL, CR …) shown as ``\\xNN``.

    Newlines and tabs stay: the text around them is ours.
    """

    def escape(match: re.Match[str]) -> str:
        char = match.group()
        return char if char in "\n\t" else f"\\x{ord(char):02x}"

    return _CONTROL.sub(escape, text)
