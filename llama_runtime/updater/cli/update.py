"""``update``: resolve, download, verify and activate a release; roll back on failure.

It runs as the home's update job, so ``job status/wait/cancel`` follow it from
another terminal, and ``--events`` streams it as JSON Lines.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from llama_runtime import BusyError, LlamaRuntimeError
from llama_runtime.updater.cli.common import (
    add_events_flag,
    add_require_provenance,
    add_storage_flags,
    cancel_on_signals,
    duration_arg,
    explain_failure,
    outcome_lines,
    progress_for,
    settings_from_args,
    tag_or_none,
    updater_for,
)

if TYPE_CHECKING:
    from llama_runtime import PlanResult, RuntimeUpdater, UpdateOutcome
    from llama_runtime.updater.cli.main import AddParser, Handler
    from llama_runtime.updater.cli.output import Output


# -- update ------------------------------------------------------------------------------------------------------


def _register_update(add: AddParser) -> dict[str, Handler]:
    """Add ``update``."""
    from llama_runtime.updater.cli.gateopts import add_gate_arguments
    from llama_runtime.updater.cli.main import completes, installed_tags

    p = add("update", "resolve, download, verify and activate a release; roll back on failure")
    which = p.add_mutually_exclusive_group()
    tag = which.add_argument("--tag", help="exact release tag: a build such as b7000 or a release such as v0.3.0")
    completes(tag, installed_tags)  # switching back to one is the common case a shell can know offline
    which.add_argument("--latest", action="store_true", help="the newest release (default)")
    p.add_argument("--cuda-version", help="CUDA line to prefer, e.g. 12 or 12.4")
    p.add_argument("--require-digest", action="store_true", help="refuse assets without a published sha256")
    p.add_argument(
        "--allow-no-device",
        action="store_true",
        help="install an explicit --backend's build even if it lists no such device here (a machine image)",
    )
    p.add_argument(
        "--retry-skipped",
        action="store_true",
        help="try the newest build again although it failed verification here before (status lists such builds)",
    )
    add_require_provenance(p)
    add_storage_flags(p)
    p.add_argument(
        "--wait", default="0", metavar="DURATION", help="wait this long for another update to finish (90, 30s, 10m)"
    )
    add_events_flag(p)
    add_gate_arguments(p, smoke=True)
    return {"update": cmd_update}


def cmd_update(args: argparse.Namespace, out: Output) -> int:
    """``update``: runs as the home's update job, so ``job status/wait/cancel`` follow it from elsewhere."""
    from llama_runtime.updater.cli.readahead import start_readahead

    # The files the imports below are about to read, asked for at once (cold page cache). Here, not
    # before the parser: there the thread slowed warm runs (see the module).
    start_readahead()
    from llama_runtime import Vocabulary
    from llama_runtime.updater.cli.gateopts import with_gate

    settings = with_gate(args, settings_from_args(args))  # bad input is exit 2 before anything changes
    tag = tag_or_none(args.tag)
    if args.cuda_version is not None:
        Vocabulary.cuda_version(args.cuda_version)  # exit 2 before any wait or job
    updater = updater_for(settings)
    bar = progress_for(args)
    listener = out.events if out.events is not None else bar
    try:
        with cancel_on_signals(updater, out):
            job = updater.update(
                tag,
                cuda_version=args.cuda_version,
                require_digest=args.require_digest,
                wait=duration_arg(args.wait, "--wait"),
                operation="update",
                listener=listener,
                allow_no_device=args.allow_no_device,
                retry_skipped=args.retry_skipped,
                pin=tag is not None,  # `update --tag` pins; the scheduled check asks its own way
            )
    except BusyError:
        if out.events is not None and tag is None:
            from llama_runtime.updater.cli.follow import attach_events

            return attach_events(updater, out, busy=updater.busy_error())
        raise updater.busy_error() from None
    except LlamaRuntimeError as exc:
        explain_failure(exc, updater)
        raise
    finally:
        if bar is not None:
            bar.close()
    if job.outcome is None:
        raise LlamaRuntimeError(f"The update job {job.id} ended without a result ({job.state().phase}).")
    _report(job.outcome, updater, args, out)
    return 0


def _report(outcome: UpdateOutcome, updater: RuntimeUpdater, args: argparse.Namespace, out: Output) -> None:
    """The update's result, with a warning when ``LLAMA_SERVER_PATH`` keeps apps on another binary."""
    warnings = list(outcome.warnings)
    override = updater.status().override
    if override:
        warnings.append(
            f"LLAMA_SERVER_PATH={override.path} is set: apps keep running that binary, not the runtime just installed."
        )
    payload = outcome.to_json()
    payload["warnings"] = warnings
    lines = outcome_lines(outcome) + ([] if args.quiet else [f"warning: {w}" for w in warnings])
    if outcome.pinned is not None:
        lines.append(
            f"Pinned {outcome.pinned}: `check --apply`, scheduled jobs and a plain `update` stay on it; "
            "`llama-runtime unpin` releases it."
        )
    out.result(payload, lines)


# -- plan: ``plan``: what ``update`` would install and why; downloads nothing. -----------------------------------


def _register_plan(add: AddParser) -> dict[str, Handler]:
    """Add ``plan``."""
    from llama_runtime.updater.cli.main import completes, installed_tags, platform_names

    p = add("plan", "what update would install and why; downloads nothing")
    which = p.add_mutually_exclusive_group()
    completes(which.add_argument("--tag", help="plan for this release tag, e.g. b7000"), installed_tags)
    which.add_argument("--latest", action="store_true", help="plan for the newest release (default)")
    completes(p.add_argument("--platform", help="plan for another machine: OS-ARCH, e.g. windows-x64"), platform_names)
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


def register(add: AddParser) -> dict[str, Handler]:
    """Add this module's commands."""
    return {**_register_update(add), **_register_plan(add)}
