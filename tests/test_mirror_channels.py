"""A mirror answers like GitHub: channels, semver releases and listings resolve through it as upstream.

Upstream (the fake's "2026" scheme, as ggml-org/llama.cpp since PR #27485): every ``bNNNN`` build is a
prerelease and each is cut as a semver release ``v0.N.0`` whose only asset, ``nightly-tag.txt``, names it.
Here b7000 is v0.1.0 and b7001 is v0.2.0 (tests/test_mirror.py's fixture). Every failure test also asserts
that the runtime installed before is unchanged and still runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, VULKAN_TAR, HomeGuard, assert_runs, cli_json, stand_in_tarball
from tests.test_mirror import RELEASES, WIN, publish, sync
from tests.test_mirror import static_server as static_server  # the fixture: `python -m http.server` on a directory


@pytest.fixture
def github(tmp_path: Path) -> Iterator[FakeGitHub]:
    """b7000 (v0.1.0), b7001 (v0.2.0), and b7002: a nightly build no semver release names yet."""
    (tmp_path / "src").mkdir()
    with FakeGitHub() as server:
        publish(server, tmp_path, "b7000")
        publish(server, tmp_path, "b7001")
        cpu = stand_in_tarball(tmp_path / "src" / CPU_TAR.format(tag="b7002"), tag="b7002")
        names: dict[str, bytes | Path] = {CPU_TAR: cpu, VULKAN_TAR: b"vulkan", WIN: b"windows"}  # as complete as b7001
        server.add_release(REPO, "b7002", {n.format(tag="b7002"): v for n, v in names.items()}, stable=False)
        yield server


def installed_from(capsys: pytest.CaptureFixture[str], url: str, home: Path, *extra: str) -> dict[str, Any]:
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--backend", "cpu", *extra)
    assert code == 0, payload
    assert_runs(Path(payload["active"]["binary"]))
    assert cli_json(capsys, "unpin", "--home", str(home))[0] == 0  # `update --tag` pins; later updates move on
    return payload


def test_update_tag_v0_2_0_against_a_mirror_synced_with_that_tag_installs_the_build_it_names(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, static_server: Any
) -> None:
    """`mirror sync --tag v0.2.0` succeeded and `update --tag v0.2.0` against it was exit 7."""
    dest = tmp_path / "mirror"
    code, report = sync(capsys, github, dest, "--tag", "v0.2.0")
    assert (code, report["releases"], report["versions"]) == (0, ["b7001"], ["v0.2.0"]), report
    github.stop()
    for url, home in ((dest.as_uri(), tmp_path / "a"), (static_server(dest), tmp_path / "b")):
        payload = installed_from(capsys, url, home, "--tag", "v0.2.0")
        assert (payload["active"]["tag"], payload["active"]["version"]) == ("b7001", "v0.2.0")
        # stable resolves through the mirror's releases/latest (v0.2.0) as through GitHub's.
        code, plan = cli_json(capsys, "plan", "--api-url", url, "--backend", "cpu", "--platform", "linux-x64")
        assert (code, plan["tag"]) == (0, "b7001"), plan


def test_after_a_nightly_sync_stable_against_the_mirror_still_picks_the_stable_build(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    """The mirror's `latest` followed whichever channel synced last, so stable picked a nightly."""
    dest = tmp_path / "mirror"
    assert sync(capsys, github, dest)[0] == 0  # stable: v0.2.0 -> b7001
    code, report = sync(capsys, github, dest, "--channel", "nightly")
    assert (code, report["releases"], report["latest"]) == (0, ["b7002"], "b7001"), report
    github.stop()
    url = dest.as_uri()
    code, stable = cli_json(capsys, "plan", "--api-url", url, "--channel", "stable", "--backend", "cpu")
    assert (code, stable["tag"]) == (0, "b7001"), stable
    code, nightly = cli_json(capsys, "plan", "--api-url", url, "--channel", "nightly", "--backend", "cpu")
    assert (code, nightly["tag"]) == (0, "b7002"), nightly
    listing = json.loads((dest / RELEASES / "index.json").read_text())
    flags = {doc["tag_name"]: doc["prerelease"] for doc in listing}
    assert flags == {"b7001": True, "b7002": True, "v0.2.0": False}  # upstream's flags, as GitHub lists them
    home = tmp_path / "home"
    installed_from(capsys, url, home)
    code, listed = cli_json(capsys, "list", "--available", "--home", str(home), "--api-url", url)
    assert code == 0 and [a["tag"] for a in listed["available"]] == ["b7001"], listed
    code, listed = cli_json(
        capsys, "list", "--available", "--channel", "nightly", "--home", str(home), "--api-url", url
    )
    assert code == 0 and [a["tag"] for a in listed["available"]] == ["b7002", "b7001"], listed


def test_a_mirror_without_a_stable_release_says_so_and_the_installed_runtime_stays(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    dest, home = tmp_path / "mirror", tmp_path / "home"
    installed_from(capsys, github.api_url, home, "--tag", "b7000")
    code, report = sync(capsys, github, dest, "--channel", "nightly")
    assert (code, report["releases"], report["latest"]) == (0, ["b7002"], None), report
    assert not (dest / RELEASES / "latest").exists()  # GitHub answers 404 without a stable release
    guard = HomeGuard(tmp_path, home)
    code, failed = cli_json(
        capsys, "update", "--home", str(home), "--api-url", dest.as_uri(), "--channel", "stable", "--backend", "cpu"
    )
    assert code == 7, failed
    assert "holds no stable release" in failed["error"]["message"]
    assert "--channel nightly" in failed["error"]["hint"]
    assert "web server" not in failed["error"]["hint"] and "644" not in failed["error"]["hint"]  # file://
    guard.assert_intact("b7000", capsys=capsys)


def test_a_mirror_that_lacks_a_tag_names_it_and_for_file_urls_never_blames_a_web_server(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, static_server: Any
) -> None:
    dest, home = tmp_path / "mirror", tmp_path / "home"
    assert sync(capsys, github, dest)[0] == 0
    installed_from(capsys, dest.as_uri(), home)
    guard = HomeGuard(tmp_path, home)
    code, failed = cli_json(capsys, "update", "--home", str(home), "--api-url", dest.as_uri(), "--tag", "v0.1.0")
    assert code == 7, failed
    assert failed["error"]["message"].endswith("does not hold the release v0.1.0."), failed
    hint = failed["error"]["hint"]
    assert "mirror sync --dest DIR --tag v0.1.0" in hint and "web server" not in hint and "644" not in hint
    code, failed = cli_json(capsys, "update", "--home", str(home), "--api-url", static_server(dest), "--tag", "b6999")
    assert code == 7 and "does not hold the release b6999" in failed["error"]["message"], failed
    assert "mode 644" in failed["error"]["hint"]  # over http the web server may be what cannot read it
    guard.assert_intact("b7001", capsys=capsys)


def test_a_plain_static_server_serves_the_mirrors_listing_and_a_directory_listing_is_an_error(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path, static_server: Any
) -> None:
    """Under `python -m http.server` the HTML directory listing was read as "none available"."""
    dest, home = tmp_path / "mirror", tmp_path / "home"
    assert sync(capsys, github, dest, "--newest", "3", "--channel", "nightly")[0] == 0
    github.stop()
    url = static_server(dest)
    installed_from(capsys, url, home, "--tag", "b7000")
    code, listed = cli_json(
        capsys, "list", "--available", "--channel", "nightly", "--home", str(home), "--api-url", url
    )
    assert code == 0 and [a["tag"] for a in listed["available"]] == ["b7002", "b7001", "b7000"], listed
    # A mirror without its index.html (an older sync, a copy): the server lists the directory instead.
    (dest / RELEASES / "index.html").unlink()
    guard = HomeGuard(tmp_path, home)
    for argv in (("list", "--available"), ("update", "--channel", "nightly")):
        code, failed = cli_json(capsys, *argv, "--home", str(home), "--api-url", url)
        assert code == 7, failed
        assert "directory listing" in failed["error"]["message"] and "mirror sync" in failed["error"]["hint"]
    guard.assert_intact("b7000", capsys=capsys)


def test_the_mirrors_latest_follows_githubs_rule_for_upstream_forks_and_nightly_only_mirrors() -> None:
    from llama_runtime.updater.offline.mirror import stable_tag

    def doc(tag: str, prerelease: bool, draft: bool = False) -> dict[str, Any]:
        return {"tag_name": tag, "prerelease": prerelease, "draft": draft}

    upstream = [doc("b7002", True), doc("v0.2.0", False), doc("v0.10.0", False), doc("b7001", True)]
    assert stable_tag(upstream) == "v0.10.0"  # by semver, never the highest nightly build
    fork = [doc("b7000", False), doc("b7001", False), doc("b7002", False, draft=True)]
    assert stable_tag(fork) == "b7001"  # a fork's plain builds are its stable releases
    assert stable_tag([doc("b7001", True), doc("b7002", True)]) is None  # nightly only: GitHub answers 404


def test_while_the_newest_semver_release_is_still_empty_stable_resolves_through_the_mirror_as_through_github(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Upstream today (shared/reference/upstream-2026-10.md; make-release.yml creates the release before it
    uploads nightly-tag.txt): v0.6.0 names no build yet, so stable falls back to v0.5.0 -> b11146."""
    from tests.upstream_today import publish_today

    with FakeGitHub(auto_cut=False) as github:
        publish_today(github, latest_pointer=False)
        where = ("--backend", "cpu", "--platform", "linux-x64")
        code, upstream = cli_json(capsys, "plan", "--api-url", github.api_url, "--channel", "stable", *where)
        assert code == 0, upstream
        dest = tmp_path / "mirror"
        code, report = sync(capsys, github, dest)
        assert code == 0, report
    code, mirrored = cli_json(capsys, "plan", "--api-url", dest.as_uri(), "--channel", "stable", *where)
    assert code == 0, mirrored
    assert (mirrored["tag"], mirrored["version"]) == (upstream["tag"], upstream["version"]) == ("b11146", "v0.5.0")
