"""``doctor``: re-verify the active runtime and say what to do.

Checks, in order, each reported as a finding with a verdict: the pointer, the
active runtime's marker, every recorded file (size and sha256), the binary's
``--version`` and ``--list-devices``, the ``LLAMA_SERVER_PATH`` override and
leftovers of interrupted updates. ``--repair`` only ever moves the pointer to
a runtime that passes these checks, and removes those leftovers (staging,
temporary files, downloads of installed releases, marker-less directories the
pointer does not name: see :mod:`updater.recovery`); it never deletes a runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from llama_runtime.runtime.binary import ProcessRunner, run_process, server_override
from llama_runtime.runtime.errors import BusyError, CorruptStateError, VerificationError
from llama_runtime.runtime.layout import Home, InstalledRuntime, Pointer
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.updater.install.installed import verify_files
from llama_runtime.updater.install.recovery import clean_leftovers, find_leftovers
from llama_runtime.updater.install.verify import probe_binary

#: CPU flags that decide which llama.cpp CPU build runs (old Windows avx/avx2/avx512 assets).
_ISA_FLAGS: Final = frozenset({"avx", "avx2", "avx512f", "fma", "f16c", "asimd", "sve", "neon"})


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

    def to_json(self) -> dict[str, object]:
        return {
            "healthy": self.healthy,
            "active": self.active.to_json() if self.active else None,
            "checks": [{"check": f.check, "ok": f.ok, "detail": f.detail} for f in self.findings],
            "repaired": self.repaired,
            "advice": self.advice,
            "host": self.host,
        }

    def lines(self) -> list[str]:
        out = [f"[{'ok' if f.ok else 'FAIL'}] {f.check}: {f.detail}" for f in self.findings]
        if self.repaired:
            out.append(f"repaired: {self.repaired}")
        if self.host is not None:
            sources = self.host.get("sources")
            facts = {k: v for k, v in self.host.items() if k != "sources" and v not in (None, [], False, "")}
            flags = facts.get("cpu_features")
            if isinstance(flags, list):  # people need the ISA level, not 100 flags
                facts["cpu_features"] = [f for f in flags if f in _ISA_FLAGS]
            out.append("host: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
            if isinstance(sources, dict):
                out += [f"  {fact}: from {where}" for fact, where in sources.items()]
        out += [f"next: {a}" for a in self.advice]
        if self.healthy and not self.advice:
            out.append("Everything checks out.")
        return out


def check_runtime(runtime: InstalledRuntime, runner: ProcessRunner, env: Mapping[str, str] | None = None) -> list[str]:
    """Everything wrong with an installed runtime (empty when healthy)."""
    problems = verify_files(runtime)
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


def _repair(home: Home, report: DoctorReport, runner: ProcessRunner, pointer: Pointer) -> None:
    """Point at the best runtime that verifies, deciding and writing under the update lock.

    The pointer seen before the lock is only what was diagnosed: if an update
    changed it meanwhile, the repair stands down rather than overwrite it.
    """
    with UpdateLock(home.lock_path).hold("doctor --repair"):
        try:
            now = home.read_pointer()
        except CorruptStateError:
            now = Pointer()
        if now != pointer:
            report.advice.append("The runtime changed while doctor ran (an update?); run `llama-runtime doctor` again.")
            return
        candidates = home.installed()
        preferred = [r for r in candidates if r.name == pointer.previous] + sorted(
            (r for r in candidates if r.name != pointer.previous),
            key=lambda r: r.marker.installed_at,
            reverse=True,
        )
        for runtime in preferred:
            if not check_runtime(runtime, runner):
                home.write_pointer(Pointer(active=runtime.name, previous=None))
                report.repaired = (
                    f"the pointer now names {runtime.marker.tag} ({runtime.marker.backend}), {runtime.name}"
                )
                report.active = runtime
                report.add("repair", True, report.repaired)
                return
    report.advice.append("No installed runtime passes verification; run `llama-runtime update` to install one.")


def run_doctor(
    home: Home,
    *,
    repair: bool = False,
    runner: ProcessRunner = run_process,
    host: dict[str, object] | None = None,
) -> DoctorReport:
    """Check the home and the active runtime; optionally repair the pointer.

    Args:
        home: The llama-runtime home.
        repair: Point the pointer at a verified runtime when it is damaged.
        runner: The process seam for running binaries.
        host: Host facts (with their sources) to report alongside.
    """
    report = DoctorReport(host=host)
    override = server_override()
    if override is not None:
        report.add(
            "override",
            override.is_file(),
            f"LLAMA_SERVER_PATH={override} is in force; apps run it instead of the managed runtime",
        )
        report.advice.append("Unset LLAMA_SERVER_PATH to let apps use the managed runtime.")
    _check_leftovers(home, report, repair)
    try:
        pointer = home.read_pointer()
    except CorruptStateError as exc:
        report.add("pointer", False, exc.message)
        if repair:
            _repair(home, report, runner, Pointer())
        else:
            report.advice.append("Run `llama-runtime doctor --repair`.")
        return report
    if pointer.active is None:
        orphans = home.installed()
        if not orphans:
            report.add("pointer", True, "no runtime is active yet")
            report.advice.append("Run `llama-runtime update` to install llama.cpp.")
            return report
        # Runtimes without a pointer: the pointer file was lost, not never written.
        report.add("pointer", False, f"{home.pointer_path} is missing but {len(orphans)} runtimes are installed")
        if repair:
            _repair(home, report, runner, pointer)
        else:
            report.advice.append("Run `llama-runtime doctor --repair` to point at the newest verified runtime.")
        return report
    try:
        active = home.load(pointer.active)
    except CorruptStateError as exc:
        report.add("active runtime", False, exc.message)
        if repair:
            _repair(home, report, runner, pointer)
        else:
            report.advice.append("Run `llama-runtime doctor --repair` or `llama-runtime update`.")
        return report
    report.active = active
    report.add("pointer", True, f"names {active.name}")
    problems = check_runtime(active, runner)
    report.add(
        "active runtime",
        not problems,
        "; ".join(problems) if problems else f"{active.marker.tag} ({active.marker.backend}) verifies and runs",
    )
    if problems and repair:
        _repair(home, report, runner, pointer)
    elif problems:
        report.advice.append("Run `llama-runtime doctor --repair` (or `llama-runtime update`) to recover.")
    return report


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
