"""CLI commands for offline machines and housekeeping: ``install-file``, ``export``,
``mirror sync`` and ``gc`` (listed in ``cli/main.py``'s ``COMMAND_MODULES``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime import UserInputError
from llama_runtime.updater.cli.common import GLOBAL_EPILOG

if TYPE_CHECKING:
    from llama_runtime.updater.cli.main import AddParser, Handler
    from llama_runtime.updater.cli.output import Output


def register(add: AddParser) -> dict[str, Handler]:
    """Add the offline commands' parsers; returns their handlers by name.

    Nothing heavy is imported here: every command's parser is built at start-up.
    """
    p = add("install-file", "install a release archive or a bundle already on disk, through the same verification")
    p.add_argument("archive", metavar="ARCHIVE", help="a llama.cpp release .zip/.tar.gz, or a bundle from `export`")
    p.add_argument("--tag", help="the release the archive holds, e.g. b7000 (bundles carry their own)")
    p.add_argument("--sha256", metavar="HEX", help="refuse the archive unless its sha256 is this")
    p.add_argument(
        "--bundle",
        metavar="FILE",
        help="the archive's build attestation: a Sigstore bundle, `gh attestation download` JSON lines, "
        "or the attestations API's answer; verified offline",
    )
    p.add_argument(
        "--allow-no-device",
        action="store_true",
        help="install an explicit --backend's build even if it lists no such device here (a machine image)",
    )
    from llama_runtime.updater.cli.common import add_require_provenance

    add_require_provenance(p)
    p = add("export", "write the active runtime and its marker as one bundle for `install-file`")
    p.add_argument("--output", "-o", required=True, metavar="FILE", help="the bundle to write (.tar.gz)")
    mirror = add("mirror", "mirror releases into a static directory or an OCI registry that --api-url can point at")
    actions = mirror.add_subparsers(dest="mirror_action", metavar="ACTION", required=True)
    p = actions.add_parser("sync", help="fetch what is new, re-check what is there", epilog=GLOBAL_EPILOG)
    _sync_flags(p)
    from llama_runtime.updater.cli.registry import promote_flags

    promote_flags(actions.add_parser("promote", help="move a registry's channel tag to a pushed build"))
    p = add(
        "gc",
        "remove inactive runtimes beyond the newest N, stale staging, old partial downloads "
        "and cached assets no remaining runtime uses",
    )
    p.add_argument(
        "--keep",
        dest="retain",
        metavar="N",
        help="runtimes to keep in all, as update's --keep counts them: the active, the previous and the newest "
        "others (default 3; 0 keeps all; LLAMA_RUNTIME_KEEP)",
    )
    p.add_argument("--dry-run", action="store_true", help="report what would be removed; remove nothing")
    p.add_argument(
        "--cache", action="store_true", help="only trim the download cache (assets no installed runtime uses)"
    )
    return {"install-file": cmd_install_file, "export": cmd_export, "mirror": cmd_mirror, "gc": cmd_gc}


def _sync_flags(p: argparse.ArgumentParser) -> None:
    """Flags of ``mirror sync``; the common ones again, since they may follow ``sync``."""
    from llama_runtime.updater.cli.main import channel_names, completes, concrete_backend_names, platform_names

    quiet = argparse.SUPPRESS  # never override a value given before ``sync``
    p.add_argument(
        "--dest", required=True, metavar="DIR|oci://HOST/NS/NAME", help="the mirror directory, or an OCI registry"
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tag", help="mirror exactly this release")
    which.add_argument("--newest", type=int, default=None, metavar="N", help="mirror the N newest builds (default 1)")
    # ``--latest`` is a flag everywhere else (update, plan); ``--latest N`` is kept as the old spelling of --newest N.
    which.add_argument(
        "--latest",
        type=int,
        nargs="?",
        const=1,
        default=None,
        metavar="N",
        help="the newest build (same as --newest 1)",
    )
    p.add_argument("--prune", action="store_true", help="remove mirrored releases that --newest N does not name")
    platform = p.add_argument(
        "--platform", action="append", default=[], metavar="OS-ARCH", help="only these platforms (repeat)"
    )
    completes(platform, platform_names)
    backend = p.add_argument(
        "--backend", action="append", default=quiet, metavar="B", help="only these backends (repeat)"
    )
    completes(backend, concrete_backend_names)
    p.add_argument("--repo", default=quiet, help="OWNER/NAME to mirror (LLAMA_RUNTIME_REPO)")
    # The other global options again, unlisted (`llama-runtime --help` lists them once).
    hidden = argparse.SUPPRESS
    p.add_argument("--home", default=quiet, help=hidden)
    p.add_argument("--api-url", default=quiet, help=hidden)
    for flag in ("--json", "--log-json", "--no-progress"):
        p.add_argument(flag, action="store_true", default=quiet, help=hidden)
    p.add_argument("-q", "--quiet", dest="quiet", action="store_true", default=quiet, help=hidden)
    p.add_argument("-v", "--verbose", action="count", default=quiet, help=hidden)
    channel = p.add_argument(
        "--channel", default=quiet, help="what --newest means: stable or nightly (LLAMA_RUNTIME_CHANNEL)"
    )
    completes(channel, channel_names)
    from llama_runtime.updater.cli.registry import sync_flags

    sync_flags(p)


def cmd_install_file(args: argparse.Namespace, out: Output) -> int:
    """``install-file ARCHIVE [--tag TAG] [--sha256 HEX]``."""
    from llama_runtime.updater.cli.common import provenance_line, settings_from_args, updater_for

    # A file's origin is not the active runtime's: without --repo it is recorded as ggml-org's, as always.
    updater = updater_for(settings_from_args(args, follow_active_repo=False))
    archive = Path(args.archive).expanduser()
    outcome = updater.install_file(
        archive,
        tag=args.tag,
        repo=updater.repo if args.repo is not None else None,
        sha256=args.sha256,
        attestation=Path(args.bundle).expanduser() if args.bundle else None,
        allow_no_device=args.allow_no_device,
    )
    m = outcome.active.marker
    if outcome.result == "up_to_date":
        lines = [f"Already active: {m.repo} {m.tag} ({m.backend}) from these very bytes."]
    elif outcome.result == "switched":
        lines = [f"Switched to {m.repo} {m.tag} ({m.backend}): the same build was installed already."]
    else:
        where = "standard input" if args.archive in ("-", "/dev/stdin") else archive
        lines = [f"Installed {m.repo} {m.tag} ({m.backend}) from {where} and made it active."]
        if outcome.previous:
            lines.append(f"`llama-runtime rollback` returns to {outcome.previous.marker.tag}.")
        lines.append(f"binary: {outcome.active.binary}")
    lines.append(provenance_line(outcome.active))
    payload = outcome.to_json()
    payload["source"] = m.source
    out.result(payload, lines)
    return 0


def cmd_export(args: argparse.Namespace, out: Output) -> int:
    """``export --output FILE``."""
    from llama_runtime import Vocabulary
    from llama_runtime.updater.cli.common import settings_from_args, updater_for

    result = updater_for(settings_from_args(args)).export(args.output)
    m = result.runtime.marker
    out.result(
        result.to_json(),
        [
            f"Wrote {m.repo} {m.tag} ({m.backend}) to {result.path} ({Vocabulary.size(result.size)}).",
            f"Restore it elsewhere with `llama-runtime install-file {result.path}`.",
        ],
    )
    return 0


def cmd_mirror(args: argparse.Namespace, out: Output) -> int:
    """``mirror sync --dest DIR|oci://… [--tag T | --newest N [--prune]] [--platform P]… [--backend B]…``,
    ``mirror promote --dest oci://… --tag T --to CHANNEL``."""
    from llama_runtime import Vocabulary

    if args.mirror_action == "promote":
        from llama_runtime.updater.cli.registry import cmd_promote

        return cmd_promote(args, out)
    if Vocabulary.is_registry(args.dest):
        from llama_runtime.updater.cli.registry import cmd_sync_registry

        return cmd_sync_registry(args, out, latest=_newest(args))
    from llama_runtime import Vocabulary
    from llama_runtime.updater.cli.common import progress_bar, settings_from_args, updater_for

    raw_backends = [args.backend] if isinstance(args.backend, str) else args.backend or []
    # A mirror is the fleet's, not this machine's: without --repo it is ggml-org's, whatever runs here.
    settings = settings_from_args(argparse.Namespace(**{**vars(args), "backend": None}), follow_active_repo=False)
    with progress_bar(args) as bar:
        report = updater_for(settings).mirror_sync(
            args.dest,
            tag=args.tag,
            newest=_newest(args),
            platforms=args.platform,
            backends=raw_backends,
            prune=args.prune,
            progress=bar,
        )
    lines = [
        f"Mirrored {settings.repo} {', '.join(report.releases)} into {report.dest}: "
        f"{len(report.fetched)} fetched ({Vocabulary.size(report.fetched_bytes)}), {len(report.reused)} re-checked, "
        f"{len(report.attestations)} with build attestations.",
        f"Clients: --api-url {report.dest.as_uri()} (or the URL a static web server gives this directory).",
    ]
    lines += [] if args.quiet else [f"warning: {w}" for w in report.warnings]
    out.result(report.to_json(), lines)
    return 0


def _newest(args: argparse.Namespace) -> int:
    """How many of the newest builds ``mirror sync`` mirrors (--newest N, or the older --latest N)."""
    count = args.newest if args.newest is not None else args.latest if args.latest is not None else 1
    if count < 1:
        raise UserInputError(f"--newest must be 1 or more, not {count}.")
    return int(count)


def cmd_gc(args: argparse.Namespace, out: Output) -> int:
    """``gc [--keep N] [--dry-run] [--cache]``."""
    from llama_runtime import Vocabulary
    from llama_runtime.updater.cli.common import settings_from_args, updater_for

    report = updater_for(settings_from_args(args)).gc(dry_run=args.dry_run, cache_only=args.cache)
    verb = "Would free" if report.dry_run else "Freed"
    lines = [f"{verb} {Vocabulary.size(report.freed_bytes)}."]
    lines += [f"  {'would remove' if report.dry_run else 'removed'} {i.kind} {i.path}" for i in report.removed]
    lines += [f"  kept {name}: {why}" for name, why in report.kept.items()]
    lines += [f"  could not remove {f}" for f in report.failed]
    out.result(report.to_json(), lines)
    return 0
