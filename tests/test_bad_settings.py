"""Settings a person can get wrong are exit 2 with what is valid, never a silent default
(found by trying the tool as an attacker and as a careless script would)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_runtime.updater.cli.main import main
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, HomeGuard, run_json


def test_empty_home_flag_is_refused_instead_of_using_the_default_home(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # the default home would be under here
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user" / "data"))
    for argv in (["gc", "--keep", "0"], ["status"]):
        code = main([*argv, "--home", "", "--json"])
        out = capsys.readouterr().out
        assert code == 2, out
        assert "--home is empty" in out
    assert not (tmp_path / "user").exists()  # nothing was created or pruned there


@pytest.mark.parametrize("value", ["banana", "ture", "2"])
def test_a_mistyped_require_provenance_is_exit_2_not_silently_off(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    b7000_home: Path,
    github: FakeGitHub,
    value: str,
) -> None:
    guard = HomeGuard(b7000_home.parent, b7000_home)
    monkeypatch.setenv("LLAMA_RUNTIME_REQUIRE_PROVENANCE", value)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7000")
    assert code == 2, payload
    assert (
        "LLAMA_RUNTIME_REQUIRE_PROVENANCE" in payload["error"]["message"] and "1, true" in payload["error"]["message"]
    )
    guard.assert_intact("b7000")


@pytest.mark.parametrize("value", ["0", "false", "off", ""])
def test_require_provenance_off_spellings_are_accepted(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    b7000_home: Path,
    github: FakeGitHub,
    value: str,
) -> None:
    monkeypatch.setenv("LLAMA_RUNTIME_REQUIRE_PROVENANCE", value)
    code, payload = run_json(capsys, b7000_home, github.api_url, "status")
    assert code == 0, payload


def test_install_file_from_an_endless_pipe_stops_at_the_asset_cap(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, b7000_home: Path, github: FakeGitHub
) -> None:
    guard = HomeGuard(b7000_home.parent, b7000_home)
    monkeypatch.setattr("llama_runtime.updater.offline.offline.MAX_ASSET_BYTES", 4 * 1024 * 1024)
    code, payload = run_json(
        capsys, b7000_home, github.api_url, "install-file", "/dev/zero", "--tag", "b7010", "--repo", REPO
    )
    assert code == 2, payload
    assert "not an archive" in payload["error"]["message"]
    assert not list((b7000_home / "downloads").glob(".spool-*")), "the spool was left behind"
    guard.assert_intact("b7000")


def test_provenance_check_reads_its_yes_no_variables_like_the_settings() -> None:
    from llama_runtime.runtime.errors import UserInputError
    from llama_runtime.updater.verify.provenance import ProvenanceCheck

    assert ProvenanceCheck.from_env({"LLAMA_RUNTIME_TRUST_ROOT_OFFLINE": "yes"}).offline
    assert not ProvenanceCheck.from_env({"LLAMA_RUNTIME_REQUIRE_PROVENANCE": "off"}).require
    with pytest.raises(UserInputError, match="LLAMA_RUNTIME_TRUST_ROOT_OFFLINE"):
        ProvenanceCheck.from_env({"LLAMA_RUNTIME_TRUST_ROOT_OFFLINE": "banana"})


@pytest.mark.parametrize("url", ["http://h:abc", "http://[::1", "https://h:99999/api"])
def test_an_api_url_no_client_can_address_is_exit_2_not_an_internal_error_and_nothing_changes(
    url: str, b7000_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guard = HomeGuard(b7000_home.parent, b7000_home)
    for verb in (("plan", "--backend", "cpu", "--platform", "linux-x64"), ("update", "--backend", "cpu")):
        code, payload = run_json(capsys, b7000_home, url, *verb)
        assert code == 2, payload
        assert payload["error"]["message"].startswith(f"Malformed API URL '{url}'")
    guard.assert_intact("b7000", capsys=capsys)
