"""The registry forms of ``mirror``: ``sync --dest oci://…`` and ``promote`` (parsers built at start-up: light)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from llama_runtime import UserInputError

if TYPE_CHECKING:
    from llama_runtime.updater.cli.output import Output

#: What an interrupted ``mirror sync``/``promote`` says: it never touches this machine's runtime.
MIRROR_INTERRUPTED = (
    "Interrupted; the mirror keeps every build that was complete (tags move last, after everything they "
    "name), and this machine's runtime was not touched. Run the same `mirror` command again."
)


def promote_flags(p: argparse.ArgumentParser) -> None:
    """Flags of ``mirror promote``."""
    quiet = argparse.SUPPRESS
    p.add_argument("--dest", required=True, metavar="oci://HOST/NS/NAME", help="the registry repository")
    p.add_argument("--tag", default=None, help="the build already pushed, e.g. b7000")
    p.add_argument("--to", required=True, metavar="CHANNEL", help="the channel tag to move: stable, canary, …")
    p.add_argument(
        "--to-sync",
        action="store_true",
        help="hand the channel back to `mirror sync` (a promotion otherwise holds across syncs)",
    )
    for flag in ("--json", "--log-json", "--no-progress"):
        p.add_argument(flag, action="store_true", default=quiet, help=quiet)
    p.add_argument("-q", "--quiet", dest="quiet", action="store_true", default=quiet, help=quiet)
    p.add_argument("--home", default=quiet, help=quiet)
    p.add_argument("--api-url", default=quiet, help=quiet)
    p.add_argument("--ca-bundle", default=quiet, metavar="PEM", help=quiet)


def sync_flags(p: argparse.ArgumentParser) -> None:
    """The registry-only flags of ``mirror sync``."""
    p.add_argument(
        "--channels",
        default=None,
        metavar="none|stable,nightly",
        help="the channel tags a registry sync may move (default: the one --channel resolves); "
        "a promoted channel is never moved",
    )
    p.add_argument("--ca-bundle", default=argparse.SUPPRESS, metavar="PEM", help=argparse.SUPPRESS)


def parse_channels_flag(value: str | None) -> list[str] | None:
    """``--channels`` as a list (``none``: empty; absent: ``None``)."""
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    if names == ["none"]:
        return []
    unknown = [n for n in names if n not in ("stable", "nightly")]
    if not names or unknown:
        raise UserInputError(
            f"--channels {value!r}: give none, or a comma-separated list of stable and nightly "
            "(channels of your own move with `mirror promote`)."
        )
    return names


def cmd_promote(args: argparse.Namespace, out: Output) -> int:
    """``mirror promote --dest oci://… --tag T --to CHANNEL [--to-sync]``."""
    from llama_runtime.updater.cli.common import settings_from_args, updater_for

    settings = settings_from_args(argparse.Namespace(**{**vars(args), "backend": None}), follow_active_repo=False)
    moved = updater_for(settings).registry_promote(args.dest, args.tag, args.to, to_sync=args.to_sync)
    if moved.to_sync:
        line = f"{moved.dest}:{moved.channel} names {moved.digest}; the next `mirror sync` moves it again."
    else:
        line = (
            f"{moved.dest}:{moved.channel} now names {moved.tag} ({moved.digest}); "
            "`mirror sync` leaves it there until `--to-sync`."
        )
    out.result(moved.to_json(), [] if getattr(args, "quiet", False) else [line])
    return 0


def cmd_sync_registry(args: argparse.Namespace, out: Output, *, latest: int) -> int:
    """``mirror sync --dest oci://…``: the builds a directory sync would choose, pushed as artifacts."""
    from llama_runtime import Vocabulary
    from llama_runtime.updater.cli.common import progress_bar, settings_from_args, updater_for

    if args.prune:
        raise UserInputError("--prune is for a directory mirror; a registry's retention policy removes old tags.")
    raw_backends = [args.backend] if isinstance(args.backend, str) else args.backend or []
    settings = settings_from_args(argparse.Namespace(**{**vars(args), "backend": None}), follow_active_repo=False)
    with progress_bar(args) as bar:
        report = updater_for(settings).registry_sync(
            args.dest,
            tag=args.tag,
            newest=latest,
            platforms=args.platform,
            backends=raw_backends,
            progress=bar,
            channels=parse_channels_flag(args.channels),
        )
    channels = ", ".join(f"{c} -> {b}" for c, b in report.channels.items()) or "none moved"
    lines = [
        f"Pushed {settings.repo} {', '.join(report.releases)} to {report.dest}: {len(report.uploaded)} uploaded "
        f"({Vocabulary.size(report.uploaded_bytes)}), {len(report.reused)} already there, "
        f"{len(report.attestations)} with build attestations; channel tags: {channels}.",
        f"Clients: --api-url {report.dest} (or LLAMA_RUNTIME_GITHUB_API={report.dest}).",
    ]
    lines += [] if args.quiet else [f"warning: {w}" for w in report.warnings]
    out.result(report.to_json(), lines)
    return 0
