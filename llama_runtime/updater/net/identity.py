"""How the updater names itself to servers: one User-Agent for every request.

``llama-runtime/<version>``, and, unless ``LLAMA_RUNTIME_USER_AGENT_DETAIL=0``, what a fleet's
registry or mirror operator needs to tell clients apart: ``(<os>-<arch>; build <tag>; backend <b>)``
of the runtime active when the command started (set once by the composition root, never a secret).
"""

from __future__ import annotations

import os
import platform
import re
from typing import Final

from llama_runtime._version import __version__

__all__ = ["DETAIL_VAR", "describe_runtime", "user_agent"]

#: ``0`` (or ``false``, ``no``, ``off``) sends ``llama-runtime/<version>`` alone.
DETAIL_VAR: Final = "LLAMA_RUNTIME_USER_AGENT_DETAIL"
_OFF: Final[frozenset[str]] = frozenset({"0", "false", "no", "off"})
# What a product comment may hold (RFC 9110 §5.6.5 ctext, without parentheses and backslash).
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._+\-:/ ]")

_runtime: dict[str, str] = {}


def describe_runtime(*, build: str | None, backend: str | None) -> None:
    """Remember the active runtime's build tag and backend for the User-Agent's detail."""
    _runtime.clear()
    if build:
        _runtime["build"] = _UNSAFE.sub("", build)[:64]
    if backend:
        _runtime["backend"] = _UNSAFE.sub("", backend)[:32]


def user_agent() -> str:
    """``llama-runtime/<version>``, with the platform and active runtime unless the detail is turned off."""
    product = f"llama-runtime/{__version__}"
    if os.environ.get(DETAIL_VAR, "").strip().lower() in _OFF:
        return product
    parts = [f"{platform.system().lower()}-{platform.machine().lower()}"]
    parts += [f"{key} {value}" for key, value in _runtime.items()]
    return f"{product} ({'; '.join(parts)})"
