"""structlog, routed where its caller wants it: an app's ``logging``, or the CLI's stderr.

A library is silent by default: unless :func:`configure_logging` is called (the CLI calls it)
or the app configured structlog itself, every line goes through the standard library's
``logging`` to the logger of its module (``llama_runtime.…``), which has a ``NullHandler``:
an app sees the lines once it configures ``logging`` (``logging.basicConfig()``, or a handler on
``logging.getLogger("llama_runtime")``), and nothing otherwise. :func:`configure_logging` sends
them to stderr instead: readable on a terminal, JSON lines with ``--log-json``; stdout is
reserved for the command's output (one JSON object with ``--json``).

structlog is imported only when something logs a line, not when a logger is
created or logging is configured: importing it costs ~30 ms, and app start-up
(``ensure``) and ``status`` never log. A line below the level configured here
(the CLI's ``warning`` without ``-v``) is dropped before structlog is imported:
the filter structlog would be configured with drops it anyway (~45
modules of every quiet ``update``'s start).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import structlog

# The standard library's level numbers (logging.DEBUG … logging.ERROR), without importing logging.
_LEVELS: Final = {"debug": 10, "info": 20, "warning": 30, "error": 40}

# The configuration asked for; applied to structlog on first use.
_wanted: dict[str, Any] = {"json_lines": False, "level": "warning", "explicit": False}
_applied = False


class _StderrLogger:
    """Writes each rendered line to whatever ``sys.stderr`` is at that moment.

    Binding the stream at configuration time breaks when it is replaced later
    (an app redirecting stderr, pytest's capture), so it is looked up per line.
    """

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warning = warn = error = critical = exception = fatal = msg


def _stderr_logger_factory(*_args: object) -> _StderrLogger:
    return _StderrLogger()


def configure_logging(*, json_lines: bool = False, level: str = "warning") -> None:
    """Send llama-runtime's log lines to stderr at ``level`` and above, instead of ``logging`` (applied on first use).

    Without this call the lines go through the standard library's ``logging`` (silent until the app
    configures it). ``json_lines``: one JSON object a line (``--log-json``); ``level``: ``debug``,
    ``info``, ``warning`` or ``error``.
    """
    global _applied
    _wanted.update(json_lines=json_lines, level=level, explicit=True)
    _applied = False
    if "structlog" in sys.modules:
        _apply()


def _load_structlog() -> None:
    """Import structlog without rich, unless something imported either already.

    structlog.dev imports rich (sigstore's dependency: ~70 modules, 0.2-0.3 s of
    every update's start on a cold page cache) only to draw exceptions
    with it; the renderer here then prints them as plain tracebacks. A blocked
    name in ``sys.modules`` makes that ``import rich`` fail; it is removed at
    once, so anything importing rich later gets it.
    """
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog  # noqa: F401
    finally:
        blocked: object = sys.modules.get("rich", sys)
        if blocked is None:
            del sys.modules["rich"]


def _apply() -> None:
    global _applied
    _load_structlog()
    import structlog

    _applied = True
    if not _wanted["explicit"]:
        # An app that embeds us and configured structlog itself keeps its setup; otherwise the
        # lines go to the standard library (unconfigured, structlog would print to stdout, the app's).
        if not structlog.is_configured():
            _route_to_stdlib(structlog)
        return
    processors: list[structlog.typing.Processor] = [
        _redact_urls,
        _escape_controls,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if _wanted["json_lines"]:
        processors.append(structlog.processors.JSONRenderer())
    else:
        # https://no-color.org: any non-empty NO_COLOR turns colour off.
        colour = sys.stderr.isatty() and not os.environ.get("NO_COLOR")
        processors.append(structlog.dev.ConsoleRenderer(colors=colour))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(_wanted["level"], _LEVELS["warning"])),
        logger_factory=_stderr_logger_factory,
        cache_logger_on_first_use=False,
    )


def _route_to_stdlib(structlog: Any) -> None:
    """Send every line to ``logging.getLogger(<module>)`` as one plain message; silent until the app listens."""
    import logging

    logging.getLogger("llama_runtime").addHandler(logging.NullHandler())
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, _redact_urls, _escape_controls, _plain_message],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def _plain_message(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> str:
    """``event key=value …``: one line a ``logging`` handler formats like any other message."""
    fields = " ".join(f"{key}={value}" for key, value in event.items() if key != "event")
    return f"{event.get('event', '')} {fields}".strip()


def redact_with(redactor: Callable[[str], str]) -> None:
    """Pass every string field of every later log line through ``redactor`` (idempotent).

    The last guard of "credentials never leave memory": the HTTP client
    registers :func:`~updater.credentials.redact_text` when it is made, so a field
    that names a URL loses its ``user:password@`` and its (possibly signed) query,
    whichever module logged it, at every level. (A sibling of ``credentials`` in
    the layering, this module takes the function instead of importing it.)
    """
    _redactors[:] = [redactor]


_redactors: list[Callable[[str], str]] = []


def _redact_urls(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> Mapping[str, Any]:
    """Every string field that holds a URL, through the registered redactor."""
    if not _redactors:
        return event
    redact = _redactors[0]
    return {key: redact(value) if isinstance(value, str) and "://" in value else value for key, value in event.items()}


def _escape_controls(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> Mapping[str, Any]:
    """Show control characters in logged text (a tag, a server's words) instead of sending them to a terminal."""
    from llama_runtime.runtime.errors import printable

    return {key: printable(value) if isinstance(value, str) else value for key, value in event.items()}


class Logger:
    """A named logger that imports and configures structlog on its first line.

    Modules create theirs at import (``log = get_logger(__name__)``); only a
    module that actually logs pays for structlog, so app start-up never does.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def _bound(self) -> structlog.typing.FilteringBoundLogger:
        _load_structlog()
        import structlog

        if not _applied:
            _apply()
        logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(self.name)
        return logger

    def debug(self, event: str, **fields: Any) -> None:
        """Log ``event`` at debug level with ``fields``."""
        if not _filtered_out("debug"):
            self._bound().debug(event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log ``event`` at info level with ``fields``."""
        if not _filtered_out("info"):
            self._bound().info(event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log ``event`` at warning level with ``fields``."""
        if not _filtered_out("warning"):
            self._bound().warning(event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log ``event`` at error level with ``fields``."""
        if not _filtered_out("error"):
            self._bound().error(event, **fields)


def _filtered_out(level: str) -> bool:
    """A line the configuration asked for here would drop, decided without importing structlog.

    Only while that configuration is still to be applied (:func:`configure_logging`
    was called, no line has applied it yet): the first line that passes applies it,
    and from then on structlog's own filter decides (an app may have configured it since).
    """
    if not _wanted["explicit"] or _applied:
        return False
    return _LEVELS[level] < _LEVELS.get(_wanted["level"], _LEVELS["warning"])


def get_logger(name: str) -> Logger:
    """The logger for ``name`` (structlog, configured by :func:`configure_logging`, on first use)."""
    return Logger(name)


def warn_state(message: str) -> None:
    """Warn that a cache or record was damaged and set aside (``runtime.fsutil.read_cache``'s ``warn``)."""
    get_logger("llama_runtime.state").warning(message)
