"""The front door never lies: errors, late subscribers, and a home the system refuses to write.

* every public method of ``RuntimeUpdater`` and ``UpdateJob`` raises only ``LlamaRuntimeError``
  subclasses, a read-only or full home included;
* ``update()`` raises the error that ended its job, as ``use()`` and ``rollback()`` raise theirs;
* ``subscribe()`` on a job already over calls back once with its final state.

Every failure asserts that the previously active runtime is unchanged and still runs.
"""

from __future__ import annotations

import dataclasses
import errno
import inspect
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llama_runtime import (
    Available,
    DiskSpaceError,
    ExportResult,
    FileSystemError,
    GatePolicy,
    InstalledRuntime,
    JobResult,
    JobState,
    ListResult,
    LlamaRuntimeError,
    MirrorReport,
    ReleaseNotFoundError,
    RuntimeEntry,
    RuntimeUpdater,
    StatusResult,
    UpdateJob,
    UpdateOutcome,
    UserInputError,
)
from llama_runtime.updater.api.boundary import BOUNDARY_MARK
from llama_runtime.updater.choice.host import host_for_platform
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, HomeGuard, cli_json, publish_stand_in

#: Generous bound for a job in the stand-in world (it finishes in well under a second).
JOB_SECONDS = 30.0


def make_updater(home: Path, github: FakeGitHub) -> RuntimeUpdater:
    return RuntimeUpdater(
        home, repo=REPO, backend="cpu", api_url=github.api_url, host=lambda: host_for_platform("linux-x64")
    )


def install_two(home: Path, github: FakeGitHub, tmp_path: Path) -> RuntimeUpdater:
    """b7000 then b7100 installed through the front door: b7100 active, b7000 previous."""
    updater = make_updater(home, github)
    for tag in ("b7000", "b7100"):
        publish_stand_in(github, tmp_path, tag)
        state = updater.start_update(tag=tag).wait(JOB_SECONDS)
        assert state.phase == "done", state.error
    return updater


@pytest.fixture
def two_installed(home: Path, github: FakeGitHub, tmp_path: Path) -> RuntimeUpdater:
    return install_two(home, github, tmp_path)


# -- every public method keeps the promise ---------------------------------------------


def _public_methods(cls: type) -> list[str]:
    return [
        name
        for name, member in vars(cls).items()
        # An app builds a RuntimeUpdater; an UpdateJob only ever comes from one.
        if (not name.startswith("_") or (name == "__init__" and cls is RuntimeUpdater))
        and (inspect.isfunction(member) or isinstance(member, property))
    ]


@pytest.mark.parametrize("cls", [RuntimeUpdater, UpdateJob])
def test_every_public_method_is_behind_the_boundary_that_turns_other_errors_into_the_tree(cls: type) -> None:
    unguarded = []
    for name in _public_methods(cls):
        member = vars(cls)[name]
        target = member.fget if isinstance(member, property) else member
        if not getattr(target, BOUNDARY_MARK, False):
            unguarded.append(f"{cls.__name__}.{name}")
    assert unguarded == []
    assert {"start_update", "update", "check", "rollback", "gc", "status", "list"} <= set(
        _public_methods(RuntimeUpdater)
    )


def _refuse_lock(error: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the update lock's file unwritable as the system would: every locking verb meets ``error``."""
    from llama_runtime.runtime.lock import UpdateLock

    def refused(self: UpdateLock, *_args: object, **_kwargs: object) -> Iterator[None]:
        raise OSError(error, "refused by the test", str(self.lock_path))

    monkeypatch.setattr(UpdateLock, "hold", refused)


def test_a_full_disk_under_rollback_and_gc_is_the_disk_full_error_and_changes_nothing(
    two_installed: RuntimeUpdater, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = HomeGuard(None, home)
    _refuse_lock(errno.ENOSPC, monkeypatch)
    for verb in (two_installed.rollback, two_installed.gc):
        with pytest.raises(DiskSpaceError, match=r"disk is full.*update\.lock") as caught:
            verb()
        assert caught.value.exit_code == 4 and isinstance(caught.value.__cause__, OSError)
    guard.assert_intact("b7100")


def test_a_refused_file_under_rollback_is_a_local_error_naming_the_file_and_changes_nothing(
    two_installed: RuntimeUpdater, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = HomeGuard(None, home)
    _refuse_lock(errno.EACCES, monkeypatch)
    with pytest.raises(FileSystemError, match=r"update\.lock") as caught:
        two_installed.rollback()
    assert caught.value.code == "io_error" and caught.value.fault == "local"
    guard.assert_intact("b7100")


def test_a_bug_below_the_front_door_is_an_internal_error_with_the_bug_as_its_cause(
    two_installed: RuntimeUpdater, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = HomeGuard(None, home)
    monkeypatch.setattr("llama_runtime.updater.activate.gc.collect_garbage", lambda *_a, **_k: 1 / 0)
    with pytest.raises(LlamaRuntimeError, match=r"Internal error \(ZeroDivisionError") as caught:
        two_installed.gc(dry_run=True)
    assert type(caught.value) is LlamaRuntimeError and isinstance(caught.value.__cause__, ZeroDivisionError)
    monkeypatch.undo()
    guard.assert_intact("b7100")


# -- a home on a read-only file system ---------------------------------------------------


@pytest.fixture
def read_only_home(github: FakeGitHub, tmp_path: Path) -> Iterator[tuple[RuntimeUpdater, Path]]:
    """Two runtimes installed on a tmpfs that is then remounted read-only (needs CAP_SYS_ADMIN)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        updater = install_two(mount / "home", github, tmp_path)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True, capture_output=True)
        yield updater, mount / "home"
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_read_only_home_makes_every_writing_verb_a_llama_runtime_error_and_keeps_the_runtime(
    read_only_home: tuple[RuntimeUpdater, Path], github: FakeGitHub, tmp_path: Path
) -> None:
    updater, home = read_only_home
    publish_stand_in(github, tmp_path, "b7200")
    guard = HomeGuard(None, home)
    verbs = {
        "start_update": lambda: updater.start_update(tag="b7200").wait(JOB_SECONDS),
        "update": lambda: updater.update(tag="b7200"),
        "check": lambda: updater.check(),
        "rollback": updater.rollback,
        "gc": updater.gc,
    }
    for name, verb in verbs.items():
        try:
            verb()
        except LlamaRuntimeError as exc:
            assert "Read-only file system" in exc.message or exc.fault == "local", (name, exc)
        except Exception as exc:  # the finding: a bare OSError escaped
            pytest.fail(f"{name} raised {type(exc).__name__}: {exc}")
    guard.assert_intact("b7100")


# -- update() raises what ended its job ---------------------------------------------------


def test_update_to_a_tag_that_is_not_released_raises_that_error_and_changes_nothing(
    two_installed: RuntimeUpdater, home: Path
) -> None:
    guard = HomeGuard(None, home)
    with pytest.raises(ReleaseNotFoundError, match="b9999"):
        two_installed.update(tag="b9999")
    state = two_installed.jobs.current()
    assert state is not None and state.phase == "failed" and state.error is not None
    assert state.error.code == "release_not_found"  # the record keeps it for followers
    guard.assert_intact("b7100")


def test_update_that_succeeds_returns_the_job_with_its_outcome(
    two_installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7200")
    job = two_installed.update(tag="b7200")
    assert job.outcome is not None and job.outcome.active.marker.tag == "b7200" and job.exception is None


# -- subscribe() on a job already over ------------------------------------------------------


def test_subscribe_to_an_owned_job_that_ended_calls_back_once_with_the_final_state(
    two_installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7200")
    job = two_installed.start_update(tag="b7200")
    assert job.owned and job.wait(JOB_SECONDS).phase == "done"
    seen: list[JobState] = []
    job.subscribe(seen.append)
    assert [state.phase for state in seen] == ["done"]
    assert seen[0] == job.state() and seen[0].result is not None


def test_subscribe_to_a_followed_job_that_ended_calls_back_once_with_the_final_state(
    two_installed: RuntimeUpdater,
) -> None:
    job = two_installed.current_job()
    assert job is not None and not job.owned
    seen: list[JobState] = []
    called = threading.Event()

    def listener(state: JobState) -> None:
        seen.append(state)
        called.set()

    job.subscribe(listener)
    assert called.wait(JOB_SECONDS)
    time.sleep(0.3)  # a second call would come within a few polls
    assert [state.phase for state in seen] == ["done"]


# -- results typed to the leaf -------------------------------------------------------------


def test_a_finished_jobs_result_names_installed_runtimes_read_from_their_markers(
    two_installed: RuntimeUpdater,
) -> None:
    result = two_installed.jobs.current().result  # type: ignore[union-attr]
    assert result is not None and isinstance(result.active, InstalledRuntime)
    assert result.active.marker.tag == "b7100" and result.active.binary.is_file()
    assert isinstance(result.previous, InstalledRuntime) and result.previous.marker.tag == "b7000"
    assert result.to_json()["active"]["tag"] == "b7100"  # the stored record is unchanged


def test_a_job_result_naming_a_directory_outside_the_homes_runtimes_loads_nothing(
    two_installed: RuntimeUpdater, tmp_path: Path
) -> None:
    stored = two_installed.jobs.current().result.to_json()  # type: ignore[union-attr]
    outside = tmp_path / "elsewhere" / stored["active"]["name"]
    hostile = JobResult.from_json({**stored, "active": {**stored["active"], "runtime_dir": str(outside)}})
    assert hostile.active is None and hostile.previous is not None


def test_ready_and_not_ready_serialise_with_the_same_keys_and_a_code_says_why(
    two_installed: RuntimeUpdater, home: Path, tmp_path: Path
) -> None:
    ready = two_installed.ensure()
    assert ready.ready and ready.code is None
    payload = ready.to_json()
    assert payload["ready"] is True and payload["binary"] == str(ready.binary)
    assert payload["runtime"]["tag"] == "b7100" and json.loads(json.dumps(payload)) == payload
    nothing = RuntimeUpdater(tmp_path / "empty").ensure()
    assert not nothing.ready and nothing.code == "nothing_installed"
    assert set(nothing.to_json()) == set(payload) and nothing.to_json()["code"] == "nothing_installed"
    guard = HomeGuard(None, home)
    ready.binary.write_bytes(b"")  # truncated: the files differ from the marker
    damaged = two_installed.ensure()
    assert not damaged.ready and damaged.code == "damaged" and damaged.to_json()["problem"] == damaged.problem
    assert guard.pointer == (home / "active.json").read_bytes()  # start-up changed nothing


# -- status() and list(): the CLI's answers, typed --------------------------------------------


def test_status_names_active_previous_and_installed_runtimes_as_status_json_does(
    two_installed: RuntimeUpdater, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = two_installed.status()
    assert isinstance(status, StatusResult) and status.home == home
    assert status.active is not None and status.active.marker.tag == "b7100"
    assert status.previous is not None and status.previous.marker.tag == "b7000"
    assert sorted(e.runtime.marker.tag for e in status.installed) == ["b7000", "b7100"]
    assert all(isinstance(e, RuntimeEntry) and e.own_bytes > 0 for e in status.installed)
    assert status.override is None and status.update_running is False and status.trial is None
    code, payload = cli_json(capsys, "--home", str(home), "status", "--json")
    assert code == 0 and payload == json.loads(json.dumps(status.to_json()))


def test_list_flags_the_active_and_previous_runtime_and_lists_available_builds_for_this_host(
    two_installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    listed = two_installed.list()
    assert isinstance(listed, ListResult) and listed.available is None and "available" not in listed.to_json()
    flags = {e.runtime.marker.tag: (e.active, e.previous, e.damage) for e in listed.installed}
    assert flags == {"b7100": (True, False, ()), "b7000": (False, True, ())}
    publish_stand_in(github, tmp_path, "b7200")
    offered = two_installed.list(available=True, limit=2)
    assert offered.available is not None and [a.tag for a in offered.available] == ["b7200", "b7100"]
    assert isinstance(offered.available[0], Available) and offered.available[1].installed
    assert offered.to_json()["available"][0]["tag"] == "b7200" and offered.repo == REPO


def test_list_with_a_limit_below_one_is_bad_input(two_installed: RuntimeUpdater) -> None:
    with pytest.raises(UserInputError, match="limit must be 1 or more"):
        two_installed.list(available=True, limit=0)


# -- the front door depends on its use cases, never the other way round ----------------------


def test_no_module_of_the_api_but_the_front_door_imports_the_front_door() -> None:
    import ast
    import importlib
    import pkgutil

    import llama_runtime.updater.api as api

    leaks = []
    for info in pkgutil.iter_modules(api.__path__, api.__name__ + "."):
        if info.name.endswith(".service"):
            continue
        source = inspect.getsource(importlib.import_module(info.name))
        for node in ast.walk(ast.parse(source)):  # TYPE_CHECKING imports count: they are the same loop
            if isinstance(node, ast.ImportFrom) and node.module == "llama_runtime.updater.api.service":
                leaks.append(info.name)
    assert leaks == []


def test_export_writes_the_active_runtime_as_a_bundle_install_file_restores_elsewhere(
    two_installed: RuntimeUpdater, home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    guard = HomeGuard(None, home)
    result = two_installed.export(tmp_path / "b7100.tar.gz")
    assert isinstance(result, ExportResult) and result.runtime.marker.tag == "b7100"
    assert result.path.is_file() and result.size == result.path.stat().st_size
    elsewhere = make_updater(tmp_path / "elsewhere", github)
    assert elsewhere.install_file(result.path).active.marker.tag == "b7100"
    with pytest.raises(UserInputError):
        make_updater(tmp_path / "empty", github).export(tmp_path / "none.tar.gz")
    guard.assert_intact("b7100")


def test_check_that_applies_an_update_holds_what_it_installed_as_an_update_outcome(
    two_installed: RuntimeUpdater, github: FakeGitHub, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7200")
    result = two_installed.check(apply=True)
    assert result.applied and isinstance(result.outcome, UpdateOutcome)
    assert result.outcome.active.marker.tag == "b7200" and result.outcome.result == "installed"
    assert result.to_json()["outcome"] == result.outcome.to_json()


def test_mirror_sync_writes_a_mirror_another_home_updates_from_and_never_one_inside_the_home(
    two_installed: RuntimeUpdater, home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    guard = HomeGuard(None, home)
    dest = tmp_path / "mirror"
    report = two_installed.mirror_sync(dest, tag="b7100", platforms=["linux-x64"], backends=["cpu"])
    assert isinstance(report, MirrorReport) and report.releases == ["b7100"] and report.fetched
    linux = host_for_platform("linux-x64")
    client = RuntimeUpdater(tmp_path / "client", repo=REPO, backend="cpu", api_url=dest.as_uri(), host=lambda: linux)
    assert client.update(tag="b7100").outcome.active.marker.tag == "b7100"  # type: ignore[union-attr]
    with pytest.raises(UserInputError, match="inside the llama-runtime home"):
        two_installed.mirror_sync(home / "mirror")
    with pytest.raises(UserInputError, match="Unknown platform"):
        two_installed.mirror_sync(dest, platforms=["beos-x64"])
    assert not (home / "mirror").exists()
    guard.assert_intact("b7100")


def test_gate_settings_stored_through_the_front_door_are_what_the_cli_shows(
    two_installed: RuntimeUpdater, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default = two_installed.gate_settings()
    assert isinstance(default, GatePolicy)
    stored = two_installed.gate_settings(dataclasses.replace(default, max_slowdown=0.3, timeout=42.0))
    assert (stored.max_slowdown, stored.timeout) == (0.3, 42.0) and two_installed.gate_settings() == stored
    code, payload = cli_json(capsys, "--home", str(home), "gate", "--json")
    assert code == 0 and (payload["max_slowdown"], payload["timeout"]) == (0.3, 42.0)
    with pytest.raises(UserInputError):
        two_installed.gate_settings(dataclasses.replace(stored, smoke_model=home / "missing.gguf"))
    assert two_installed.gate_settings() == stored  # a refused policy stores nothing
