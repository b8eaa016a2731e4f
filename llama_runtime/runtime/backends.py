"""The backend vocabulary: the one place that knows backend names.

Every entry point (CLI flag, environment variable, API argument, the marker
read back from disk) goes through :func:`parse_backend`. It trims whitespace,
ignores case and maps aliases; anything else is an
:class:`~runtime.errors.UnknownBackendError` whose message lists what is valid.
Nothing ever falls back silently to another backend.
"""

from __future__ import annotations

import re
from typing import Final

from llama_runtime.runtime.errors import UnknownBackendError

AUTO: Final = "auto"

#: Concrete backends, in the order they are listed to people.
CONCRETE_BACKENDS: Final[tuple[str, ...]] = (
    "cpu",
    "cuda",
    "vulkan",
    "rocm",
    "metal",
    "sycl",
    "openvino",
    "opencl",
    "cann",
)

#: Every valid request: ``auto`` plus the concrete backends.
BACKEND_CHOICES: Final[tuple[str, ...]] = (AUTO, *CONCRETE_BACKENDS)

#: Other spellings people and older tools use for the same backend.
ALIASES: Final[dict[str, str]] = {
    "hip": "rocm",
    "amd": "rocm",
    "cublas": "cuda",
    "nvidia": "cuda",
    "vk": "vulkan",
    "mps": "metal",
    "oneapi": "sycl",
    "ascend": "cann",
    "none": "cpu",
}

#: GPU backends: a build must hold their library, and a host that has such a
#: device must see it in ``--list-devices``.
GPU_BACKENDS: Final[frozenset[str]] = frozenset(
    {"cuda", "vulkan", "rocm", "metal", "sycl", "openvino", "opencl", "cann"}
)

# "cuda12", "cuda-12.4", "rocm7.2": a backend followed by a version line.
_VERSIONED = re.compile(r"^(?P<name>[a-z]+)[-_ ]?(?:cu)?(?P<version>\d+(?:\.\d+)*)$")


def _choices_text(choices: tuple[str, ...] = BACKEND_CHOICES) -> str:
    return ", ".join(choices)


def parse_backend(value: object, *, allow_auto: bool = True, source: str = "") -> str:
    """Normalise a backend name to its canonical spelling.

    Args:
        value: What the caller gave: a flag, an environment value, a marker field.
        allow_auto: Whether ``auto`` is acceptable here (it is not in a marker).
        source: Where the value came from, for the message ("LLAMA_RUNTIME_BACKEND").

    Returns:
        The canonical name, e.g. ``"rocm"`` for ``" HIP "``.

    Raises:
        UnknownBackendError: The name is not known; the message lists the
            valid names and a did-you-mean when one is close.
    """
    choices = BACKEND_CHOICES if allow_auto else CONCRETE_BACKENDS
    raw = value if isinstance(value, str) else repr(value)
    name = raw.strip().lower()
    name = ALIASES.get(name, name)
    if name in choices:
        return name
    where = f" (from {source})" if source else ""
    message = f"Unknown backend '{raw.strip()}'{where}. Choose one of: {_choices_text(choices)}."
    suggestion = suggest_backend(name)
    hint = None
    if suggestion is not None:
        backend, version = suggestion
        message += f" Did you mean '{backend}'?"
        if version is not None and backend == "cuda":
            hint = f"Pick the CUDA line separately: --backend cuda --cuda-version {version}"
        elif version is not None:
            hint = f"Backend versions are chosen from the release; use --backend {backend}"
    raise UnknownBackendError(message, hint=hint)


def suggest_backend(name: str) -> tuple[str, str | None] | None:
    """A close backend name for a typo, with any version line that was glued on.

    Returns:
        ``(backend, version)`` or ``None`` when nothing is close.
    """
    match = _VERSIONED.match(name)
    if match:
        base = ALIASES.get(match["name"], match["name"])
        if base in CONCRETE_BACKENDS:
            return base, match["version"]
    import difflib  # deferred: only a misspelled backend needs it

    close = difflib.get_close_matches(name, [*BACKEND_CHOICES, *ALIASES], n=1, cutoff=0.6)
    if close:
        return ALIASES.get(close[0], close[0]), None
    return None


def is_gpu_backend(backend: str) -> bool:
    """Whether ``backend`` (canonical) drives an accelerator."""
    return backend in GPU_BACKENDS
