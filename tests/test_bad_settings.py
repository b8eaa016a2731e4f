"""Settings a person can get wrong are exit 2 with what is valid, never a silent default
(found by trying the tool as an attacker and as a careless script would)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from llama_runtime import NetworkError, RuntimeUpdater, UserInputError
from llama_runtime.updater.choice.host import host_for_platform
from llama_runtime.updater.cli.main import main
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import CPU_TAR, REPO, HomeGuard, publish_stand_in, run_json

#: One malformed value of each kind of setting read at start: a rate, a duration, a provenance pin, a file.
MALFORMED = [
    ("LLAMA_RUNTIME_MIN_RATE", "fast"),
    ("LLAMA_RUNTIME_DOWNLOAD_DEADLINE", "-5"),
    ("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", "not a workflow"),
    ("LLAMA_RUNTIME_TRUSTED_ROOT", "/nonexistent/trusted_root.json"),  # a file setting: checked before it is needed
]


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
    from llama_runtime import UserInputError
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


# -- one settings object: every knob is read once, from the environment the caller gave -----------------------


def _updater(home: Path, github: FakeGitHub, env: dict[str, str]) -> RuntimeUpdater:
    return RuntimeUpdater(
        home,
        repo=REPO,
        backend="cpu",
        api_url=github.api_url,
        host=lambda: host_for_platform("linux-x64"),
        env=env,
    )


@pytest.mark.parametrize(("name", "value"), MALFORMED)
def test_an_updater_given_its_own_env_ignores_a_malformed_value_in_the_process_env(
    monkeypatch: pytest.MonkeyPatch, b7000_home: Path, github: FakeGitHub, tmp_path: Path, name: str, value: str
) -> None:
    publish_stand_in(github, tmp_path, "b7001")
    monkeypatch.setenv(name, value)
    job = _updater(b7000_home, github, env={}).update(tag="b7001")
    assert job.outcome is not None and job.outcome.active.marker.tag == "b7001"
    HomeGuard(b7000_home.parent, b7000_home).assert_intact("b7001")


@pytest.mark.parametrize(("name", "value"), MALFORMED)
def test_a_malformed_value_in_the_given_env_fails_the_constructor_naming_it_before_any_request(
    b7000_home: Path, github: FakeGitHub, name: str, value: str
) -> None:
    guard = HomeGuard(b7000_home.parent, b7000_home)
    github.requests.clear()
    with pytest.raises(UserInputError, match=name):
        _updater(b7000_home, github, env={name: value})
    assert github.requests == []
    guard.assert_intact("b7000")


def test_a_download_deadline_in_the_given_env_is_the_one_downloads_are_held_to(
    b7000_home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    # 16 bytes every 0.1 s: the ~270-byte asset would take ~2 s, far past the given deadline.
    publish_stand_in(github, tmp_path, "b7001")
    github.inject(CPU_TAR.format(tag="b7001"), Fault(drip_seconds=0.1, drip_chunk=16, times=None))
    guard = HomeGuard(b7000_home.parent, b7000_home)
    updater = _updater(b7000_home, github, env={"LLAMA_RUNTIME_DOWNLOAD_DEADLINE": "0.3"})
    with pytest.raises(NetworkError, match="LLAMA_RUNTIME_DOWNLOAD_DEADLINE"):
        updater.update(tag="b7001")
    guard.assert_intact("b7000")


@pytest.mark.parametrize(("name", "value"), MALFORMED)
def test_the_cli_with_a_malformed_setting_is_exit_2_naming_it_before_any_request(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    b7000_home: Path,
    github: FakeGitHub,
    tmp_path: Path,
    name: str,
    value: str,
) -> None:
    publish_stand_in(github, tmp_path, "b7001")
    guard = HomeGuard(b7000_home.parent, b7000_home)
    github.requests.clear()
    monkeypatch.setenv(name, value)
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--tag", "b7001")
    assert code == 2, payload
    assert name in payload["error"]["message"]
    assert github.requests == []
    monkeypatch.delenv(name)  # every command reads it at start: status would refuse it too
    guard.assert_intact("b7000", capsys=capsys)


def test_a_malformed_provenance_pin_only_warns_for_a_command_that_verifies_no_build(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, b7000_home: Path, github: FakeGitHub
) -> None:
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", "not a workflow")
    code, payload = run_json(capsys, b7000_home, github.api_url, "status")
    assert code == 0, payload
    HomeGuard(b7000_home.parent, b7000_home).assert_intact("b7000")


def test_a_malformed_provenance_pin_is_exit_2_for_a_doctor_repair_that_may_reinstall(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, b7000_home: Path, github: FakeGitHub
) -> None:
    guard = HomeGuard(b7000_home.parent, b7000_home)
    monkeypatch.setenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", "not a workflow")
    code, payload = run_json(capsys, b7000_home, github.api_url, "doctor", "--repair")
    assert code == 2, payload
    assert "LLAMA_RUNTIME_PROVENANCE_WORKFLOW" in payload["error"]["message"]
    monkeypatch.delenv("LLAMA_RUNTIME_PROVENANCE_WORKFLOW")
    guard.assert_intact("b7000", capsys=capsys)


#: The modules that may read the process's environment, and why: the settings (read once, at start, from
#: the env given, else the process's), and what is about the process itself rather than the update.
PROCESS_ENV_READERS = {
    "updater/config.py": "the settings, read once",
    "runtime/binary.py": "LLAMA_SERVER_PATH: the binary this machine's apps run",
    "updater/choice/host_detect.py": "host facts (CUDA_VISIBLE_DEVICES ...)",
    "updater/cli/main.py": "LLAMA_RUNTIME_DEBUG and shell completion",
    "updater/checkpoints.py": "crash-test checkpoints",
    "updater/cli/watchdog.py": "a test watchdog's stack dumps",
    "updater/logs.py": "NO_COLOR",
    "runtime/sandbox.py": "HOME (what the sandbox hides) and PATH (where bwrap is), of this process",
    "runtime/confine.py": "the allow-listed part of what a build not yet accepted would inherit (GPU selection)",
    "updater/verify/smoke.py": "the same allow-list, for the staged build's smoke run",
    "updater/sources/oci/auth.py": "registry credentials where container tools keep them (DOCKER_CONFIG, ...)",
    "runtime/server.py": "the managed llama-server runs with the user's environment (plus its home's mark)",
    "updater/net/identity.py": "LLAMA_RUNTIME_USER_AGENT_DETAIL: how this process names itself on every request",
    "updater/net/tls.py": "the machine's CA bundle (SSL_CERT_FILE), as every TLS client here reads it",
}


def test_only_the_settings_and_process_level_modules_read_the_process_environment() -> None:
    package = Path(__file__).resolve().parent.parent / "llama_runtime"
    readers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
                and node.attr in {"environ", "environb", "getenv", "getenvb"}
            ):
                readers.add(path.relative_to(package).as_posix())
    assert readers <= set(PROCESS_ENV_READERS), sorted(readers - set(PROCESS_ENV_READERS))
