"""The home's pin: the one build a plain ``update``, ``check --apply`` and a scheduled job keep.

``pin.json`` in the home holds the pinned repository and tag. It is the user's
standing intent, not a fact about a runtime: it survives installs, ``use`` and
``rollback`` (the install marker remembers what each runtime was installed as;
the pin says what the home must stay on), and only ``unpin``, ``pin TAG`` or
``update --tag TAG`` change it.

Invariants:
    * Written atomically (``fsutil.write_record``): a reader sees the old pin or the new one.
    * A damaged file is never read as "no pin" (that would let the next scheduled job
      move a held machine): it is a ``corrupt_state`` error naming ``unpin``, which
      removes it whatever it holds.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from llama_runtime.runtime.errors import CorruptStateError
from llama_runtime.runtime.fsutil import DamagedRecordError, read_record, write_record

__all__ = ["PIN_FILE", "Pin", "clear_pin", "load_pin", "pinned_tag", "save_pin"]

PIN_FILE: Final = "pin.json"
#: A pin names one repository and one tag; a longer file is not one we wrote.
_MAX_FILE_BYTES: Final = 4 * 1024
#: GitHub's limits: owner/name up to 140 characters, a tag far shorter in practice.
_MAX_TEXT_CHARS: Final = 256


@dataclass(frozen=True)
class Pin:
    """The pinned build.

    Attributes:
        repo: The repository (``owner/name``) the tag belongs to.
        tag: The pinned tag as the user gave it (``b7000`` or ``v0.3.0``).
    """

    repo: str
    tag: str

    def to_json(self) -> dict[str, str]:
        """The contract's ``pinned`` object."""
        return {"repo": self.repo, "tag": self.tag}


def pin_path(home_root: Path) -> Path:
    """Where the pin of the home ``home_root`` lives."""
    return home_root / PIN_FILE


def load_pin(home_root: Path) -> Pin | None:
    """The home's pin, or ``None`` when nothing is pinned.

    Raises:
        CorruptStateError: The pin file exists but is not a pin.
    """
    path = pin_path(home_root)
    try:
        payload: Any = read_record(path, max_bytes=_MAX_FILE_BYTES)
    except FileNotFoundError:
        return None
    except (OSError, DamagedRecordError):
        payload = None
    texts = [payload.get(k) for k in ("repo", "tag")] if isinstance(payload, dict) else []
    if len(texts) != 2 or not all(isinstance(t, str) and 0 < len(t) <= _MAX_TEXT_CHARS for t in texts):
        raise CorruptStateError(
            f"The pin file {path} is damaged, so which build this home is held at is unknown.",
            hint="Run `llama-runtime unpin` to remove it, or `llama-runtime pin TAG` to pin again.",
        )
    return Pin(str(texts[0]), str(texts[1]))


def pinned_tag(home_root: Path, repo: str) -> str | None:
    """The tag the home is pinned to for ``repo`` (a pin of another repository holds nothing there).

    Raises:
        CorruptStateError: The pin file is damaged.
    """
    pin = load_pin(home_root)
    return pin.tag if pin is not None and pin.repo.lower() == repo.lower() else None


def save_pin(home_root: Path, pin: Pin) -> None:
    """Pin ``pin`` (replacing any other pin), atomically.

    Raises:
        OSError: The file could not be written; the old pin is unchanged.
    """
    write_record(pin_path(home_root), pin.to_json())


def clear_pin(home_root: Path) -> bool:
    """Remove the pin, damaged or not; whether there was a pin file.

    Raises:
        OSError: It exists but could not be removed.
    """
    path = pin_path(home_root)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        return True
    return False
