"""Damaged state on disk: ``status`` and ``doctor`` explain it, ``doctor --repair`` or ``update`` recovers.

The home holds b7000 (previous) and b7001 (active), both stand-in builds;
each scenario damages the active side the way a crash, a full disk or a
careless ``rm`` would. Never a traceback: ``status`` exits 6 with the
``corrupt_state`` error naming ``doctor --repair``; ``doctor`` lists the
failing check; the repair leaves a runtime that runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from llama_runtime.runtime.fsutil import remove_tree
from llama_runtime.updater.cli.main import main
from tests.fakegithub import FakeGitHub
from tests.helpers import HomeGuard, assert_runs, assert_status_active, publish_stand_in, run_json, snapshot_tree

MARKER = "llama-runtime.json"


def _active_dir(home: Path) -> Path:
    name: str = json.loads((home / "active.json").read_text())["active"]
    return home / "runtimes" / name


def garbage_marker(home: Path) -> None:
    (_active_dir(home) / MARKER).write_bytes(b'{"repo": "ggml-org/llama.cpp", "tag": ')


def missing_marker(home: Path) -> None:
    (_active_dir(home) / MARKER).unlink()


def pointer_to_deleted_directory(home: Path) -> None:
    remove_tree(_active_dir(home))


def garbage_pointer(home: Path) -> None:
    (home / "active.json").write_bytes(b"\x00\x13garbage{")


def half_deleted_runtime(home: Path) -> None:
    (_active_dir(home) / "llama-b7001" / "llama-server").unlink()


#: Scenario -> (damage, words the explanation must contain).
SCENARIOS: dict[str, tuple[Callable[[Path], None], str]] = {
    "garbage_marker": (garbage_marker, "not valid JSON"),
    "missing_marker": (missing_marker, "no install marker"),
    "pointer_to_deleted_directory": (pointer_to_deleted_directory, "is missing"),
    "garbage_pointer": (garbage_pointer, "pointer"),
    "half_deleted_runtime": (half_deleted_runtime, "llama-server is missing"),
}


@pytest.fixture
def home(capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for tag in ("b7000", "b7001"):
        publish_stand_in(github, tmp_path, tag)
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
        assert code == 0, payload
    return home


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_status_explains_damage_with_exit_6_and_names_the_repair(
    scenario: str, home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    damage, words = SCENARIOS[scenario]
    damage(home)
    code, payload = run_json(capsys, home, github.api_url, "status")
    assert code == 6, payload
    assert payload["error"]["code"] == "corrupt_state"
    assert words in payload["error"]["message"]
    assert "doctor --repair" in payload["error"]["hint"]

    code = main(["status", "--home", str(home)])
    out, err = capsys.readouterr()
    assert code == 6 and out == ""
    assert "Traceback" not in err
    assert err.startswith("error: ") and "  next: " in err and "doctor --repair" in err


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_doctor_reports_the_failing_check_and_advises_the_repair(
    scenario: str, home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    damage, words = SCENARIOS[scenario]
    damage(home)
    pointer = (home / "active.json").read_bytes()
    code, report = run_json(capsys, home, github.api_url, "doctor")
    assert code == 6, report
    assert report["healthy"] is False
    failed = [c for c in report["checks"] if not c["ok"]]
    assert failed and any(words in c["detail"] for c in failed), failed
    assert any("doctor --repair" in advice for advice in report["advice"])
    assert (home / "active.json").read_bytes() == pointer, "doctor without --repair changes nothing"


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_doctor_repair_points_at_a_runtime_that_runs(
    scenario: str, home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    SCENARIOS[scenario][0](home)
    code, report = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 0, report
    assert report["repaired"]
    code, status = run_json(capsys, home, github.api_url, "status")
    assert code == 0, status
    # A runtime whose marker still says what it was is reinstalled in place; otherwise
    # the previous runtime is the first choice; with the pointer itself lost, the newest that verifies.
    expected = {
        "garbage_pointer": {"b7000", "b7001"},
        "half_deleted_runtime": {"b7001"},
    }.get(scenario, {"b7000"})
    assert status["active"]["tag"] in expected
    assert_runs(Path(status["active"]["binary"]))
    code, report = run_json(capsys, home, github.api_url, "doctor")
    assert code == 0 and report["healthy"] is True, report


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_update_reinstalls_over_the_damage(
    scenario: str, home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    SCENARIOS[scenario][0](home)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    # With only the pointer damaged, the intact b7001 on disk is verified again and switched to
    # (no second copy); a damaged runtime is never "up to date".
    assert payload["result"] == ("switched" if scenario == "garbage_pointer" else "installed"), payload
    code, status = run_json(capsys, home, github.api_url, "status")
    assert code == 0, status
    assert status["active"]["tag"] == "b7001"
    assert_runs(Path(status["active"]["binary"]))


def test_doctor_repair_removes_leftovers_of_an_interrupted_update(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = home / "staging" / "999999-0badf00d"
    (stale / "llama-b7002").mkdir(parents=True)
    (home / ".active.json.x1y2.tmp").write_text("{")
    code, report = run_json(capsys, home, github.api_url, "doctor")
    assert any("leftovers" in advice for advice in report["advice"]), report
    assert stale.exists()
    code, report = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 0, report
    assert not stale.exists() and not (home / ".active.json.x1y2.tmp").exists()
    assert any(c["check"] == "leftovers" and c["ok"] for c in report["checks"])


# -- a directory where a file of ours belongs ---------------------------------------------------------------


def _refused_naming(capsys: pytest.CaptureFixture[str], home: Path, api_url: str, path: Path, *verb: str) -> None:
    code, payload = run_json(capsys, home, api_url, *verb)
    assert code == 6, (verb, payload)
    assert payload["error"]["code"] == "corrupt_state", (verb, payload)
    assert f"{path} is a directory" in payload["error"]["message"], (verb, payload)
    assert "doctor --repair" in payload["error"]["hint"], (verb, payload)
    assert "`llama-runtime update`" not in payload["error"]["hint"], (verb, payload)  # it cannot help here


def test_a_directory_in_place_of_the_pointer_is_named_and_doctor_repair_moves_it_aside(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    pointer = home / "active.json"
    runtimes = snapshot_tree(home / "runtimes")
    pointer.unlink()
    pointer.mkdir()
    (pointer / "notes.txt").write_text("someone's notes\n")
    update = ("update", "--tag", "b7001", "--backend", "cpu")
    for verb in (("status",), ("gc",), ("use", "b7000"), ("rollback",), update):
        _refused_naming(capsys, home, github.api_url, pointer, *verb)
    code, report = run_json(capsys, home, github.api_url, "doctor")
    assert code == 6, report
    assert any(not c["ok"] and "is a directory" in c["detail"] for c in report["checks"]), report
    assert snapshot_tree(home / "runtimes") == runtimes
    code, report = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 0, report
    aside = home / "active.json.damaged"
    assert (aside / "notes.txt").read_text() == "someone's notes\n", "nothing of the user's is deleted"
    assert any(str(aside) in advice for advice in report["advice"]), report
    assert_status_active(capsys, home, "b7001")  # the newest runtime that verifies, the one active before


def test_a_directory_in_place_of_the_update_lock_is_reported_and_doctor_repair_moves_it_aside(
    home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = home / "locks" / "update.lock"
    lock.unlink()
    lock.mkdir()
    guard = HomeGuard(None, home)
    code, report = run_json(capsys, home, github.api_url, "doctor")
    assert code == 6, report
    assert any(c["check"] == "locks" and not c["ok"] and str(lock) in c["detail"] for c in report["checks"]), report
    for verb in (("gc",), ("update", "--tag", "b7000", "--backend", "cpu")):
        _refused_naming(capsys, home, github.api_url, lock, *verb)
    guard.assert_intact("b7001", capsys=capsys)
    code, report = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 0, report
    assert (home / "locks" / "update.lock.damaged").is_dir()
    code, payload = run_json(capsys, home, github.api_url, "gc")
    assert code == 0, payload
    guard.assert_intact("b7001", capsys=capsys)
