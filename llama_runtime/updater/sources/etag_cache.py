"""Where ETags and JSON bodies persist, so a repeated API request is a free ``304 Not Modified``.

GitHub does not count a conditional request answered 304 against the rate
limit (docs, "Use conditional requests if appropriate"); the scheduled check
relies on it to cost nothing when nothing changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Protocol

from llama_runtime.runtime.record import read_record, write_record

#: Largest the cache file grows (bytes of JSON). Past it the entries written longest ago go first:
#: a fork's manifests are cached per release (up to 1 MiB each), and a cache is no archive.
MAX_CACHE_BYTES: Final[int] = 16 * 1024 * 1024


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
            data = read_record(self.path)
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
        data.pop(url, None)  # re-inserted last: the newest entry is dropped last
        data[url] = {"etag": etag, "body": body}
        # Each entry's size is measured once; the oldest go until the rest fit (the newest always stays).
        sizes = {key: len(json.dumps({key: entry})) for key, entry in data.items()}
        total = sum(sizes.values())
        for key in list(data)[:-1]:
            if total <= MAX_CACHE_BYTES:
                break
            total -= sizes[key]
            del data[key]
        try:
            write_record(self.path, data)
        except OSError:
            return
