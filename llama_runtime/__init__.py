"""llama-runtime: keep a machine's llama.cpp runtime current, verified and rollback-safe.

This module is the public, stable API for apps that embed llama-runtime:

* :class:`RuntimeUpdater` and the result types it returns;
* the exception tree, rooted at :class:`LlamaRuntimeError` and split by who is at fault;
* the inference gate: :func:`probe_inference` (the completion check for any llama-server URL),
  :class:`GatePolicy` and :func:`save_gate_settings` (what every later update of a home applies).

Everything under ``llama_runtime.updater`` and ``llama_runtime.runtime`` is internal and may change.
Imports are lazy: ``from llama_runtime import RuntimeUpdater`` loads only what start-up needs.
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
        IntegrityError,
        LlamaRuntimeError,
        LocalError,
        NetworkError,
        ProvenanceError,
        ProvenanceMissingError,
        RateLimitError,
        ReleaseNotFoundError,
        RemoteError,
        SizeMismatchError,
        UnknownBackendError,
        UnsafeArchiveError,
        UserInputError,
        VerificationError,
    )
    from llama_runtime.runtime.inference import InferenceResult, Speed, probe_inference
    from llama_runtime.updater.api.job_handle import UpdateJob
    from llama_runtime.updater.api.job_state import JobState
    from llama_runtime.updater.api.ready import EnsureResult, NotReady, Ready
    from llama_runtime.updater.api.schedule import CheckResult
    from llama_runtime.updater.api.service import RuntimeUpdater
    from llama_runtime.updater.install.gate import GatePolicy
    from llama_runtime.updater.install.gate_store import load_gate_settings, save_gate_settings

_ERRORS = "llama_runtime.runtime.errors"

#: Public name -> the module that defines it. Loaded on first attribute access.
_EXPORTS: dict[str, str] = {
    "CheckResult": "llama_runtime.updater.api.schedule",
    "EnsureResult": "llama_runtime.updater.api.ready",
    "NotReady": "llama_runtime.updater.api.ready",
    "Ready": "llama_runtime.updater.api.ready",
    "JobState": "llama_runtime.updater.api.job_state",
    "RuntimeUpdater": "llama_runtime.updater.api.service",
    "UpdateJob": "llama_runtime.updater.api.job_handle",
    # The inference gate: the check itself, and the settings every later update applies.
    "GatePolicy": "llama_runtime.updater.install.gate",
    "InferenceResult": "llama_runtime.runtime.inference",
    "Speed": "llama_runtime.runtime.inference",
    "probe_inference": "llama_runtime.runtime.inference",
    "load_gate_settings": "llama_runtime.updater.install.gate_store",
    "save_gate_settings": "llama_runtime.updater.install.gate_store",
    **{
        name: _ERRORS
        for name in (
            "BackendUnavailableError",
            "BusyError",
            "CancelledError",
            "CorruptStateError",
            "DigestMismatchError",
            "DiskSpaceError",
            "FileSystemError",
            "IntegrityError",
            "LlamaRuntimeError",
            "LocalError",
            "NetworkError",
            "ProvenanceError",
            "ProvenanceMissingError",
            "RateLimitError",
            "ReleaseNotFoundError",
            "RemoteError",
            "SizeMismatchError",
            "UnknownBackendError",
            "UnsafeArchiveError",
            "UserInputError",
            "VerificationError",
        )
    },
}

__all__ = [
    "BackendUnavailableError",
    "BusyError",
    "CancelledError",
    "CheckResult",
    "CorruptStateError",
    "DigestMismatchError",
    "DiskSpaceError",
    "EnsureResult",
    "FileSystemError",
    "GatePolicy",
    "InferenceResult",
    "IntegrityError",
    "JobState",
    "LlamaRuntimeError",
    "LocalError",
    "NetworkError",
    "NotReady",
    "ProvenanceError",
    "ProvenanceMissingError",
    "RateLimitError",
    "Ready",
    "ReleaseNotFoundError",
    "RemoteError",
    "RuntimeUpdater",
    "SizeMismatchError",
    "Speed",
    "UnknownBackendError",
    "UnsafeArchiveError",
    "UpdateJob",
    "UserInputError",
    "VerificationError",
    "load_gate_settings",
    "probe_inference",
    "save_gate_settings",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'llama_runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
