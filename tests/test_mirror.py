"""``mirror sync``: a static tree that clients read with ``--api-url`` with upstream gone."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import CPU_TAR, REPO, VULKAN_TAR, assert_runs, cli_json, stand_in_tarball

WIN = "llama-{tag}-bin-win-cpu-x64.zip"
RELEASES = Path("repos") / REPO / "releases"


def mirrored_file(dest: Path, tag: str, name: str) -> Path:
    """The file the published ``tags/{tag}`` JSON of ``dest`` names for the asset ``name``."""
    doc = json.loads((dest / RELEASES / "tags" / tag).read_text())
    url: str = next(a["browser_download_url"] for a in doc["assets"] if a["name"] == name)
    assert url.startswith("../download/"), url
    return dest / RELEASES / url.removeprefix("../")


def publish(github: FakeGitHub, tmp_path: Path, tag: str) -> None:
    cpu = stand_in_tarball(tmp_path / "src" / CPU_TAR.format(tag=tag), tag=tag)
    github.add_release(
        REPO,
        tag,
        {
            CPU_TAR.format(tag=tag): cpu,
            VULKAN_TAR.format(tag=tag): b"vulkan build bytes",
            WIN.format(tag=tag): b"windows zip bytes",
            "llama.cpp-source-b1.tar.gz": b"source",
        },
    )


@pytest.fixture
def github(tmp_path: Path) -> Iterator[FakeGitHub]:
    (tmp_path / "src").mkdir()
    with FakeGitHub() as server:
        publish(server, tmp_path, "b7000")
        publish(server, tmp_path, "b7001")
        yield server


def sync(capsys: pytest.CaptureFixture[str], github: FakeGitHub, dest: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    return cli_json(
        capsys, "mirror", "sync", "--dest", str(dest), "--api-url", github.api_url,
        "--platform", "linux-x64", "--backend", "cpu", *extra,
    )  # fmt: skip


@pytest.fixture
def static_server(tmp_path: Path) -> Iterator[Any]:
    """Starts ``python -m http.server`` on 127.0.0.1 for a directory; returns its base URL."""
    procs: list[subprocess.Popen[str]] = []

    def start(directory: Path) -> str:
        proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(directory)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"port (\d+)", line)
        assert match, line
        return f"http://127.0.0.1:{match[1]}"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def test_sync_writes_github_shaped_json_with_only_the_chosen_assets(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    code, report = sync(capsys, github, dest, "--newest", "2")
    assert code == 0, report
    assert sorted(report["releases"]) == ["b7000", "b7001"]
    assert report["latest"] == "b7001"
    doc = json.loads((dest / RELEASES / "tags" / "b7001").read_text())
    assert doc["tag_name"] == "b7001"
    assert [a["name"] for a in doc["assets"]] == [CPU_TAR.format(tag="b7001")]
    asset = doc["assets"][0]
    data = mirrored_file(dest, "b7001", asset["name"]).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    assert asset["size"] == len(data)
    assert asset["digest"] == "sha256:" + sha
    assert asset["browser_download_url"] == f"../download/b7001/{sha[:16]}/{asset['name']}"
    assert doc["prerelease"] is True  # upstream's flag: a bNNNN build is a prerelease
    # releases/latest answers as GitHub's: the newest semver release, with its nightly-tag.txt and digest.
    assert report["latest_version"] == "v0.2.0" and sorted(report["versions"]) == ["v0.1.0", "v0.2.0"]
    latest = json.loads((dest / RELEASES / "latest").read_text())
    assert (latest["tag_name"], latest["prerelease"]) == ("v0.2.0", False)
    (pointer,) = latest["assets"]
    data = (dest / RELEASES / pointer["browser_download_url"]).read_bytes()
    assert pointer["name"] == "nightly-tag.txt" and data == b"b7001\n"
    assert pointer["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert not list((dest / RELEASES / "download").rglob(VULKAN_TAR.format(tag="b7001")))


def test_update_and_latest_resolution_work_from_the_mirror_with_upstream_stopped(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, static_server: Any
) -> None:
    dest, home = tmp_path / "mirror", tmp_path / "home"
    code, report = sync(capsys, github, dest, "--newest", "2")
    assert code == 0, report
    github.stop()
    url = static_server(dest)
    code, plan = cli_json(capsys, "plan", "--api-url", url, "--backend", "cpu", "--platform", "linux-x64")
    assert code == 0, plan
    assert (plan["tag"], plan["asset"]) == ("b7001", CPU_TAR.format(tag="b7001"))
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--backend", "cpu")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7001"
    marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
    assert marker["digest_verified"] is True
    assert_runs(Path(payload["active"]["binary"]))
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "b7000")
    assert code == 0, payload
    assert (payload["active"]["tag"], payload["previous"]["tag"]) == ("b7000", "b7001")
    assert cli_json(capsys, "unpin", "--home", str(home))[0] == 0  # `update --tag` pinned b7000
    code, checked = cli_json(capsys, "check", "--home", str(home), "--api-url", url)
    assert code == 0, checked
    assert (checked["installed"], checked["latest"], checked["update_available"]) == ("b7000", "b7001", True)
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "b6999")
    assert code == 7, payload


def test_file_url_reads_the_mirror_without_a_server(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    dest, home = tmp_path / "mirror", tmp_path / "home"
    code, report = sync(capsys, github, dest, "--newest", "2")
    assert code == 0, report
    github.stop()
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", dest.as_uri(), "--backend", "cpu")
    assert code == 0, payload
    assert payload["active"]["tag"] == "b7001"
    assert_runs(Path(payload["active"]["binary"]))
    # The mirror lists its releases too (releases/index.json): list --available and the nightly channel.
    url = dest.as_uri()
    code, listed = cli_json(capsys, "list", "--available", "--home", str(home), "--api-url", url)
    assert code == 0 and [a["tag"] for a in listed["available"]] == ["b7001", "b7000"], listed
    code, nightly = cli_json(capsys, "check", "--channel", "nightly", "--home", str(home), "--api-url", url)
    assert code == 0 and nightly["latest"] == "b7001", nightly
    code, older = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--tag", "b7000")
    assert code == 0 and older["active"]["tag"] == "b7000", older  # the listing's URLs reach the files


def test_second_sync_fetches_nothing_and_a_damaged_file_is_fetched_again(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    assert sync(capsys, github, dest, "--newest", "2")[0] == 0

    def asset_downloads() -> int:  # the stable release's nightly-tag.txt is read each time
        return len([r for r in github.requests_to("blob") if not r.path.endswith("/nightly-tag.txt")])

    blobs = asset_downloads()
    code, report = sync(capsys, github, dest, "--newest", "2")
    assert code == 0, report
    assert report["fetched"] == [] and sorted(report["reused"]) == [
        f"b7000/{CPU_TAR.format(tag='b7000')}",
        f"b7001/{CPU_TAR.format(tag='b7001')}",
        "v0.1.0/nightly-tag.txt",
        "v0.2.0/nightly-tag.txt",
    ]
    assert asset_downloads() == blobs
    damaged = mirrored_file(dest, "b7000", CPU_TAR.format(tag="b7000"))
    good = damaged.read_bytes()
    damaged.write_bytes(bytes(len(good)))
    code, report = sync(capsys, github, dest, "--newest", "2")
    assert code == 0, report
    assert report["fetched"] == [f"b7000/{CPU_TAR.format(tag='b7000')}"]
    assert damaged.read_bytes() == good


def test_failed_sync_of_a_new_release_leaves_it_invisible_and_a_rerun_completes_it(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    assert sync(capsys, github, dest, "--tag", "v0.1.0")[0] == 0  # v0.1.0 names b7000
    publish(github, tmp_path, "b7002")  # cut as v0.3.0
    github.inject(CPU_TAR.format(tag="b7002"), Fault(status=404, times=None))
    code, report = sync(capsys, github, dest, "--tag", "v0.3.0")
    assert code == 7, report
    assert not (dest / RELEASES / "tags" / "b7002").exists() and not (dest / RELEASES / "tags" / "v0.3.0").exists()
    assert not list((dest / RELEASES / "download").rglob(CPU_TAR.format(tag="b7002")))
    assert json.loads((dest / RELEASES / "latest").read_text())["tag_name"] == "v0.1.0"
    github._faults.clear()
    code, report = sync(capsys, github, dest, "--tag", "v0.3.0")
    assert code == 0, report
    assert (report["releases"], report["versions"], report["latest"]) == (["b7002"], ["v0.3.0"], "b7002")
    assert json.loads((dest / RELEASES / "latest").read_text())["tag_name"] == "v0.3.0"
    assert json.loads((dest / RELEASES / "tags" / "b7000").read_text())["tag_name"] == "b7000"


def test_filter_matching_nothing_exits_5_and_writes_no_release(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    code, report = cli_json(
        capsys, "mirror", "sync", "--dest", str(dest), "--api-url", github.api_url, "--platform", "macos-arm64"
    )
    assert code == 5, report
    assert not (dest / RELEASES / "tags").exists()


def test_unknown_platform_exits_2(capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path) -> None:
    code, report = cli_json(
        capsys, "mirror", "sync", "--dest", str(tmp_path / "m"), "--api-url", github.api_url, "--platform", "beos"
    )
    assert code == 2, report


@pytest.mark.parametrize("inside", ["", "runtimes"])
def test_a_mirror_inside_the_home_is_exit_2_and_writes_nothing(
    inside: str, capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    dest = home / inside if inside else home
    code, report = cli_json(capsys, "mirror", "sync", "--dest", str(dest), "--home", str(home),
                            "--api-url", github.api_url, "--newest", "1")  # fmt: skip
    assert code == 2, report
    assert "inside the llama-runtime home" in report["error"]["message"]
    assert not home.exists()


def test_interrupted_asset_download_resumes_where_it_stopped(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    github.inject(CPU_TAR.format(tag="b7001"), Fault(truncate_after_bytes=100, times=1))
    code, report = sync(capsys, github, dest, "--tag", "b7001")
    assert code == 0, report
    ranges = [r.headers.get("range") for r in github.requests_to("blob", CPU_TAR.format(tag="b7001"))]
    assert ranges == [None, "bytes=100-"]
    data = mirrored_file(dest, "b7001", CPU_TAR.format(tag="b7001")).read_bytes()
    doc = json.loads((dest / RELEASES / "tags" / "b7001").read_text())
    assert doc["assets"][0]["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert list((dest / ".partial").iterdir()) == []


def test_a_mirror_can_be_synced_from_another_mirror(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert sync(capsys, github, first, "--latest", "2")[0] == 0
    github.stop()
    code, report = cli_json(capsys, "mirror", "sync", "--dest", str(second), "--api-url", first.as_uri())
    assert code == 0, report
    assert report["releases"] == ["b7001"]
    copied = mirrored_file(second, "b7001", CPU_TAR.format(tag="b7001"))
    assert copied.read_bytes() == mirrored_file(first, "b7001", CPU_TAR.format(tag="b7001")).read_bytes()


def test_upstream_tag_with_dotdot_exits_8_and_writes_nothing_outside_the_mirror(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    upstream = tmp_path / "upstream"
    releases = upstream / "repos" / "o" / "n" / "releases"
    (releases / "download").mkdir(parents=True)
    body, name = b"whatever bytes", CPU_TAR.format(tag="b1")
    (releases / "download" / name).write_bytes(body)
    asset = {
        "name": name, "size": len(body), "state": "uploaded", "browser_download_url": f"download/{name}",
        "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
    }  # fmt: skip
    doc = {"tag_name": "../../../../../../ESCAPED", "draft": False, "prerelease": False, "assets": [asset]}
    (releases / "latest").write_text(json.dumps(doc))
    dest = tmp_path / "mirror" / "dest"
    code, report = cli_json(
        capsys, "mirror", "sync", "--dest", str(dest), "--api-url", upstream.as_uri(), "--repo", "o/n"
    )  # fmt: skip
    assert code == 8, report  # the contract: remote data that breaks the rules is an integrity refusal
    assert "tag" in report["error"]["message"]
    written = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_relative_to(upstream)]
    assert written == []


def test_tag_flag_with_a_path_exits_2(capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path) -> None:
    dest = tmp_path / "mirror"
    code, report = sync(capsys, github, dest, "--tag", "../b7000")
    assert code == 2, report
    assert not dest.exists() or not list(dest.rglob("*"))


def test_resync_after_an_upstream_reupload_never_changes_bytes_the_published_json_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dest, cpu, vulkan = tmp_path / "mirror", CPU_TAR.format(tag="b7000"), VULKAN_TAR.format(tag="b7000")
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    first = stand_in_tarball(tmp_path / "v1" / cpu, tag="b7000")
    second = stand_in_tarball(tmp_path / "v2" / cpu, tag="b7000", libs=("extra",))
    filters = ("--tag", "b7000", "--platform", "linux-x64")
    with FakeGitHub() as upstream:
        upstream.add_release(REPO, "b7000", {cpu: first, vulkan: b"vk-1"})
        code, report = cli_json(capsys, "mirror", "sync", "--dest", str(dest), "--api-url", upstream.api_url, *filters)
        assert code == 0, report
        assert sorted(report["fetched"]) == sorted([f"b7000/{cpu}", f"b7000/{vulkan}"])
    published = (dest / RELEASES / "tags" / "b7000").read_bytes()
    v1_file = mirrored_file(dest, "b7000", cpu)
    # Upstream re-uploads the CPU_TAR build; the sync then fails on the Vulkan one.
    with FakeGitHub() as upstream:
        upstream.add_release(REPO, "b7000", {cpu: second, vulkan: b"vk-2"})
        upstream.inject(vulkan, Fault(status=404, times=None))
        code, report = cli_json(
            capsys, "mirror", "sync", "--dest", str(dest), "--api-url", upstream.api_url, *filters
        )  # fmt: skip
        assert code == 7, report
        assert (dest / RELEASES / "tags" / "b7000").read_bytes() == published
        assert v1_file.read_bytes() == first.read_bytes()
        # A client of the mirror still gets exactly what the published JSON promises.
        home = tmp_path / "home"
        code, payload = cli_json(
            capsys, "update", "--home", str(home), "--api-url", dest.as_uri(), "--tag", "b7000", "--backend", "cpu"
        )  # fmt: skip
        assert code == 0, payload
        marker = json.loads(Path(payload["active"]["marker_path"]).read_text())
        assert marker["sha256"] == hashlib.sha256(first.read_bytes()).hexdigest()
        assert_runs(Path(payload["active"]["binary"]))
        # Once the whole release is in place the JSON switches to the new bytes; the old
        # file stays one more sync for clients that read the old JSON, then goes.
        upstream._faults.clear()
        code, report = cli_json(capsys, "mirror", "sync", "--dest", str(dest), "--api-url", upstream.api_url, *filters)
        assert code == 0, report
        assert mirrored_file(dest, "b7000", cpu).read_bytes() == second.read_bytes()
        assert v1_file.read_bytes() == first.read_bytes()
        code, report = cli_json(capsys, "mirror", "sync", "--dest", str(dest), "--api-url", upstream.api_url, *filters)
        assert code == 0, report
        assert report["fetched"] == []
        assert not v1_file.exists()
        assert mirrored_file(dest, "b7000", cpu).read_bytes() == second.read_bytes()


def test_digestless_upstream_is_mirrored_with_a_null_digest_and_clients_record_it_unverified(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dest, cpu = tmp_path / "mirror", CPU_TAR.format(tag="b7000")
    with FakeGitHub() as upstream:
        upstream.add_release(REPO, "b7000", {cpu: stand_in_tarball(tmp_path / cpu, tag="b7000")}, digests=False)
        assert sync(capsys, upstream, dest, "--tag", "b7000")[0] == 0
        doc = json.loads((dest / RELEASES / "tags" / "b7000").read_text())
        assert doc["assets"][0]["digest"] is None
        code, report = sync(capsys, upstream, dest, "--tag", "b7000")
        assert code == 0, report
        assert report["fetched"] == [] and report["reused"] == [f"b7000/{cpu}"]
    code, payload = cli_json(
        capsys, "update", "--home", str(tmp_path / "home"), "--api-url", dest.as_uri(), "--tag", "b7000",
        "--backend", "cpu",
    )  # fmt: skip
    assert code == 0, payload
    assert payload["active"]["digest_verified"] is False
    assert_runs(Path(payload["active"]["binary"]))


def test_every_mirror_file_is_readable_by_a_web_server_running_as_another_user(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    old_umask = os.umask(0o022)
    try:
        code, report = sync(capsys, github, dest, "--newest", "2")
    finally:
        os.umask(old_umask)
    assert code == 0, report
    files = [p for p in dest.rglob("*") if p.is_file()]
    assert any(p.name == "latest" for p in files) and any(p.parent.name == "tags" for p in files)
    modes = {p.relative_to(dest).as_posix(): oct(p.stat().st_mode & 0o777) for p in files}
    assert set(modes.values()) == {oct(0o644)}, modes


def test_latest_n_is_still_accepted_as_the_old_spelling_of_newest_n(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    code, report = sync(capsys, github, tmp_path / "a", "--latest", "2")
    assert code == 0 and sorted(report["releases"]) == ["b7000", "b7001"], report
    code, report = sync(capsys, github, tmp_path / "b", "--latest")
    assert code == 0 and report["releases"] == ["b7001"], report
    code, report = sync(capsys, github, tmp_path / "c", "--newest", "0")
    assert code == 2 and "--newest must be 1 or more" in report["error"]["message"]


def test_a_mirror_that_answers_404_says_to_check_it_is_synced_and_readable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, static_server: Any
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    url = static_server(empty)
    code, payload = cli_json(capsys, "update", "--home", str(tmp_path / "home"), "--api-url", url)
    assert code == 7, payload
    assert "mirror sync" in payload["error"]["hint"] and "mode 644" in payload["error"]["hint"]


def test_sync_latest_mirrors_the_build_the_stable_release_names_and_nightly_the_newest(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    cpu = stand_in_tarball(tmp_path / "src" / CPU_TAR.format(tag="b7002"), tag="b7002")
    # As complete as b7001, else "still uploading".
    names: dict[str, bytes | Path] = {
        CPU_TAR: cpu,
        VULKAN_TAR: b"vulkan",
        WIN: b"windows",
    }  # as complete as b7001, else "still uploading"
    github.add_release(REPO, "b7002", {n.format(tag="b7002"): v for n, v in names.items()}, stable=False)
    code, report = sync(capsys, github, tmp_path / "stable")
    assert (code, report["releases"], report["latest"]) == (0, ["b7001"], "b7001")
    code, report = sync(capsys, github, tmp_path / "nightly", "--channel", "nightly")
    assert (code, report["releases"]) == (0, ["b7002"])
    code, report = sync(capsys, github, tmp_path / "pinned", "--tag", "v0.1.0")
    assert (code, report.get("releases")) == (0, ["b7000"]), report
