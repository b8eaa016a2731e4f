"""The parts of llama-runtime's results: what the results an app reads hold, by name.

An app reads these as attributes of the results ``RuntimeUpdater`` returns (``status().installed``
holds :class:`RuntimeEntry` values, ``update().outcome.attempts`` :class:`Attempt` values …) and
rarely names them; they are here for type annotations and ``isinstance``:
``from llama_runtime.types import RuntimeEntry``. Each is frozen; ``to_json()`` is its CLI object.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llama_runtime.runtime.binary import ProcessResult
    from llama_runtime.runtime.failed_builds import FailedBuild, SkippedBuild
    from llama_runtime.runtime.inference import InferenceResult, Speed
    from llama_runtime.runtime.marker import FileRecord, InstallMarker
    from llama_runtime.runtime.pin import Pin
    from llama_runtime.updater.activate.attempts import Attempt
    from llama_runtime.updater.activate.gc import GcItem
    from llama_runtime.updater.activate.swap import SwitchReport
    from llama_runtime.updater.api.inventory import DamagedRuntime, RuntimeEntry, ServerOverride, TrialInfo
    from llama_runtime.updater.api.job_store import JobError, JobListener, JobResult
    from llama_runtime.updater.api.manage import DoctorCheck, JobRecords, PlanCandidate
    from llama_runtime.updater.api.ready import NotReady, Ready
    from llama_runtime.updater.choice.decide import Available
    from llama_runtime.updater.config import DownloadPace, ProvenanceSettings
    from llama_runtime.updater.offline.export import ExportResult
    from llama_runtime.updater.offline.mirror import MirrorReport
    from llama_runtime.updater.offline.registry_push import Promotion, PushReport
    from llama_runtime.updater.progress import ProgressCallback
    from llama_runtime.updater.verify.smoke import SmokeReport

#: Public name -> the module that defines it. Loaded on first attribute access.
_EXPORTS: dict[str, str] = {
    "Attempt": "llama_runtime.updater.activate.attempts",
    "Available": "llama_runtime.updater.choice.decide",
    "DamagedRuntime": "llama_runtime.updater.api.inventory",
    "DoctorCheck": "llama_runtime.updater.api.manage",
    "DownloadPace": "llama_runtime.updater.config",
    "ExportResult": "llama_runtime.updater.offline.export",
    "FailedBuild": "llama_runtime.runtime.failed_builds",
    "FileRecord": "llama_runtime.runtime.marker",
    "GcItem": "llama_runtime.updater.activate.gc",
    "InferenceResult": "llama_runtime.runtime.inference",
    "InstallMarker": "llama_runtime.runtime.marker",
    "JobError": "llama_runtime.updater.api.job_store",
    "JobListener": "llama_runtime.updater.api.job_store",
    "JobRecords": "llama_runtime.updater.api.manage",
    "JobResult": "llama_runtime.updater.api.job_store",
    "MirrorReport": "llama_runtime.updater.offline.mirror",
    "NotReady": "llama_runtime.updater.api.ready",
    "Pin": "llama_runtime.runtime.pin",
    "PlanCandidate": "llama_runtime.updater.api.manage",
    "ProcessResult": "llama_runtime.runtime.binary",
    "ProgressCallback": "llama_runtime.updater.progress",
    "Promotion": "llama_runtime.updater.offline.registry_push",
    "ProvenanceSettings": "llama_runtime.updater.config",
    "PushReport": "llama_runtime.updater.offline.registry_push",
    "Ready": "llama_runtime.updater.api.ready",
    "RuntimeEntry": "llama_runtime.updater.api.inventory",
    "ServerOverride": "llama_runtime.updater.api.inventory",
    "SkippedBuild": "llama_runtime.runtime.failed_builds",
    "SmokeReport": "llama_runtime.updater.verify.smoke",
    "Speed": "llama_runtime.runtime.inference",
    "SwitchReport": "llama_runtime.updater.activate.swap",
    "TrialInfo": "llama_runtime.updater.api.inventory",
}

__all__ = [
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
    "ServerOverride",
    "SkippedBuild",
    "SmokeReport",
    "Speed",
    "SwitchReport",
    "TrialInfo",
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
