"""Text for a terminal: what came from outside is shown, never interpreted.

A tag, an asset name or a server's error text can carry ESC/CSI sequences
that would move the cursor, retitle the window or hide lines. Everything the
CLI prints for people passes :func:`printable` (JSON output is escaped by the
encoder already).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["printable"]

# C0 controls, DEL and C1 controls (ESC, CSI …): what a terminal would interpret.
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters (ESC, CSI, BEL, CR …) shown as ``\\xNN``.

    Newlines and tabs stay: the text around them is ours.
    """

    def escape(match: re.Match[str]) -> str:
        char = match.group()
        return char if char in "\n\t" else f"\\x{ord(char):02x}"

    return _CONTROL.sub(escape, text)
