"""llama-runtime: keep a machine's llama.cpp runtime current, verified and rollback-safe.

This module is the public, stable API for apps that embed llama-runtime:

* :class:`RuntimeUpdater` and the result types it returns (each a frozen dataclass whose
  ``to_json()`` is the CLI's ``--json`` object of the same verb), with every type they hold;
* the exception tree, rooted at :class:`LlamaRuntimeError` and split by who is at fault:
  every exception a public method can raise is exported here;
* the seams an app may pass to :class:`RuntimeUpdater` (:class:`ServerControl`, :class:`Clock`,
  :data:`ProcessRunner`, :class:`ReleaseSource`);
* the inference gate: :func:`probe_inference` (the completion check for any llama-server URL),
  :class:`GatePolicy` and :func:`save_gate_settings` (what every later update of a home applies).

Everything under ``llama_runtime.updater`` and ``llama_runtime.runtime`` is internal and may change.
Imports are lazy: ``from llama_runtime import RuntimeUpdater`` loads only what start-up needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llama_runtime._version import __version__

if TYPE_CHECKING:
    from llama_runtime.runtime.binary import ProcessResult, ProcessRunner
    from llama_runtime.runtime.clock import Clock
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
    from llama_runtime.runtime.failed_builds import FailedBuild, SkippedBuild
    from llama_runtime.runtime.inference import InferenceResult, Speed, probe_inference
    from llama_runtime.runtime.layout import InstalledRuntime, UnsafeHomeError
    from llama_runtime.runtime.marker import FileRecord, InstallMarker
    from llama_runtime.runtime.pin import Pin
    from llama_runtime.runtime.server import ServerControl
    from llama_runtime.updater.activate.attempts import Attempt, CandidatesFailedError, UpdateOutcome
    from llama_runtime.updater.activate.gc import GcItem
    from llama_runtime.updater.activate.swap import SwitchReport
    from llama_runtime.updater.api.check import CheckResult
    from llama_runtime.updater.api.inventory import (
        DamagedRuntime,
        ListResult,
        RuntimeEntry,
        ServerOverride,
        StatusResult,
        TrialInfo,
    )
    from llama_runtime.updater.api.job_store import JobError, JobListener, JobResult, JobState
    from llama_runtime.updater.api.jobs import UpdateJob
    from llama_runtime.updater.api.manage import (
        DoctorCheck,
        DoctorResult,
        GcResult,
        JobRecords,
        PinResult,
        PlanCandidate,
        PlanResult,
        RemoveResult,
        RollbackResult,
    )
    from llama_runtime.updater.api.ready import EnsureResult, NotReady, Ready
    from llama_runtime.updater.api.server import RuntimeServer, ServerReport, ServerStopped
    from llama_runtime.updater.api.service import RuntimeUpdater
    from llama_runtime.updater.api.vocabulary import Vocabulary
    from llama_runtime.updater.choice.decide import Available
    from llama_runtime.updater.config import DownloadPace, GatePolicy, ProvenanceSettings, Settings
    from llama_runtime.updater.logs import configure_logging
    from llama_runtime.updater.offline.export import ExportResult
    from llama_runtime.updater.offline.mirror import MirrorReport
    from llama_runtime.updater.offline.registry_push import Promotion, PushReport
    from llama_runtime.updater.progress import Progress, ProgressCallback
    from llama_runtime.updater.sources.source import DirectoryListingError, ReleaseSource
    from llama_runtime.updater.verify.gate import load_gate_settings, save_gate_settings
    from llama_runtime.updater.verify.signer import SigstoreMissingError
    from llama_runtime.updater.verify.smoke import SmokeReport

_ERRORS = "llama_runtime.runtime.errors"

#: Public name -> the module that defines it. Loaded on first attribute access.
_EXPORTS: dict[str, str] = {
    "CheckResult": "llama_runtime.updater.api.check",
    "EnsureResult": "llama_runtime.updater.api.ready",
    "NotReady": "llama_runtime.updater.api.ready",
    "Ready": "llama_runtime.updater.api.ready",
    "JobState": "llama_runtime.updater.api.job_store",
    "JobResult": "llama_runtime.updater.api.job_store",
    "JobError": "llama_runtime.updater.api.job_store",
    "JobRecords": "llama_runtime.updater.api.manage",
    "JobListener": "llama_runtime.updater.api.job_store",
    "RuntimeUpdater": "llama_runtime.updater.api.service",
    "Settings": "llama_runtime.updater.config",
    "DownloadPace": "llama_runtime.updater.config",
    "ProvenanceSettings": "llama_runtime.updater.config",
    "RuntimeServer": "llama_runtime.updater.api.server",
    "ServerReport": "llama_runtime.updater.api.server",
    "ServerStopped": "llama_runtime.updater.api.server",
    "Vocabulary": "llama_runtime.updater.api.vocabulary",
    "configure_logging": "llama_runtime.updater.logs",
    "__version__": "llama_runtime._version",
    "UpdateJob": "llama_runtime.updater.api.jobs",
    "DoctorCheck": "llama_runtime.updater.api.manage",
    "DoctorResult": "llama_runtime.updater.api.manage",
    "GcResult": "llama_runtime.updater.api.manage",
    "PinResult": "llama_runtime.updater.api.manage",
    "Pin": "llama_runtime.runtime.pin",
    "PlanCandidate": "llama_runtime.updater.api.manage",
    "PlanResult": "llama_runtime.updater.api.manage",
    "RemoveResult": "llama_runtime.updater.api.manage",
    "RollbackResult": "llama_runtime.updater.api.manage",
    "ExportResult": "llama_runtime.updater.offline.export",
    "MirrorReport": "llama_runtime.updater.offline.mirror",
    "Promotion": "llama_runtime.updater.offline.registry_push",
    "PushReport": "llama_runtime.updater.offline.registry_push",
    "StatusResult": "llama_runtime.updater.api.inventory",
    "ListResult": "llama_runtime.updater.api.inventory",
    "RuntimeEntry": "llama_runtime.updater.api.inventory",
    "DamagedRuntime": "llama_runtime.updater.api.inventory",
    "ServerOverride": "llama_runtime.updater.api.inventory",
    "TrialInfo": "llama_runtime.updater.api.inventory",
    "FailedBuild": "llama_runtime.runtime.failed_builds",
    "SkippedBuild": "llama_runtime.runtime.failed_builds",
    "Available": "llama_runtime.updater.choice.decide",
    "UpdateOutcome": "llama_runtime.updater.activate.attempts",
    "Progress": "llama_runtime.updater.progress",
    "ProgressCallback": "llama_runtime.updater.progress",
    "Attempt": "llama_runtime.updater.activate.attempts",
    "SwitchReport": "llama_runtime.updater.activate.swap",
    "SmokeReport": "llama_runtime.updater.verify.smoke",
    "GcItem": "llama_runtime.updater.activate.gc",
    "InstalledRuntime": "llama_runtime.runtime.layout",
    "InstallMarker": "llama_runtime.runtime.marker",
    "FileRecord": "llama_runtime.runtime.marker",
    "ServerControl": "llama_runtime.runtime.server",
    "ProcessResult": "llama_runtime.runtime.binary",
    "ProcessRunner": "llama_runtime.runtime.binary",
    "Clock": "llama_runtime.runtime.clock",
    "ReleaseSource": "llama_runtime.updater.sources.source",
    "DirectoryListingError": "llama_runtime.updater.sources.source",
    "UnsafeHomeError": "llama_runtime.runtime.layout",
    "CandidatesFailedError": "llama_runtime.updater.activate.attempts",
    "SigstoreMissingError": "llama_runtime.updater.verify.signer",
    "RemoteDataError": "llama_runtime.runtime.errors",
    # The inference gate: the check itself, and the settings every later update applies.
    "GatePolicy": "llama_runtime.updater.config",
    "InferenceResult": "llama_runtime.runtime.inference",
    "Speed": "llama_runtime.runtime.inference",
    "probe_inference": "llama_runtime.runtime.inference",
    "load_gate_settings": "llama_runtime.updater.verify.gate",
    "save_gate_settings": "llama_runtime.updater.verify.gate",
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
            "RemoteError",
            "ServerAlreadyRunningError",
            "ServerStartError",
            "ServerStopError",
            "SizeMismatchError",
            "SwitchError",
            "UnknownBackendError",
            "UnsafeArchiveError",
            "UserInputError",
            "VerificationError",
        )
    },
}

__all__ = [
    "Attempt",
    "Available",
    "BackendUnavailableError",
    "BusyError",
    "CancelledError",
    "CandidatesFailedError",
    "CheckResult",
    "Clock",
    "CorruptStateError",
    "DamagedRuntime",
    "DigestMismatchError",
    "DirectoryListingError",
    "DiskSpaceError",
    "DoctorCheck",
    "DoctorResult",
    "DownloadPace",
    "EnsureResult",
    "ExportResult",
    "FailedBuild",
    "FileRecord",
    "FileSystemError",
    "ForeignMarkerError",
    "GatePolicy",
    "GcItem",
    "GcResult",
    "InferenceResult",
    "InstallMarker",
    "InstalledRuntime",
    "IntegrityError",
    "JobError",
    "JobListener",
    "JobRecords",
    "JobResult",
    "JobState",
    "ListResult",
    "LlamaRuntimeError",
    "LocalError",
    "MacOSTooOldError",
    "MirrorReport",
    "NetworkError",
    "NotReady",
    "NothingActiveError",
    "Pin",
    "PinResult",
    "PlanCandidate",
    "PlanResult",
    "PortInUseError",
    "ProcessResult",
    "ProcessRunner",
    "Progress",
    "ProgressCallback",
    "Promotion",
    "ProvenanceError",
    "ProvenanceMissingError",
    "ProvenanceSettings",
    "PushReport",
    "RateLimitError",
    "Ready",
    "RegistryAuthError",
    "ReleaseIncompleteError",
    "ReleaseNotFoundError",
    "ReleaseSource",
    "RemoteDataError",
    "RemoteError",
    "RemoveResult",
    "RollbackResult",
    "RuntimeEntry",
    "RuntimeServer",
    "RuntimeUpdater",
    "ServerAlreadyRunningError",
    "ServerControl",
    "ServerOverride",
    "ServerReport",
    "ServerStartError",
    "ServerStopError",
    "ServerStopped",
    "Settings",
    "SigstoreMissingError",
    "SizeMismatchError",
    "SkippedBuild",
    "SmokeReport",
    "Speed",
    "StatusResult",
    "SwitchError",
    "SwitchReport",
    "TrialInfo",
    "UnknownBackendError",
    "UnsafeArchiveError",
    "UnsafeHomeError",
    "UpdateJob",
    "UpdateOutcome",
    "UserInputError",
    "VerificationError",
    "Vocabulary",
    "__version__",
    "configure_logging",
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
