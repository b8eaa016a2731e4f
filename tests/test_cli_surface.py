"""What a person meets at the command line: help, durations, -v/-vv, --log-json, the JSON
shapes of check/plan/doctor/status, and ``server start`` failing in llama-server's own words."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llama_runtime.updater.cli.main import build_parser, main
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, cli_process, publish_stand_in, run_json, stand_in_server, stand_in_tarball

GLOBAL_FLAGS = ("--home", "--api-url", "--repo", "--backend", "--json", "--log-json", "--verbose", "--quiet")


def help_of(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*args, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.fixture
def installed(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path) -> Path:
    for tag in ("b7000", "b7001"):
        publish_stand_in(github, tmp_path, tag)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    return home


# -- help -------------------------------------------------------------------------------------


def test_global_options_are_listed_once_at_the_top_and_accepted_after_a_command(
    capsys: pytest.CaptureFixture[str], installed: Path, github: FakeGitHub
) -> None:
    top = help_of(capsys)
    assert all(flag in top for flag in GLOBAL_FLAGS)
    commands = sorted(build_parser()._subparsers._group_actions[0].choices or ())  # type: ignore[union-attr]
    for command in commands:
        text = help_of(capsys, command)
        assert not any(f"  {flag}" in text for flag in GLOBAL_FLAGS if flag != "--backend"), (command, text)
        assert "Global options" in text, command
    # ... and still work after the command
    assert main(["status", "--home", str(installed), "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["active"]["tag"] == "b7000"


def test_plan_tag_and_latest_have_help_text(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, "plan")
    assert "plan for this release tag" in text and "plan for the newest release" in text


# -- durations --------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["check", "--apply"], ["update"]])
def test_wait_takes_a_duration_like_jitter(
    command: list[str], capsys: pytest.CaptureFixture[str], installed: Path, github: FakeGitHub
) -> None:
    code, payload = run_json(capsys, installed, github.api_url, *command, "--wait", "10m")
    assert code == 0, payload
    code, payload = run_json(capsys, installed, github.api_url, *command, "--wait", "10 parsecs")
    assert code == 2 and "--wait" in payload["error"]["message"], payload


# -- verbosity and log formats ---------------------------------------------------------------


def run_module(home: Path, github: FakeGitHub, *args: str) -> subprocess.CompletedProcess[str]:
    """``llama-runtime ARGS`` as a child, its home and API given by the environment (as a service unit would)."""
    env = {**os.environ, "LLAMA_RUNTIME_HOME": str(home), "LLAMA_RUNTIME_GITHUB_API": github.api_url}
    return cli_process(*args, env=env)


STEPS = ("decided", "downloading", "downloaded", "extracted", "binary runs", "activated")


def test_v_shows_each_step_and_vv_every_request_and_candidate(
    github: FakeGitHub, tmp_path: Path, installed: Path
) -> None:
    quiet = run_module(tmp_path / "h0", github, "update", "--tag", "b7001", "--backend", "cpu")
    one = run_module(tmp_path / "h1", github, "update", "--tag", "b7001", "--backend", "cpu", "-v")
    two = run_module(tmp_path / "h2", github, "update", "--tag", "b7001", "--backend", "cpu", "-vv")
    assert quiet.returncode == one.returncode == two.returncode == 0, (quiet.stderr, one.stderr, two.stderr)
    assert not any(step in quiet.stderr for step in STEPS), quiet.stderr
    assert all(step in one.stderr for step in STEPS), one.stderr
    assert "github" not in one.stderr and "candidate" not in one.stderr
    assert "github" in two.stderr and "candidate" in two.stderr, two.stderr


def test_log_json_makes_every_stderr_line_json_errors_included(github: FakeGitHub, tmp_path: Path) -> None:
    github.set_default_branch("ggml-org/llama.cpp", "master")  # the repository exists, without b6999
    done = run_module(tmp_path / "home", github, "update", "--tag", "b6999", "--log-json", "-v")
    assert done.returncode == 7, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    error = lines[-1]
    assert error["level"] == "error" and error["error"]["code"] == "release_not_found", error
    assert error["error"]["exit_code"] == 7 and "b6999" in error["event"]


def test_quiet_prints_the_result_and_no_warnings(
    capsys: pytest.CaptureFixture[str], installed: Path, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMA_SERVER_PATH", str(installed / "elsewhere"))  # an update then warns about it
    assert main(["--home", str(installed), "--api-url", github.api_url, "update", "--tag", "b7001"]) == 0
    loud = capsys.readouterr()
    assert "warning: LLAMA_SERVER_PATH" in loud.out
    assert main(["--home", str(installed), "--api-url", github.api_url, "-q", "rollback"]) == 0
    assert main(["--home", str(installed), "--api-url", github.api_url, "-q", "update", "--tag", "b7001"]) == 0
    quiet = capsys.readouterr()
    assert "Switched to" in quiet.out and "warning" not in quiet.out + quiet.err, quiet


# -- JSON shapes ------------------------------------------------------------------------------


def test_check_reports_the_active_runtime_like_status_does(
    capsys: pytest.CaptureFixture[str], installed: Path, github: FakeGitHub
) -> None:
    code, checked = run_json(capsys, installed, github.api_url, "check")
    assert code == 0, checked
    code, status = run_json(capsys, installed, github.api_url, "status")
    assert checked["installed"] == "b7000" and checked["latest"] == "b7001"
    assert checked["active"] == status["active"]
    assert isinstance(status["installed"], list)


def test_plan_and_doctor_list_only_the_cpu_flags_that_pick_a_build(
    capsys: pytest.CaptureFixture[str], installed: Path, github: FakeGitHub
) -> None:
    from llama_runtime.updater.choice.host import ISA_FLAGS
    from llama_runtime.updater.choice.host_detect import detect_host

    raw = detect_host().cpu_features
    code, plan = run_json(capsys, installed, github.api_url, "plan", "--backend", "cpu", "--explain")
    assert code == 0, plan
    code, doctor = run_json(capsys, installed, github.api_url, "doctor")
    for host in (plan["host"], doctor["host"]):
        assert set(host["cpu_features"]) == raw & ISA_FLAGS
        assert not set(host["cpu_features"]) - ISA_FLAGS


def test_a_multi_line_override_version_is_one_line_in_status(
    capsys: pytest.CaptureFixture[str], installed: Path, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    override = installed / "custom-llama-server"
    override.write_bytes(
        b"#!/bin/sh\necho 'ggml_vulkan: Found 1 Vulkan devices:' >&2\necho 'version: 7000 (abc123)' >&2\n"
        b"echo 'built with cc for x86_64-linux-gnu' >&2\n"
    )
    override.chmod(0o755)
    monkeypatch.setenv("LLAMA_SERVER_PATH", str(override))
    assert main(["--home", str(installed), "status"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("override:"))
    assert "(version: 7000 (abc123)) is in force" in line
    code, status = run_json(capsys, installed, github.api_url, "status")
    assert code == 0 and status["override_info"]["version"] == "version: 7000 (abc123)"


# -- server start -----------------------------------------------------------------------------


def test_server_start_binds_llama_servers_own_default_port(tmp_path: Path) -> None:
    from llama_runtime import RuntimeUpdater

    def port(env: dict[str, str]) -> int | None:
        return RuntimeUpdater(tmp_path / "home", env=env).server.port

    assert port({}) == 8080
    assert port({"LLAMA_RUNTIME_SERVER_PORT": "0"}) is None
    assert port({"LLAMA_RUNTIME_SERVER_PORT": "9000"}) == 9000


def test_server_start_without_port_records_8080(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in that stays up without binding anything: the recorded arguments are what counts."""
    monkeypatch.delenv("LLAMA_RUNTIME_SERVER_PORT")
    script = stand_in_server().replace(b"exit 0\n", b"exec sleep 30\n", 1)
    archive = stand_in_tarball(tmp_path / CPU_TAR.format(tag="b7000"), tag="b7000", script=script)
    assert main(["--home", str(home), "--json", "install-file", str(archive), "--tag", "b7000"]) == 0
    capsys.readouterr()
    try:
        main(["--home", str(home), "--json", "server", "start", "--timeout", "0.5"])
        started = json.loads(capsys.readouterr().out)
        assert started["port"] == 8080 and started["args"][-2:] == ["--port", "8080"], started
    finally:
        main(["--home", str(home), "server", "stop"])


def test_server_start_with_a_bad_flag_shows_llama_servers_own_error(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    real_vulkan_tarball: Path,
    vk_env: dict[str, str],
) -> None:
    github.add_release(REPO, "b7000", {"llama-b7000-bin-ubuntu-vulkan-x64.tar.gz": real_vulkan_tarball})
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "vulkan")
    assert code == 0, payload

    code, failed = run_json(capsys, home, github.api_url, "server", "start", "--timeout", "30", "--", "--bad-flag")

    assert code == 6, failed
    message = failed["error"]["message"]
    assert "invalid argument: --bad-flag" in message and "exited with status 1" in message, message
    assert "pid None" not in message
    code, status = run_json(capsys, home, github.api_url, "server", "status")
    assert code == 0 and status["running"] is False


# -- shell completion ---------------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_each_shell(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert "llama-runtime" in script and "_ARGCOMPLETE" in script


def complete(line: str, home: Path, tmp_path: Path) -> list[str]:
    """What the shell gets for ``line`` (argcomplete's protocol, as the installed script speaks it)."""
    answer = tmp_path / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "LLAMA_RUNTIME_HOME": str(home),
    }
    argv = [sys.executable, "-m", "llama_runtime"]
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [item.strip() for item in answer.read_text().split("\n")]


def test_the_shell_completes_commands_options_and_installed_tags(installed: Path, tmp_path: Path) -> None:
    assert "use" in complete("llama-runtime us", installed, tmp_path)
    assert "--available" in complete("llama-runtime list --av", installed, tmp_path)
    assert complete("llama-runtime use b70", installed, tmp_path) == ["b7000"]
    assert "b7000" in complete("llama-runtime remove ", installed, tmp_path)


def test_the_shell_completes_backends_channels_platforms_tags_and_global_options_after_the_command(
    installed: Path, tmp_path: Path
) -> None:
    """`--backend` and `--channel` completed file names; global options after a command were not offered."""
    assert complete("llama-runtime --backend vu", installed, tmp_path) == ["vulkan"]
    assert set(complete("llama-runtime update --backend ", installed, tmp_path)) >= {"auto", "cpu", "cuda", "vulkan"}
    assert complete("llama-runtime --channel ", installed, tmp_path) == ["stable", "nightly"]
    assert complete("llama-runtime plan --channel ni", installed, tmp_path) == ["nightly"]
    assert complete("llama-runtime mirror sync --channel s", installed, tmp_path) == ["stable"]
    assert "auto" not in complete("llama-runtime mirror sync --backend ", installed, tmp_path)
    assert complete("llama-runtime plan --platform windows-a", installed, tmp_path) == ["windows-arm64"]
    assert complete("llama-runtime update --tag b7", installed, tmp_path) == ["b7000"]
    after = complete("llama-runtime update --", installed, tmp_path)
    assert {"--home", "--api-url", "--json", "--backend", "--channel", "--tag"} <= set(after)
    assert {"--home", "--json", "--repo"} <= set(complete("llama-runtime use b7000 --", installed, tmp_path))
