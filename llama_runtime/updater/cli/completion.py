"""Shell completion for bash, zsh and fish, through argcomplete.

``llama-runtime completion SHELL`` prints the script to install (the README says
where); the shell then runs ``llama-runtime`` with ``_ARGCOMPLETE`` set to ask for
completions, which :func:`maybe_complete` answers before any command runs. Tags of
``use`` and ``remove`` complete to what is installed in the home.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from llama_runtime.updater.cli.output import Output
    from llama_runtime.updater.cli.parser import AddParser, Handler

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
    from llama_runtime.runtime.layout import Home
    from llama_runtime.updater.config import resolve_settings

    try:
        runtimes = Home(resolve_settings(home=getattr(parsed_args, "home", None)).home).installed()
    except Exception:  # completion must never print an error into the user's prompt
        return []
    return sorted({r.marker.tag for r in runtimes if r.marker.tag.startswith(prefix)})


def maybe_complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request and exit, when this run is one (``_ARGCOMPLETE`` set)."""
    if "_ARGCOMPLETE" not in os.environ:
        return  # the common case costs one dictionary look-up: argcomplete is not imported
    import argcomplete

    argcomplete.autocomplete(parser, exit_method=sys.exit)
