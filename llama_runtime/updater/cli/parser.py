"""The argument parser of ``llama-runtime``: the global options and every command's own.

Each command module has ``register(add: AddParser) -> dict[str, Handler]``: it adds
its parsers and returns its handlers, keeping its heavy imports inside them, so
building the parser (done on every run) stays cheap.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.updater.cli.common import GLOBAL_EPILOG

if TYPE_CHECKING:
    from llama_runtime.updater.cli.output import Output

Handler = Callable[[argparse.Namespace, "Output"], int]
AddParser = Callable[[str, str], argparse.ArgumentParser]

#: The modules that add commands, in the order ``--help`` lists the commands.
COMMAND_MODULES: list[str] = [
    "llama_runtime.updater.cli.status",
    "llama_runtime.updater.cli.update",
    "llama_runtime.updater.cli.plan",
    "llama_runtime.updater.cli.recovery",
    "llama_runtime.updater.cli.offline",
    "llama_runtime.updater.cli.server",
    "llama_runtime.updater.cli.jobs",
    "llama_runtime.updater.cli.lifecycle",
    "llama_runtime.updater.cli.gate",
    "llama_runtime.updater.cli.completion",
]

#: Command name -> handler; :func:`build_parser` fills it from :data:`COMMAND_MODULES`.
COMMANDS: dict[str, Handler] = {}


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors become exit-2 errors in our format."""

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
    """The installed version of llama-runtime."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-runtime-updater")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``llama-runtime``; also fills :data:`COMMANDS`."""
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

    for module in COMMAND_MODULES:
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
        "--backend", default=default, help=shown("auto, cpu, cuda, vulkan, rocm, metal, … (LLAMA_RUNTIME_BACKEND)")
    )
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
    parser.add_argument(
        "--channel",
        default=default,
        help=shown(
            "stable (the newest release, e.g. v0.3.0, resolved to its build) or nightly (the newest bNNNN build) "
            "(LLAMA_RUNTIME_CHANNEL; default: the active runtime's, else stable)"
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
