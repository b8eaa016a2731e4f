"""The registry forms of ``mirror``: ``sync --dest oci://…`` and ``promote`` (parsers built at start-up: light)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from llama_runtime.runtime.errors import UserInputError

if TYPE_CHECKING:
    from llama_runtime.updater.cli.main import Output


def promote_flags(p: argparse.ArgumentParser) -> None:
    """Flags of ``mirror promote``."""
    quiet = argparse.SUPPRESS
    p.add_argument("--dest", required=True, metavar="oci://HOST/NS/NAME", help="the registry repository")
    p.add_argument("--tag", required=True, help="the build already pushed, e.g. b7000")
    p.add_argument("--to", required=True, metavar="CHANNEL", help="the channel tag to move: stable, canary, …")
    for flag in ("--json", "--log-json", "-q", "--no-progress"):
        p.add_argument(flag, action="store_true", default=quiet, help=quiet)
    p.add_argument("--home", default=quiet, help=quiet)
    p.add_argument("--api-url", default=quiet, help=quiet)


def cmd_promote(args: argparse.Namespace, out: Output) -> int:
    """``mirror promote --dest oci://… --tag T --to CHANNEL``."""
    from llama_runtime.updater.offline.registry_push import promote
    from llama_runtime.updater.sources.oci.connect import open_registry

    with open_registry(_registry_url(args.dest)) as registry:
        digest = promote(registry, args.tag, args.to)
        display = registry.ref.display
    out.result(
        {"dest": display, "tag": args.tag, "channel": args.to, "digest": digest},
        [f"{display}:{args.to} now names {args.tag} ({digest})."],
    )
    return 0


def cmd_sync_registry(args: argparse.Namespace, out: Output, *, latest: int, platforms: list[str]) -> int:
    """``mirror sync --dest oci://…``: the builds a directory sync would choose, pushed as artifacts.

    ``latest`` and ``platforms`` are ``--newest`` and ``--platform`` as ``mirror sync`` checked them.
    """
    from llama_runtime.runtime.marker import parse_backend
    from llama_runtime.updater.cli.common import engine_for, progress_for, settings_from_args
    from llama_runtime.updater.fetch.cache import human_size
    from llama_runtime.updater.offline.mirror import MirrorFetch
    from llama_runtime.updater.offline.registry_push import sync_registry
    from llama_runtime.updater.release.tags import validate_tag
    from llama_runtime.updater.sources.oci.connect import open_registry
    from llama_runtime.updater.stage.streaming import FetchOptions

    if args.prune:
        raise UserInputError("--prune is for a directory mirror; a registry's retention policy removes old tags.")
    raw_backends = [args.backend] if isinstance(args.backend, str) else args.backend or []
    backends = [parse_backend(b, allow_auto=False, source="--backend") for b in raw_backends]
    settings = settings_from_args(argparse.Namespace(**{**vars(args), "backend": None}), follow_active_repo=False)
    tag = validate_tag(args.tag) if args.tag is not None else None
    with (
        open_registry(_registry_url(args.dest), read_timeout=settings.read_timeout) as registry,
        engine_for(settings).open_source(etag_cache=False) as client,
    ):
        report = sync_registry(
            client,
            registry,
            tag=tag,
            latest=latest,
            platforms=platforms,
            backends=backends,
            channel=settings.channel or "stable",
            fetch=MirrorFetch(FetchOptions(parallel=settings.parallel_downloads), progress_for(args)),
        )
    channels = ", ".join(f"{c} -> {b}" for c, b in report.channels.items()) or "none moved"
    lines = [
        f"Pushed {settings.repo} {', '.join(report.releases)} to {report.dest}: {len(report.uploaded)} uploaded "
        f"({human_size(report.uploaded_bytes)}), {len(report.reused)} already there, "
        f"{len(report.attestations)} with build attestations; channel tags: {channels}.",
        f"Clients: --api-url {report.dest} (or LLAMA_RUNTIME_GITHUB_API={report.dest}).",
    ]
    lines += [] if args.quiet else [f"warning: {w}" for w in report.warnings]
    out.result(report.to_json(), lines)
    return 0


def _registry_url(dest: str) -> str:
    """``dest`` as a repository URL: a tag or digest there is refused (they are flags here)."""
    from llama_runtime.updater.sources.oci.reference import parse_reference

    ref = parse_reference(dest)
    if ref.tag is not None or ref.digest is not None:
        raise UserInputError(f"--dest {dest} names a tag or digest; give the repository only (oci://HOST/NS/NAME).")
    return dest
