"""JSON a release server sent, decoded with its nesting bounded.

Remote answers (release lists, build manifests, attestation listings) are data
from elsewhere: a reply nested thousands of levels deep must be refused as
remote data, never crash the decoder's recursion.
"""

from __future__ import annotations

import json
from typing import Any, Final

from llama_runtime.runtime.errors import RemoteDataError
from llama_runtime.runtime.fsutil import nests_deeper

__all__ = ["MAX_JSON_DEPTH", "loads_bounded"]

#: Deepest JSON nesting accepted. Release JSON is 4 levels deep (list, release,
#: assets, asset.uploader); 64 leaves room for any field GitHub may add while
#: staying far below the interpreter's recursion limit.
MAX_JSON_DEPTH: Final[int] = 64


def loads_bounded(data: bytes, *, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Decode JSON ``data`` whose nesting is at most ``max_depth`` levels.

    Raises:
        ValueError: ``data`` is not JSON (the caller words that one).
        RemoteDataError: The JSON nests deeper than ``max_depth``.
    """
    try:
        value = json.loads(data)
    except RecursionError:
        raise _too_deep(what, max_depth) from None
    if nests_deeper(value, max_depth):
        raise _too_deep(what, max_depth)
    return value


def _too_deep(what: str, max_depth: int) -> RemoteDataError:
    return RemoteDataError(f"The server sent {what} nested more than {max_depth} levels deep; it was not used.")
