"""A misbehaving release server, end to end through the CLI.

Each fault gives its documented exit code (cli-contract.md) and one human
sentence, and leaves the active runtime byte for byte unchanged and running.
Transient faults (5xx, a reset or a cut body) are retried or resumed and end
in a normal install.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llama_runtime.updater.cli.main import main
from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import CPU_TAR, REPO, HomeGuard, assert_runs, run_json, stand_in_server, stand_in_tarball

NEW = CPU_TAR.format(tag="b7001")
API_TAG_PATH = f"/api/repos/{REPO}/releases/tags/b7001"
MiB = 1024 * 1024
#: Big enough that a cut at 2 MiB leaves bytes on disk to resume from.
PAD_BYTES = 4 * MiB


@dataclass(frozen=True)
class Case:
    """One fault, where it is injected, and what the CLI must answer."""

    faults: tuple[tuple[str, Fault], ...]
    exit_code: int
    error_code: str | None = None
    says: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    still_uploading: bool = False


CASES: dict[str, Case] = {
    "api_500s_then_success": Case(((API_TAG_PATH, Fault(status=500, times=2)),), 0),
    "asset_500s_then_success": Case(((NEW, Fault(status=503, times=2)),), 0),
    "connection_reset_mid_body_resumes": Case(((NEW, Fault(reset_after_bytes=2 * MiB)),), 0),
    "truncated_body_resumes": Case(((NEW, Fault(truncate_after_bytes=2 * MiB)),), 0),
    "asset_404_is_not_retried": Case(((NEW, Fault(status=404, times=None)),), 7, "remote_error", ("HTTP 404",)),
    "rate_limit_403_with_reset": Case(
        ((API_TAG_PATH, Fault(status=403, rate_limited=True)),), 7, "rate_limited", ("rate limit", "resets at")
    ),
    "rate_limit_429_with_retry_after": Case(
        ((API_TAG_PATH, Fault(status=429, rate_limited=True, retry_after=90)),),
        7,
        "rate_limited",
        ("retry after 90 seconds",),
    ),
    "body_longer_than_published_size": Case(
        ((NEW, Fault(extra_bytes=4096)),), 8, "size_mismatch", ("larger than its published size",)
    ),
    "wrong_digest": Case(((NEW, Fault(wrong_bytes=True, times=None)),), 8, "digest_mismatch", ("sha256",)),
    "slow_drip_past_read_timeout": Case(
        ((NEW, Fault(drip_seconds=1.0, drip_chunk=4096, times=None)),),
        7,
        "network_error",
        ("ReadTimeout",),
        env={"LLAMA_RUNTIME_READ_TIMEOUT": "0.3"},
    ),
    "asset_redirect_loop": Case(((NEW, Fault(redirect_loop=True, times=None)),), 7, "remote_error", ("redirect",)),
    "api_redirect_loop": Case(
        ((API_TAG_PATH, Fault(redirect_loop=True, times=None)),), 7, "remote_error", ("redirected in a loop",)
    ),
    "html_instead_of_json": Case(
        ((API_TAG_PATH, Fault(html=True, status=200)),), 7, "remote_error", ("not release data", "text/html")
    ),
    "asset_still_uploading": Case(
        (), 7, "release_incomplete", ("still being uploaded; try again",), still_uploading=True
    ),
}
FAILING = [name for name, case in CASES.items() if case.exit_code]


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries still happen (the request log proves it); only the waits go."""
    monkeypatch.setattr("llama_runtime.runtime.clock.RETRY_BACKOFF_SECONDS", 0.0)
    for name in ("GITHUB_TOKEN", "GH_TOKEN", "LLAMA_RUNTIME_READ_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)


def padded_tarball(path: Path, tag: str) -> Path:
    """A stand-in build plus 4 MiB of incompressible bytes, so bodies can be cut midway."""
    pad = random.Random(7001).randbytes(PAD_BYTES)
    files: dict[str, bytes | Path] = {"llama-server": stand_in_server(f"version: {tag[1:]} (stand-in)"), "pad.bin": pad}
    return build_release_archive(path, "tar-tagdir", files, modes={"llama-server": 0o755, "pad.bin": 0o644}, tag=tag)


def arm(case: Case, github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    states = {NEW: "open"} if case.still_uploading else None
    github.add_release(REPO, "b7001", {NEW: padded_tarball(tmp_path / "b.tar.gz", "b7001")}, state_overrides=states)
    for key, fault in case.faults:
        github.inject(key, fault)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("name", list(CASES))
def test_fault_gives_its_exit_code_and_leaves_the_active_runtime_alone(
    name: str,
    b7000_home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    case = CASES[name]
    home = b7000_home
    arm(case, github, tmp_path, monkeypatch)
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == case.exit_code, payload
    if code == 0:
        assert payload["result"] == "installed" and payload["active"]["tag"] == "b7001"
        assert_runs(Path(payload["active"]["binary"]))
        assert list((home / "downloads").iterdir()) == []
        return
    error = payload["error"]
    assert error["code"] == case.error_code
    for words in case.says:
        assert words in error["message"], error["message"]
    if case.exit_code == 8:
        assert list((home / "downloads").iterdir()) == [], "untrusted bytes must not stay on disk"
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)


def test_api_500s_are_retried_until_success(
    b7000_home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    github.add_release(REPO, "b7001", {NEW: stand_in_tarball(tmp_path / "b.tar.gz", tag="b7001")})
    github.inject(API_TAG_PATH, Fault(status=500, times=2))
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    assert [r.status for r in github.requests_to("api", API_TAG_PATH)] == [500, 500, 200]


@pytest.mark.parametrize("fault", [Fault(reset_after_bytes=2 * MiB), Fault(truncate_after_bytes=2 * MiB)])
def test_cut_body_resumes_with_range_instead_of_starting_over(
    fault: Fault, b7000_home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    archive = padded_tarball(tmp_path / "b.tar.gz", "b7001")
    github.add_release(REPO, "b7001", {NEW: archive})
    github.inject(NEW, fault)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    first, second = github.requests_to("blob", NEW)
    assert "range" not in first.headers
    resumed_at = int(second.headers["range"].removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= 2 * MiB
    assert github.download_bytes_sent <= archive.stat().st_size + 2 * MiB


@pytest.mark.parametrize("status", [404, 403])
def test_client_errors_on_the_asset_are_not_retried(
    status: int, b7000_home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    github.add_release(REPO, "b7001", {NEW: stand_in_tarball(tmp_path / "b.tar.gz", tag="b7001")})
    github.inject(NEW, Fault(status=status, times=None))
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 7, payload
    assert len(github.requests_to("api", NEW)) == 1


def test_rate_limit_names_the_reset_time_and_the_token_and_is_not_retried(
    b7000_home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    github.inject(API_TAG_PATH, Fault(status=403, rate_limited=True))
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 7
    assert "resets at" in payload["error"]["message"]
    assert "GITHUB_TOKEN" in payload["error"]["hint"]
    assert len(github.requests_to("api", API_TAG_PATH)) == 1


def test_body_cut_on_every_try_exits_7_and_the_next_run_resumes_the_partial(
    b7000_home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    archive = padded_tarball(tmp_path / "b.tar.gz", "b7001")
    github.add_release(REPO, "b7001", {NEW: archive})
    github.inject(NEW, Fault(truncate_after_bytes=MiB, times=3))
    guard = HomeGuard(None, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 7 and payload["error"]["code"] == "network_error"
    assert "kept for resuming" in payload["error"]["message"]
    (partial,) = (b7000_home / "downloads").glob("*.part")
    kept = partial.stat().st_size
    assert kept == 3 * MiB
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)

    sent_before = github.download_bytes_sent
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, payload
    assert github.requests_to("blob", NEW)[-1].headers["range"] == f"bytes={kept}-"
    assert github.download_bytes_sent - sent_before == archive.stat().st_size - kept


@pytest.mark.parametrize("name", FAILING)
def test_fault_is_one_human_sentence_on_stderr_without_a_traceback(
    name: str,
    b7000_home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    case = CASES[name]
    arm(case, github, tmp_path, monkeypatch)
    argv = ["update", "--tag", "b7001", "--backend", "cpu", "--home", str(b7000_home), "--api-url", github.api_url]
    code = main(argv)  # no --json: what a person sees
    out, err = capsys.readouterr()
    assert code == case.exit_code
    assert out == ""
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    sentence = errors[0].removeprefix("error: ")
    assert sentence.endswith(".") and "\n" not in sentence, sentence
