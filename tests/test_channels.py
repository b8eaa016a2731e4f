"""Channels over release data (pure) and against a server shaped like today's upstream."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_runtime import IntegrityError, UserInputError
from llama_runtime.errors import DigestMismatchError, ReleaseIncompleteError, ReleaseNotFoundError, SizeMismatchError
from llama_runtime.updater.cli.main import main
from llama_runtime.updater.release.channel import (
    StableFallback,
    channel_builds,
    fallback_stable,
    missing_pointer,
    older_versions,
    parse_channel,
    parse_nightly_tag,
    pointer_asset,
    resolve_latest,
    resolve_release,
    stable_candidate,
    upload_problem,
)
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.release.tags import compare_tags, is_upgrade, parse_tag
from llama_runtime.updater.sources.github import GitHubClient, JsonFileEtagCache
from llama_runtime.updater.sources.resolve import pointers_on_page, resolve_latest_remote, resolve_tag_remote
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import CPU_TAR, REPO, VULKAN_TAR, HomeGuard, Sleeps, assert_runs, publish_stand_in, run_json

FORK = "unslothai/llama.cpp"


def build(
    tag: str, *, prerelease: bool = True, names: tuple[str, ...] = (CPU_TAR, VULKAN_TAR), state: str = "uploaded"
) -> Release:
    assets = tuple(Asset(n.format(tag=tag), 10, f"http://127.0.0.1/{n.format(tag=tag)}", state=state) for n in names)
    return Release(REPO, tag, assets, prerelease=prerelease)


def version(tag: str) -> Release:
    return Release(REPO, tag, (Asset("nightly-tag.txt", 7, "http://127.0.0.1/nightly-tag.txt"),))


UPSTREAM = [build("b10485"), build("b10490"), version("v0.2.0"), version("v0.3.0"), build("b10500")]
POINTERS = {"v0.2.0": "b10485", "v0.3.0": "b10490"}


# -- pure resolver -----------------------------------------------------------------


def test_stable_follows_the_highest_semver_release_to_the_build_its_pointer_names() -> None:
    found = resolve_latest(UPSTREAM, "stable", POINTERS)
    assert (found.build_tag, found.version) == ("b10490", "v0.3.0")
    assert found.release.assets[0].name == "llama-b10490-bin-ubuntu-x64.tar.gz"


def test_nightly_is_the_highest_build_including_prereleases() -> None:
    found = resolve_latest(UPSTREAM, "nightly", POINTERS)
    assert (found.build_tag, found.version) == ("b10500", None)


def test_nightly_names_the_semver_release_of_a_build_when_one_points_at_it() -> None:
    found = resolve_latest(UPSTREAM[:4], "nightly", POINTERS)
    assert (found.build_tag, found.version) == ("b10490", "v0.3.0")


def test_semver_releases_order_by_semver_not_by_publication() -> None:
    releases = [version("v0.10.0"), version("v0.9.0")]
    start = stable_candidate(releases)
    assert start is not None and start.tag == "v0.10.0"


def test_fork_without_semver_releases_resolves_stable_to_its_highest_plain_build() -> None:
    fork = [build("b9596-mix-e6f2453", prerelease=False), build("b9000", prerelease=False)]
    found = resolve_latest(fork, "stable")
    assert (found.build_tag, found.version) == ("b9596-mix-e6f2453", None)


def test_nightly_skips_a_build_with_an_asset_still_uploading() -> None:
    releases = [build("b10500"), build("b10501", state="open")]
    found = resolve_latest(releases, "nightly")
    assert found.build_tag == "b10500"
    assert "b10501 is still uploading" in found.notes[0] and "'open'" in found.notes[0]


def test_nightly_skips_a_build_missing_an_archive_the_build_before_had() -> None:
    releases = [build("b10500"), build("b10501", names=(CPU_TAR,))]
    found = resolve_latest(releases, "nightly")
    assert found.build_tag == "b10500"
    assert "no llama-b10501-bin-ubuntu-vulkan-x64.tar.gz yet" in found.notes[0]
    assert upload_problem(releases[0], None) is None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("llama-{tag}-bin-win-openvino-2026.4-x64.zip", "llama-{tag}-bin-win-openvino-2026.4.1-x64.zip"),
        ("llama-{tag}-bin-ubuntu-cuda-13.3-x64.tar.gz", "llama-{tag}-bin-ubuntu-cuda-13.4-x64.tar.gz"),
        ("cudart-llama-bin-win-cuda-13.3-x64.zip", "cudart-llama-bin-win-cuda-13.4-x64.zip"),
        ("llama-{tag}-bin-ubuntu-rocm-7.14-x64.tar.gz", "llama-{tag}-bin-ubuntu-rocm-10.0-x64.tar.gz"),
    ],
)
def test_a_toolkit_rename_is_not_an_upload_in_progress(before: str, after: str) -> None:
    # upstream-2026-10.md: the first build after a rename has "fewer" archives of the old names.
    releases = [build("b10500", names=(CPU_TAR, before)), build("b10501", names=(CPU_TAR, after))]
    assert upload_problem(releases[1], releases[0]) is None
    assert resolve_latest(releases, "nightly").build_tag == "b10501"


def test_one_of_two_cuda_lines_missing_is_still_an_upload_in_progress() -> None:
    lines = ("llama-{tag}-bin-ubuntu-cuda-12.8-x64.tar.gz", "llama-{tag}-bin-ubuntu-cuda-13.4-x64.tar.gz")
    older, newer = build("b10500", names=lines), build("b10501", names=lines[:1])
    problem = upload_problem(newer, older)
    assert problem is not None and "1 of the 2" in problem and "ubuntu-cuda-*-x64" in problem


def test_stable_with_unread_or_unpublished_pointer_is_release_not_found() -> None:
    with pytest.raises(ReleaseNotFoundError, match="not read"):
        resolve_latest(UPSTREAM, "stable", {})
    with pytest.raises(ReleaseNotFoundError, match="names build b99999"):
        resolve_latest(UPSTREAM, "stable", {"v0.3.0": "b99999"})


def test_channel_builds_lists_what_each_channel_would_install() -> None:
    stable = {b.build_tag: b.version for b in channel_builds(UPSTREAM, "stable", POINTERS)}
    assert stable == {"b10485": "v0.2.0", "b10490": "v0.3.0"}
    nightly = {b.build_tag: b.version for b in channel_builds(UPSTREAM, "nightly", POINTERS)}
    assert nightly == {"b10485": "v0.2.0", "b10490": "v0.3.0", "b10500": None}
    # a pointer whose build is not among the releases offers nothing rather than failing
    assert channel_builds(UPSTREAM, "stable", {"v0.3.0": "b99999"}) == []


def test_only_prereleases_give_stable_nothing_and_say_use_nightly() -> None:
    with pytest.raises(ReleaseNotFoundError, match="--channel nightly"):
        resolve_latest([build("b1")], "stable")


@pytest.mark.parametrize("content", [b"b10485\n", b"  b10485  ", "b10485"])
def test_nightly_tag_file_names_a_build(content: bytes | str) -> None:
    assert parse_nightly_tag(content, "v0.3.0") == "b10485"


@pytest.mark.parametrize("content", [b"", b"v0.3.0", b"../../etc", b"\xff\xfe", b"b1" * 600, b"latest"])
def test_nightly_tag_file_that_names_no_build_is_integrity_error(content: bytes) -> None:
    with pytest.raises(IntegrityError) as err:
        parse_nightly_tag(content, "v0.3.0")
    assert err.value.exit_code == 8


def test_pointer_is_only_followed_on_a_release_without_binaries() -> None:
    assert pointer_asset(version("v0.3.0")) is not None
    both = Release(REPO, "b1", (*build("b1").assets, *version("x").assets))
    assert pointer_asset(both) is None


@pytest.mark.parametrize(("value", "channel"), [("stable", "stable"), (" Nightly ", "nightly")])
def test_channel_names_parse(value: str, channel: str) -> None:
    assert parse_channel(value) == channel


def test_unknown_channel_is_bad_input_listing_both() -> None:
    with pytest.raises(UserInputError, match=r"'stable'.*'nightly'") as err:
        parse_channel("beta", "LLAMA_RUNTIME_CHANNEL")
    assert "LLAMA_RUNTIME_CHANNEL" in err.value.message and err.value.exit_code == 2


def test_semver_tags_compare_by_semver_and_never_with_build_tags() -> None:
    assert compare_tags(parse_tag("v0.10.0"), parse_tag("v0.9.0")) == 1
    assert compare_tags(parse_tag("v0.3.0"), parse_tag("b10490")) is None
    assert not is_upgrade("b10490", "v0.3.0") and not is_upgrade("v0.3.0", "b10490")
    assert parse_tag("v0.3.0").is_release_version and parse_tag("v0.3.0").build is None


# -- against the fake shaped like today's upstream ------------------------------------


def client(github: FakeGitHub, tmp_path: Path | None = None, **kw: object) -> GitHubClient:
    cache = JsonFileEtagCache(tmp_path / "etags.json") if tmp_path else None
    return GitHubClient(github.api_url, REPO, sleep=Sleeps(), etag_cache=cache, **kw)  # type: ignore[arg-type]


def publish(github: FakeGitHub, tag: str, **kw: object) -> None:
    github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): b"cpu " + tag.encode()}, **kw)  # type: ignore[arg-type]


def test_fake_publishes_builds_as_prereleases_and_latest_as_a_semver_pointer(github: FakeGitHub) -> None:
    publish(github, "b7000")
    publish(github, "b7001", stable=False)
    assert github.latest_version(REPO) == "v0.1.0"
    found = resolve_latest_remote(client(github), "stable")
    assert (found.build_tag, found.version, found.release.prerelease) == ("b7000", "v0.1.0", True)
    paths = [(r.host, r.path) for r in github.requests]
    assert paths == [
        ("api", f"/api/repos/{REPO}/releases/latest"),
        ("api", f"/dl/{REPO}/releases/download/v0.1.0/nightly-tag.txt"),  # web download: no API quota
        ("blob", paths[2][1]),
        ("api", f"/api/repos/{REPO}/releases/tags/b7000"),
    ]
    assert github.quota_used == 2
    assert resolve_latest_remote(client(github), "nightly").build_tag == "b7001"


def test_update_tag_v0_resolves_to_the_build_its_pointer_names(github: FakeGitHub) -> None:
    publish(github, "b7000")
    publish(github, "b7001")
    found = resolve_tag_remote(client(github), "v0.1.0")
    assert (found.build_tag, found.version) == ("b7000", "v0.1.0")


def test_a_fork_keeps_working_unchanged(github: FakeGitHub) -> None:
    github.add_release(FORK, "b9596-mix-e6f2453", {CPU_TAR.format(tag="b9596-mix-e6f2453"): b"x"})
    api = GitHubClient(github.api_url, FORK, sleep=Sleeps())
    found = resolve_latest_remote(api, "stable")
    assert (found.build_tag, found.version, found.release.prerelease) == ("b9596-mix-e6f2453", None, False)
    assert github.quota_used == 1


def test_legacy_upstream_scheme_still_resolves(tmp_path: Path) -> None:
    with FakeGitHub(scheme="legacy") as github:
        publish(github, "b7000")
        assert github.latest_version(REPO) == "b7000"
        assert resolve_latest_remote(client(github), "stable").build_tag == "b7000"


def test_hostile_pointer_content_is_integrity_error(github: FakeGitHub) -> None:
    publish(github, "b7000", stable=False)
    github.add_version(REPO, "v0.1.0", "b7000", content=b"../../../etc/passwd")
    with pytest.raises(IntegrityError, match="not a build tag"):
        resolve_latest_remote(client(github), "stable")


def test_pointer_to_a_missing_build_is_release_not_found(github: FakeGitHub) -> None:
    github.add_version(REPO, "v0.1.0", "b9999")
    with pytest.raises(ReleaseNotFoundError, match="names build b9999"):
        resolve_latest_remote(client(github), "stable")


def test_pointer_content_is_cached_while_the_asset_is_unchanged(github: FakeGitHub, tmp_path: Path) -> None:
    publish(github, "b7000")
    resolve_latest_remote(client(github, tmp_path), "stable")
    resolve_latest_remote(client(github, tmp_path), "stable")
    assert len(github.requests_to("blob")) == 1


# -- stable while a release is being cut (make-release.yml: release first, nightly-tag.txt after, or never) --


def empty(tag: str, *, state: str | None = None) -> Release:
    """A semver release as make-release.yml leaves it before (or without) its nightly-tag.txt."""
    if state is None:
        return Release(REPO, tag, ())
    return Release(REPO, tag, (Asset("nightly-tag.txt", 7, "http://127.0.0.1/nightly-tag.txt", state=state),))


def test_stable_passes_over_a_newest_release_without_a_pointer_for_the_one_before_and_says_so() -> None:
    found = resolve_latest([*UPSTREAM, empty("v0.4.0")], "stable", POINTERS)
    assert (found.build_tag, found.version) == ("b10490", "v0.3.0")
    assert found.notes == ("v0.4.0 has no nightly-tag.txt yet (a release in progress?); using v0.3.0 → b10490",)


def test_stable_passes_over_a_pointer_still_uploading() -> None:
    found = resolve_latest([*UPSTREAM, empty("v0.4.0", state="open")], "stable", {**POINTERS, "v0.4.0": "b10500"})
    assert (found.build_tag, found.version) == ("b10490", "v0.3.0")
    assert found.notes[0].startswith("v0.4.0 has its nightly-tag.txt still uploading (state 'open')")


def test_stable_fallback_skips_older_releases_that_name_nothing_published_and_lists_them() -> None:
    releases = [*UPSTREAM, version("v0.4.0"), empty("v0.4.1"), empty("v0.5.0")]
    found = resolve_latest(releases, "stable", {**POINTERS, "v0.4.0": "b99999"})
    assert (found.build_tag, found.version) == ("b10490", "v0.3.0")
    assert found.notes == (
        "v0.5.0 has no nightly-tag.txt yet (a release in progress?); using v0.3.0 → b10490",
        "skipped v0.4.1 has no nightly-tag.txt yet",
        "skipped v0.4.0: it names b99999, which is not published",
    )


def test_stable_with_no_older_release_naming_a_build_is_exit_7_saying_why() -> None:
    with pytest.raises(ReleaseIncompleteError) as err:
        resolve_latest([build("b10485"), empty("v0.1.0")], "stable")
    assert err.value.exit_code == 7 and err.value.code == "release_incomplete"
    assert "v0.1.0 has no nightly-tag.txt yet" in err.value.message
    assert "no older release names a published build" in err.value.message


def test_a_top_release_whose_pointer_names_an_unpublished_build_still_fails_rather_than_falling_back() -> None:
    with pytest.raises(ReleaseNotFoundError, match="names build b99999"):
        resolve_latest([*UPSTREAM, version("v0.4.0")], "stable", {**POINTERS, "v0.4.0": "b99999"})


def test_an_explicit_semver_release_without_a_pointer_is_exit_7_probably_still_being_cut() -> None:
    with pytest.raises(ReleaseIncompleteError) as err:
        resolve_release(empty("v0.4.0"), {}, UPSTREAM)
    assert err.value.exit_code == 7
    assert "v0.4.0 has no nightly-tag.txt yet" in err.value.message
    assert "probably still being cut" in err.value.message and "make-release.yml" in err.value.message


def test_list_available_offers_the_other_stable_builds_beside_a_release_without_a_pointer() -> None:
    stable = {b.build_tag: b.version for b in channel_builds([*UPSTREAM, empty("v0.4.0")], "stable", POINTERS)}
    assert stable == {"b10485": "v0.2.0", "b10490": "v0.3.0"}


def test_older_versions_are_the_semver_tags_below_highest_first_and_nothing_else() -> None:
    tags = ["v0.10.0", "v0.9.0", "v0.4.1", "b11429", "v1", "v0.4.0", "v0.11.0", "v0.6.0-rc1", "latest"]
    assert older_versions(tags, "v0.10.0") == ["v0.9.0", "v0.4.1", "v0.4.0"]
    assert older_versions(tags, "v0.10.0", limit=1) == ["v0.9.0"]
    assert older_versions(tags, "b11541") == []


def test_a_fallback_naming_the_installed_build_qualifies_without_its_build_looked_up() -> None:
    candidate = StableFallback("v0.3.0", version("v0.3.0"), "b10490", None)
    chosen, notes = fallback_stable("v0.4.0 has no nightly-tag.txt yet", [candidate], installed="b10490")
    assert chosen is candidate and notes[0].endswith("using v0.3.0 → b10490")
    with pytest.raises(ReleaseIncompleteError, match="names b10490, which is not published"):
        fallback_stable("v0.4.0 has no nightly-tag.txt yet", [candidate], installed="b10485")


def test_missing_pointer_is_only_about_semver_releases_without_binaries() -> None:
    assert missing_pointer(empty("v0.4.0")) == "v0.4.0 has no nightly-tag.txt yet"
    assert missing_pointer(version("v0.4.0")) is None
    assert missing_pointer(build("b10500")) is None
    assert missing_pointer(Release(FORK, "b9596-mix-e6f2453", ())) is None


# -- the same against the fake, cut by hand the way upstream does today ----------------------------


def hand_cut() -> FakeGitHub:
    """Builds only (no v0.N.0 per build): upstream-2026-10.md's cadence, stable far behind nightly."""
    return FakeGitHub(auto_cut=False)


def publish_range(github: FakeGitHub, first: int, last: int) -> None:
    for number in range(first, last + 1):
        publish(github, f"b{number}")


def test_fake_cuts_semver_releases_by_hand_so_stable_lags_nightly_by_a_hundred_builds() -> None:
    with hand_cut() as github:
        publish_range(github, 11420, 11429)
        github.cut_version(REPO, "v0.6.0", "b11429")
        publish_range(github, 11430, 11541)
        assert github.latest_version(REPO) == "v0.6.0"
        stable = resolve_latest_remote(client(github), "stable")
        assert (stable.build_tag, stable.version, stable.notes) == ("b11429", "v0.6.0", ())
        assert resolve_latest_remote(client(github), "nightly").build_tag == "b11541"


def test_stable_mid_release_falls_back_for_four_api_requests_until_the_pointer_arrives() -> None:
    with hand_cut() as github:
        publish_range(github, 11427, 11429)
        github.cut_version(REPO, "v0.5.0", "b11427")
        github.cut_version(REPO, "v0.6.0", "b11429")
        publish_range(github, 11430, 11433)
        github.cut_version(REPO, "v0.7.0", "b11433", pointer=False)
        assert github.latest_version(REPO) == "v0.7.0"
        found = resolve_latest_remote(client(github), "stable")
        assert (found.build_tag, found.version) == ("b11429", "v0.6.0")
        assert found.notes == ("v0.7.0 has no nightly-tag.txt yet (a release in progress?); using v0.6.0 → b11429",)
        api = [r.path.removeprefix(f"/api/repos/{REPO}") for r in github.requests_to("api", "/api/")]
        tags = "/git/matching-refs/tags/v"  # the vX.Y.Z tags: small, and changes only when a release is cut
        assert api == ["/releases/latest", tags, "/releases/tags/v0.6.0", "/releases/tags/b11429"]
        assert github.quota_used == 4
        github.upload_pointer(REPO, "v0.7.0")
        found = resolve_latest_remote(client(github), "stable")
        assert (found.build_tag, found.version, found.notes) == ("b11433", "v0.7.0", ())


@pytest.mark.parametrize("refusal", ["404", "405", "html"])
def test_stable_mid_release_pages_the_releases_where_the_source_serves_no_tag_refs(refusal: str) -> None:
    """A proxy or forge that serves releases only refuses matching-refs: unknown, not failure."""
    with hand_cut() as github:
        refs = f"/api/repos/{REPO}/git/matching-refs/tags/v"
        if refusal == "404":
            github.serves_refs = False
        else:
            github.inject(refs, Fault(status=405 if refusal == "405" else 200, html=refusal == "html", times=None))
        publish_range(github, 11427, 11429)
        github.cut_version(REPO, "v0.5.0", "b11427")
        github.cut_version(REPO, "v0.6.0", "b11429")
        publish_range(github, 11430, 11549)  # v0.6.0 is on the second page of 100
        github.cut_version(REPO, "v0.7.0", "b11549", pointer=False)
        found = resolve_latest_remote(client(github), "stable")
        assert (found.build_tag, found.version) == ("b11429", "v0.6.0")
        assert found.notes == ("v0.7.0 has no nightly-tag.txt yet (a release in progress?); using v0.6.0 → b11429",)
        asked = [(r.path.removeprefix(f"/api/repos/{REPO}"), r.query) for r in github.requests_to("api", "/api/")]
        pages = [query for path, query in asked if path == "/releases"]
        assert pages == ["per_page=100&page=1", "per_page=100&page=2"]  # stops at the short page
        assert ("/git/matching-refs/tags/v", "") in asked
        assert not any(path == "/releases/tags/v0.6.0" for path, _ in asked)  # the page brought it


@pytest.mark.e2e
def test_check_against_a_source_without_tag_refs_falls_back_by_paging_not_exit_7(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path, tmp_path: Path
) -> None:
    publish_stand_in(github, tmp_path, "b7001")  # cut as a semver release naming b7001
    github.cut_version(REPO, "v1.0.0", "b7001", pointer=False)  # the newest names no build yet
    github.serves_refs = False
    guard = HomeGuard(tmp_path, b7000_home)
    code, payload = run_json(capsys, b7000_home, github.api_url, "check")
    assert code == 0, payload
    assert (payload["latest"], payload["update_available"]) == ("b7001", True)
    assert any(w.startswith("v1.0.0 has no nightly-tag.txt yet") for w in payload["warnings"]), payload
    guard.assert_intact("b7000")


def test_stable_fallback_passes_over_a_bare_tag_and_a_release_that_never_got_its_pointer() -> None:
    with hand_cut() as github:
        publish_range(github, 10960, 10964)
        github.cut_version(REPO, "v0.4.1", "b10964")
        github.cut_version(REPO, "v0.5.0", "b10964", pointer=False)  # no b* tag at its commit: never a pointer
        github.push_tag(REPO, "v0.5.1")  # pushed, its release not created yet
        github.cut_version(REPO, "v0.6.0", "b10964", pointer=False)
        found = resolve_latest_remote(client(github), "stable")
        assert (found.build_tag, found.version) == ("b10964", "v0.4.1")
        assert found.notes[1:] == (
            "skipped v0.5.1: no release is published for the tag",
            "skipped v0.5.0 has no nightly-tag.txt yet",
        )


def test_stable_fallback_is_not_used_up_by_tags_without_a_release() -> None:
    """Bare or junk tags above the good release cost a lookup each but never one of the releases tried."""
    with hand_cut() as github:
        publish_range(github, 10960, 10964)
        github.cut_version(REPO, "v0.4.1", "b10964")
        for tag in ("v0.5.1", "v0.5.2", "v0.5.3", "v0.5.4"):
            github.push_tag(REPO, tag)
        github.cut_version(REPO, "v0.6.0", "b10964", pointer=False)
        found = resolve_latest_remote(client(github), "stable")
        assert (found.build_tag, found.version) == ("b10964", "v0.4.1")


@pytest.mark.parametrize("content", [b"v0.6.0\n", b"v0.5.7\n", b"b10964" + b" " * 5000], ids=["semver", "self", "huge"])
def test_stable_fallback_passes_over_an_older_pointer_that_names_no_build(content: bytes) -> None:
    with hand_cut() as github:
        publish_range(github, 10960, 10964)
        github.cut_version(REPO, "v0.4.1", "b10964")
        github.cut_version(REPO, "v0.5.7", "b10964", content=content)
        github.cut_version(REPO, "v0.6.0", "b10964", pointer=False)
        found = resolve_latest_remote(client(github), "stable")
        assert (found.build_tag, found.version) == ("b10964", "v0.4.1")


def test_an_explicit_tag_whose_release_has_no_pointer_yet_is_exit_7(github: FakeGitHub) -> None:
    publish(github, "b7000")
    github.cut_version(REPO, "v0.2.0", "b7000", pointer=False)
    with pytest.raises(ReleaseIncompleteError, match="probably still being cut") as err:
        resolve_tag_remote(client(github), "v0.2.0")
    assert err.value.exit_code == 7


@pytest.mark.parametrize("asked", ["stable latest", "explicit tag", "stable fallback", "list page"])
def test_a_pointer_whose_bytes_fail_its_published_digest_is_exit_8_whatever_asked(asked: str) -> None:
    with hand_cut() as github:
        publish_range(github, 7000, 7001)
        github.cut_version(REPO, "v0.1.0", "b7000", served=b"b7001\n")  # same size: only the digest tells
        if asked == "stable fallback":
            github.cut_version(REPO, "v0.2.0", "b7001", pointer=False)
        api = client(github)
        with pytest.raises(DigestMismatchError, match="does not match the sha256") as err:
            if asked == "explicit tag":
                resolve_tag_remote(api, "v0.1.0")
            elif asked == "list page":
                pointers_on_page(api, api.recent_releases())
            else:
                resolve_latest_remote(api, "stable")
        assert err.value.exit_code == 8


def test_a_pointer_without_a_published_digest_is_checked_by_its_size(github: FakeGitHub) -> None:
    publish(github, "b7000", stable=False)
    github.add_release(REPO, "v0.1.0", {"nightly-tag.txt": b"b7000\n"}, digests=False)
    assert resolve_latest_remote(client(github), "stable").build_tag == "b7000"
    github.inject("nightly-tag.txt", Fault(extra_bytes=3))
    with pytest.raises(SizeMismatchError, match="no digest is published") as err:
        resolve_latest_remote(client(github), "stable")
    assert err.value.exit_code == 8


def test_a_channel_asked_for_is_remembered_also_when_its_newest_build_is_already_active(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, b7000_home: Path
) -> None:
    code, before = run_json(capsys, b7000_home, github.api_url, "status")
    assert code == 0 and before["active"]["channel"] == "stable", before
    code, payload = run_json(capsys, b7000_home, github.api_url, "update", "--channel", "nightly")
    assert code == 0 and payload["result"] == "up_to_date", payload  # b7000 is nightly's newest too
    assert payload["active"]["channel"] == "nightly"
    code, after = run_json(capsys, b7000_home, github.api_url, "status")
    assert after["active"]["channel"] == "nightly" and after["active"]["tag"] == "b7000", after
    code = main(["status", "--home", str(b7000_home)])
    assert code == 0 and "channel nightly" in capsys.readouterr().out  # plain status names it
    assert after["active"]["runtime_dir"] == before["active"]["runtime_dir"]  # only the marker's channel changed
    assert_runs(Path(after["active"]["binary"]))
