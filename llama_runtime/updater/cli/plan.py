"""``plan``: what ``update`` would install and why, for this machine or another; downloads nothing.

It asks the same decision as ``update`` and ``check``; ``--explain`` adds every
candidate asset, the channel's resolution and the host facts it went by.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime.updater.cli.common import settings_from_args, tag_or_none, updater_for

if TYPE_CHECKING:
    from llama_runtime.updater.api.results import PlanResult
    from llama_runtime.updater.cli.main import AddParser, Handler, Output


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
    settings = settings_from_args(args)
    tag = tag_or_none(args.tag)
    plan = updater_for(settings).plan(
        tag,
        platform=args.platform,
        cuda_version=args.cuda_version,
        host_file=Path(args.host_file) if args.host_file else None,
    )
    lines = _plan_lines(plan)
    if args.explain:
        lines += _explain_lines(plan)
    out.result(plan.to_json(explain=args.explain), lines)
    return 0


def _plan_lines(plan: PlanResult) -> list[str]:
    """The plan in sentences: the release and asset, extra assets, and why."""
    named = f"{plan.version} (build {plan.tag})" if plan.version else plan.tag
    return [
        f"{plan.repo} {named}: {plan.asset} ({plan.backend})",
        *[f"  + {name}" for name in plan.extra_assets],
        f"why: {plan.reason}",
    ]


def _explain_lines(plan: PlanResult) -> list[str]:
    """``--explain``: the resolution, every candidate and the host facts, for people."""
    lines = [f"resolved through the {plan.channel} channel" + "".join(f"; {n}" for n in plan.resolution)]
    lines.append("candidates:")
    lines += [f"  {'*' if c.taken else '-'} {c.asset}: {c.why}" for c in plan.candidates]
    lines.append("host facts:")
    lines += [f"  {k}: {v}" for k, v in plan.host.items() if k != "sources"]
    lines += [f"  {fact} from: {where}" for fact, where in plan.host_sources]
    return lines
