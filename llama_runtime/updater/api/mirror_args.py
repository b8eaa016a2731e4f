"""What ``mirror_sync`` is asked, checked before anything is fetched: the directory and the platform filters."""

from __future__ import annotations

from pathlib import Path

from llama_runtime.runtime.errors import UserInputError

__all__ = ["mirror_dest", "platform_filter"]


def mirror_dest(dest: Path, home_root: Path) -> Path:
    """``dest`` made absolute; never the llama-runtime home or a directory inside it.

    Raises:
        UserInputError: ``dest`` is in the home, whose directories the tool cleans up.
    """
    resolved = dest.expanduser().absolute()
    real, real_home = resolved.resolve(), home_root.expanduser().absolute().resolve()
    if real == real_home or real.is_relative_to(real_home):
        raise UserInputError(
            f"--dest {dest} is inside the llama-runtime home {home_root}; give the mirror a directory of its own."
        )
    return resolved


def platform_filter(value: str) -> str:
    """A mirror's ``OS-ARCH`` filter, checked.

    Raises:
        UserInputError: Not one of the platforms llama.cpp publishes for.
    """
    os_name, _, arch = value.partition("-")
    if os_name not in {"linux", "windows", "macos", "android"} or arch not in {"x64", "arm64", "s390x"}:
        raise UserInputError(f"Unknown platform '{value}'. Use OS-ARCH, e.g. linux-x64 or windows-arm64.")
    return value


def registry_repository(dest: str) -> str:
    """``dest`` as a registry repository URL; a tag or digest there is refused (they are options here).

    Raises:
        UserInputError: Not an ``oci://`` repository, or one with a tag or digest.
    """
    from llama_runtime.updater.sources.oci.reference import parse_reference

    ref = parse_reference(dest)
    if ref.tag is not None or ref.digest is not None:
        raise UserInputError(f"--dest {dest} names a tag or digest; give the repository only (oci://HOST/NS/NAME).")
    return dest
