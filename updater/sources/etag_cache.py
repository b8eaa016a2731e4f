"""Where ETags and JSON bodies persist, so a repeated API request is a free ``304 Not Modified``.

GitHub does not count a conditional request answered 304 against the rate
limit (docs, "Use conditional requests if appropriate"); the scheduled check
relies on it to cost nothing when nothing changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from llama_runtime.runtime.fsutil import atomic_write_json


class EtagCache(Protocol):
    """Stores the last ETag and JSON body per URL so a repeat is a free 304."""

    def get(self, url: str) -> tuple[str, Any] | None:
        """The stored ``(etag, decoded JSON)`` for ``url``, if any."""
        ...

    def put(self, url: str, etag: str, body: Any) -> None:
        """Remember ``etag`` and the decoded JSON ``body`` for ``url``."""
        ...


class JsonFileEtagCache:
    """An :class:`EtagCache` kept in one JSON file, replaced atomically on each write.

    A missing or unreadable file is an empty cache: the worst outcome is one
    full (non-304) request.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, url: str) -> tuple[str, Any] | None:
        """The stored ``(etag, decoded JSON)`` for ``url``, if any."""
        entry = self._load().get(url)
        if isinstance(entry, dict) and isinstance(entry.get("etag"), str) and "body" in entry:
            return entry["etag"], entry["body"]
        return None

    def put(self, url: str, etag: str, body: Any) -> None:
        """Remember ``etag`` and ``body`` for ``url`` (one atomic replace of the file).

        A cache that cannot be written (a read-only home, a full disk) is no
        cache: the answer in hand is still right, and the next request is a
        full one instead of a free 304. The file is left as it was.
        """
        data = self._load()
        data[url] = {"etag": etag, "body": body}
        try:
            atomic_write_json(self.path, data)
        except OSError:
            return
