"""``llama-runtime``: the command line, per ``shared/reference/cli-contract.md``.

Every command takes ``--json``: stdout then carries exactly one JSON object;
logs go to stderr. Errors map to the contract's exit codes through the
exception tree; nothing ever ends in a traceback. Heavy imports (httpx, the
installer) happen inside the commands that need them, so ``status`` starts
fast. The parser is in ``cli/main.py``, each command in its own module.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeGuard

from llama_runtime import LlamaRuntimeError, UserInputError
from llama_runtime.updater.cli.common import GLOBAL_EPILOG
from llama_runtime.updater.cli.output import Output
from llama_runtime.updater.cli.watchdog import arm_stack_dump

if TYPE_CHECKING:
    from llama_runtime.updater.cli.events import EventStream


# -- main --------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``llama-runtime``; returns the exit code of the contract."""
    arm_stack_dump()  # a test watchdog's SIGUSR1, when it set LLAMA_RUNTIME_TEST_STACKS
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
    if out.as_json and "--version" in argv:  # argparse acts on --version before it has seen a later --json
        out.result({"name": "llama-runtime", "version": tool_version()}, [f"llama-runtime {tool_version()}"])
        return 0
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
    from llama_runtime import configure_logging

    # A shell's completion request walks every command: only then, or when the words name no
    # command plainly, is the whole parser built.
    command = None if "_ARGCOMPLETE" in os.environ else command_named(argv)
    parser = build_parser(only=command)
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
        bug = exc.__cause__
        if os.environ.get("LLAMA_RUNTIME_DEBUG") and exc.code == "internal_error" and _is_bug(bug):
            raise bug  # the front door wrapped a bug (api.boundary): its own traceback, as asked
        try:
            out.error(exc)
        except BrokenPipeError:
            _silence_stdout()
        return exc.exit_code
    if isinstance(exc, OSError):
        from llama_runtime import LocalError

        io_error = LocalError.from_os_failure(exc)
        out.error(io_error)
        return io_error.exit_code
    if isinstance(exc, KeyboardInterrupt):
        from llama_runtime import CancelledError
        from llama_runtime.updater.cli.common import describe_active_now

        # The truth, read from the pointer now: a Ctrl-C after the flip changed it.
        if args is not None and getattr(args, "command", None) == "mirror":  # touches no runtime of this home
            from llama_runtime.updater.cli.registry import MIRROR_INTERRUPTED

            interrupted = CancelledError(MIRROR_INTERRUPTED)
        else:
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


def _is_bug(cause: BaseException | None) -> TypeGuard[Exception]:
    """Whether ``cause`` is a bug: an exception outside the error tree and not the system refusing."""
    return isinstance(cause, Exception) and not isinstance(cause, LlamaRuntimeError | OSError)


def _silence_stdout() -> None:
    """Point stdout at the null device, so the interpreter's last flush cannot fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _events_stream() -> EventStream:
    from llama_runtime.updater.cli.events import EventStream

    return EventStream()


if __name__ == "__main__":
    sys.exit(main())


# -- parser: The argument parser of ``llama-runtime``: the global options and every command's own. ---------------

Handler = Callable[[argparse.Namespace, "Output"], int]
AddParser = Callable[[str, str], argparse.ArgumentParser]

#: The modules that add commands, in the order ``--help`` lists the commands.
COMMAND_MODULES: list[str] = [
    "llama_runtime.updater.cli.status",
    "llama_runtime.updater.cli.update",
    "llama_runtime.updater.cli.pin",
    "llama_runtime.updater.cli.lifecycle",
    "llama_runtime.updater.cli.offline",
    "llama_runtime.updater.cli.jobs",
    "llama_runtime.updater.cli.gate",
    "llama_runtime.updater.cli.main",
]

#: Command -> the module of :data:`COMMAND_MODULES` that adds it (tests/test_startup_imports.py checks the two agree).
COMMAND_MODULE_OF: Final[dict[str, str]] = {
    **dict.fromkeys(("status", "server"), "llama_runtime.updater.cli.status"),
    **dict.fromkeys(("update", "plan"), "llama_runtime.updater.cli.update"),
    **dict.fromkeys(("pin", "unpin"), "llama_runtime.updater.cli.pin"),
    **dict.fromkeys(("list", "use", "remove", "which", "rollback", "doctor"), "llama_runtime.updater.cli.lifecycle"),
    **dict.fromkeys(("install-file", "export", "mirror", "gc"), "llama_runtime.updater.cli.offline"),
    **dict.fromkeys(("check", "job"), "llama_runtime.updater.cli.jobs"),
    "gate": "llama_runtime.updater.cli.gate",
    "completion": "llama_runtime.updater.cli.main",
}

#: Command name -> handler; :func:`build_parser` fills it from :data:`COMMAND_MODULES`.
COMMANDS: dict[str, Handler] = {}

#: The global options that take a value, and those that take none, as :func:`_add_global_options` adds them.
_VALUED_OPTIONS: Final = frozenset(
    {"--home", "--api-url", "--repo", "--ca-bundle", "--backend", "--channel", "--follow"}
)
_FLAG_OPTIONS: Final = frozenset({"--json", "--log-json", "-v", "-vv", "--verbose", "-q", "--quiet", "--no-progress"})


def command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, when argparse is sure to read the same one; else ``None``.

    Only global options spelled out in full may come before it (``--home DIR``, ``--home=DIR``,
    ``--json``, ``-v``): an abbreviation, a cluster of short flags or ``--`` leaves the reading
    to argparse and the whole parser.
    """
    words = iter(argv)
    for word in words:
        if word in _FLAG_OPTIONS:
            continue
        if word in _VALUED_OPTIONS:
            next(words, None)
            continue
        if word.startswith("--") and word.partition("=")[0] in _VALUED_OPTIONS:
            continue
        return word if word in COMMAND_MODULE_OF else None
    return None


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, given the terminal's width so that it never imports shutil for it.

    argparse makes a formatter for every argument it adds (~370 for the whole parser, built on every
    run); each one without a width imports shutil (and with it bz2 and lzma) and asks it for the
    terminal size: about a tenth of ``status``'s start-up. The width is the one
    ``shutil.get_terminal_size`` gives: ``COLUMNS``, else the terminal's, else 80, minus 2.
    """

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _terminal_columns() - 2 if width is None else width)


def _terminal_columns() -> int:
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors become exit-2 errors in our format."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UserInputError(f"{message[0].upper()}{message[1:]}. See `{self.prog} --help`.")


class _VersionAction(argparse.Action):
    """``--version``: the tool's own version, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kwargs: object) -> None:
        sys.stdout.write(f"llama-runtime {tool_version()}\n")
        sys.stdout.flush()
        parser.exit(0)


def tool_version() -> str:
    """The version of llama-runtime (the installed metadata is built from the same constant)."""
    from llama_runtime import __version__

    return __version__


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``llama-runtime``; also fills :data:`COMMANDS`.

    ``only``: a command whose module alone adds its commands (a command line that names it needs
    no other: building all ~370 arguments of every command cost ``status`` a quarter of its start-up).
    """
    parser = _Parser(
        prog="llama-runtime", description="Keep llama.cpp's llama-server current, verified and rollback-safe."
    )
    _add_global_options(parser, top=True)
    parser.add_argument("--version", action=_VersionAction, help="print llama-runtime's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=GLOBAL_EPILOG)
        _add_global_options(p, top=False)
        return p

    for module in COMMAND_MODULES if only is None else [COMMAND_MODULE_OF[only]]:
        COMMANDS.update(importlib.import_module(module).register(add))
    return parser


def _add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The global options: listed once at the top level, accepted (unlisted) after a command too."""
    default = None if top else argparse.SUPPRESS

    def shown(text: str) -> str:
        return text if top else argparse.SUPPRESS

    parser.add_argument("--home", default=default, help=shown("llama-runtime home (LLAMA_RUNTIME_HOME)"))
    parser.add_argument(
        "--api-url", default=default, help=shown("GitHub API base or mirror (LLAMA_RUNTIME_GITHUB_API)")
    )
    parser.add_argument("--repo", default=default, help=shown("OWNER/NAME to take releases from (LLAMA_RUNTIME_REPO)"))
    parser.add_argument(
        "--ca-bundle",
        default=default,
        metavar="PEM",
        help=shown("the CAs HTTPS servers are trusted by (LLAMA_RUNTIME_CA_BUNDLE; default: the OS store)"),
    )
    backend = parser.add_argument(
        "--backend", default=default, help=shown("auto, cpu, cuda, vulkan, rocm, metal, … (LLAMA_RUNTIME_BACKEND)")
    )
    completes(backend, backend_names)
    flag = False if top else argparse.SUPPRESS
    parser.add_argument("--json", action="store_true", default=flag, help=shown("one JSON object on stdout"))
    parser.add_argument(
        "--log-json", action="store_true", default=flag, help=shown("log lines and errors on stderr as JSON")
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0 if top else argparse.SUPPRESS,
        help=shown("-v: each step (release, asset, download, checks); -vv: also every request and candidate"),
    )
    channel = parser.add_argument(
        "--channel",
        default=default,
        help=shown(
            "stable (the newest release, e.g. v0.3.0, resolved to its build) or nightly (the newest bNNNN build) "
            "(LLAMA_RUNTIME_CHANNEL; default: the active runtime's, else stable)"
        ),
    )
    completes(channel, channel_names)
    parser.add_argument(
        "--follow",
        default=default,
        choices=("newer", "exact"),
        help=shown(
            "newer: never a downgrade without a tag; exact: follow the channel back down too, "
            "a fleet rolled back by moving its channel tag (LLAMA_RUNTIME_FOLLOW; default newer)"
        ),
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=flag,
        help=shown("no progress bar, warnings or log lines; results and errors only"),
    )
    parser.add_argument("--no-progress", action="store_true", default=flag, help=shown("no progress bar"))


# -- completion: Shell completion for bash, zsh and fish, through argcomplete. -----------------------------------

SHELLS: Final[tuple[str, ...]] = ("bash", "zsh", "fish")


def register(add: AddParser) -> dict[str, Handler]:
    """Add ``completion SHELL``."""
    p = add("completion", "print the shell completion script for bash, zsh or fish (see the README)")
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    return {"completion": cmd_completion}


def cmd_completion(args: argparse.Namespace, out: Output) -> int:
    """``completion SHELL``: the script that makes SHELL complete ``llama-runtime``."""
    from argcomplete.shell_integration import shellcode

    script = shellcode(["llama-runtime"], shell=args.shell)
    out.result({"shell": args.shell, "script": script}, [script.rstrip("\n")])
    return 0


def installed_tags(prefix: str, parsed_args: argparse.Namespace, **_kwargs: Any) -> list[str]:
    """Completer of ``use``/``remove`` TAG: the builds installed in the home the line names."""
    from llama_runtime import RuntimeUpdater

    try:
        runtimes = RuntimeUpdater(getattr(parsed_args, "home", None)).status().installed
    except Exception:  # completion must never print an error into the user's prompt
        return []
    return sorted({r.runtime.marker.tag for r in runtimes if r.runtime.marker.tag.startswith(prefix)})


Completer = Callable[..., list[str]]


def completes(action: argparse.Action, completer: Completer) -> argparse.Action:
    """``action`` with ``completer`` as argcomplete's hook (an attribute it reads on the Action)."""
    action.completer = completer  # type: ignore[attr-defined]
    return action


def _starting(prefix: str, names: Iterable[str]) -> list[str]:
    return [name for name in names if name.startswith(prefix)]


def backend_names(prefix: str, **_kwargs: Any) -> list[str]:
    """Completer of ``--backend``: every backend request (``auto`` first)."""
    from llama_runtime import Vocabulary

    return _starting(prefix, Vocabulary.BACKENDS)


def concrete_backend_names(prefix: str, **_kwargs: Any) -> list[str]:
    """Completer of ``mirror sync --backend``: the backends an asset can have (no ``auto``)."""
    from llama_runtime import Vocabulary

    return _starting(prefix, Vocabulary.CONCRETE_BACKENDS)


def channel_names(prefix: str, **_kwargs: Any) -> list[str]:
    """Completer of ``--channel``: ``stable`` and ``nightly``."""
    from llama_runtime import Vocabulary

    return _starting(prefix, Vocabulary.CHANNELS)


def platform_names(prefix: str, **_kwargs: Any) -> list[str]:
    """Completer of ``--platform``: the ``OS-ARCH`` names a plan or a mirror takes."""
    from llama_runtime import Vocabulary

    return _starting(prefix, Vocabulary.PLATFORMS)


def maybe_complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request and exit, when this run is one (``_ARGCOMPLETE`` set).

    The global options a command accepts after it are hidden from its ``--help``
    (``llama-runtime --help`` lists them once), not from the shell: suppressed
    options are offered too.
    """
    if "_ARGCOMPLETE" not in os.environ:
        return  # the common case costs one dictionary look-up: argcomplete is not imported
    import argcomplete

    argcomplete.autocomplete(parser, exit_method=sys.exit, print_suppressed=True)
