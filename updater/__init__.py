"""llama-runtime's updater: getting a llama.cpp release onto this machine.

Imports are lazy so that ``llama-runtime status`` starts fast: the public
names below load their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from updater.jobs import JobState
    from updater.schedule import CheckResult
    from updater.service import EnsureResult, RuntimeUpdater, UpdateJob

__all__ = ["CheckResult", "EnsureResult", "JobState", "RuntimeUpdater", "UpdateJob"]

_EXPORTS: dict[str, str] = {
    "CheckResult": "updater.schedule",
    "EnsureResult": "updater.service",
    "JobState": "updater.jobs",
    "RuntimeUpdater": "updater.service",
    "UpdateJob": "updater.service",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'updater' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
