"""What several CLI commands share: tags typed by people, the progress bar, the
sentences that report an activation, and the hint after a failed update."""

from __future__ import annotations

import argparse
import contextlib
from typing import TYPE_CHECKING

from llama_runtime import LlamaRuntimeError, RemoteError, UserInputError, Vocabulary
from llama_runtime.updater.cli.gateopts import gate_lines

if TYPE_CHECKING:
    from collections.abc import Iterator

    from llama_runtime import InstalledRuntime, RuntimeUpdater, Settings, UpdateOutcome
    from llama_runtime.updater.cli.output import Output
    from llama_runtime.updater.cli.progressbar import TerminalProgress


# -- common ------------------------------------------------------------------------------------------------------

#: Shown under every command's help instead of repeating the global options there.
GLOBAL_EPILOG = (
    "Global options such as --backend, --repo, --home, --json, -q and -v (see `llama-runtime --help`) "
    "may be given before or after the command."
)

#: After a failed first install: where a machine without GitHub gets a runtime from.
OFFLINE_HINT = (
    "Without access to GitHub: point --api-url (LLAMA_RUNTIME_GITHUB_API) at a mirror "
    "(`llama-runtime mirror sync`, an https:// or file:// URL), or install an archive you have with "
    "`llama-runtime install-file ARCHIVE --tag TAG`."
)


def tag_or_none(tag: str | None) -> str | None:
    """``--tag`` checked as :meth:`Vocabulary.tag` checks it, or ``None`` when not given."""
    return None if tag is None else Vocabulary.tag(tag)


def add_require_provenance(parser: argparse.ArgumentParser) -> None:
    """The ``--require-provenance`` flag (also LLAMA_RUNTIME_REQUIRE_PROVENANCE=1)."""
    parser.add_argument(
        "--require-provenance",
        action="store_true",
        help="refuse an asset without a verified build attestation (LLAMA_RUNTIME_REQUIRE_PROVENANCE=1)",
    )


def add_storage_flags(parser: argparse.ArgumentParser) -> None:
    """``--keep N`` (runtimes each update keeps, LLAMA_RUNTIME_KEEP) and ``--fresh-companion``."""
    parser.add_argument(
        "--keep",
        dest="retain",
        metavar="N",
        help="runtimes to keep after the update: active, previous and the newest others (default 3; 0 keeps all; "
        "LLAMA_RUNTIME_KEEP)",
    )
    parser.add_argument(
        "--fresh-companion",
        action="store_true",
        help="download the CUDA runtime companion even when an installed runtime's verified copy fits",
    )


def add_events_flag(parser: argparse.ArgumentParser) -> None:
    """``--events``: JSON Lines on stdout (phases, progress, warnings, then the result or error)."""
    parser.add_argument(
        "--events",
        action="store_true",
        help="JSON Lines on stdout for apps: phase, progress (≤10/s), warning, then result or error",
    )


def cancel_on_signals(updater: RuntimeUpdater, out: Output) -> contextlib.AbstractContextManager[None]:
    """With ``--events``, SIGINT/SIGTERM first ask the running job to stop (see ``cli/events.py``)."""
    if out.events is None:
        return contextlib.nullcontext()
    from llama_runtime.updater.cli.events import cancel_on_signals as on_signals

    events = out.events

    def request_cancel() -> bool:
        job = updater.current_job() if events.job_id is not None else None
        if job is None or job.id != events.job_id:
            return False
        job.cancel()
        return True

    return on_signals(request_cancel)


def duration_arg(value: str | float, option: str) -> float:
    """Seconds in a duration option: ``90``, ``30s``, ``10m`` or ``1.5h`` (as ``--jitter`` takes them).

    Raises:
        UserInputError: Not such a duration (the message names ``option``).
    """
    try:
        return Vocabulary.duration(str(value))
    except UserInputError as exc:
        raise UserInputError(f"{option}: {exc.message}") from None


def progress_for(args: argparse.Namespace) -> TerminalProgress | None:
    """The progress bar on stderr, unless --json, --events, --quiet or --no-progress, or stderr is no terminal."""
    quiet = ("json", "events", "quiet", "no_progress")
    if any(getattr(args, flag, False) for flag in quiet):
        return None
    from llama_runtime.updater.cli.progressbar import terminal_progress

    return terminal_progress()


@contextlib.contextmanager
def progress_bar(args: argparse.Namespace) -> Iterator[TerminalProgress | None]:
    """:func:`progress_for`, its line finished when the work ends, however it ends."""
    bar = progress_for(args)
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


def outcome_lines(outcome: UpdateOutcome) -> list[str]:
    """What ``update``, ``use`` and ``install-file`` say about the runtime they activated."""
    m = outcome.active.marker
    if outcome.skipped is not None:  # not "up to date": the newest build was passed over
        return [
            *attempt_lines(outcome),
            f"Not updated: {outcome.skipped.sentence()}",
            f"{m.repo} {m.tag} ({m.backend}) stays active.",
        ]
    if outcome.result == "up_to_date":
        why = [f"why: {outcome.reason}"] if outcome.reason else []
        return [*attempt_lines(outcome), f"Already up to date: {m.repo} {m.tag} ({m.backend}) is active.", *why]
    if outcome.result == "switched":
        lines = [f"Switched to {m.repo} {m.tag} ({m.backend}), already installed: nothing was downloaded."]
    else:
        named = f"{m.release_version} (build {m.tag})" if m.release_version else m.tag
        lines = [f"Installed {m.repo} {named} ({m.backend}) and made it active."]
    lines = [*attempt_lines(outcome), *lines] + ([f"why: {outcome.reason}"] if outcome.reason else [])
    if outcome.previous:
        p = outcome.previous.marker
        lines.append(f"The previous runtime {p.tag} ({p.backend}) is kept: `llama-runtime rollback` returns to it.")
    lines.append(f"binary: {outcome.active.binary}")
    lines.append(provenance_line(outcome.active))
    if outcome.server and outcome.server.restarted:
        lines.append(f"The running llama-server was restarted on {m.tag}.")
        if outcome.server.reload_required:
            lines.append("Reload your model to use it.")
    return lines + gate_lines(outcome.server) + ([outcome.smoke.line()] if outcome.smoke else [])


def attempt_lines(outcome: UpdateOutcome) -> list[str]:
    """Why ``auto`` ended on another build than its first choice: every build it tried before, in order."""
    before = [a for a in outcome.attempts if a.outcome in ("failed", "skipped")]
    if not before:
        return []
    return [
        "auto went down its candidates, best first (a build that failed left nothing behind):",
        *(f"  {n}. {a.describe()}" for n, a in enumerate(outcome.attempts, 1)),
    ]


def provenance_line(runtime: InstalledRuntime) -> str:
    """``provenance: verified …`` / ``absent …`` / ``unverified …`` for people."""
    p = runtime.provenance
    # The certificate proves who signed, from which ref and trigger, and the commit the
    # signing run checked out; under workflow_run that is the publisher's commit, so the
    # built commit is named only from the release or the binary, never from the certificate.
    built = ""
    if isinstance(p.get("build_commit"), str):
        source = "the release" if p.get("build_commit_from") == "release" else "the binary's --version"
        built = f"; build commit {p['build_commit'][:12]} (from {source})"
    if p["status"] == "verified":
        how = f"trigger {p.get('trigger') or 'unknown'}, ref {p.get('source_ref') or p.get('ref')}"
        return (
            f"provenance: verified, signed by {p.get('repository')} {p.get('workflow')} ({how}), "
            f"signer commit {str(p.get('signer_commit'))[:12]} ({p.get('run_url')}){built}"
        )
    return f"provenance: {p['status']} ({p.get('reason')}){built}"


def explain_failure(exc: LlamaRuntimeError, updater: RuntimeUpdater) -> None:
    """Add the hint a person wants after a failed update, unless the error carries one.

    With a runtime active, that it still is; on a first run, that nothing is
    installed yet, and for a network or remote failure where an offline machine
    gets a runtime from. Read after the failure, which never changes the active
    runtime: so an update that succeeds pays nothing for it.
    """
    if exc.hint is not None:
        return
    if has_active(updater):
        exc.hint = "Nothing changed: the runtime that was active is still active."
    elif isinstance(exc, RemoteError):
        exc.hint = f"Nothing was installed. {OFFLINE_HINT}"
    else:
        exc.hint = "Nothing was installed; no runtime is active yet."


# -- context: What a command builds from its arguments: settings, home, engine. ----------------------------------


def settings_from_args(args: argparse.Namespace, *, follow_active_repo: bool = True) -> Settings:
    """The settings the global flags name, over the environment and the defaults."""
    from llama_runtime import Settings

    return Settings.resolve(
        home=args.home,
        api_url=args.api_url,
        repo=args.repo,
        backend=args.backend,
        require_provenance=bool(getattr(args, "require_provenance", False)),
        channel=args.channel,
        follow_active_repo=follow_active_repo,
        keep=getattr(args, "retain", None),
        fresh_companion=bool(getattr(args, "fresh_companion", False)),
        # The verbs that verify take the flag; a repair may reinstall (and so verify) the active build.
        verifies=hasattr(args, "require_provenance") or bool(getattr(args, "repair", False)),
        ca_bundle=getattr(args, "ca_bundle", None),
        follow=getattr(args, "follow", None),
    )


def updater_for(settings: Settings) -> RuntimeUpdater:
    """The front door over ``settings``: every verb goes through it."""
    from llama_runtime import RuntimeUpdater

    return RuntimeUpdater.from_settings(settings)


def has_active(updater: RuntimeUpdater) -> bool:
    """Whether the pointer names a runtime (a damaged pointer or home counts: something was there)."""
    try:  # status reads the pointer and the home's layout, never the job records (a read sets those aside)
        return updater.status().active is not None
    except LlamaRuntimeError:  # a damaged pointer or home: something was there
        return True


def describe_active_now(args: argparse.Namespace | None) -> str:
    """Which runtime is active right now, as words; never raises."""
    try:
        if args is None:
            raise LookupError("no home yet")
        active = updater_for(settings_from_args(args)).status().active
    except Exception as exc:  # bad settings or a damaged home: the interruption is still the news
        reason = getattr(exc, "message", None) or type(exc).__name__
        return f"the active runtime could not be read ({reason}); `llama-runtime status` shows it"
    return f"{active.describe()} is active" if active is not None else "no runtime is active"
