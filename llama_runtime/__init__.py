"""llama-runtime: keep a machine's llama.cpp runtime current, verified and rollback-safe.

This module is the public, stable API for apps that embed llama-runtime, in 42 names:

* :class:`RuntimeUpdater`, the one front door, built from arguments or from :class:`Settings`;
  its managed llama-server (:class:`RuntimeServer`) and its jobs (:class:`UpdateJob`, :class:`JobState`);
* the results an app reads (each a frozen dataclass whose ``to_json()`` is the CLI's ``--json``
  object of the same verb) and :class:`InstalledRuntime`, the runtime they name;
* the seams an app may implement or pass (:class:`ServerControl`, :class:`Clock`,
  :data:`ProcessRunner`, :class:`BuildSource`, a :class:`Progress` callback) and the inference gate
  (:class:`GatePolicy`, :func:`probe_inference`, :func:`load_gate_settings`, :func:`save_gate_settings`);
* :class:`Vocabulary` (the words a front end offers and checks) and :func:`configure_logging`;
* the error categories an app catches, rooted at :class:`LlamaRuntimeError`.

Two public modules complete it: :mod:`llama_runtime.types` (the parts of results, for annotations)
and :mod:`llama_runtime.errors` (the whole exception tree). Their names also resolve here, so code
that imported them from ``llama_runtime`` keeps working, but they are not listed in ``__all__``.
Everything under ``llama_runtime.updater`` and ``llama_runtime.runtime`` is internal and may change.
Imports are lazy: ``from llama_runtime import RuntimeUpdater`` loads only what start-up needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llama_runtime._version import __version__

if TYPE_CHECKING:
    from llama_runtime.errors import *  # noqa: F403 - the finer error classes resolve here too
    from llama_runtime.runtime.binary import ProcessRunner
    from llama_runtime.runtime.clock import Clock
    from llama_runtime.runtime.errors import (
        BackendUnavailableError,
        BusyError,
        CancelledError,
        CorruptStateError,
        DiskSpaceError,
        IntegrityError,
        LlamaRuntimeError,
        LocalError,
        RemoteError,
        UserInputError,
        VerificationError,
    )
    from llama_runtime.runtime.inference import probe_inference
    from llama_runtime.runtime.layout import InstalledRuntime
    from llama_runtime.runtime.server import ServerControl
    from llama_runtime.types import *  # noqa: F403 - the parts of results resolve here too
    from llama_runtime.updater.activate.attempts import UpdateOutcome
    from llama_runtime.updater.api.check import CheckResult
    from llama_runtime.updater.api.inventory import ListResult, StatusResult
    from llama_runtime.updater.api.job_store import JobState
    from llama_runtime.updater.api.jobs import UpdateJob
    from llama_runtime.updater.api.manage import (
        DoctorResult,
        GcResult,
        PinResult,
        PlanResult,
        RemoveResult,
        RollbackResult,
    )
    from llama_runtime.updater.api.ready import EnsureResult
    from llama_runtime.updater.api.server import RuntimeServer, ServerReport, ServerStopped
    from llama_runtime.updater.api.service import RuntimeUpdater
    from llama_runtime.updater.api.vocabulary import Vocabulary
    from llama_runtime.updater.config import GatePolicy, Settings
    from llama_runtime.updater.logs import configure_logging
    from llama_runtime.updater.progress import Progress
    from llama_runtime.updater.sources.source import BuildSource
    from llama_runtime.updater.verify.gate import load_gate_settings, save_gate_settings

#: Public name -> the module that defines it. Loaded on first attribute access.
_EXPORTS: dict[str, str] = {
    "BackendUnavailableError": "llama_runtime.runtime.errors",
    "BusyError": "llama_runtime.runtime.errors",
    "CancelledError": "llama_runtime.runtime.errors",
    "CheckResult": "llama_runtime.updater.api.check",
    "Clock": "llama_runtime.runtime.clock",
    "CorruptStateError": "llama_runtime.runtime.errors",
    "DiskSpaceError": "llama_runtime.runtime.errors",
    "DoctorResult": "llama_runtime.updater.api.manage",
    "EnsureResult": "llama_runtime.updater.api.ready",
    "GatePolicy": "llama_runtime.updater.config",
    "GcResult": "llama_runtime.updater.api.manage",
    "InstalledRuntime": "llama_runtime.runtime.layout",
    "IntegrityError": "llama_runtime.runtime.errors",
    "JobState": "llama_runtime.updater.api.job_store",
    "ListResult": "llama_runtime.updater.api.inventory",
    "LlamaRuntimeError": "llama_runtime.runtime.errors",
    "LocalError": "llama_runtime.runtime.errors",
    "PinResult": "llama_runtime.updater.api.manage",
    "PlanResult": "llama_runtime.updater.api.manage",
    "ProcessRunner": "llama_runtime.runtime.binary",
    "Progress": "llama_runtime.updater.progress",
    "BuildSource": "llama_runtime.updater.sources.source",
    "RemoteError": "llama_runtime.runtime.errors",
    "RemoveResult": "llama_runtime.updater.api.manage",
    "RollbackResult": "llama_runtime.updater.api.manage",
    "RuntimeServer": "llama_runtime.updater.api.server",
    "RuntimeUpdater": "llama_runtime.updater.api.service",
    "ServerControl": "llama_runtime.runtime.server",
    "ServerReport": "llama_runtime.updater.api.server",
    "ServerStopped": "llama_runtime.updater.api.server",
    "Settings": "llama_runtime.updater.config",
    "StatusResult": "llama_runtime.updater.api.inventory",
    "UpdateJob": "llama_runtime.updater.api.jobs",
    "UpdateOutcome": "llama_runtime.updater.activate.attempts",
    "UserInputError": "llama_runtime.runtime.errors",
    "VerificationError": "llama_runtime.runtime.errors",
    "Vocabulary": "llama_runtime.updater.api.vocabulary",
    "configure_logging": "llama_runtime.updater.logs",
    "load_gate_settings": "llama_runtime.updater.verify.gate",
    "probe_inference": "llama_runtime.runtime.inference",
    "save_gate_settings": "llama_runtime.updater.verify.gate",
    "__version__": "llama_runtime._version",
}
#: The names of llama_runtime.types and llama_runtime.errors, which resolve here too (not in ``__all__``).
_ALSO: dict[str, str] = {
    **{
        name: "llama_runtime.types"
        for name in (
            "Attempt",
            "Available",
            "DamagedRuntime",
            "DoctorCheck",
            "DownloadPace",
            "ExportResult",
            "FailedBuild",
            "FileRecord",
            "GcItem",
            "InferenceResult",
            "InstallMarker",
            "JobError",
            "JobListener",
            "JobRecords",
            "JobResult",
            "MirrorReport",
            "NotReady",
            "Pin",
            "PlanCandidate",
            "ProcessResult",
            "ProgressCallback",
            "Promotion",
            "ProvenanceSettings",
            "PushReport",
            "Ready",
            "RuntimeEntry",
            "SandboxSupport",
            "ServerOverride",
            "SkippedBuild",
            "SmokeReport",
            "Speed",
            "SwitchReport",
            "TrialInfo",
        )
    },
    **{
        name: "llama_runtime.errors"
        for name in (
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
        )
    },
}

__all__ = [
    "BackendUnavailableError",
    "BuildSource",
    "BusyError",
    "CancelledError",
    "CheckResult",
    "Clock",
    "CorruptStateError",
    "DiskSpaceError",
    "DoctorResult",
    "EnsureResult",
    "GatePolicy",
    "GcResult",
    "InstalledRuntime",
    "IntegrityError",
    "JobState",
    "ListResult",
    "LlamaRuntimeError",
    "LocalError",
    "PinResult",
    "PlanResult",
    "ProcessRunner",
    "Progress",
    "RemoteError",
    "RemoveResult",
    "RollbackResult",
    "RuntimeServer",
    "RuntimeUpdater",
    "ServerControl",
    "ServerReport",
    "ServerStopped",
    "Settings",
    "StatusResult",
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
    module = _EXPORTS.get(name) or _ALSO.get(name)
    if module is None:
        raise AttributeError(f"module 'llama_runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
