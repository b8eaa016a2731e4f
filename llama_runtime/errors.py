"""The whole exception tree of llama-runtime, rooted at :class:`LlamaRuntimeError`.

Every exception a public method can raise is one of these; each carries ``code``, ``message``,
``hint``, ``exit_code`` (the CLI's) and ``fault`` (who is at fault). The categories an app
usually catches (``UserInputError``, ``BusyError``, ``RemoteError``, ``IntegrityError``,
``VerificationError`` …) are also exported from ``llama_runtime`` itself; the finer classes live
here: ``from llama_runtime.errors import RateLimitError``. docs/api.md draws the tree.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llama_runtime.runtime.errors import (
        BackendUnavailableError,
        BusyError,
        CancelledError,
        CorruptStateError,
        DigestMismatchError,
        DiskSpaceError,
        FileSystemError,
        ForeignMarkerError,
        IntegrityError,
        LlamaRuntimeError,
        LocalError,
        MacOSTooOldError,
        NetworkError,
        NothingActiveError,
        PortInUseError,
        ProvenanceError,
        ProvenanceMissingError,
        RateLimitError,
        RegistryAuthError,
        ReleaseIncompleteError,
        ReleaseNotFoundError,
        RemoteDataError,
        RemoteError,
        ServerAlreadyRunningError,
        ServerStartError,
        ServerStopError,
        SizeMismatchError,
        SwitchError,
        UnknownBackendError,
        UnsafeArchiveError,
        UserInputError,
        VerificationError,
    )
    from llama_runtime.runtime.layout import UnsafeHomeError
    from llama_runtime.updater.activate.attempts import CandidatesFailedError
    from llama_runtime.updater.sources.source import DirectoryListingError
    from llama_runtime.updater.verify.signer import SigstoreMissingError

#: Public name -> the module that defines it. Loaded on first attribute access.
_EXPORTS: dict[str, str] = {
    "BackendUnavailableError": "llama_runtime.runtime.errors",
    "BusyError": "llama_runtime.runtime.errors",
    "CancelledError": "llama_runtime.runtime.errors",
    "CandidatesFailedError": "llama_runtime.updater.activate.attempts",
    "CorruptStateError": "llama_runtime.runtime.errors",
    "DigestMismatchError": "llama_runtime.runtime.errors",
    "DirectoryListingError": "llama_runtime.updater.sources.source",
    "DiskSpaceError": "llama_runtime.runtime.errors",
    "FileSystemError": "llama_runtime.runtime.errors",
    "ForeignMarkerError": "llama_runtime.runtime.errors",
    "IntegrityError": "llama_runtime.runtime.errors",
    "LlamaRuntimeError": "llama_runtime.runtime.errors",
    "LocalError": "llama_runtime.runtime.errors",
    "MacOSTooOldError": "llama_runtime.runtime.errors",
    "NetworkError": "llama_runtime.runtime.errors",
    "NothingActiveError": "llama_runtime.runtime.errors",
    "PortInUseError": "llama_runtime.runtime.errors",
    "ProvenanceError": "llama_runtime.runtime.errors",
    "ProvenanceMissingError": "llama_runtime.runtime.errors",
    "RateLimitError": "llama_runtime.runtime.errors",
    "RegistryAuthError": "llama_runtime.runtime.errors",
    "ReleaseIncompleteError": "llama_runtime.runtime.errors",
    "ReleaseNotFoundError": "llama_runtime.runtime.errors",
    "RemoteDataError": "llama_runtime.runtime.errors",
    "RemoteError": "llama_runtime.runtime.errors",
    "ServerAlreadyRunningError": "llama_runtime.runtime.errors",
    "ServerStartError": "llama_runtime.runtime.errors",
    "ServerStopError": "llama_runtime.runtime.errors",
    "SigstoreMissingError": "llama_runtime.updater.verify.signer",
    "SizeMismatchError": "llama_runtime.runtime.errors",
    "SwitchError": "llama_runtime.runtime.errors",
    "UnknownBackendError": "llama_runtime.runtime.errors",
    "UnsafeArchiveError": "llama_runtime.runtime.errors",
    "UnsafeHomeError": "llama_runtime.runtime.layout",
    "UserInputError": "llama_runtime.runtime.errors",
    "VerificationError": "llama_runtime.runtime.errors",
}

__all__ = [
    "BackendUnavailableError",
    "BusyError",
    "CancelledError",
    "CandidatesFailedError",
    "CorruptStateError",
    "DigestMismatchError",
    "DirectoryListingError",
    "DiskSpaceError",
    "FileSystemError",
    "ForeignMarkerError",
    "IntegrityError",
    "LlamaRuntimeError",
    "LocalError",
    "MacOSTooOldError",
    "NetworkError",
    "NothingActiveError",
    "PortInUseError",
    "ProvenanceError",
    "ProvenanceMissingError",
    "RateLimitError",
    "RegistryAuthError",
    "ReleaseIncompleteError",
    "ReleaseNotFoundError",
    "RemoteDataError",
    "RemoteError",
    "ServerAlreadyRunningError",
    "ServerStartError",
    "ServerStopError",
    "SigstoreMissingError",
    "SizeMismatchError",
    "SwitchError",
    "UnknownBackendError",
    "UnsafeArchiveError",
    "UnsafeHomeError",
    "UserInputError",
    "VerificationError",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
