"""The seams host detection asks through, and one detection pass over them.

Two seams, so tests feed recorded machine profiles and never need a GPU: the
process runner (:mod:`llama_runtime.runtime.runner`) runs probe commands, and
a :class:`FileView` answers file questions. Every probe is time-boxed and
swallows its own failure: a missing or hanging ``nvidia-smi`` means "no NVIDIA
facts", never an exception. Each fact records where it came from
(``sources``) so ``doctor`` and ``plan --explain`` can say why a backend was
or was not picked.
"""

from __future__ import annotations

import ctypes.util
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Protocol

from llama_runtime.runtime.runner import ProcessResult, ProcessRunner, run_process

#: Seconds one probe command may take. nvidia-smi can stall for many seconds on
#: a wedged driver; a slow probe must not hold up an update.
PROBE_TIMEOUT_S: Final[float] = 5.0


class FileView(Protocol):
    """The read-only file-system questions the probes ask."""

    def read_text(self, path: str) -> str | None:
        """File content, or ``None`` when unreadable."""

    def list_dir(self, path: str) -> tuple[str, ...]:
        """Entry names of a directory, empty when it is missing."""

    def exists(self, path: str) -> bool:
        """Whether the path exists."""

    def find_library(self, name: str) -> str | None:
        """``ctypes.util.find_library`` or a test double."""


class RealFiles:
    """:class:`FileView` over the real machine."""

    def read_text(self, path: str) -> str | None:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def list_dir(self, path: str) -> tuple[str, ...]:
        try:
            return tuple(sorted(p.name for p in Path(path).iterdir()))
        except OSError:
            return ()

    def exists(self, path: str) -> bool:
        return Path(path).exists()

    def find_library(self, name: str) -> str | None:
        try:
            return ctypes.util.find_library(name)
        except (OSError, subprocess.SubprocessError):
            return None


def run_probe(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> ProcessResult:
    """The default probe runner: :func:`run_process` reading stdout alone (probes parse it)."""
    return run_process(argv, timeout, env, keep_stderr=False)


class ProbePass:
    """One detection pass: asks each command once, and collects where each fact came from.

    Args:
        run: Runs probe commands.
        env: The environment to read (``CUDA_VISIBLE_DEVICES`` …).
        files: The file-system view.
    """

    def __init__(self, run: ProcessRunner, env: Mapping[str, str], files: FileView) -> None:
        self.run, self.env, self.files = run, env, files
        #: ``(fact, where it came from)`` in the order found.
        self.sources: list[tuple[str, str]] = []
        self._answers: dict[tuple[str, ...], str | None] = {}

    def call(self, *argv: str) -> str | None:
        """The standard output of ``argv``; ``None`` when it is missing, failed or timed out."""
        if argv in self._answers:  # one pass asks each command once (vulkaninfo is slow)
            return self._answers[argv]
        try:
            result = self.run(argv, PROBE_TIMEOUT_S, None)
        except Exception:  # a runner must never break detection
            result = None
        # Missing, not executable, failed or timed out: no answer, an absent fact.
        answer = result.output if result is not None and result.succeeded else None
        self._answers[argv] = answer
        return answer
