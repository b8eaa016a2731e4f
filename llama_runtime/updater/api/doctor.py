"""``doctor``: re-verify the active runtime and say what to do.

Checks, in order, each reported as a finding with a verdict: the pointer, the
active runtime's marker, every recorded file (size and sha256), the binary's
``--version`` and ``--list-devices``, the ``LLAMA_SERVER_PATH`` override and
leftovers of interrupted updates. ``--repair`` first reinstalls a damaged
active build in place (the same release, through the full verification), and
only when that cannot be done moves the pointer to a runtime that passes these
checks, saying so when that one is older and keeping the damaged one as
``previous``. It removes leftovers (staging, temporary files, downloads of
installed releases, marker-less directories the pointer does not name: see
:func:`~llama_runtime.updater.activate.gc.find_leftovers`); it never deletes a runtime, and never touches one a
newer llama-runtime installed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from llama_runtime.runtime.binary import ProcessRunner, run_process, server_override
from llama_runtime.runtime.errors import BusyError, CorruptStateError, LlamaRuntimeError, VerificationError
from llama_runtime.runtime.fingerprint import record_runtime
from llama_runtime.runtime.fsutil import set_aside
from llama_runtime.runtime.layout import Home, InstalledRuntime, Pointer
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.runtime.marker import ForeignMarkerError, install_order, provenance_summary
from llama_runtime.runtime.snapshot import HomeSnapshot
from llama_runtime.updater.activate.gc import clean_leftovers, find_leftovers
from llama_runtime.updater.offline.export import unrecorded_files
from llama_runtime.updater.release.tags import compare_tags, parse_tag
from llama_runtime.updater.verify.installed import verify_files
from llama_runtime.updater.verify.verify import probe_binary


@dataclass
class Finding:
    """One check and its outcome."""

    check: str
    ok: bool
    detail: str


@dataclass
class DoctorReport:
    """All findings, and what to do next."""

    findings: list[Finding] = field(default_factory=list)
    active: InstalledRuntime | None = None
    repaired: str | None = None
    advice: list[str] = field(default_factory=list)
    host: dict[str, object] | None = None

    @property
    def healthy(self) -> bool:
        """Whether every check passed, or a repair restored a verified runtime."""
        return self.repaired is not None or all(f.ok for f in self.findings)

    def add(self, check: str, ok: bool, detail: str) -> None:
        self.findings.append(Finding(check, ok, detail))

    def error_message(self) -> str | None:
        """The one sentence a person reads when the report is unhealthy (contract: ``error.message``)."""
        if self.healthy:
            return None
        failed = [f"{f.check}: {f.detail}" for f in self.findings if not f.ok]
        message = "The runtime does not verify (" + "; ".join(failed[:3]) + ")."
        return message + (f" {self.advice[0]}" if self.advice else "")

    def to_json(self) -> dict[str, object]:
        payload: dict[str, object] = {
            "healthy": self.healthy,
            "active": self.active.to_json() if self.active else None,
            "checks": [{"check": f.check, "ok": f.ok, "detail": f.detail} for f in self.findings],
            "repaired": self.repaired,
            "advice": self.advice,
            "host": self.host,
        }
        message = self.error_message()
        if message is not None:
            # Every non-zero --json exit carries error.message (exit 6: verification failed).
            payload["error"] = {"code": "verification_failed", "message": message, "exit_code": 6}
        return payload

    def lines(self, *, quiet: bool = False) -> list[str]:
        """The report for people; ``quiet``: the failed checks, the repair, the advice and the verdict only."""
        out = [f"[{'ok' if f.ok else 'FAIL'}] {f.check}: {f.detail}" for f in self.findings if not (quiet and f.ok)]
        if self.repaired:
            out.append(f"repaired: {self.repaired}")
        if self.host is not None and not quiet:
            sources = self.host.get("sources")
            facts = {k: v for k, v in self.host.items() if k != "sources" and v not in (None, [], False, "")}
            out.append("host: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
            if isinstance(sources, dict):
                out += [f"  {fact}: from {where}" for fact, where in sources.items()]
        out += [f"next: {a}" for a in self.advice]
        if self.healthy and not self.advice:
            out.append("Everything checks out.")
        return out


def check_runtime(
    runtime: InstalledRuntime,
    runner: ProcessRunner,
    env: Mapping[str, str] | None = None,
    digest: Callable[[Path], str] | None = None,
) -> list[str]:
    """Everything wrong with an installed runtime (empty when healthy); ``digest`` as :func:`verify_files` takes it."""
    problems = verify_files(runtime, digest)
    if not problems:
        try:
            probe_binary(
                runtime.binary,
                backend=runtime.marker.backend,
                files=list(runtime.marker.files),
                host_has_device=False,
                runner=runner,
                env=env,
            )
        except VerificationError as exc:
            problems.append(exc.message)
    return problems


#: Reinstalls the build of a damaged runtime (same repo, tag, asset) through the
#: full verification and returns the new active runtime; raises LlamaRuntimeError.
Reinstall = Callable[[InstalledRuntime], InstalledRuntime]


def _reinstall(active: InstalledRuntime, reinstall: Reinstall, runner: ProcessRunner, report: DoctorReport) -> bool:
    """Repair in place: the damaged build again, from what is at hand; whether it worked."""
    what = f"{active.marker.tag} ({active.marker.backend})"
    try:
        fresh = reinstall(active)
    except LlamaRuntimeError as exc:
        report.add("reinstall", False, f"could not reinstall {what}: {exc.message}")
        return False
    problems = check_runtime(fresh, runner)
    if problems:  # the installer verified it; this only guards against a racing change
        report.add("reinstall", False, f"the reinstalled {what} does not verify: {'; '.join(problems[:3])}")
        return False
    report.repaired = f"reinstalled {what} through the full verification: {fresh.name}"
    report.active = fresh
    report.add("repair", True, report.repaired)
    # Retention may have removed the damaged copy already; one that stays is named, its tag now means two runtimes.
    if fresh.name != active.name and active.path.is_dir():
        report.advice.append(
            f"The damaged copy {active.name} is kept; `llama-runtime remove {active.name}` (or `llama-runtime gc`) "
            "deletes it."
        )
    return True


def _is_older(candidate: InstalledRuntime, than: InstalledRuntime | None) -> bool:
    """Whether moving from ``than`` to ``candidate`` goes back (unknown: assume it does)."""
    if than is None:
        return True  # a runtime whose marker cannot be read may be the newest one
    order = compare_tags(parse_tag(candidate.marker.tag), parse_tag(than.marker.tag))
    return order is None or order < 0 or (order == 0 and install_order(candidate.marker) < install_order(than.marker))


def _repair(
    home: Home, report: DoctorReport, runner: ProcessRunner, pointer: Pointer, *, require_provenance: bool = False
) -> None:
    """Point at the best runtime that verifies, deciding and writing under the update lock.

    With ``require_provenance``, a runtime whose recorded provenance is not verified is never a candidate.

    The pointer seen before the lock is only what was diagnosed: if an update
    changed it meanwhile, the repair stands down rather than overwrite it.
    Moving back to an older runtime is said, and the damaged newer one stays
    the rollback target (``previous``) so nothing newer is forgotten.
    """
    with UpdateLock(home.lock_path).hold("doctor --repair"):
        _set_aside_directory(home.pointer_path, report, "pointer")  # else no pointer can be written
        snapshot = HomeSnapshot.read(home)  # a damaged pointer reads as empty
        if snapshot.pointer != pointer:
            report.advice.append("The runtime changed while doctor ran (an update?); run `llama-runtime doctor` again.")
            return
        # Only runtimes with a valid marker are candidates; a damaged one is never pointed at.
        candidates = [r for r in snapshot.runtimes if r.name != pointer.active]
        preferred = [r for r in candidates if r.name == pointer.previous] + sorted(
            (r for r in candidates if r.name != pointer.previous),
            key=lambda r: install_order(r.marker),
            reverse=True,
        )
        damaged = snapshot.find(pointer.active)
        for runtime in preferred:
            if require_provenance and not _provenance_verified(runtime, report):
                continue
            if check_runtime(runtime, runner, digest=snapshot.sha256):
                continue
            was_active = pointer.active
            going_back = was_active is not None and _is_older(runtime, damaged)
            keep = was_active if was_active and going_back and home.runtime_path(was_active).is_dir() else None
            home.write_pointer(Pointer(active=runtime.name, previous=keep))
            record_runtime(home.root, runtime.name, runtime.path, runtime.marker)  # every file was just hashed
            report.repaired = f"the pointer now names {runtime.marker.tag} ({runtime.marker.backend}), {runtime.name}"
            report.active = runtime
            report.add("repair", True, report.repaired)
            if keep is not None:
                was = f"{damaged.marker.tag} ({damaged.marker.backend})" if damaged else keep
                report.advice.append(
                    f"Moved back to the older {runtime.marker.tag} because {was} is damaged; {was} is kept as "
                    "the previous runtime. Reinstall it with `llama-runtime update"
                    + (f" --tag {damaged.marker.tag}`." if damaged else "`.")
                )
            return
    report.advice.append("No installed runtime passes verification; run `llama-runtime update` to install one.")


def _provenance_verified(runtime: InstalledRuntime, report: DoctorReport) -> bool:
    """Whether ``runtime``'s marker records verified provenance; when not, the advice says why it was passed over."""
    recorded = provenance_summary(runtime.marker)
    if recorded["status"] == "verified":
        return True
    report.advice.append(
        f"{runtime.marker.tag} ({runtime.marker.backend}), {runtime.name}, was not considered: its provenance is "
        f"'{recorded['status']}' and LLAMA_RUNTIME_REQUIRE_PROVENANCE requires a verified one."
    )
    return False


def run_doctor(
    home: Home,
    *,
    repair: bool = False,
    runner: ProcessRunner = run_process,
    host: dict[str, object] | None = None,
    reinstall: Reinstall | None = None,
    require_provenance: bool = False,
) -> DoctorReport:
    """Check the home and the active runtime; optionally repair the pointer.

    Args:
        home: The llama-runtime home.
        repair: Point the pointer at a verified runtime when it is damaged.
        runner: The process seam for running binaries.
        host: Host facts (with their sources) to report alongside.
        reinstall: With ``repair``, reinstalls a damaged active runtime's build
            (tried before moving the pointer to another runtime).
        require_provenance: A repair never points at a runtime whose provenance is not verified.

    Raises:
        UnsafeHomeError: The home is not safely ours (a file, a link loop, another user's).
    """
    home.check_safe()  # a home that is not safely a directory of ours is refused before anything is read
    report = DoctorReport(host=host)
    _check_override(report)
    _check_locks(home, report, repair)
    _check_leftovers(home, report, repair)
    _check_trial(home, report, repair)
    # One look at the home for the diagnosis; a repair looks again under the lock.
    snapshot = HomeSnapshot.read(home)
    pointer = snapshot.pointer
    if snapshot.pointer_error is not None:
        report.add("pointer", False, snapshot.pointer_error.message)
        advice = "Run `llama-runtime doctor --repair`."
        _repair_or_advise(home, report, runner, Pointer(), repair, advice, require_provenance=require_provenance)
    elif pointer.active is None:
        _check_no_active(snapshot, report, runner, repair, require_provenance=require_provenance)
    elif (
        active := _load_active(snapshot, report, runner, pointer.active, repair, require_provenance=require_provenance)
    ) is not None:
        _check_active(
            home,
            report,
            runner,
            pointer,
            active,
            repair=repair,
            reinstall=reinstall,
            require_provenance=require_provenance,
        )
    _advise_damaged(snapshot, report)
    return report


def _check_locks(home: Home, report: DoctorReport, repair: bool) -> None:
    """A directory where a lock file belongs stops every locked command; ``repair`` moves it aside."""
    for path in (home.lock_path, home.switch_lock_path):
        if not path.is_dir() or path.is_symlink():
            continue
        if repair:
            _set_aside_directory(path, report, "locks")  # nobody can hold a lock that is a directory
            continue
        report.add("locks", False, f"{path} is a directory, not a lock file; no command that changes the home can run")
        report.advice.append("Run `llama-runtime doctor --repair` to move it aside (nothing in it is deleted).")


def _set_aside_directory(path: Path, report: DoctorReport, check: str) -> None:
    """Move a directory standing where a file of ours belongs to a reported name; never delete it."""
    if not path.is_dir() or path.is_symlink():
        return
    aside = set_aside(path)
    report.add(check, True, f"moved the directory that stood at {path} to {aside} (nothing in it was deleted)")
    report.advice.append(f"Look at {aside} and delete it once it holds nothing you need.")


def _check_trial(home: Home, report: DoctorReport, repair: bool) -> None:
    """A switch that ended before its check's verdict: reverted with ``repair`` (runtime.trial), else reported."""
    from llama_runtime.runtime.trial import finish_abandoned_trial, owner_alive, read_trial

    trial = read_trial(home)
    if trial is None:
        return
    if owner_alive(trial):
        report.add("trial", True, f"{trial.describe()}; its check is running now")
        return
    if not repair:
        report.add(
            "trial",
            False,
            f"{trial.describe()}, and the switch ended before its check gave a verdict; "
            f"`llama-runtime doctor --repair` (or the next update) reverts to {trial.before_name}",
        )
        return
    try:
        with UpdateLock(home.lock_path).hold("doctor --repair"):
            done = finish_abandoned_trial(home)
    except BusyError:
        report.advice.append("An update started meanwhile; it finishes the abandoned trial itself.")
        return
    if done is not None:
        report.add("trial", True, done)


def _advise_damaged(snapshot: HomeSnapshot, report: DoctorReport) -> None:
    """Name the damaged runtime directories the pointer does not name (those are reported above)."""
    unnamed = [
        d for d in snapshot.damaged.values() if d.name not in {snapshot.pointer.active, snapshot.pointer.previous}
    ]
    if unnamed:
        shown = "; ".join(f"{d.name}: {d.reason}" for d in unnamed[:3])
        report.advice.append(
            f"{len(unnamed)} damaged runtime directories are never used ({shown}); `llama-runtime gc` removes them."
        )


def _repair_or_advise(
    home: Home,
    report: DoctorReport,
    runner: ProcessRunner,
    pointer: Pointer,
    repair: bool,
    advice: str,
    *,
    require_provenance: bool,
) -> None:
    """With ``repair``, point at the best runtime that verifies; else tell people how."""
    if repair:
        _repair(home, report, runner, pointer, require_provenance=require_provenance)
    else:
        report.advice.append(advice)


def _check_override(report: DoctorReport) -> None:
    """``LLAMA_SERVER_PATH`` makes apps run another binary: say so, and whether it exists."""
    override = server_override()
    if override is None:
        return
    report.add(
        "override",
        override.is_file(),
        f"LLAMA_SERVER_PATH={override} is in force; apps run it instead of the managed runtime",
    )
    report.advice.append("Unset LLAMA_SERVER_PATH to let apps use the managed runtime.")


def _check_no_active(
    snapshot: HomeSnapshot, report: DoctorReport, runner: ProcessRunner, repair: bool, *, require_provenance: bool
) -> None:
    """The pointer names nothing: fine on a new home, damage when runtimes are installed."""
    home, pointer, orphans = snapshot.home, snapshot.pointer, snapshot.runtimes
    if not orphans:
        report.add("pointer", True, "no runtime is active yet")
        report.advice.append("Run `llama-runtime update` to install llama.cpp.")
        return
    # Runtimes without a pointer: the pointer file was lost, not never written.
    report.add("pointer", False, f"{home.pointer_path} is missing but {len(orphans)} runtimes are installed")
    advice = "Run `llama-runtime doctor --repair` to point at the newest verified runtime."
    _repair_or_advise(home, report, runner, pointer, repair, advice, require_provenance=require_provenance)


def _load_active(
    snapshot: HomeSnapshot,
    report: DoctorReport,
    runner: ProcessRunner,
    name: str,
    repair: bool,
    *,
    require_provenance: bool,
) -> InstalledRuntime | None:
    """The runtime the pointer names, or ``None`` once its unreadable marker is reported (and repaired)."""
    home, pointer = snapshot.home, snapshot.pointer
    try:
        return snapshot.load(name)
    except ForeignMarkerError as exc:
        # Not damage: a newer llama-runtime wrote it. Moving away would drop it.
        report.add("active runtime", False, exc.message)
        report.advice.append(
            "doctor leaves that runtime active and changes nothing; upgrade llama-runtime to verify or repair it."
        )
    except CorruptStateError as exc:
        report.add("active runtime", False, exc.message)
        advice = "Run `llama-runtime doctor --repair` or `llama-runtime update`."
        _repair_or_advise(home, report, runner, pointer, repair, advice, require_provenance=require_provenance)
    return None


def _check_active(
    home: Home,
    report: DoctorReport,
    runner: ProcessRunner,
    pointer: Pointer,
    active: InstalledRuntime,
    *,
    repair: bool,
    reinstall: Reinstall | None,
    require_provenance: bool,
) -> None:
    """Verify the active runtime's files and binary; repair: reinstall it, else move the pointer."""
    report.active = active
    report.add("pointer", True, f"names {active.name}")
    problems = check_runtime(active, runner)
    report.add(
        "active runtime",
        not problems,
        "; ".join(problems) if problems else f"{active.marker.tag} ({active.marker.backend}) verifies and runs",
    )
    if not problems and repair:  # every file was just hashed: status and ensure() need only stat it
        record_runtime(home.root, active.name, active.path, active.marker)
    if problems and repair:
        if reinstall is None or not _reinstall(active, reinstall, runner, report):
            _repair(home, report, runner, pointer, require_provenance=require_provenance)
    elif problems:
        report.advice.append("Run `llama-runtime doctor --repair` (or `llama-runtime update`) to recover.")
    else:
        _advise_unrecorded(active, report)
        if active.marker.device_warning:  # installed with --allow-no-device: never "everything checks out"
            report.advice.append(
                f"{active.marker.device_warning}. Reinstall it on a machine with that device, or "
                f"`llama-runtime update --backend auto --tag {active.marker.tag}` to detect what this one has."
            )


def _advise_unrecorded(active: InstalledRuntime, report: DoctorReport) -> None:
    """Files in the active runtime its marker does not record: never deleted, but said (``export`` refuses them).

    ggml loads backend libraries from the binary's directory, so a stray file there may run.
    """
    strays = unrecorded_files(active)
    if strays:
        shown = ", ".join(strays[:3]) + (f" (and {len(strays) - 3} more)" if len(strays) > 3 else "")
        report.advice.append(
            f"The active runtime holds {shown}, which its install marker does not record (written there after the "
            f"install?); `llama-runtime export` refuses it until they are moved out of {active.path}."
        )


def _check_leftovers(home: Home, report: DoctorReport, repair: bool) -> None:
    lock = UpdateLock(home.lock_path)
    if home.lock_path.exists() and lock.is_held():
        return  # staging belongs to the update that is running
    found = find_leftovers(home)
    if not found:
        return
    if not repair:
        report.advice.append(
            f"{len(found)} leftovers of interrupted updates (e.g. {found[0].path}); "
            "`llama-runtime doctor --repair` or the next update removes them."
        )
        return
    try:
        with lock.hold("doctor --repair"):
            removed = clean_leftovers(home)
    except BusyError:
        report.advice.append("An update started meanwhile; it removes the leftovers itself.")
        return
    report.add("leftovers", True, f"removed {len(removed)} leftovers of interrupted updates")
