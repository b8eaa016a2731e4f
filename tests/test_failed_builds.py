"""Never the same failure twice: a build that failed verification here is skipped by the scheduled
job and plain updates until a newer build appears or it is asked for by tag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llama_runtime.runtime.failed_builds import (
    FAILED_BUILDS_FILE,
    MAX_RECORDS,
    FailedBuild,
    forget_failed,
    load_failed,
    record_failed,
)
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, assert_runs, run_json, snapshot_tree, stand_in_server, stand_in_tarball


def publish_broken(github: FakeGitHub, tmp_path: Path, tag: str) -> str:
    """``tag`` whose llama-server does not run (exit 1 on --version): verification rejects it."""
    archive = stand_in_tarball(tmp_path / f"{tag}-broken.tar.gz", tag=tag, script=stand_in_server(exit_code=1))
    github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): archive})
    return CPU_TAR.format(tag=tag)


def publish_good(github: FakeGitHub, tmp_path: Path, tag: str) -> str:
    number = tag.lstrip("b")
    archive = stand_in_tarball(
        tmp_path / f"{tag}.tar.gz", tag=tag, script=stand_in_server(version=f"version: {number} (abc123)")
    )
    github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): archive})
    return CPU_TAR.format(tag=tag)


def active_tag(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub) -> str:
    code, status = run_json(capsys, home, github.api_url, "status")
    assert code == 0
    assert_runs(Path(status["active"]["binary"]))
    return str(status["active"]["tag"])


def test_build_that_failed_here_is_not_downloaded_again_by_the_scheduled_job(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, b7000_home: Path
) -> None:
    home = b7000_home
    asset = publish_broken(github, tmp_path, "b7001")
    runtimes = snapshot_tree(home / "runtimes")
    code, payload = run_json(capsys, home, github.api_url, "check", "--apply")
    assert code == 6, payload
    assert snapshot_tree(home / "runtimes") == runtimes and active_tag(capsys, home, github) == "b7000"
    assert len(github.requests_to("blob", asset)) == 1

    # Every later scheduled run: no download, a sentence that says why, exit 0.
    for _ in range(3):
        code, payload = run_json(capsys, home, github.api_url, "check", "--apply")
        assert code == 0, payload
        assert payload["update_available"] is False and "failed verification on this machine" in payload["reason"]
    code, payload = run_json(capsys, home, github.api_url, "update")
    assert code == 0 and payload["result"] == "up_to_date"
    assert any("--tag b7001" in w for w in payload["warnings"])
    assert len(github.requests_to("blob", asset)) == 1, "the failed build was fetched again"
    assert active_tag(capsys, home, github) == "b7000"

    code, status = run_json(capsys, home, github.api_url, "status")
    [skipped] = status["skipped_builds"]
    assert (skipped["tag"], skipped["asset"]) == ("b7001", asset) and "--version" in skipped["reason"]


def test_asking_by_tag_tries_again_and_a_newer_build_is_installed(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, b7000_home: Path
) -> None:
    home = b7000_home
    asset = publish_broken(github, tmp_path, "b7001")
    assert run_json(capsys, home, github.api_url, "update")[0] == 6
    code, _ = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 6  # asked for by tag: tried (and it still fails)
    assert len(github.requests_to("blob", asset)) == 2
    publish_good(github, tmp_path, "b7002")
    code, payload = run_json(capsys, home, github.api_url, "check", "--apply")
    assert code == 0 and payload["applied"] is True, payload
    assert active_tag(capsys, home, github) == "b7002"


def test_first_install_of_a_build_that_failed_here_is_exit_6_without_a_download(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    asset = publish_broken(github, tmp_path, "b7001")
    assert run_json(capsys, home, github.api_url, "update", "--backend", "cpu")[0] == 6
    code, payload = run_json(capsys, home, github.api_url, "update", "--backend", "cpu")
    assert code == 6 and "failed verification on this machine before" in payload["error"]["message"]
    assert len(github.requests_to("blob", asset)) == 1


def test_success_by_tag_forgets_the_failure(tmp_path: Path) -> None:
    record_failed(tmp_path, FailedBuild(REPO, "b7001", "a.tar.gz", "cpu", "no device", 1.0))
    record_failed(tmp_path, FailedBuild(REPO, "b7002", "a.tar.gz", "cpu", "no device", 2.0))
    forget_failed(tmp_path, REPO, "b7001", "a.tar.gz")
    assert [b.tag for b in load_failed(tmp_path)] == ["b7002"]


def test_records_are_bounded_and_a_damaged_file_is_no_record(tmp_path: Path) -> None:
    for i in range(MAX_RECORDS + 10):
        record_failed(tmp_path, FailedBuild(REPO, f"b{7000 + i}", "a.tar.gz", "cpu", "x" * 5000, float(i)))
    records = load_failed(tmp_path)
    assert len(records) == MAX_RECORDS and records[0].tag == f"b{7000 + MAX_RECORDS + 9}"
    assert all(len(r.reason) <= 500 for r in records)
    for damaged in ("{", "[]", json.dumps({"failed": [{"repo": 1}, "x", None]}), "x" * 300_000):
        (tmp_path / FAILED_BUILDS_FILE).write_text(damaged)
        assert load_failed(tmp_path) == ()


def test_a_skipped_build_is_named_by_update_check_and_status_and_retry_skipped_tries_it(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, b7000_home: Path
) -> None:
    home = b7000_home
    asset = publish_broken(github, tmp_path, "b7001")
    assert run_json(capsys, home, github.api_url, "update")[0] == 6
    code, payload = run_json(capsys, home, github.api_url, "update")
    assert code == 0 and payload["result"] == "up_to_date", payload
    assert payload["skipped"]["tag"] == "b7001" and "--version" in payload["skipped"]["reason"]
    assert "--retry-skipped" in payload["skipped"]["until"]
    code, text = main_text(capsys, home, github, "update")
    assert code == 0 and text.startswith("Not updated: b7001 (cpu) failed verification"), text
    code, checked = run_json(capsys, home, github.api_url, "check")
    assert code == 0 and checked["skipped_build"]["tag"] == "b7001", checked
    code, text = main_text(capsys, home, github, "check")
    assert text.startswith("Not updated: b7001"), text  # never "Up to date" first
    code, text = main_text(capsys, home, github, "status")
    assert "skipped (failed here; `update --retry-skipped` retries)" in text, text
    code, payload = run_json(capsys, home, github.api_url, "update", "--retry-skipped")
    assert code == 6, payload  # tried again (it still fails), and the active runtime stays
    assert len(github.requests_to("blob", asset)) == 2
    assert active_tag(capsys, home, github) == "b7000"


def test_the_api_names_a_skipped_build_in_the_outcome_it_returns(
    github: FakeGitHub, tmp_path: Path, b7000_home: Path
) -> None:
    from llama_runtime import LlamaRuntimeError, RuntimeUpdater, SkippedBuild

    publish_broken(github, tmp_path, "b7001")
    updater = RuntimeUpdater(b7000_home, api_url=github.api_url, backend="cpu")
    with pytest.raises(LlamaRuntimeError):
        updater.update()
    outcome = updater.update().outcome
    assert outcome is not None and outcome.result == "up_to_date"
    assert isinstance(outcome.skipped, SkippedBuild) and outcome.skipped.tag == "b7001"
    assert updater.check().skipped_build == outcome.skipped
    assert outcome.active.marker.tag == "b7000"


def main_text(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, *argv: str) -> tuple[int, str]:
    """``llama-runtime ARGV`` for people: the exit code and stdout."""
    from llama_runtime.updater.cli.main import main

    code = main([*argv, "--home", str(home), "--api-url", github.api_url])
    return code, capsys.readouterr().out
