"""Everyday refusals and wording a new user meets, each with the state a failure must not change.

CUDA asked for on a host without an NVIDIA driver, malformed semver tags, a repository that does
not exist, a rate limit the next update must respect, repair from the download cache, ``server
restart``, a damaged copy after repair, the ``check --apply`` phases and wording, and the smaller
wording of ``--version --json``, ``install-file -``, the rate-limit hint, doctor and ``list``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from llama_runtime.updater.choice.host import HostFacts
from llama_runtime.updater.choice.host_detect import detect_host
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import REPO, HomeGuard, assert_runs, run_json, stand_in_server, stand_in_tarball
from tests.test_host import FakeFiles, FakeRunner

CUDA_TAR = "llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz"


def _linux(files: FakeFiles) -> HostFacts:
    return detect_host(FakeRunner(), {}, system="Linux", machine="x86_64", files=files)


def _as_host(monkeypatch: pytest.MonkeyPatch, **facts: Any) -> None:
    """This machine as detected, with ``facts`` replaced (no GPU unless they name one)."""
    from llama_runtime.updater.choice import host_detect as host_module

    real = host_module.detect_host
    plain = {"vulkan": False, "nvidia_driver": None, "cuda_driver_version": None, "rocm": False}
    plain |= {"no_nvidia_driver": None, "nvidia_unsure": None}

    def replaced() -> HostFacts:
        return dataclasses.replace(real(), **{**plain, **facts})

    monkeypatch.setattr(host_module, "detect_host", replaced)


def _publish_cuda(github: FakeGitHub, tmp_path: Path, tag: str) -> str:
    name = CUDA_TAR.format(tag=tag)
    # It lists a CUDA device, as a real build does where the driver turns out usable (asked for by name, it must).
    script = stand_in_server(f"version: {tag[1:]}", devices="  CUDA0: stand-in GPU\\n")
    archive = stand_in_tarball(tmp_path / f"{tag}-cuda.tar.gz", tag=tag, script=script)
    github.add_release(REPO, tag, {name: archive})
    return name


# -- i: --backend cuda without an NVIDIA driver ----------------------------------------------------------------


def test_no_nvidia_smi_and_no_device_node_is_a_sure_no_driver() -> None:
    host = _linux(FakeFiles())
    assert host.no_nvidia_driver is not None and "no nvidia-smi" in host.no_nvidia_driver
    assert host.nvidia_unsure is None


@pytest.mark.parametrize("trace", ["/dev/nvidia0", "/dev/nvidiactl", "/proc/driver/nvidia/version"])
def test_a_device_node_without_nvidia_smi_is_unsure_not_absent(trace: str) -> None:
    host = _linux(FakeFiles(texts={trace: ""}))
    assert host.no_nvidia_driver is None
    assert host.nvidia_unsure is not None and trace in host.nvidia_unsure
    assert dict(host.sources)["cuda"].startswith("unsure:")


def test_update_backend_cuda_without_an_nvidia_driver_is_exit_5_before_any_download(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    github: FakeGitHub,
    b7000_home: Path,
    tmp_path: Path,
) -> None:
    name = _publish_cuda(github, tmp_path, "b7001")
    _as_host(monkeypatch, no_nvidia_driver="no nvidia-smi, no /dev/nvidia* device, no /proc/driver/nvidia")
    guard = HomeGuard(tmp_path, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001", "--backend", "cuda")
    assert code == 5, payload
    message = payload["error"]["message"]
    assert "no NVIDIA driver detected" in message and "glibc" not in message
    assert not [r for r in github.requests if name in r.path]  # nothing was downloaded
    guard.assert_intact("b7000", capsys=capsys)


def test_update_backend_cuda_with_unsure_detection_warns_and_leaves_it_to_the_device_check(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    github: FakeGitHub,
    home: Path,
    tmp_path: Path,
) -> None:
    name = _publish_cuda(github, tmp_path, "b7001")
    _as_host(monkeypatch, nvidia_unsure="/dev/nvidia0 is present but nvidia-smi did not answer")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001", "--backend", "cuda")
    assert code == 0, payload  # the stand-in's --version and --list-devices runs pass: the check decided
    assert payload["active"]["asset"] == name
    assert any("Cannot tell whether an NVIDIA driver is usable here (/dev/nvidia0" in w for w in payload["warnings"])


# -- p: a partial semver tag is bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("tag", ["v1", "v0.2", "V0.1.0"])
def test_update_of_a_partial_semver_tag_is_exit_2_naming_the_valid_forms_before_any_request(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path, tmp_path: Path, tag: str
) -> None:
    guard = HomeGuard(tmp_path, b7000_home)
    before = len(github.requests)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", tag)
    assert code == 2, payload
    assert "vMAJOR.MINOR.PATCH" in payload["error"]["message"] and "bNNNN" in payload["error"]["message"]
    assert len(github.requests) == before
    guard.assert_intact("b7000", capsys=capsys)


# -- j: a repository that does not exist -------------------------------------------------------------------------


@pytest.mark.parametrize("args", [(), ("--tag", "b7001"), ("--channel", "nightly")])
def test_update_from_a_repository_github_does_not_know_says_repository_not_found(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    guard = HomeGuard(tmp_path, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--repo", "someone/llama.cpp", *args)
    assert code == 7, payload
    assert "The repository someone/llama.cpp was not found" in payload["error"]["message"], payload
    assert "--repo" in payload["error"]["hint"]
    guard.assert_intact("b7000", capsys=capsys)


def test_a_repository_without_releases_still_says_no_releases(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path
) -> None:
    github.push_tag("someone/llama.cpp", "b1")  # the repository exists, with no release
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--repo", "someone/llama.cpp")
    assert code == 7, payload
    assert "repository someone/llama.cpp was not found" not in payload["error"]["message"], payload
    assert "someone/llama.cpp" in payload["error"]["message"]


# -- o, c: a rate-limited update stores the back-off, and the check says when it resumes --------------------------

LATEST_PATH = f"/api/repos/{REPO}/releases/latest"


def test_a_rate_limited_update_stores_the_backoff_and_the_next_update_asks_nothing(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path, tmp_path: Path
) -> None:
    github.inject(LATEST_PATH, Fault(status=403, rate_limited=True))
    guard = HomeGuard(tmp_path, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update")
    assert code == 7 and payload["error"]["code"] == "rate_limited", payload
    stored = json.loads((b7000_home / "cache" / "ratelimit.json").read_text())
    assert stored["not_before"] > time.time() + 1000  # the server's reset is 30 minutes ahead
    before = len(github.requests)
    code, again = run_json(capsys, b7000_home, github.api_url, "update")
    assert code == 7 and again["error"]["code"] == "rate_limited", again
    assert "not asking again before" in again["error"]["message"]
    assert len(github.requests) == before  # the stored back-off held: nothing was asked
    code, check = run_json(capsys, b7000_home, github.api_url, "check")  # the check honours the same file
    assert code == 0 and check["skipped"] == "rate_limited"
    assert re.search(r"resumes after \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, in \d+ min", check["reason"]), check
    assert len(github.requests) == before
    guard.assert_intact("b7000", capsys=capsys)


def test_an_update_settled_by_the_active_runtime_needs_no_request_during_the_backoff(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path
) -> None:
    github.inject(LATEST_PATH, Fault(status=403, rate_limited=True))
    assert run_json(capsys, b7000_home, github.api_url, "update")[0] == 7
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7000")
    assert code == 0 and payload["result"] == "up_to_date", payload


# -- k, m, n, b: what the text and JSON say ----------------------------------------------------------------------


def _text(capsys: pytest.CaptureFixture[str], home: Path, api_url: str | None, *args: str) -> tuple[int, str]:
    """``llama-runtime ARGS`` in this process without ``--json``: the exit code and stdout."""
    from llama_runtime.updater.cli.main import main

    capsys.readouterr()
    code = main([*args, "--home", str(home), *(["--api-url", api_url] if api_url else [])])
    return code, capsys.readouterr().out


def test_check_apply_of_an_installed_build_says_switched_not_installed(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path, tmp_path: Path
) -> None:
    from tests.helpers import publish_stand_in

    publish_stand_in(github, tmp_path, "b7001")
    assert run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001")[0] == 0
    assert run_json(capsys, b7000_home, github.api_url, "use", "b7000")[0] == 0
    code, out = _text(capsys, b7000_home, github.api_url, "check", "--apply")
    assert code == 0, out
    assert "Switched to v0.2.0 (build b7001) (was b7000): nothing was downloaded." in out, out
    assert "Installed" not in out


@pytest.mark.parametrize("order", [("--version", "--json"), ("--json", "--version")])
def test_version_with_json_is_one_json_object(capsys: pytest.CaptureFixture[str], order: tuple[str, str]) -> None:
    from llama_runtime.updater.cli.main import main, tool_version

    assert main(list(order)) == 0
    assert json.loads(capsys.readouterr().out) == {"name": "llama-runtime", "version": tool_version()}


def test_install_file_from_standard_input_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, home: Path, tmp_path: Path
) -> None:
    import io
    import sys

    archive = stand_in_tarball(tmp_path / "b7001.tar.gz", tag="b7001")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(archive.read_bytes())))
    code, out = _text(capsys, home, None, "install-file", "-", "--tag", "b7001", "--backend", "cpu")
    assert code == 0, out
    assert "from standard input and made it active" in out and "from -" not in out


@pytest.mark.parametrize(
    ("api_url", "named", "not_named"),
    [
        ("https://api.github.com", "GITHUB_TOKEN (or GH_TOKEN, or LLAMA_RUNTIME_GITHUB_TOKEN)", None),
        ("https://ghe.example.com/api/v3", "LLAMA_RUNTIME_GITHUB_TOKEN to send", "Set GITHUB_TOKEN"),
        ("http://mirror.example.com", "No token is ever sent", "Set "),
    ],
)
def test_the_rate_limit_hint_names_only_the_token_that_origin_is_sent(
    api_url: str, named: str, not_named: str | None
) -> None:
    from llama_runtime.updater.sources.github_limits import token_hint

    hint = token_hint(api_url)
    assert named in hint
    assert not_named is None or not_named not in hint


def test_a_rate_limited_update_from_a_local_server_hints_llama_runtime_github_token(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path
) -> None:
    github.inject(LATEST_PATH, Fault(status=403, rate_limited=True))
    code, payload = run_json(capsys, b7000_home, github.api_url, "update")
    assert code == 7, payload
    assert payload["error"]["hint"].startswith("Set LLAMA_RUNTIME_GITHUB_TOKEN"), payload


# -- q: doctor --repair takes the archive from the download cache ------------------------------------------------


def test_doctor_repair_reinstalls_from_the_download_cache_without_a_download(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path
) -> None:
    from llama_runtime.runtime.layout import Home
    from llama_runtime.updater.cli.main import main

    cached = list((b7000_home / "cache" / "assets").iterdir())
    assert len(cached) == 1  # the install kept its archive, named by its sha256
    active = Home(b7000_home).load(Home(b7000_home).read_pointer().active or "")
    active.binary.write_bytes(b"#!/bin/sh\nexit 1\n")  # damaged in place
    downloads = len(github.requests_to("blob"))
    capsys.readouterr()
    code = main(["doctor", "--repair", "-v", "--json", "--home", str(b7000_home), "--api-url", github.api_url])
    said = capsys.readouterr()
    payload = json.loads(said.out)
    assert code == 0, payload
    assert "reinstalled b7000" in payload["repaired"], payload
    assert len(github.requests_to("blob")) == downloads  # the cached archive, checked by its digest
    assert "taken from the download cache" in said.err  # and -v says so
    code, status = run_json(capsys, b7000_home, None, "status")
    assert status["active"]["tag"] == "b7000"


# -- a, e: after doctor --repair the damaged copy is named, and list shows both names of a build -----------------


def test_after_doctor_repair_the_damaged_copy_is_marked_in_list_and_removable_by_the_name_given(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_runtime.runtime.layout import Home

    monkeypatch.setenv("LLAMA_RUNTIME_KEEP", "0")  # retention would remove the damaged copy (next test)

    layout = Home(b7000_home)
    damaged = layout.load(layout.read_pointer().active or "")
    damaged.binary.write_bytes(b"#!/bin/sh\nexit 1\n")
    code, report = run_json(capsys, b7000_home, github.api_url, "doctor", "--repair")
    assert code == 0, report
    advice = " ".join(report["advice"])
    assert f"`llama-runtime remove {damaged.name}`" in advice, report
    code, listed = run_json(capsys, b7000_home, None, "list")
    flagged = {r["name"]: r["damage"] for r in listed["installed"]}
    assert flagged[damaged.name] and not flagged[layout.read_pointer().active or ""], listed
    code, out = _text(capsys, b7000_home, None, "list")
    assert f"{damaged.name} DAMAGED" in out, out
    code, refused = run_json(capsys, b7000_home, None, "remove", "b7000")  # the tag means the active copy
    assert code == 2 and f"`llama-runtime remove {damaged.name}`" in refused["error"]["message"], refused
    code, removed = run_json(capsys, b7000_home, None, "remove", damaged.name)
    assert code == 0 and removed["removed"]["runtime_dir"] == str(damaged.path), removed
    code, status = run_json(capsys, b7000_home, None, "status")
    assert status["active"]["tag"] == "b7000" and len(status["installed"]) == 1


def test_text_list_shows_the_build_and_the_semver_release_it_was_installed_as(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, home: Path, tmp_path: Path
) -> None:
    from tests.helpers import publish_stand_in

    publish_stand_in(github, tmp_path, "b7000")  # cut as v0.1.0
    assert run_json(capsys, home, github.api_url, "update", "--backend", "cpu")[0] == 0
    code, out = _text(capsys, home, None, "list")
    assert code == 0 and "b7000 (v0.1.0)" in out, out


# -- h: server restart --------------------------------------------------------------------------------------------


def test_server_restart_stops_and_starts_again_with_the_recorded_arguments(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    """A stand-in that stays up without answering /health: pids and recorded arguments are what counts."""
    script = stand_in_server().replace(b"exit 0\n", b"exec sleep 30\n", 1)
    archive = stand_in_tarball(tmp_path / "llama-b7000-bin-ubuntu-x64.tar.gz", tag="b7000", script=script)
    assert run_json(capsys, home, None, "install-file", str(archive), "--tag", "b7000")[0] == 0
    try:
        _code, started = run_json(capsys, home, None, "server", "start", "--timeout", "0.2", "--", "--ctx-size", "64")
        assert started["running"], started
        _code, restarted = run_json(capsys, home, None, "server", "restart", "--timeout", "0.2")
        assert restarted["running"] and restarted["pid"] != started["pid"], restarted
        assert restarted["args"] == started["args"] and "--ctx-size" in restarted["args"]
        code, status = run_json(capsys, home, None, "server", "status")
        assert code == 0 and status["pid"] == restarted["pid"]
    finally:
        run_json(capsys, home, None, "server", "stop")


def test_server_restart_with_nothing_running_and_no_arguments_is_exit_2(
    capsys: pytest.CaptureFixture[str], b7000_home: Path
) -> None:
    code, payload = run_json(capsys, b7000_home, None, "server", "restart")
    assert code == 2 and "server start -- ARGS" in payload["error"]["message"], payload


# -- l: the server switch's phases, and resolve first for a build already installed ------------------------------


def _phases_of(updater: Any, tag: str) -> list[str]:
    seen: list[str] = []

    def listen(state: Any) -> None:
        if not seen or seen[-1] != state.phase:
            seen.append(state.phase)

    final = updater.start_update(tag=tag, listener=listen, background=False).wait(60)
    assert final.phase == "done", final.error
    return seen


def test_an_update_with_a_running_server_reports_stop_server_and_health_phases(
    github: FakeGitHub, tmp_path: Path
) -> None:
    from llama_runtime import RuntimeUpdater
    from llama_runtime.updater.choice.host import host_for_platform
    from tests.helpers import publish_stand_in
    from tests.test_service import RecordingAppServer

    home = tmp_path / "home"
    for tag in ("b7000", "b7001", "b7002"):
        publish_stand_in(github, tmp_path, tag)
    plain = RuntimeUpdater(home, repo=REPO, backend="cpu", api_url=github.api_url)
    assert plain.start_update(tag="b7000").wait(60).phase == "done"
    assert plain.start_update(tag="b7001").wait(60).phase == "done"
    app = RecordingAppServer(tmp_path / "running-llama-server")
    updater = RuntimeUpdater(
        home,
        repo=REPO,
        backend="cpu",
        api_url=github.api_url,
        host=lambda: host_for_platform("linux-x64"),
        server=app,  # type: ignore[arg-type]  # a control without endpoint(), as older apps' are
    )
    installed = _phases_of(updater, "b7002")
    assert installed == ["resolve", "download", "verify", "activate", "stop_server", "health", "done"], installed
    switched = _phases_of(updater, "b7000")  # installed already: no download, still resolve first
    assert switched == ["resolve", "verify", "activate", "stop_server", "health", "done"], switched
    assert app.calls.count("stop") == 2 and app.calls.count("health") == 2


def test_an_update_without_a_running_server_has_no_server_phases(github: FakeGitHub, tmp_path: Path) -> None:
    from llama_runtime import RuntimeUpdater
    from tests.helpers import publish_stand_in

    publish_stand_in(github, tmp_path, "b7000")
    updater = RuntimeUpdater(tmp_path / "home", repo=REPO, backend="cpu", api_url=github.api_url)
    assert _phases_of(updater, "b7000") == ["resolve", "download", "verify", "activate", "done"]


# -- f, g: doctor and a stray file; doctor -q ---------------------------------------------------------------------


def test_doctor_names_a_stray_file_in_the_active_runtime_that_export_refuses(
    capsys: pytest.CaptureFixture[str], b7000_home: Path, tmp_path: Path
) -> None:
    from llama_runtime.runtime.layout import Home

    layout = Home(b7000_home)
    active = layout.load(layout.read_pointer().active or "")
    (active.binary.parent / "notes.txt").write_text("written after the install\n")
    code, out = _text(capsys, b7000_home, None, "doctor")
    assert "notes.txt" in out and "Everything checks out" not in out, out
    code, exported = run_json(capsys, b7000_home, None, "export", "--output", str(tmp_path / "bundle.tar.gz"))
    assert code != 0 and "notes.txt" in exported["error"]["message"]  # what doctor warned of


def test_doctor_quiet_prints_no_host_block_and_no_passed_checks(
    capsys: pytest.CaptureFixture[str], b7000_home: Path
) -> None:
    code, loud = _text(capsys, b7000_home, None, "doctor")
    assert code == 0 and "host:" in loud and "[ok]" in loud
    code, quiet = _text(capsys, b7000_home, None, "doctor", "-q")
    assert code == 0 and quiet.strip() == "Everything checks out.", quiet


def test_doctor_quiet_still_prints_what_failed(capsys: pytest.CaptureFixture[str], b7000_home: Path) -> None:
    from llama_runtime.runtime.layout import Home

    layout = Home(b7000_home)
    layout.load(layout.read_pointer().active or "").binary.write_bytes(b"#!/bin/sh\nexit 1\n")
    code, quiet = _text(capsys, b7000_home, None, "doctor", "-q")
    assert code == 6 and "[FAIL] active runtime" in quiet and "host:" not in quiet and "[ok]" not in quiet, quiet


def test_auto_with_unsure_nvidia_detection_says_how_to_let_the_device_check_decide() -> None:
    from llama_runtime.updater.choice.choose import choose_asset
    from tests.test_choose import load

    unsure = HostFacts(os="windows", arch="x64", nvidia_unsure="/dev/nvidia0 is present but nvidia-smi did not answer")
    choice = choose_asset(load("b7000"), unsure, "auto")
    assert choice.backend == "cpu"
    assert "--backend cuda lets its device check decide" in choice.reason, choice.reason


def test_after_doctor_repair_retention_removes_the_damaged_copy_and_the_advice_does_not_name_it(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path
) -> None:
    from llama_runtime.runtime.layout import Home

    layout = Home(b7000_home)
    damaged = layout.load(layout.read_pointer().active or "")
    damaged.binary.write_bytes(b"#!/bin/sh\nexit 1\n")
    code, report = run_json(capsys, b7000_home, github.api_url, "doctor", "--repair")
    assert code == 0, report
    assert damaged.name not in " ".join(report["advice"]), report
    assert not damaged.path.exists()
    code, listed = run_json(capsys, b7000_home, None, "list")
    assert [r["tag"] for r in listed["installed"]] == ["b7000"] and not listed["installed"][0]["damage"], listed
    assert_runs(Path(listed["installed"][0]["binary"]))
