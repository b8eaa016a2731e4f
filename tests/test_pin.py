"""A pinned build stays pinned: ``check --apply``, a scheduled job and a plain ``update`` never leave it.

``update --tag T`` and ``pin [T]`` pin; ``unpin`` releases; ``status`` and ``check`` say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llama_runtime import RuntimeUpdater
from llama_runtime.runtime.marker import read_marker
from llama_runtime.runtime.pin import PIN_FILE, Pin, load_pin
from llama_runtime.updater.choice.decide import ActiveState, UpdateRequest, decide, held_request
from llama_runtime.updater.choice.host import host_for_platform
from llama_runtime.updater.release.release import Asset, Release
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, publish_stand_in, run_json
from tests.test_docs_contract import validate

# -- the CLI against a GitHub-like server -----------------------------------------------------


@pytest.fixture
def pinned_home(capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path) -> Path:
    """b7000 installed with ``update --tag`` (so pinned), and b7001 published after it."""
    home = tmp_path / "home"
    publish_stand_in(github, tmp_path, "b7000")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    assert payload["pinned"] == "b7000"
    publish_stand_in(github, tmp_path, "b7001")
    return home


def test_update_tag_pins_and_says_so(capsys: pytest.CaptureFixture[str], pinned_home: Path) -> None:
    code, status = run_json(capsys, pinned_home, None, "status")
    assert code == 0
    assert status["pinned"] == {"repo": REPO, "tag": "b7000"}
    validate("status", status)


def test_check_reports_a_newer_build_as_held_and_apply_installs_nothing(
    capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub
) -> None:
    guard = HomeGuard(None, pinned_home)
    code, check = run_json(capsys, pinned_home, github.api_url, "check")
    assert code == 0, check
    assert (check["update_available"], check["held"], check["pinned"]) == (False, "b7001", "b7000")
    assert "unpin" in check["reason"]
    validate("check", check)
    code, applied = run_json(capsys, pinned_home, github.api_url, "check", "--apply")
    assert code == 0, applied
    assert applied["applied"] is False and applied["held"] == "b7001"
    guard.assert_intact("b7000", capsys=capsys)


def test_a_plain_update_stays_on_the_pin_and_says_how_to_move(
    capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub
) -> None:
    guard = HomeGuard(None, pinned_home)
    code, payload = run_json(capsys, pinned_home, github.api_url, "update")
    assert code == 0, payload
    assert payload["result"] == "up_to_date" and payload["active"]["tag"] == "b7000"
    assert any("unpin" in w and "--tag" in w for w in payload["warnings"]), payload["warnings"]
    guard.assert_intact("b7000", capsys=capsys)


def test_plan_in_a_pinned_home_shows_the_pinned_build_as_update_would(
    capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub
) -> None:
    code, plan = run_json(capsys, pinned_home, github.api_url, "plan")
    assert code == 0, plan
    assert (plan["tag"], plan["action"]) == ("b7000", "up_to_date")
    assert any("unpin" in w for w in plan["warnings"]), plan["warnings"]


def test_the_scheduled_job_through_the_api_never_leaves_a_pin(pinned_home: Path, github: FakeGitHub) -> None:
    guard = HomeGuard(None, pinned_home)
    updater = RuntimeUpdater(pinned_home, api_url=github.api_url)
    result = updater.check(apply=True)
    assert (result.applied, result.held) == (False, "b7001")
    guard.assert_intact("b7000")


def test_unpin_lets_check_apply_move_to_the_newest(
    capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub
) -> None:
    code, payload = run_json(capsys, pinned_home, None, "unpin")
    assert code == 0 and payload == {"pinned": None, "before": "b7000", "active": "b7000"}
    validate("unpin", payload)
    code, applied = run_json(capsys, pinned_home, github.api_url, "check", "--apply")
    assert code == 0 and applied["applied"] is True, applied
    assert applied["outcome"]["active"]["tag"] == "b7001"


def test_update_tag_moves_the_pin(capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub) -> None:
    code, payload = run_json(capsys, pinned_home, github.api_url, "update", "--tag", "b7001")
    assert code == 0 and payload["pinned"] == "b7001", payload
    assert load_pin(pinned_home) == Pin(REPO, "b7001")


def test_pin_without_a_tag_pins_the_active_build_and_the_api_does_the_same(
    capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub
) -> None:
    updater = RuntimeUpdater(pinned_home, api_url=github.api_url)
    assert updater.unpin().before == "b7000"
    assert updater.check().update_available is True  # unpinned: the newer build is available again
    code, payload = run_json(capsys, pinned_home, None, "pin")
    assert code == 0 and payload["pinned"] == {"repo": REPO, "tag": "b7000"}, payload
    validate("pin", payload)
    assert updater.pin("b7001").pinned == Pin(REPO, "b7001")
    result = updater.check(apply=True)  # the newer build is the pinned one: the check goes to the pin
    assert (result.applied, result.held, result.pinned) == (True, None, "b7001")


def test_pin_with_nothing_active_and_no_tag_is_bad_input(capsys: pytest.CaptureFixture[str], home: Path) -> None:
    code, payload = run_json(capsys, home, None, "pin")
    assert code == 2 and "Nothing is active to pin" in payload["error"]["message"]
    assert not (home / PIN_FILE).exists()


def test_a_damaged_pin_file_is_never_read_as_no_pin_and_unpin_removes_it(
    capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub
) -> None:
    (pinned_home / PIN_FILE).write_text("{not json")
    guard = HomeGuard(None, pinned_home)
    for args in (["update"], ["check", "--apply"]):
        code, payload = run_json(capsys, pinned_home, github.api_url, *args)
        assert code == 6 and payload["error"]["code"] == "corrupt_state", payload
        assert "unpin" in json.dumps(payload["error"])
    guard.assert_intact("b7000", capsys=capsys)  # status still answers, saying the pin is damaged
    code, payload = run_json(capsys, pinned_home, None, "unpin")
    assert code == 0 and payload["before"] is None
    assert not (pinned_home / PIN_FILE).exists()


def test_an_explicit_backend_still_applies_to_the_pinned_build(
    capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub
) -> None:
    code, payload = run_json(capsys, pinned_home, github.api_url, "update", "--backend", "cpu")
    assert code == 0 and payload["active"]["tag"] == "b7000", payload
    assert read_marker(Path(payload["active"]["runtime_dir"])).tag == "b7000"


# -- the decision ---------------------------------------------------------------------------------


def _release(tag: str) -> Release:
    return Release(REPO, tag, (Asset(CPU_TAR.format(tag=tag), 1, "https://example.invalid/a"),))


def test_a_plain_request_in_a_pinned_home_asks_for_the_pinned_tag() -> None:
    held, note = held_request(UpdateRequest(REPO, pinned="b7000"))
    assert held.tag == "b7000" and note is not None and "unpin" in note
    told, none = held_request(UpdateRequest(REPO, tag="b7001", pinned="b7000"))
    assert (told.tag, none) == ("b7001", None)


def test_the_scheduled_decision_holds_a_newer_build_behind_a_pin() -> None:
    from llama_runtime.types import InstallMarker

    marker = InstallMarker(REPO, "b7000", "cpu", "auto", CPU_TAR.format(tag="b7000"), 1, "0" * 64, True, "t", "b")
    host = host_for_platform("linux-x64")
    active = ActiveState(marker)
    free = decide(UpdateRequest(REPO), active, _release("b7001"), host, mode="upgrade_only")
    held = decide(UpdateRequest(REPO, pinned="b7000"), active, _release("b7001"), host, mode="upgrade_only")
    assert (free.action, free.held) == ("install", None)
    assert (held.action, held.held) == ("up_to_date", "b7001")


def test_a_build_held_by_a_pin_that_failed_here_is_not_tried_again_by_a_plain_update() -> None:
    host = host_for_platform("linux-x64")
    release = _release("b7000")
    failed = {(REPO, "b7000", CPU_TAR.format(tag="b7000")): "--version exited 1"}
    held, _ = held_request(UpdateRequest(REPO, pinned="b7000"))
    asked = UpdateRequest(REPO, tag="b7000")
    assert decide(held, None, release, host, failed=failed).action == "refuse"  # skipped, not downloaded again
    assert decide(asked, None, release, host, failed=failed).action == "install"  # asked for by tag: tried again


def test_a_semver_pin_naming_the_newer_build_lets_check_apply_move_to_it(
    capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub
) -> None:
    code, checked = run_json(capsys, pinned_home, github.api_url, "check")
    assert code == 0 and checked["latest"] == "b7001", checked
    version = checked["latest_version"]
    assert version is not None, "the fake GitHub names each build by a semver release"
    assert run_json(capsys, pinned_home, github.api_url, "pin", version)[0] == 0  # resolved first
    code, applied = run_json(capsys, pinned_home, github.api_url, "check", "--apply")
    assert code == 0 and (applied["applied"], applied["held"]) == (True, None), applied
    assert applied["outcome"]["active"]["tag"] == "b7001"


def test_pin_of_a_tag_the_source_does_not_list_pins_nothing_and_names_it(
    capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub
) -> None:
    guard = HomeGuard(None, pinned_home)
    code, payload = run_json(capsys, pinned_home, github.api_url, "pin", "b99999")
    assert code == 7 and payload["error"]["code"] == "release_not_found", payload
    assert "b99999" in payload["error"]["message"] and "--force" in payload["error"]["hint"]
    assert load_pin(pinned_home) == Pin(REPO, "b7000")  # the pin before is untouched
    guard.assert_intact("b7000", capsys=capsys)


def test_pin_force_pins_a_tag_the_source_cannot_confirm_and_says_so(
    capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub
) -> None:
    code, payload = run_json(capsys, pinned_home, github.api_url, "pin", "--force", "b99999")
    assert code == 0, payload
    assert payload["pinned"] == {"repo": REPO, "tag": "b99999"}
    assert payload["checked"].startswith("not checked: ") and "b99999" in payload["checked"]
    code, check = run_json(capsys, pinned_home, github.api_url, "check")
    assert check["pinned"] == "b99999" and "b99999" in check["plain_update"], check


def test_pin_of_a_published_build_resolves_it_and_a_check_names_what_a_plain_update_does(
    capsys: pytest.CaptureFixture[str], pinned_home: Path, github: FakeGitHub
) -> None:
    updater = RuntimeUpdater(pinned_home, api_url=github.api_url)
    result = updater.pin("b7001")
    assert result.checked is not None and result.checked.startswith("resolved: ") and "b7001" in result.checked
    assert result.active is not None and result.active.marker.tag == "b7000"
    check = updater.check()
    assert check.plain_update is not None and "moves from b7000 to the pinned b7001" in check.plain_update
    assert updater.pin("b7000").checked == "installed"  # an installed build needs no request
