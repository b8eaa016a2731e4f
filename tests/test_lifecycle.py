"""The runtime-manager verbs: ``use``, ``remove``, ``which``, ``list [--available]``, ``--version``,
and ``update``/``install-file`` of a build that is installed already (switched, never a second copy).

End to end through the CLI against the GitHub-like server on 127.0.0.1; the switching
scenarios run the real llama-server (Vulkan build on Mesa's software device).
"""

from __future__ import annotations

import json
import shutil
from importlib.metadata import version
from pathlib import Path

import pytest

from llama_runtime.runtime.layout import Home
from llama_runtime.updater.cli.main import main
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, VULKAN_TAR, HomeGuard, assert_runs, publish_stand_in, run_json


def blob_requests(github: FakeGitHub) -> int:
    """Asset downloads; resolving "latest" reads the stable release's small nightly-tag.txt, not an asset."""
    return len([r for r in github.requests_to("blob") if not r.path.endswith("/nightly-tag.txt")])


def runtime_dirs(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "runtimes").iterdir())


@pytest.fixture
def cpu_builds(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub, tmp_path: Path) -> Path:
    """b7000, b7001 and b7002 (stand-in CPU_TAR builds) installed one after another; b7002 active."""
    for tag in ("b7000", "b7001", "b7002"):
        publish_stand_in(github, tmp_path, tag)
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
        assert code == 0 and payload["result"] == "installed", payload
    return home


# -- with the real llama-server ---------------------------------------------------------------


@pytest.fixture
def real_pair(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    github: FakeGitHub,
    real_vulkan_tarball: Path,
    vk_env: dict[str, str],
) -> Path:
    """b7000 and b7001 (the real Vulkan build) installed; b7001 active, b7000 previous."""
    for tag in ("b7000", "b7001"):
        github.add_release(REPO, tag, {VULKAN_TAR.format(tag=tag): real_vulkan_tarball})
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "vulkan")
        assert code == 0, payload
    return home


def test_use_switches_the_running_real_server_to_the_installed_build_without_a_download(
    real_pair: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = real_pair
    models = tmp_path / "models"
    models.mkdir()
    code, started = run_json(
        capsys, home, github.api_url, "server", "start", "--timeout", "60", "--", "--models-dir", str(models)
    )
    assert code == 0 and started["healthy"], started
    blobs, dirs = blob_requests(github), runtime_dirs(home)

    code, used = run_json(capsys, home, github.api_url, "use", "b7000")

    assert code == 0, used
    assert used["result"] == "switched"
    assert (used["active"]["tag"], used["previous"]["tag"]) == ("b7000", "b7001")
    assert used["server_restarted"] is True
    assert blob_requests(github) == blobs and runtime_dirs(home) == dirs, "no download, no new copy"
    code, server = run_json(capsys, home, github.api_url, "server", "status")
    assert server["running"] and server["healthy"] and server["runtime"]["tag"] == "b7000", server
    assert Path(server["binary"]) == Path(used["active"]["binary"])
    code, which = run_json(capsys, home, github.api_url, "which")
    assert code == 0 and which["binary"] == used["active"]["binary"]
    assert_runs(Path(which["binary"]))


def test_update_of_an_installed_real_build_switches_to_it_with_zero_bytes(
    real_pair: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub
) -> None:
    home = real_pair
    blobs, dirs = blob_requests(github), runtime_dirs(home)
    sent = github.download_bytes_sent

    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "vulkan")

    assert code == 0, payload
    assert payload["result"] == "switched"
    assert payload["active"]["tag"] == "b7000" and payload["previous"]["tag"] == "b7001"
    assert github.download_bytes_sent == sent and blob_requests(github) == blobs
    assert runtime_dirs(home) == dirs, "the home never holds two copies of one build"
    assert_runs(Path(payload["active"]["binary"]))


def test_update_to_latest_switches_when_the_latest_build_is_installed_but_not_active(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub
) -> None:
    home = cpu_builds
    assert run_json(capsys, home, github.api_url, "use", "b7000")[0] == 0
    blobs, dirs = blob_requests(github), runtime_dirs(home)

    code, payload = run_json(capsys, home, github.api_url, "update")

    assert code == 0, payload
    assert payload["result"] == "switched" and payload["active"]["tag"] == "b7002"
    assert blob_requests(github) == blobs and runtime_dirs(home) == dirs


def test_use_of_a_damaged_installed_build_is_refused_and_the_active_one_still_runs(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub
) -> None:
    home = cpu_builds
    b7000 = next(r for r in Home(home).installed() if r.marker.tag == "b7000")
    b7000.binary.write_bytes(b"#!/bin/sh\nexit 3\n" + b" " * (b7000.binary.stat().st_size - 17))
    guard = HomeGuard(None, home)

    code, payload = run_json(capsys, home, github.api_url, "use", "b7000")

    assert code == 6, payload
    assert "does not match its recorded sha256" in payload["error"]["message"]
    assert f"remove {b7000.name}" in payload["error"]["hint"]  # by name: the tag may mean two copies
    guard.assert_intact("b7002", capsys=capsys)


def test_update_reinstalls_an_installed_copy_that_no_longer_verifies_and_retention_drops_the_bad_copy(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub
) -> None:
    home = cpu_builds
    b7000 = next(r for r in Home(home).installed() if r.marker.tag == "b7000")
    (b7000.binary).write_bytes(b"x" * b7000.binary.stat().st_size)  # same size: only sha256 can tell

    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")

    assert code == 0 and payload["result"] == "installed", payload
    assert_runs(Path(payload["active"]["binary"]))
    # The update's retention (keep 3) already dropped the bad copy of a build it keeps.
    assert not b7000.path.exists()
    code, report = run_json(capsys, home, github.api_url, "gc", "--keep", "5")
    assert code == 0, report
    assert [item["path"] for item in report["removed"] if item["kind"] == "runtime"] == []


def test_use_names_what_is_installed_when_the_tag_is_not(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub
) -> None:
    code, payload = run_json(capsys, cpu_builds, github.api_url, "use", "b6999")
    assert code == 2, payload
    message = payload["error"]["message"]
    assert "b6999 is not installed" in message and all(t in message for t in ("b7000", "b7001", "b7002"))
    assert "update --tag b6999" in payload["error"]["hint"]


def test_use_whose_build_gc_removes_before_it_takes_the_lock_says_it_is_no_longer_installed(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_runtime.updater.activate.installer import Installer

    frozen = HomeGuard(None, cpu_builds)
    home = Home(cpu_builds)
    b7000 = next(r for r in home.installed() if r.marker.tag == "b7000")
    finish = Installer.finish_trial

    def removed_meanwhile(self: Installer, emit: object) -> str | None:
        # What `gc` or `remove` in another process did between use's look-up and its lock.
        if b7000.path.is_dir():
            shutil.rmtree(b7000.path)
        return finish(self, emit)  # type: ignore[arg-type]

    monkeypatch.setattr(Installer, "finish_trial", removed_meanwhile)
    code, payload = run_json(capsys, cpu_builds, github.api_url, "use", "b7000")
    assert code == 2, payload
    assert payload["error"]["message"].startswith("b7000 is no longer installed"), payload
    assert "doctor" not in json.dumps(payload)
    frozen.runtimes = {k: v for k, v in frozen.runtimes.items() if not k.startswith(b7000.name)}
    frozen.assert_intact("b7002", capsys=capsys)


def test_use_asks_which_one_when_a_tag_is_installed_from_two_repositories(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = cpu_builds
    github.add_release("unslothai/llama.cpp", "b7000", {CPU_TAR.format(tag="b7000"): tmp_path / "b7000.tar.gz"})
    code, payload = run_json(
        capsys, home, github.api_url, "update", "--repo", "unslothai/llama.cpp", "--tag", "b7000", "--keep", "0"
    )
    assert code == 0 and payload["result"] == "installed", payload

    code, payload = run_json(capsys, home, github.api_url, "use", "b7000")
    assert code == 2 and "installed more than once" in payload["error"]["message"], payload
    assert "--repo" in payload["error"]["message"]

    code, payload = run_json(capsys, home, github.api_url, "use", "b7000", "--repo", REPO)
    assert code == 0 and payload["result"] == "switched", payload
    assert (payload["active"]["repo"], payload["active"]["tag"]) == (REPO, "b7000")


def test_use_of_the_active_build_is_up_to_date(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub
) -> None:
    pointer = (cpu_builds / "active.json").read_bytes()
    code, payload = run_json(capsys, cpu_builds, github.api_url, "use", "b7002")
    assert code == 0 and payload["result"] == "up_to_date", payload
    assert (cpu_builds / "active.json").read_bytes() == pointer


def test_remove_refuses_active_and_previous_and_deletes_another(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub
) -> None:
    home = cpu_builds
    guard = HomeGuard(None, home)
    for tag, words in (("b7002", "active runtime"), ("b7001", "previous runtime")):
        code, payload = run_json(capsys, home, github.api_url, "remove", tag)
        assert code == 2 and words in payload["error"]["message"], payload
    guard.assert_intact("b7002", capsys=capsys)

    code, payload = run_json(capsys, home, github.api_url, "remove", "b7000")

    assert code == 0, payload
    assert payload["removed"]["tag"] == "b7000" and payload["freed_bytes"] > 0
    assert not Path(payload["removed"]["runtime_dir"]).exists()
    code, listed = run_json(capsys, home, github.api_url, "list")
    assert [r["tag"] for r in listed["installed"]] == ["b7001", "b7002"]
    code, payload = run_json(capsys, home, github.api_url, "remove", "b7000")
    assert code == 2 and "not installed" in payload["error"]["message"]


def test_which_prints_one_line_and_exits_5_when_nothing_is_active(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    assert main(["--home", str(cpu_builds), "which"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and Path(out.strip()).name == "llama-server"
    assert_runs(Path(out.strip()))

    code, payload = run_json(capsys, tmp_path / "empty", github.api_url, "which")
    assert code == 5 and payload["error"]["code"] == "nothing_active", payload
    assert main(["--home", str(tmp_path / "empty"), "which"]) == 5
    captured = capsys.readouterr()
    assert captured.out == "" and "No runtime is active" in captured.err


def test_which_prints_the_llama_server_path_override_when_it_is_in_force(
    cpu_builds: Path,
    capsys: pytest.CaptureFixture[str],
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`$(llama-runtime which)` ran the managed binary while `status` reported the override."""
    code, before = run_json(capsys, cpu_builds, github.api_url, "which")
    override = tmp_path / "custom-llama-server"
    override.write_text("#!/bin/sh\necho 'version: 1 (custom)' >&2\n")
    override.chmod(0o755)
    monkeypatch.setenv("LLAMA_SERVER_PATH", str(override))
    assert main(["--home", str(cpu_builds), "which"]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"{override}\n" and "LLAMA_SERVER_PATH" in captured.err
    code, payload = run_json(capsys, cpu_builds, github.api_url, "which")
    assert code == 0 and payload["binary"] == payload["override"] == str(override)
    assert payload["managed"] == before["binary"]
    code, status = run_json(capsys, cpu_builds, github.api_url, "status")
    assert status["override"] == payload["binary"]
    # Nothing managed is active: the override still answers, exit 0.
    code, empty = run_json(capsys, tmp_path / "empty", github.api_url, "which")
    assert code == 0 and empty["binary"] == str(override) and empty["managed"] is None
    assert_runs(Path(before["binary"]))  # the managed runtime is untouched


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"llama-runtime {version('llama-runtime-updater')}\n"


def test_list_is_one_array_and_available_shows_what_fits_this_host(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = cpu_builds
    github.add_release(REPO, "b7003", {CPU_TAR.format(tag="b7003"): tmp_path / "b7000.tar.gz"})
    github.add_release(REPO, "b7004", {"llama-b7004-bin-macos-arm64.tar.gz": tmp_path / "b7000.tar.gz"})
    github.add_release(REPO, "b7005", {CPU_TAR.format(tag="b7005"): tmp_path / "b7000.tar.gz"}, prerelease=True)

    code, listed = run_json(capsys, home, github.api_url, "list")
    # One array of runtimes under one key, beside the damaged directories (listed, never chosen).
    assert code == 0 and set(listed) == {"installed", "damaged", "home_bytes", "trial"} and listed["damaged"] == []
    assert [r["tag"] for r in listed["installed"]] == ["b7000", "b7001", "b7002"]
    assert [r["active"] for r in listed["installed"]] == [False, False, True]

    for bad in (("--limit", "0"), ("--available", "--limit", "-1")):  # with or without --available
        code, refused = run_json(capsys, home, github.api_url, "list", *bad)
        assert code == 2 and "--limit must be 1 or more" in refused["error"]["message"], refused
    code, listed = run_json(capsys, home, github.api_url, "list", "--available", "--limit", "3")
    assert code == 0, listed
    available = listed["available"]
    assert [a["tag"] for a in available] == ["b7003", "b7002", "b7001"], "no macOS-only build, no prerelease"
    assert [a["installed"] for a in available] == [False, True, True]
    assert available[0] == {
        "tag": "b7003",
        "version": "v0.4.0",  # the fake cuts each upstream build as a semver release, like make-release.yml
        "asset": CPU_TAR.format(tag="b7003"),
        "backend": "cpu",
        "installed": False,
    }
    code, nightly = run_json(
        capsys, home, github.api_url, "list", "--available", "--limit", "2", "--channel", "nightly"
    )
    assert [a["tag"] for a in nightly["available"]] == ["b7005", "b7003"], "nightly lists prerelease builds"
    assert nightly["available"][0]["version"] is None


def test_install_file_of_an_installed_build_switches_to_it(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = cpu_builds
    dirs = runtime_dirs(home)
    archive = tmp_path / CPU_TAR.format(tag="b7000")
    shutil.copy(tmp_path / "b7000.tar.gz", archive)
    code, payload = run_json(capsys, home, github.api_url, "install-file", str(archive), "--tag", "b7000")
    assert code == 0 and payload["result"] == "switched", payload
    assert runtime_dirs(home) == dirs


def test_gc_never_keeps_two_copies_of_one_build(
    cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub
) -> None:
    """Homes written by older versions may hold copies; gc --keep N keeps N distinct builds in all."""
    home = cpu_builds
    b7000 = next(r for r in Home(home).installed() if r.marker.tag == "b7000")
    copies = []
    for n in range(3):
        copy = b7000.path.with_name(f"{b7000.name}-copy{n}")
        shutil.copytree(b7000.path, copy, symlinks=True)
        marker = copy / "llama-runtime.json"
        data = json.loads(marker.read_text())
        data["installed_at"] = f"2027-01-01T00:00:0{n}.000Z"  # newer than everything else
        marker.write_text(json.dumps(data))
        copies.append(copy)

    code, report = run_json(capsys, home, github.api_url, "gc", "--keep", "3")  # active, previous and one more

    assert code == 0, report
    removed = sorted(item["path"] for item in report["removed"] if item["kind"] == "runtime")
    assert removed == sorted([str(b7000.path), str(copies[0]), str(copies[1])])
    code, listed = run_json(capsys, home, github.api_url, "list")
    assert sorted(r["tag"] for r in listed["installed"]) == ["b7000", "b7001", "b7002"]


def test_rollback_reports_its_result(cpu_builds: Path, capsys: pytest.CaptureFixture[str], github: FakeGitHub) -> None:
    code, payload = run_json(capsys, cpu_builds, github.api_url, "rollback")
    assert code == 0 and payload["result"] == "switched", payload
    assert (payload["active"]["tag"], payload["previous"]["tag"]) == ("b7001", "b7002")


@pytest.mark.parametrize("typed", ["7000", "B7000"])
def test_a_bare_build_number_is_bad_input_that_suggests_the_tag(
    typed: str, capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub
) -> None:
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", typed)
    assert code == 2, payload
    assert "did you mean b7000" in payload["error"]["message"]
    assert github.requests == [], "refused before asking anyone"


def test_first_run_failure_says_nothing_was_installed_and_how_to_work_offline(
    capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub
) -> None:
    api_url = github.api_url
    github.stop()  # nothing answers there any more
    code = main(["--home", str(home), "--api-url", api_url, "update"])
    err = capsys.readouterr().err
    assert code == 7, err
    assert "still active" not in err
    assert "Nothing was installed" in err and "--api-url" in err and "install-file" in err


def test_list_available_reads_further_pages_for_stable_releases_that_upstream_cuts_rarely(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    # Upstream publishes a dozen bNNNN prereleases a day and a semver release now and then: the newest
    # page of 100 holds one stable release here, whose build is on the next page.
    def builds(first: int, count: int) -> None:
        for n in range(first, first + count):
            github.add_release(REPO, f"b{n}", {CPU_TAR.format(tag=f"b{n}"): b"x" * 64}, stable=False)

    builds(7000, 150)
    github.add_version(REPO, "v0.1.0", "b7010")
    github.add_version(REPO, "v0.2.0", "b7060")
    builds(7150, 99)
    code, listed = run_json(capsys, tmp_path / "home", github.api_url, "list", "--available", "--limit", "2")
    assert code == 0, listed
    assert [(a["tag"], a["version"]) for a in listed["available"]] == [("b7060", "v0.2.0"), ("b7010", "v0.1.0")]
    pages = [r.query for r in github.requests_to("api", "/releases") if r.path.endswith("/releases")]
    assert len(pages) == 3 and "page=3" in pages[-1], pages  # three pages, one request each
