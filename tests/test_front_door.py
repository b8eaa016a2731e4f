"""One front door: every verb an app needs is a ``RuntimeUpdater`` method with a typed, exported result.

The installs run end to end against the fake GitHub; every failure asserts the
previous runtime is unchanged and still runs.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import types
import typing
import warnings
from pathlib import Path
from typing import Any

import pytest

import llama_runtime
import llama_runtime.errors
import llama_runtime.types
from llama_runtime import (
    BusyError,
    DoctorResult,
    GcResult,
    JobError,
    JobResult,
    JobState,
    LlamaRuntimeError,
    PlanResult,
    RemoveResult,
    RollbackResult,
    RuntimeUpdater,
    UpdateOutcome,
    UserInputError,
)
from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.updater.choice.host import host_for_platform
from llama_runtime.updater.engine import Engine
from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, assert_runs, cli_json, stand_in_server

#: Where the internal types live: a public signature may hold one only if ``llama_runtime`` re-exports it.
INTERNAL_PREFIXES = ("llama_runtime.updater", "llama_runtime.runtime")
#: Generous bound for a job in the stand-in world (it finishes in well under a second).
JOB_SECONDS = 30.0


def cpu_build(directory: Path, tag: str) -> Path:
    files: dict[str, bytes | Path] = {"llama-server": stand_in_server(f"version: {tag[1:]} (stand-in)")}
    return build_release_archive(
        directory / f"{tag}.tar.gz", "tar-tagdir", files, modes={"llama-server": 0o755}, tag=tag
    )


def make_updater(home: Path, github: FakeGitHub) -> RuntimeUpdater:
    return RuntimeUpdater(
        home, repo=REPO, backend="cpu", api_url=github.api_url, host=lambda: host_for_platform("linux-x64")
    )


@pytest.fixture
def two_installed(home: Path, github: FakeGitHub, tmp_path: Path) -> RuntimeUpdater:
    """b7000 then b7100 installed through the front door: b7100 active, b7000 previous."""
    updater = make_updater(home, github)
    for tag in ("b7000", "b7100"):
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): cpu_build(tmp_path, tag)})
        state = updater.start_update(tag=tag).wait(JOB_SECONDS)
        assert state.phase == "done", state.error
    return updater


def active_tag(updater: RuntimeUpdater) -> str:
    ready = updater.ensure()
    assert ready.ready, ready.problem
    return ready.runtime.marker.tag


# -- public types only ----------------------------------------------------------------


def _classes_in(annotation: Any) -> list[type]:
    """Every class an annotation names (through unions, generics, callables and aliases)."""
    found: list[type] = []
    origin = typing.get_origin(annotation)
    if origin is not None:
        if isinstance(origin, type) and origin.__module__ != "builtins":
            found.append(origin)
        for arg in typing.get_args(annotation):
            found += _classes_in(arg)
    elif isinstance(annotation, list):  # Callable's argument list
        for arg in annotation:
            found += _classes_in(arg)
    elif isinstance(annotation, type) and annotation is not types.NoneType:
        found.append(annotation)
    return found


#: The public surface: the top level, the parts of results, and the whole exception tree.
PUBLIC = (*llama_runtime.__all__, *llama_runtime.types.__all__, *llama_runtime.errors.__all__)


def _leaks(classes: list[type], where: str) -> list[str]:
    exported = {id(getattr(llama_runtime, name)) for name in PUBLIC}
    return [
        f"{where}: {cls.__module__}.{cls.__qualname__}"
        for cls in classes
        if cls.__module__.startswith(INTERNAL_PREFIXES) and id(cls) not in exported
    ]


def _hints(obj: Any) -> dict[str, Any]:
    module = importlib.import_module(obj.__module__)
    namespace = {**vars(module), **{name: getattr(llama_runtime, name) for name in PUBLIC}}
    return typing.get_type_hints(obj, globalns=namespace)


def test_public_methods_and_exported_results_name_only_exported_types() -> None:
    leaks: list[str] = []
    checked: set[type] = set()
    for name, member in inspect.getmembers(RuntimeUpdater):
        if name.startswith("_") and name != "__init__":
            continue
        target = member.fget if isinstance(member, property) else member
        if callable(target):
            for param, hint in _hints(target).items():
                leaks += _leaks(_classes_in(hint), f"RuntimeUpdater.{name}({param})")
    pending = [getattr(llama_runtime, n) for n in PUBLIC]
    while pending:
        cls = pending.pop()
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)) or cls in checked:
            continue
        checked.add(cls)
        for field_name, hint in _hints(cls).items():
            named = _classes_in(hint)
            leaks += _leaks(named, f"{cls.__name__}.{field_name}")
            pending += named
    assert leaks == []
    # The check looks where the brief's leaks were: it would have seen them.
    assert {RuntimeUpdater, JobState, DoctorResult, PlanResult} <= checked | {RuntimeUpdater}
    assert _leaks(_classes_in(dict[str, Engine] | None), "probe") != []


def test_every_llama_runtime_error_class_is_exported_from_the_package() -> None:
    missing = []
    for package in ("llama_runtime.runtime", "llama_runtime.updater"):
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            if ".cli." in info.name or info.name.endswith((".__main__", ".cli")):
                continue  # the CLI's own errors end as exit codes, never reach an app
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if (
                    isinstance(value, type)
                    and issubclass(value, LlamaRuntimeError)
                    and value.__module__ == info.name
                    and not name.startswith("_")
                    and getattr(llama_runtime, name, None) is not value
                ):
                    missing.append(f"{info.name}.{name}")
    assert missing == []
    assert set(llama_runtime.__all__) == set(llama_runtime._EXPORTS)
    assert set(llama_runtime.errors.__all__) == set(llama_runtime.errors._EXPORTS)
    assert set(llama_runtime.types.__all__) == set(llama_runtime.types._EXPORTS)


# -- JobState: typed, with deprecated dict-style reads ---------------------------------


def test_job_result_and_error_are_typed_and_dict_reads_still_work_with_a_deprecation_warning() -> None:
    payload = {
        "id": "ab12",
        "phase": "failed",
        "pid": 4242,
        "result": {"result": "installed", "active": {"tag": "b7000"}, "previous": None, "warnings": ["w"]},
        "error": {"code": "verification_failed", "message": "no", "exit_code": 6, "attempts": []},
    }
    state = JobState.from_json(payload)
    assert state is not None and isinstance(state.result, JobResult) and isinstance(state.error, JobError)
    assert (state.result.result, state.result.warnings) == ("installed", ("w",))
    assert state.result.active is None  # a runtime object that names no installed runtime
    assert (state.error.code, state.error.exit_code, state.error.hint) == ("verification_failed", 6, None)
    with pytest.warns(DeprecationWarning, match="dict-style access to JobResult"):
        assert state.result["active"]["tag"] == "b7000"
    with pytest.warns(DeprecationWarning, match="JobError"):
        assert state.error.get("exit_code") == 6
    with pytest.warns(DeprecationWarning):
        assert "attempts" in state.error
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the typed reads and the record never warn
        assert state.to_json()["result"] == payload["result"] and state.to_json()["error"] == payload["error"]
        assert JobState.from_json(state.to_json()) == state


# -- use / rollback / remove -------------------------------------------------------------


def test_use_activates_the_installed_build_and_returns_the_update_object(two_installed: RuntimeUpdater) -> None:
    outcome = two_installed.use("b7000")
    assert isinstance(outcome, UpdateOutcome) and outcome.result == "switched"
    assert outcome.active.marker.tag == "b7000" and outcome.previous is not None
    assert outcome.previous.marker.tag == "b7100"
    assert active_tag(two_installed) == "b7000"
    assert_runs(outcome.active.binary)
    assert outcome.to_json()["result"] == "switched"


def test_use_of_a_build_not_installed_is_a_clear_error_and_changes_nothing(
    two_installed: RuntimeUpdater, home: Path
) -> None:
    guard = HomeGuard(None, home)
    with pytest.raises(UserInputError, match=r"b6000 .*is not installed\. Installed: "):
        two_installed.use("b6000")
    with pytest.raises(UserInputError, match="did you mean b7000"):
        two_installed.use("7000")
    guard.assert_intact("b7100")


def test_rollback_returns_to_the_previous_runtime_and_back(two_installed: RuntimeUpdater) -> None:
    result = two_installed.rollback()
    assert isinstance(result, RollbackResult)
    assert result.active.marker.tag == "b7000" and result.previous is not None
    assert result.previous.marker.tag == "b7100"
    assert result.to_json()["result"] == "switched" and result.to_json()["server_restarted"] is False
    assert active_tag(two_installed) == "b7000"
    assert two_installed.rollback().active.marker.tag == "b7100"
    assert_runs(two_installed.ensure().runtime.binary)  # type: ignore[union-attr]


def test_rollback_while_another_process_holds_the_lock_is_busy_and_changes_nothing(
    two_installed: RuntimeUpdater, home: Path
) -> None:
    guard = HomeGuard(None, home)
    with UpdateLock(Home(two_installed.home).lock_path).hold("test"), pytest.raises(BusyError):
        two_installed.rollback()
    guard.assert_intact("b7100")


def test_remove_of_the_previous_runtime_is_refused_and_of_an_older_one_frees_it(
    two_installed: RuntimeUpdater, home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    guard = HomeGuard(None, home)
    with pytest.raises(UserInputError):
        two_installed.remove("b7000")  # the rollback target
    guard.assert_intact("b7100")
    github.add_release(REPO, "b7200", {CPU_TAR.format(tag="b7200"): cpu_build(tmp_path, "b7200")})
    assert two_installed.start_update(tag="b7200").wait(JOB_SECONDS).phase == "done"
    result = two_installed.remove("b7000")
    assert isinstance(result, RemoveResult) and result.removed.marker.tag == "b7000" and result.freed_bytes > 0
    assert not result.removed.path.exists()
    assert sorted(e.runtime.marker.tag for e in two_installed.status().installed) == ["b7100", "b7200"]
    assert active_tag(two_installed) == "b7200"


# -- install_file / gc ---------------------------------------------------------------


def test_install_file_installs_an_archive_offline_and_records_ggml_org_when_no_repo_was_given(
    home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    archive = cpu_build(tmp_path, "b7300")
    named = archive.rename(tmp_path / CPU_TAR.format(tag="b7300"))
    updater = RuntimeUpdater(home, backend="cpu", api_url=github.api_url)
    outcome = updater.install_file(named)
    assert outcome.result == "installed" and outcome.active.marker.tag == "b7300"
    assert outcome.active.marker.repo == "ggml-org/llama.cpp" and outcome.active.marker.source != "download"
    assert github.requests == []  # offline: no request at all
    assert active_tag(updater) == "b7300"


def test_install_file_with_a_wrong_digest_is_refused_and_changes_nothing(
    two_installed: RuntimeUpdater, home: Path, tmp_path: Path
) -> None:
    named = cpu_build(tmp_path, "b7300").rename(tmp_path / CPU_TAR.format(tag="b7300"))
    guard = HomeGuard(None, home)
    with pytest.raises(LlamaRuntimeError, match=r"sha256|digest"):
        two_installed.install_file(named, sha256="0" * 64)
    guard.assert_intact("b7100")


def test_gc_dry_run_names_what_it_would_remove_and_removes_nothing(
    two_installed: RuntimeUpdater, home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    for tag in ("b7200", "b7300"):
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): cpu_build(tmp_path, tag)})
        assert two_installed.start_update(tag=tag).wait(JOB_SECONDS).phase == "done"
    guard = HomeGuard(None, home)
    dry = two_installed.gc(keep=2, dry_run=True)
    assert isinstance(dry, GcResult) and dry.dry_run and dry.freed_bytes > 0
    removed_tags = {item.tag for item in dry.removed if item.kind == "runtime"}
    # Each update already kept only 3 runtimes: b7000 went with b7300's install.
    assert removed_tags == {"b7100"}
    guard.assert_intact("b7300")
    done = two_installed.gc(keep=2)
    assert {item.tag for item in done.removed if item.kind == "runtime"} == removed_tags
    assert done.to_json()["freed_bytes"] == done.freed_bytes
    assert sorted(e.runtime.marker.tag for e in two_installed.status().installed) == ["b7200", "b7300"]
    assert_runs(two_installed.ensure().runtime.binary)  # type: ignore[union-attr]


# -- doctor (repair as a job) -----------------------------------------------------------


def test_doctor_without_repair_reports_healthy_and_runs_no_job(two_installed: RuntimeUpdater) -> None:
    before = two_installed.jobs.current()
    report = two_installed.doctor()
    assert isinstance(report, DoctorResult) and report.healthy and report.job_id is None
    assert report.active is not None and report.active.marker.tag == "b7100"
    assert all(check.ok for check in report.checks) and report.error_message is None
    assert two_installed.jobs.current() == before


def test_doctor_repair_of_a_truncated_binary_runs_as_a_job_that_job_status_shows(
    two_installed: RuntimeUpdater, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = two_installed.ensure().runtime.binary  # type: ignore[union-attr]
    binary.write_bytes(b"")
    seen: list[str] = []
    report = two_installed.doctor(repair=True, listener=lambda s: seen.append(s.phase))
    assert report.healthy and report.repaired is not None and report.job_id is not None
    assert active_tag(two_installed) == "b7100"
    assert_runs(two_installed.ensure().runtime.binary)  # type: ignore[union-attr]
    state = two_installed.jobs.current()
    assert state is not None and state.id == report.job_id and state.operation == "doctor"
    assert state.phase == "done" and state.result is not None and state.result.healthy is True
    assert seen[-1] == "done"
    code, payload = cli_json(capsys, "--home", str(home), "job", "status")
    assert code == 0 and payload["job"]["id"] == report.job_id and payload["job"]["operation"] == "doctor"


def test_doctor_repair_while_an_update_holds_the_lock_is_busy_and_changes_nothing(
    two_installed: RuntimeUpdater, home: Path
) -> None:
    guard = HomeGuard(None, home)
    before = two_installed.jobs.current()
    with UpdateLock(Home(two_installed.home).lock_path).hold("update"), pytest.raises(BusyError):
        two_installed.doctor(repair=True)
    assert two_installed.jobs.current() == before  # no job was claimed for the refused repair
    guard.assert_intact("b7100")


# -- plan ----------------------------------------------------------------------------


def test_plan_names_the_newest_build_and_downloads_nothing(two_installed: RuntimeUpdater, github: FakeGitHub) -> None:
    github.add_release(REPO, "b7400", {CPU_TAR.format(tag="b7400"): cpu_build(two_installed.home, "b7400")})
    del github.requests[:]
    plan = two_installed.plan()
    assert isinstance(plan, PlanResult) and plan.tag == "b7400" and plan.asset == CPU_TAR.format(tag="b7400")
    assert plan.backend == "cpu" and plan.action == "install" and plan.candidates
    assert plan.to_json(explain=True)["resolution"][0] == f"channel {plan.channel}"
    assert "candidates" not in plan.to_json()
    assert not any(request.path.endswith(plan.asset) for request in github.requests)  # no archive fetched
    assert active_tag(two_installed) == "b7100"


def test_plan_for_both_a_platform_and_a_host_file_is_a_clear_error(two_installed: RuntimeUpdater) -> None:
    with pytest.raises(UserInputError, match="--host FILE or --platform, not both"):
        two_installed.plan(platform="linux-x64", host_file="host.json")


# -- the CLI goes through the front door -------------------------------------------------

#: The CLI's handlers for the front door's verbs, by module.
FRONT_DOOR_HANDLERS = {
    "lifecycle": ("cmd_use", "cmd_remove", "cmd_rollback", "cmd_doctor"),
    "offline": ("cmd_install_file", "cmd_gc"),
    "update": ("cmd_update", "cmd_plan"),
    "jobs": ("cmd_check", "cmd_job"),
    "status": ("cmd_status", "cmd_server"),
}
#: What those handlers may import besides the CLI's own modules: the public API, as an app sees it.
ALLOWED_IMPORTS = {"llama_runtime"}


def test_the_clis_handlers_of_the_front_doors_verbs_import_no_internals() -> None:
    import ast

    leaks = []
    for module_name, handlers in FRONT_DOOR_HANDLERS.items():
        module = importlib.import_module(f"llama_runtime.updater.cli.{module_name}")
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in handlers:
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and inner.module is not None:
                        name = inner.module
                        if not name.startswith("llama_runtime.updater.cli") and name not in ALLOWED_IMPORTS:
                            leaks.append(f"{module_name}.{node.name}: {name}")
    assert leaks == []


def test_a_job_error_built_from_its_attributes_reads_and_serialises_like_a_stored_one() -> None:
    error = JobError(code="busy", message="Another update runs.", exit_code=3)
    assert bool(error) and error.to_json() == {"code": "busy", "message": "Another update runs.", "exit_code": 3}
    assert error == JobError.from_json(error.to_json())
    with pytest.warns(DeprecationWarning):
        assert error["exit_code"] == 3
