"""``llama-runtime``: the command line, per ``shared/reference/cli-contract.md``.

Every command takes ``--json``: stdout then carries exactly one JSON object;
logs go to stderr. Errors map to the contract's exit codes through the
exception tree; nothing ever ends in a traceback. Heavy imports (httpx, the
installer) happen inside the commands that need them, so ``status`` starts
fast. The parser is in ``cli/parser.py``, each command in its own module.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from llama_runtime.runtime.errors import LlamaRuntimeError, UserInputError
from llama_runtime.updater.cli.output import Output
from llama_runtime.updater.cli.parser import COMMANDS, build_parser

if TYPE_CHECKING:
    from llama_runtime.updater.cli.events import EventStream


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``llama-runtime``; returns the exit code of the contract."""
    argv, server_args = _split_server_args(list(sys.argv[1:] if argv is None else argv))
    # Read from the raw words, so that even a usage error is reported the way asked for.
    out = Output(
        as_json="--json" in argv,
        events=_events_stream() if "--events" in argv else None,
        log_json="--log-json" in argv,
    )
    parsed: list[argparse.Namespace] = []  # the arguments once parsed: an interruption is reported with them
    try:
        with _sigterm_interrupts():
            return _run(argv, server_args, out, parsed)
    except (Exception, KeyboardInterrupt) as exc:
        return _exit_code_for(exc, out, parsed[0] if parsed else None)


def _run(argv: list[str], server_args: list[str], out: Output, parsed: list[argparse.Namespace]) -> int:
    args = _parse(argv, server_args, out)
    parsed.append(args)
    if not args.command:
        if out.as_json:
            raise UserInputError(f"No command given. Choose one of: {', '.join(sorted(COMMANDS))}.")
        build_parser().print_help()
        return 2
    return COMMANDS[args.command](args, out)


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """While inside, SIGTERM (systemd stop, ``timeout``) interrupts like Ctrl-C: the same clean-up,
    exit 130 and the error object, instead of dying at once with 143 and nothing said."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may install handlers (an app calling main() from a worker)
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _split_server_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """Our words, and everything after ``--``: those belong to llama-server (``server start -- ARGS``)."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def _parse(argv: list[str], server_args: list[str], out: Output) -> argparse.Namespace:
    """Parse the command line, answer a shell's completion request, and set up output and logging.

    Raises:
        UserInputError: The words are not a valid command line (exit 2).
    """
    from llama_runtime.updater.cli.completion import maybe_complete
    from llama_runtime.updater.logs import configure_logging

    parser = build_parser()
    maybe_complete(parser)  # a shell asking for completions gets them and nothing runs
    args = parser.parse_args(argv)
    args.server_args = server_args
    if not getattr(args, "events", False):
        out.events = None
    out.as_json = bool(args.json) or out.events is not None
    out.log_json = bool(args.log_json)
    level = "error" if args.quiet else "debug" if args.verbose > 1 else "info" if args.verbose else "warning"
    configure_logging(json_lines=args.log_json, level=level)
    return args


def _exit_code_for(exc: Exception | KeyboardInterrupt, out: Output, args: argparse.Namespace | None) -> int:
    """Report a failure the way the reader asked for and return its exit code; never a traceback.

    Raises:
        Exception: A bug (not in the error tree) while ``LLAMA_RUNTIME_DEBUG`` is set, for its traceback.
    """
    if isinstance(exc, BrokenPipeError):
        # The reader went away (`| head`): nothing more can be said on stdout.
        _silence_stdout()
        return 1
    if isinstance(exc, LlamaRuntimeError):
        try:
            out.error(exc)
        except BrokenPipeError:
            _silence_stdout()
        return exc.exit_code
    if isinstance(exc, OSError):
        from llama_runtime.runtime.errors import FileSystemError

        io_error = FileSystemError.from_os_error(exc)
        out.error(io_error)
        return io_error.exit_code
    if isinstance(exc, KeyboardInterrupt):
        from llama_runtime.runtime.errors import CancelledError
        from llama_runtime.updater.cli.context import describe_active_now

        # The truth, read from the pointer now: a Ctrl-C after the flip changed it.
        interrupted = CancelledError(f"Interrupted; {describe_active_now(args)}.")
        with contextlib.suppress(OSError):
            out.error(interrupted)
        return interrupted.exit_code
    if os.environ.get("LLAMA_RUNTIME_DEBUG"):
        raise exc
    err = LlamaRuntimeError(
        f"Internal error ({type(exc).__name__}: {exc}). The active runtime is unchanged. "
        "Please report this with LLAMA_RUNTIME_DEBUG=1 output."
    )
    out.error(err)
    return 1


def _silence_stdout() -> None:
    """Point stdout at the null device, so the interpreter's last flush cannot fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _events_stream() -> EventStream:
    from llama_runtime.updater.cli.events import EventStream

    return EventStream()


if __name__ == "__main__":
    sys.exit(main())
