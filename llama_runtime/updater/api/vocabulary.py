"""The words llama-runtime takes and gives, for a front end: the CLI, an app's settings page.

What a person may choose (backends, channels, platforms), the checks of what a person
types (a tag, a duration, a CUDA version, a slowdown, a model file), and how sizes and
foreign text are shown to people. :class:`RuntimeUpdater` checks the same again; a front
end checks first to refuse a typo before any work starts, in the same words.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from llama_runtime.updater.config import GatePolicy

__all__ = ["Vocabulary"]

T = TypeVar("T")


class _Defined(Generic[T]):
    """A class attribute read from the module that defines it, on first use (output stays light to import)."""

    def __init__(self, module: str, name: str) -> None:
        self._where = (module, name)

    def __get__(self, instance: object, owner: type | None = None) -> T:
        value: T = getattr(importlib.import_module(self._where[0]), self._where[1])
        return value


class Vocabulary:
    """The choices a front end offers and the checks of what people type; never instantiated.

    Attributes:
        BACKENDS: Every backend request, ``auto`` first (``--backend``).
        CONCRETE_BACKENDS: The backends an asset can have (no ``auto``; mirror filters).
        CHANNELS: ``stable`` and ``nightly`` (``--channel``).
        PLATFORMS: The ``OS-ARCH`` names a plan or a mirror takes (``--platform``).
    """

    BACKENDS = _Defined[tuple[str, ...]]("llama_runtime.runtime.marker", "BACKEND_CHOICES")
    CONCRETE_BACKENDS = _Defined[tuple[str, ...]]("llama_runtime.runtime.marker", "CONCRETE_BACKENDS")
    CHANNELS = _Defined[tuple[str, ...]]("llama_runtime.updater.release.channel", "CHANNELS")
    PLATFORMS = _Defined[tuple[str, ...]]("llama_runtime.updater.choice.host", "PLATFORMS")

    def __init__(self) -> None:
        raise TypeError("Vocabulary is a namespace; use its class attributes and static methods.")

    @staticmethod
    def tag(text: str) -> str:
        """A build tag as a person typed it, checked (``b7000``; ``TAG@sha256:<hex>`` pins a manifest).

        Raises:
            UserInputError: Malformed, or a bare number such as ``7000`` (did you mean ``b7000``?).
        """
        from llama_runtime.updater.api.manage import user_tag

        return user_tag(text)

    @staticmethod
    def duration(text: str) -> float:
        """Seconds in ``"90"``, ``"30s"``, ``"10m"`` or ``"1.5h"`` (at most 24 hours).

        Raises:
            UserInputError: Not such a duration.
        """
        from llama_runtime.updater.api.check import parse_duration

        return parse_duration(text)

    @staticmethod
    def cuda_version(text: str) -> str:
        """``text`` as a CUDA line (``"12"``, ``"12.4"``), trimmed.

        Raises:
            UserInputError: It is not one.
        """
        from llama_runtime.updater.choice.host import parse_cuda_version

        return parse_cuda_version(text)

    @staticmethod
    def slowdown(text: str) -> float | None:
        """The inference gate's ``20%``, ``20`` or ``off`` as a fraction (0.2), or ``None`` for off.

        Raises:
            UserInputError: Anything else.
        """
        from llama_runtime.updater.verify.gate import parse_slowdown

        return parse_slowdown(text)

    @staticmethod
    def gguf(path: str | Path) -> Path:
        """``path`` as an absolute path to a GGUF file (a smoke model).

        Raises:
            UserInputError: It is missing or not a GGUF file.
        """
        from llama_runtime.updater.verify.gate import validate_gguf

        return validate_gguf(path)

    @staticmethod
    def gate_json(policy: GatePolicy) -> dict[str, object]:
        """The inference gate's settings as the stored (and ``gate --json``) object."""
        from llama_runtime.updater.verify.gate import gate_settings_json

        return gate_settings_json(policy)

    @staticmethod
    def is_registry(url: str) -> bool:
        """Whether ``url`` names an OCI registry (``oci://`` or ``oci+http://``) rather than a directory."""
        from llama_runtime.updater.net.origin import is_oci_url

        return is_oci_url(url)

    @staticmethod
    def size(n_bytes: int) -> str:
        """``n_bytes`` for people: ``512 B``, ``1.5 MB``, ``2.3 GB`` (decimal units)."""
        from llama_runtime.updater.fetch.cache import human_size

        return human_size(n_bytes)

    @staticmethod
    def printable(text: str) -> str:
        """``text`` (a server's or a file's words) with control characters shown as ``\\xNN``; newlines stay."""
        from llama_runtime.runtime.errors import printable

        return printable(text)
