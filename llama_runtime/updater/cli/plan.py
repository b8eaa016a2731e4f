"""``plan``: what ``update`` would install and why, for this machine or another; downloads nothing.

It asks the same decision as ``update`` and ``check``; ``--explain`` adds every
candidate asset, the channel's resolution and the host facts it went by.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.updater.cli.common import tag_or_none
from llama_runtime.updater.cli.context import active_state, engine_for, home_for, settings_from_args

if TYPE_CHECKING:
    from llama_runtime.updater.choice.channel import Channel, ResolvedRelease
    from llama_runtime.updater.choice.choose import Choice
    from llama_runtime.updater.choice.host import HostFacts
    from llama_runtime.updater.cli.output import Output
    from llama_runtime.updater.cli.parser import AddParser, Handler
    from llama_runtime.updater.sources.release import Release


def register(add: AddParser) -> dict[str, Handler]:
    """Add ``plan``."""
    p = add("plan", "what update would install and why; downloads nothing")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tag", help="plan for this release tag, e.g. b7000")
    which.add_argument("--latest", action="store_true", help="plan for the newest release (default)")
    p.add_argument("--platform", help="plan for another machine: OS-ARCH, e.g. windows-x64")
    p.add_argument("--cuda-version", help="CUDA version the (other) machine's driver supports; with --host, the line")
    p.add_argument(
        "--host",
        metavar="FILE",
        dest="host_file",
        help="plan for the machine FILE describes: the host object `doctor --json` printed there",
    )
    p.add_argument("--explain", action="store_true", help="list every candidate and why it was taken or dropped")
    return {"plan": cmd_plan}


def cmd_plan(args: argparse.Namespace, out: Output) -> int:
    """``plan``: the release, asset and action ``update`` would take, and why."""
    from llama_runtime.updater.choice.decide import UpdateRequest, channel_request, decide
    from llama_runtime.updater.sources.resolve import resolve_latest_remote, resolve_tag_remote

    settings = settings_from_args(args)
    tag = tag_or_none(args.tag)
    host, cuda_line = _plan_host(args)
    # What update would do on this machine compares with the active runtime;
    # a plan for another machine (--platform) has none.
    active = None if args.platform or args.host_file else active_state(home_for(settings))
    # Like update: without --backend the active runtime's stored request decides (auto when none).
    request = UpdateRequest(
        repo=settings.repo,
        tag=tag,
        backend=settings.backend if settings.backend_explicit else None,
        cuda_version=cuda_line,
        channel=settings.channel,
    )
    channel = channel_request(request, active.marker if active else None)
    with engine_for(settings).open_source(etag_cache=False) as client:
        resolved = resolve_tag_remote(client, tag) if tag else resolve_latest_remote(client, channel)
    plan = decide(request, active, resolved.release, host)
    plan.raise_if_refused()
    choice = plan.choice
    if choice is None:
        raise AssertionError("unreachable: a plan with a release names its asset")
    payload: dict[str, Any] = {
        "repo": resolved.release.repo,
        "tag": resolved.release.tag,
        "version": resolved.version,
        "channel": channel,
        "backend": choice.backend,
        "backend_request": plan.backend_request,
        "asset": choice.asset.name,
        "extra_assets": [a.name for a in choice.extra_assets],
        "size": choice.asset.size + sum(a.size for a in choice.extra_assets),
        "reason": choice.reason,
        "host": host.to_json(),
        "action": plan.action,
        "warnings": list(plan.warnings),
    }
    lines = _plan_lines(resolved, choice)
    if args.explain:
        _explain(payload, lines, channel, resolved, choice, host)
    out.result(payload, lines)
    return 0


def _plan_host(args: argparse.Namespace) -> tuple[HostFacts, str | None]:
    """The machine to plan for, and the CUDA line to pin (only with ``--host``).

    ``--platform`` and ``--cuda-version`` describe the machine (its driver's CUDA
    version); they do not pin a CUDA line. With ``--host FILE`` the file has the
    driver, so ``--cuda-version`` pins the line.

    Raises:
        UserInputError: Both ``--host`` and ``--platform``, or either one malformed.
    """
    from llama_runtime.updater.choice.host import host_for_platform, parse_cuda_version
    from llama_runtime.updater.choice.host_detect import detect_host

    cuda = parse_cuda_version(args.cuda_version) if args.cuda_version is not None else None
    if args.host_file:
        from pathlib import Path

        from llama_runtime.updater.choice.host_file import load_host_file

        if args.platform:
            raise UserInputError("Give --host FILE or --platform, not both: the file already names the platform.")
        return load_host_file(Path(args.host_file)), cuda
    if args.platform:
        return host_for_platform(args.platform, cuda), None
    if cuda is not None:
        return dataclasses.replace(detect_host(), cuda_driver_version=cuda), None
    return detect_host(), None


def _plan_lines(resolved: ResolvedRelease, choice: Choice) -> list[str]:
    """The plan in sentences: the release and asset, extra assets, and why."""
    release = resolved.release
    named = f"{resolved.version} (build {release.tag})" if resolved.version else release.tag
    return [
        f"{release.repo} {named}: {choice.asset.name} ({choice.backend})",
        *[f"  + {a.name}" for a in choice.extra_assets],
        f"why: {choice.reason}",
    ]


def _metadata_notes(release: Release) -> list[str]:
    """What the release's own build metadata contributed, or why it did not."""
    from llama_runtime.updater.sources.build_manifest import MANIFEST_ASSET

    if release.manifest is not None:
        return [f"GPU coverage of its bundles from its {MANIFEST_ASSET}"]
    if release.asset(MANIFEST_ASSET) is not None:
        return [f"its {MANIFEST_ASSET} was not read (another schema, or still uploading): bundles chosen by name"]
    return []


def _explain(
    payload: dict[str, Any],
    lines: list[str],
    channel: Channel,
    resolved: ResolvedRelease,
    choice: Choice,
    host: HostFacts,
) -> None:
    """``--explain``: add the resolution, every candidate and the host facts to the payload and the lines."""
    notes = [*resolved.notes, *_metadata_notes(resolved.release)]
    payload["resolution"] = [f"channel {channel}", *notes]
    lines.append(f"resolved through the {channel} channel" + "".join(f"; {n}" for n in notes))
    payload["candidates"] = [
        {"asset": c.asset_name, "backend": c.backend, "taken": c.taken, "why": c.why} for c in choice.candidates
    ]
    lines.append("candidates:")
    lines += [f"  {'*' if c.taken else '-'} {c.asset_name}: {c.why}" for c in choice.candidates]
    lines.append("host facts:")
    lines += [f"  {k}: {v}" for k, v in host.to_json().items() if k != "sources"]
    lines += [f"  {fact} from: {where}" for fact, where in host.sources]
