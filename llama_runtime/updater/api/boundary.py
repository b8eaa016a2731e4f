"""The front door's promise: whatever a public method raises is a ``LlamaRuntimeError``.

The layers below turn the failures they foresee into the error tree; what reaches the
front door otherwise is the operating system refusing a file (a read-only or full home)
or a bug. Both end here as errors of the tree, the original chained as ``__cause__``
(its traceback kept), so an app's one ``except LlamaRuntimeError`` never misses one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Final, ParamSpec, TypeVar

from llama_runtime.runtime.errors import DiskSpaceError, FileSystemError, LlamaRuntimeError
from llama_runtime.runtime.fsutil import is_disk_full

__all__ = ["BOUNDARY_MARK", "as_tree_error", "front_door", "front_door_iterator"]

P = ParamSpec("P")
R = TypeVar("R")
Y = TypeVar("Y")

#: The attribute a wrapped method carries, so a test can see that every public method has the promise.
BOUNDARY_MARK: Final[str] = "__llama_runtime_boundary__"


def as_tree_error(exc: Exception) -> LlamaRuntimeError:
    """``exc`` as an error of the tree: itself, a full disk, a refused file, or an internal error.

    Args:
        exc: What a public method's work raised.

    Returns:
        ``exc`` itself when it is a ``LlamaRuntimeError``; a :class:`DiskSpaceError` for ENOSPC/EDQUOT;
        a :class:`FileSystemError` naming the file for any other ``OSError``; else an internal error.
    """
    if isinstance(exc, LlamaRuntimeError):
        return exc
    if isinstance(exc, OSError) and is_disk_full(exc):
        where = f" writing {exc.filename}" if exc.filename else ""
        return DiskSpaceError(
            f"The disk is full{where} ({exc.strerror or exc}). The active runtime is unchanged.",
            hint="Free some space (or run `llama-runtime gc`) and try again.",
        )
    if isinstance(exc, OSError):
        return FileSystemError.from_os_error(exc)
    return LlamaRuntimeError(f"Internal error ({type(exc).__name__}: {exc}). The active runtime is unchanged.")


def front_door(method: Callable[P, R]) -> Callable[P, R]:
    """Wrap a public method so that only ``LlamaRuntimeError`` subclasses leave it.

    ``KeyboardInterrupt`` and ``SystemExit`` pass unchanged: they are the caller's, not a failure.
    """

    @functools.wraps(method)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except LlamaRuntimeError:
            raise
        except Exception as exc:
            raise as_tree_error(exc) from exc

    setattr(wrapped, BOUNDARY_MARK, True)
    return wrapped


def front_door_iterator(method: Callable[P, Iterator[Y]]) -> Callable[P, Iterator[Y]]:
    """:func:`front_door` for a generator method: the promise holds while it is iterated, too."""

    @functools.wraps(method)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> Iterator[Y]:
        try:
            yield from method(*args, **kwargs)
        except LlamaRuntimeError:
            raise
        except Exception as exc:
            raise as_tree_error(exc) from exc

    setattr(wrapped, BOUNDARY_MARK, True)
    return wrapped
