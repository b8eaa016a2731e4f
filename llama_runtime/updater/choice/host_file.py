"""``plan --host FILE``: the facts of another machine, as its ``doctor --json`` printed them.

Fleets collect these files and support reproduces a user's choice from one. The
file is the ``host`` object of ``doctor --json`` (or the whole ``doctor --json``
output). A missing key means unknown, and unknown never means "can run it"; an
unknown key is ignored, so files from newer versions still load.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.runtime.record import parse_record
from llama_runtime.updater.choice.host import PLATFORMS, HostFacts

#: A host file is a few KB; anything bigger is not one (and is not read whole).
MAX_HOST_FILE_BYTES: Final = 1024 * 1024


def load_host_file(path: Path) -> HostFacts:
    """The facts ``path`` describes.

    Raises:
        UserInputError: Unreadable, not JSON, not a host object, or a key of the wrong type.
    """
    try:
        if path.exists() and not path.is_file():  # a FIFO or device would block or never end
            raise UserInputError(f"The host file {path} is not a regular file; give the file `doctor --json` wrote.")
        with path.open("rb") as handle:
            raw = handle.read(MAX_HOST_FILE_BYTES + 1)
    except OSError as exc:
        raise UserInputError(f"Cannot read the host file {path}: {exc.strerror or exc}.") from None
    if len(raw) > MAX_HOST_FILE_BYTES:
        raise UserInputError(
            f"The host file {path} is over {MAX_HOST_FILE_BYTES // 1024} KiB; it is not a host object."
        )
    try:
        payload = parse_record(raw, what=str(path), max_bytes=MAX_HOST_FILE_BYTES)
    except ValueError:
        raise UserInputError(
            f"The host file {path} is not JSON. Use the `host` object that `llama-runtime doctor --json` prints."
        ) from None
    if isinstance(payload, dict) and isinstance(payload.get("host"), dict):
        payload = payload["host"]  # the whole doctor --json output
    if not isinstance(payload, dict):
        raise UserInputError(f"The host file {path} holds no host object (a JSON object with `os` and `arch`).")
    return host_from_json(payload, str(path))


def host_from_json(payload: dict[str, Any], label: str = "the host file") -> HostFacts:
    """:class:`HostFacts` from a ``doctor --json`` host object; missing keys stay unknown."""
    fields = _Fields(payload, label)
    os_name = fields.text("os")
    arch = fields.text("arch")
    if (os_name is None or arch is None) and (platform := fields.text("platform")):
        os_name, _, arch = platform.partition("-")
    if os_name is None or arch is None:
        raise UserInputError(
            f"{label} does not say which machine it describes: it needs `os` and `arch` "
            "(or `platform`, e.g. linux-x64), as `llama-runtime doctor --json` prints them."
        )
    platform = f"{os_name}-{arch}"
    if platform not in PLATFORMS:
        raise UserInputError(
            f"{label} describes the platform {platform!r}; a host object needs `os` and `arch` "
            f"making one of: {', '.join(PLATFORMS)}."
        )
    assert os_name is not None and arch is not None
    return HostFacts(
        os=os_name,
        arch=arch,
        cuda_driver_version=fields.text("cuda_driver_version"),
        nvidia_driver=fields.text("nvidia_driver"),
        compute_capability=fields.text("compute_capability"),
        gpu_names=fields.texts("gpu_names"),
        vulkan=fields.flag("vulkan"),
        rocm=fields.flag("rocm"),
        metal=fields.flag("metal"),
        cpu_features=frozenset(fields.texts("cpu_features")),
        sources=(("host", label),),
        rocm_gfx=fields.texts("rocm_gfx"),
        compute_capabilities=fields.texts("compute_capabilities"),
        vulkan_api_version=fields.text("vulkan_api_version"),
        rocm_runtime_version=fields.text("rocm_runtime_version"),
        sycl=fields.flag("sycl"),
        macos_version=fields.text("macos_version"),
        glibc_version=fields.text("glibc_version"),
    )


class _Fields:
    """Typed reads of a host object; a wrong type names the key and what it should be."""

    def __init__(self, payload: dict[str, Any], label: str) -> None:
        self.payload, self.label = payload, label

    def _get(self, key: str, kind: str, ok: Callable[[Any], bool]) -> Any:
        value = self.payload.get(key)
        if value is not None and not ok(value):
            raise UserInputError(f"In {self.label}, `{key}` must be {kind} (or absent when unknown).")
        return value

    def text(self, key: str) -> str | None:
        value = self._get(key, "a string", lambda v: isinstance(v, str))
        return value.strip() or None if isinstance(value, str) else None

    def flag(self, key: str) -> bool:
        return bool(self._get(key, "true or false", lambda v: isinstance(v, bool)))

    def texts(self, key: str) -> tuple[str, ...]:
        value = self._get(
            key, "a list of strings", lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v)
        )
        return tuple(value or ())
