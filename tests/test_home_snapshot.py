"""One look at the home, and one policy for a runtime whose marker is missing, unreadable or foreign.

The home holds b7000 (neither active nor previous), b7001 (previous) and b7002
(active), stand-in CPU builds installed by real updates from FakeGitHub. Each
test damages one marker one of three ways and checks the policy of
runtime/layout.py: the runtime is listed as damaged with the reason, never
chosen by ``use``, ``rollback`` or a "nothing to do" short-circuit, pointed away
from by ``doctor --repair`` and removed by ``gc``. Every refusal leaves the
active runtime unchanged and running (HomeGuard).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.runtime.layout import Home
from llama_runtime.runtime.snapshot import HomeSnapshot
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, assert_runs, run_json, stand_in_tarball

TAGS = ("b7000", "b7001", "b7002")

#: How a marker is damaged -> the code of the error that reading it raises.
KINDS = {"missing": "corrupt_state", "unreadable": "corrupt_state", "foreign": "foreign_marker"}
#: Words of the reason each kind is listed with (runtime/marker.py's messages).
REASONS = {"missing": "has no install marker", "unreadable": "is not valid JSON", "foreign": "newer llama-runtime"}


@pytest.fixture
def three(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path) -> dict[str, str]:
    """b7000, b7001 (previous) and b7002 (active) installed; returns tag -> runtime directory name."""
    names: dict[str, str] = {}
    for tag in TAGS:
        tarball = stand_in_tarball(tmp_path / f"{tag}.tar.gz", tag=tag)
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): tarball})
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
        assert code == 0, payload
        names[tag] = Path(payload["active"]["runtime_dir"]).name
    assert pointer(home) == {"active": names["b7002"], "previous": names["b7001"]}
    return names


def pointer(home: Path) -> dict[str, Any]:
    raw = json.loads((home / "active.json").read_text())
    return {"active": raw["active"], "previous": raw["previous"]}


def server_of(home: Path, name: str) -> Path:
    """The ``llama-server`` of runtime ``name`` (found on disk: its marker may be the damaged part)."""
    return next((home / "runtimes" / name).rglob("llama-server"))


def damage_marker(home: Path, name: str, kind: str) -> None:
    """Make the marker of runtime ``name`` missing, not JSON, or one a newer llama-runtime wrote."""
    path = home / "runtimes" / name / "llama-runtime.json"
    if kind == "missing":
        path.unlink()
    elif kind == "unreadable":
        path.write_text("{not json")
    else:
        path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 99}))


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_runtime_with_a_damaged_marker_is_listed_as_damaged_with_the_reason_never_as_installed(
    capsys: pytest.CaptureFixture[str], home: Path, three: dict[str, str], kind: str
) -> None:
    damage_marker(home, three["b7000"], kind)
    snapshot = HomeSnapshot.read(Home(home))
    assert [r.marker.tag for r in snapshot.runtimes] == ["b7001", "b7002"]
    damaged = snapshot.damaged[three["b7000"]]
    assert damaged.error.code == KINDS[kind] and REASONS[kind] in damaged.reason
    assert damaged.foreign is (kind == "foreign")
    code, listed = run_json(capsys, home, None, "list")
    assert code == 0, listed
    assert [r["tag"] for r in listed["installed"]] == ["b7001", "b7002"]
    assert [(d["name"], d["code"]) for d in listed["damaged"]] == [(three["b7000"], KINDS[kind])]
    assert REASONS[kind] in listed["damaged"][0]["reason"]


def test_a_home_without_damage_lists_no_damaged_runtime(
    capsys: pytest.CaptureFixture[str], home: Path, three: dict[str, str]
) -> None:
    code, listed = run_json(capsys, home, None, "list")
    assert code == 0 and listed["damaged"] == [], listed
    assert len(HomeSnapshot.read(Home(home)).runtimes) == 3


@pytest.mark.parametrize("kind", list(KINDS))
def test_use_of_a_runtime_with_a_damaged_marker_is_refused_and_the_active_one_still_runs(
    capsys: pytest.CaptureFixture[str], home: Path, three: dict[str, str], kind: str
) -> None:
    damage_marker(home, three["b7000"], kind)
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, None, "use", three["b7000"])
    assert code == 2, payload  # not an installed runtime: the message lists those that are
    assert "is not installed" in payload["error"]["message"]
    code, payload = run_json(capsys, home, None, "use", "b7000")
    assert code == 2 and "is not installed" in payload["error"]["message"], payload
    guard.assert_intact("b7002", capsys=capsys)


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_api_use_of_a_runtime_with_a_damaged_marker_raises_and_the_active_one_still_runs(
    home: Path, three: dict[str, str], kind: str
) -> None:
    from llama_runtime import CorruptStateError
    from llama_runtime.updater.config import resolve_settings
    from llama_runtime.updater.engine import Engine

    damage_marker(home, three["b7000"], kind)
    guard = HomeGuard(None, home)
    installer = Engine(resolve_settings(home=str(home), backend="cpu")).installer()
    with pytest.raises(CorruptStateError) as raised:
        installer.use(three["b7000"])
    assert raised.value.code == KINDS[kind] and REASONS[kind] in raised.value.message
    guard.assert_intact("b7002")


@pytest.mark.parametrize("kind", list(KINDS))
def test_rollback_to_a_previous_runtime_with_a_damaged_marker_is_refused_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], home: Path, three: dict[str, str], kind: str
) -> None:
    damage_marker(home, three["b7001"], kind)
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, None, "rollback")
    assert code == 6, payload
    assert payload["error"]["code"] == KINDS[kind] and REASONS[kind] in payload["error"]["message"]
    guard.assert_intact("b7002", capsys=capsys)


@pytest.mark.parametrize("kind", list(KINDS))
def test_update_to_the_tag_of_a_runtime_with_a_damaged_marker_installs_it_afresh_never_switches_to_it(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, three: dict[str, str], kind: str
) -> None:
    damage_marker(home, three["b7000"], kind)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0 and payload["result"] == "installed", payload
    assert Path(payload["active"]["runtime_dir"]).name != three["b7000"]
    assert pointer(home) == {"active": Path(payload["active"]["runtime_dir"]).name, "previous": three["b7002"]}
    assert_runs(Path(payload["active"]["binary"]))


@pytest.mark.parametrize("kind", ["missing", "unreadable"])
def test_update_over_an_active_runtime_with_a_damaged_marker_is_never_up_to_date(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, three: dict[str, str], kind: str
) -> None:
    damage_marker(home, three["b7002"], kind)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7002", "--backend", "cpu")
    assert code == 0 and payload["result"] == "installed", payload
    # The damaged runtime is no rollback target: the intact previous one stays it.
    assert pointer(home)["previous"] == three["b7001"]
    assert_runs(Path(payload["active"]["binary"]))


def test_update_over_an_active_runtime_a_newer_llama_runtime_wrote_refuses_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, three: dict[str, str]
) -> None:
    damage_marker(home, three["b7002"], "foreign")
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7002", "--backend", "cpu")
    assert code == 6 and payload["error"]["code"] == "foreign_marker", payload
    guard.assert_intact(None)  # pointer and every runtime byte-identical
    assert_runs(server_of(home, three["b7002"]))  # and what runs now still runs


@pytest.mark.parametrize("kind", list(KINDS))
def test_gc_removes_a_runtime_with_a_damaged_marker_and_keeps_active_and_previous_running(
    capsys: pytest.CaptureFixture[str], home: Path, three: dict[str, str], kind: str
) -> None:
    damage_marker(home, three["b7000"], kind)
    code, report = run_json(capsys, home, None, "gc", "--keep", "5")
    assert code == 0, report
    assert [Path(item["path"]).name for item in report["removed"] if item["kind"] == "runtime"] == [three["b7000"]]
    assert not (home / "runtimes" / three["b7000"]).exists()
    assert pointer(home) == {"active": three["b7002"], "previous": three["b7001"]}
    assert_runs(server_of(home, three["b7001"]))
    assert_runs(server_of(home, three["b7002"]))


@pytest.mark.parametrize("kind", list(KINDS))
def test_gc_keeps_a_damaged_previous_runtime_and_says_why(
    capsys: pytest.CaptureFixture[str], home: Path, three: dict[str, str], kind: str
) -> None:
    damage_marker(home, three["b7001"], kind)
    guard = HomeGuard(None, home)
    code, report = run_json(capsys, home, None, "gc", "--keep", "5")
    assert code == 0, report
    assert report["kept"][three["b7001"]].startswith("damaged (") and "previous" in report["kept"][three["b7001"]]
    assert [item for item in report["removed"] if item["kind"] == "runtime"] == []
    guard.assert_intact("b7002", capsys=capsys)


def test_gc_leaves_a_directory_whose_name_llama_runtime_never_makes(
    capsys: pytest.CaptureFixture[str], home: Path, three: dict[str, str]
) -> None:
    stranger = home / "runtimes" / "my-own-build"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("not llama-runtime's")
    code, report = run_json(capsys, home, None, "gc", "--keep", "5")
    assert code == 0, report
    assert (stranger / "notes.txt").read_text() == "not llama-runtime's"
    assert "not a name llama-runtime makes" in report["kept"]["my-own-build"]


@pytest.mark.parametrize("kind", ["missing", "unreadable"])
def test_doctor_repair_never_points_at_a_runtime_with_a_damaged_marker(
    capsys: pytest.CaptureFixture[str], home: Path, three: dict[str, str], kind: str
) -> None:
    # The active runtime is half deleted and the previous one's marker is damaged:
    # the only runtime that verifies is b7000.
    server_of(home, three["b7002"]).unlink()
    damage_marker(home, three["b7001"], kind)
    shutil.rmtree(home / "cache" / "assets")  # nothing to reinstall b7002 from: the pointer must move
    code, report = run_json(capsys, home, None, "doctor", "--repair")
    assert code == 0 and report["repaired"] is not None, report
    assert pointer(home)["active"] == three["b7000"]
    assert_runs(server_of(home, three["b7000"]))


@pytest.mark.parametrize("kind", list(KINDS))
def test_doctor_names_a_damaged_runtime_nothing_uses_and_stays_healthy(
    capsys: pytest.CaptureFixture[str], home: Path, three: dict[str, str], kind: str
) -> None:
    damage_marker(home, three["b7000"], kind)
    guard = HomeGuard(None, home)
    code, report = run_json(capsys, home, None, "doctor")
    assert code == 0 and report["healthy"] is True, report
    named = [a for a in report["advice"] if three["b7000"] in a and "damaged runtime" in a]
    assert len(named) == 1 and REASONS[kind] in named[0] and "gc" in named[0], report
    guard.assert_intact("b7002", capsys=capsys)
