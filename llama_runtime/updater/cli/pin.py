"""``pin [TAG]`` and ``unpin``: hold the home at one build, or let it follow the newest again.

A pin holds against everything that moves without being told where: ``check
--apply``, a scheduled job and a plain ``update``. ``update --tag TAG`` and
``pin TAG`` move it; ``unpin`` removes it (``runtime.pin``).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from llama_runtime.updater.cli.common import settings_from_args, tag_or_none, updater_for

if TYPE_CHECKING:
    from llama_runtime.updater.cli.main import AddParser, Handler
    from llama_runtime.updater.cli.output import Output


def register(add: AddParser) -> dict[str, Handler]:
    """Add ``pin`` and ``unpin``."""
    from llama_runtime.updater.cli.main import completes, installed_tags

    p = add("pin", "hold this home at a build: check --apply, scheduled jobs and plain updates keep it")
    tag = p.add_argument("tag", nargs="?", metavar="TAG", help="the build to pin, e.g. b7000 (default: the active one)")
    completes(tag, installed_tags)
    p.add_argument(
        "--force",
        action="store_true",
        help="pin TAG even when the release source cannot confirm it right now (offline, a mirror not synced yet)",
    )
    add("unpin", "remove the pin: check --apply, scheduled jobs and plain updates follow the newest build again")
    return {"pin": cmd_pin, "unpin": cmd_unpin}


def cmd_pin(args: argparse.Namespace, out: Output) -> int:
    """``pin [TAG]``: pin TAG, or the active build."""
    result = updater_for(settings_from_args(args)).pin(tag_or_none(args.tag), force=args.force)
    out.result(result.to_json(), result.lines())
    return 0


def cmd_unpin(args: argparse.Namespace, out: Output) -> int:
    """``unpin``: remove the pin (a damaged pin file too)."""
    result = updater_for(settings_from_args(args)).unpin()
    out.result(result.to_json(), result.lines())
    return 0
