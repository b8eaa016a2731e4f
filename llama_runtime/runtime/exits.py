"""What a build's failed run means, in words a person can act on (pure).

A run of ``llama-server`` that dies tells why in two places: the signal that ended it (an
illegal instruction, a segmentation fault) and the last lines it printed (CUDA's "no kernel image
is available", a Vulkan device lost). :func:`exit_meaning` turns both into one sentence that
names the cause and what would run here instead.
"""

from __future__ import annotations

import re
import signal
from typing import Final

__all__ = ["describe_run", "exit_meaning", "last_line", "signal_meaning"]

#: The advice for a build that needs CPU features this machine lacks: upstream's CPU builds carry
#: every variant (``GGML_CPU_ALL_VARIANTS``) and load the one this CPU runs.
CPU_VARIANTS_HINT: Final = (
    "a build that carries upstream's CPU variants (GGML_CPU_ALL_VARIANTS, as ggml-org/llama.cpp's own "
    "cpu, vulkan and cuda assets do) would run here"
)

_SIGNAL_WORDS: Final[dict[str, str]] = {
    "SIGILL": "illegal instruction — this build needs CPU features this machine lacks (AVX-512?); " + CPU_VARIANTS_HINT,
    "SIGSEGV": "segmentation fault — the build crashed (a bug, or a driver it does not match)",
    "SIGBUS": "bus error — the build or its model file was cut short or changed while mapped",
    "SIGABRT": "aborted — an assertion failed in the build or its driver (its last lines say which)",
    "SIGFPE": "arithmetic exception — the build crashed in a computation",
    "SIGKILL": "killed — out of memory, or past its time limit",
    "SIGXCPU": "out of CPU time — it computed far longer than a check may",
    "SIGXFSZ": "file too large — it wrote more than a check may",
    "SIGTERM": "terminated",
}

_NO_KERNEL: Final = re.compile(r"no kernel image is available for execution on the device", re.I)
_PTX: Final = re.compile(r"(unsupported PTX|PTX was compiled with an unsupported toolchain|PTX JIT compil)", re.I)
_ARCHS: Final = re.compile(r"\bARCHS\s*=\s*([0-9a-z,\s]+)", re.I)
_DEVICE_LOST: Final = re.compile(r"(ErrorDeviceLost|VK_ERROR_DEVICE_LOST|device lost)", re.I)


def signal_meaning(returncode: int) -> str | None:
    """``SIGILL: illegal instruction — …`` for a run ended by a signal (negative code), else None."""
    if returncode >= 0:
        return None
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
    words = _SIGNAL_WORDS.get(name)
    return f"{name}: {words}" if words else name


def exit_meaning(returncode: int | None, output: str, *, gpu_sm: str | None = None) -> str:
    """Why a run ended as it did: the signal or the cause its output names, else its code and last line.

    Args:
        returncode: The exit code (negative: the signal); None when it was stopped at its time limit.
        output: What it printed (stdout and stderr).
        gpu_sm: This machine's NVIDIA compute capability (``8.6``), when known.
    """
    cause = _cause_in(output, gpu_sm)
    if returncode is None:
        return "it did not finish within its time limit" + (f" ({cause})" if cause else "")
    by_signal = signal_meaning(returncode)
    if by_signal is not None:
        return by_signal + (f"; it said: {cause}" if cause else "")
    if cause:
        return f"{cause} (exit {returncode})"
    return f"exit {returncode} ({last_line(output) or 'no output'})"


def _cause_in(output: str, gpu_sm: str | None) -> str | None:
    if _NO_KERNEL.search(output):
        archs = _ARCHS.search(output)
        built = f"; the build's kernels are for SM {archs[1].strip().rstrip(',')}" if archs else ""
        here = f" (this GPU is SM {gpu_sm})" if gpu_sm else ""
        return (
            f"CUDA: no kernel image is available for this GPU{here}{built} — choose a build compiled for it "
            "(a newer CUDA toolkit's asset, or one that carries PTX)"
        )
    if _PTX.search(output):
        return (
            "CUDA: the build's PTX needs a newer NVIDIA driver than this one (unsupported PTX) — update the driver "
            "or choose a build of an older CUDA toolkit"
        )
    if _DEVICE_LOST.search(output):
        return "Vulkan: the device was lost while computing — this driver cannot run the build's shaders"
    return None


def last_line(output: str) -> str:
    """The last non-empty line of ``output`` (at most 200 characters)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def describe_run(what: str, returncode: int, output: str, *, gpu_sm: str | None = None) -> str:
    """``--version exited 1 (last line)``, or ``--version was ended by SIGILL: illegal instruction — …``."""
    if returncode < 0:
        return f"{what} was ended by {exit_meaning(returncode, output, gpu_sm=gpu_sm)}"
    cause = _cause_in(output, gpu_sm)
    return f"{what} exited {returncode} ({cause or last_line(output) or 'no output'})"
