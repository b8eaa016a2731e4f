"""The compute check: every switch runs a tiny model on the device the build will serve on.

``--version`` and ``--list-devices`` run no kernel: a build compiled for CPU features this machine
lacks (SIGILL), a CUDA build without kernels for this GPU ("no kernel image is available"), or a
Vulkan build whose shaders this driver cannot run passes both and fails on the first model. So
before a build is accepted, and before an installed one is switched to, it loads the model the
package ships (``check-model.gguf``, ~250 KB, written by ``scripts/make_check_model.py``), in the
sandbox, with every layer on the device for a GPU backend, and must give the greedy answer that
model is built to give on any correct backend.

The user's own smoke model (``--smoke-model``) replaces it; ``--no-compute-check`` skips it, and
the marker records which happened (:func:`skipped_record`, :func:`passed_record`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from llama_runtime.runtime.errors import VerificationError
from llama_runtime.runtime.marker import is_gpu_backend

__all__ = [
    "CHECK_MODEL",
    "CHECK_MODEL_SHA256",
    "EXPECTED_ANSWER",
    "ComputeOutcome",
    "check_model",
    "compute_args",
    "judge_answer",
    "passed_record",
    "skipped_record",
]

#: The model shipped with the package (see ``scripts/make_check_model.py``).
CHECK_MODEL: Final = Path(__file__).with_name("check-model.gguf")
#: Its bytes, pinned: a package file changed on disk is refused, never run.
CHECK_MODEL_SHA256: Final = "ad544291cfe4c71348a56f89d11e89b9837dd9cb7be6417d7af980b70b12b23a"
#: What the model answers the gate's prompt (which ends in ``,``), greedy, 16 tokens: each token
#: predicts the next letter by a logit margin of ~30, so every correct backend agrees.
EXPECTED_ANSWER: Final = "abcdefghijklmnop"
#: Every layer on the device: more than any model has (llama-server caps it at the model's count).
ALL_LAYERS: Final = "999"
#: The model's own context; one slot.
CONTEXT: Final = "256"

_verified: dict[Path, bool] = {}


def check_model(path: Path = CHECK_MODEL) -> Path:
    """The shipped model, its sha256 checked once per process.

    Raises:
        VerificationError: It is missing or its bytes are not the pinned ones (a damaged install
            of llama-runtime itself).
    """
    if not _verified.get(path):
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            raise VerificationError(
                f"The compute check's model {path} cannot be read ({exc.strerror or exc}).",
                hint="Reinstall llama-runtime-updater, or skip the check with --no-compute-check.",
            ) from None
        if digest != CHECK_MODEL_SHA256:
            raise VerificationError(
                f"The compute check's model {path} is not the one this llama-runtime shipped (sha256 {digest}).",
                hint="Reinstall llama-runtime-updater, or skip the check with --no-compute-check.",
            )
        _verified[path] = True
    return path


def compute_args(model: Path, backend: str) -> list[str]:
    """The check's server arguments: the model, every layer on the device for a GPU backend (pure)."""
    layers = ALL_LAYERS if is_gpu_backend(backend) else "0"
    return ["-m", str(model), "-ngl", layers, "--ctx-size", CONTEXT, "--parallel", "1"]


@dataclass(frozen=True)
class ComputeOutcome:
    """What the compute check showed."""

    ok: bool
    reason: str
    answer: str
    seconds: float | None = None


def judge_answer(answer: str) -> str | None:
    """Why ``answer`` is not the model's known answer (None: it is)."""
    if answer == EXPECTED_ANSWER:
        return None
    return (
        f"it computed a wrong answer on the compute check's model: {answer!r} instead of {EXPECTED_ANSWER!r} "
        "(a broken kernel on this device)"
    )


def passed_record(outcome: ComputeOutcome, backend: str) -> dict[str, Any]:
    """The marker's ``compute_check`` for a check that ran."""
    return {
        "model": CHECK_MODEL.name,
        "sha256": CHECK_MODEL_SHA256,
        "device_layers": "all" if is_gpu_backend(backend) else "none",
        "answer": outcome.answer,
        "seconds": round(outcome.seconds, 3) if outcome.seconds is not None else None,
    }


def skipped_record(why: str) -> dict[str, Any]:
    """The marker's ``compute_check`` for a check that did not run, and why."""
    return {"skipped": why}
