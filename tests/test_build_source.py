"""The build source seam: any implementation drives install, check and plan, and no caller asks which one it is.

A tiny in-memory source (its builds in a dict, its bytes served by an HTTP server) stands beside
GitHub, mirror directories and registries: it resolves channels and tags itself, with no
``releases/latest``, no ``nightly-tag.txt`` and no listing, and the updater installs, checks and
plans through it exactly as through the others.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Self

import httpx

from llama_runtime import RuntimeUpdater
from llama_runtime.errors import ReleaseNotFoundError
from llama_runtime.updater.choice.host import host_for_platform
from llama_runtime.updater.net.session import Session, connection_pool
from llama_runtime.updater.release.channel import Channel, ResolvedRelease
from llama_runtime.updater.release.release import Asset, Release
from llama_runtime.updater.sources.github import GitHubClient
from llama_runtime.updater.sources.mirror_reader import FileTransport, file_api_url
from llama_runtime.updater.sources.source import AssetHost, Build, BuildSource, RepositoryFacts
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, HomeGuard
from tests.test_imports import import_graph
from tests.test_service import publish

ROOT = Path(__file__).resolve().parents[1]


class MemoryBuilds:
    """A :class:`BuildSource` whose channels are a dict: ``stable`` names one build, ``nightly`` another."""

    def __init__(self, builds: dict[str, Release], channels: dict[str, str], versions: dict[str, str]) -> None:
        self.builds_by_tag = builds
        self.channels = channels
        self.versions = versions  # build tag -> the semver release naming it
        self.asked: list[tuple[str, str | None, str | None]] = []
        self.net = Session(connection_pool(timeout=httpx.Timeout(30.0), verify=True), who="the memory source")

    @property
    def repo(self) -> str:
        return REPO

    @property
    def http(self) -> httpx.Client:
        return self.net.http

    def resolve(
        self, channel: Channel = "stable", *, tag: str | None = None, installed: str | None = None
    ) -> ResolvedRelease:
        self.asked.append((channel, tag, installed))
        build = tag if tag is not None else self.channels.get(channel)
        if build is None or build not in self.builds_by_tag:
            raise ReleaseNotFoundError(f"The memory source has no {tag or channel}.")
        return ResolvedRelease(build, self.versions.get(build), self.builds_by_tag[build])

    def builds(self, limit: int) -> list[Build]:
        self.asked.append(("builds", None, str(limit)))
        newest = sorted(self.builds_by_tag.values(), key=lambda r: int(r.tag[1:]), reverse=True)[:limit]
        return [Build(r, (self.versions[r.tag],) if r.tag in self.versions else ()) for r in newest]

    def attestations(self, sha256: str) -> object:
        return []

    def repository(self) -> RepositoryFacts:
        return RepositoryFacts("master", default_branch_trusted=False)

    def auth_headers_for(self, url: str) -> dict[str, str]:
        return {}

    def asset_request(self, asset: Asset) -> tuple[str, dict[str, str]]:
        return asset.download_url, {"Accept": "application/octet-stream"}

    def close(self) -> None:
        self.net.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _hosted(github: FakeGitHub, tmp_path: Path, *tags: str) -> dict[str, Release]:
    """Builds whose bytes an HTTP server holds (the fake's CDN); their metadata lives in the memory source."""
    for tag in tags:
        publish(github, tmp_path, tag)
    with GitHubClient(github.api_url, REPO) as client:
        return {tag: Release(REPO, tag, client.get_release(tag).assets) for tag in tags}


def _updater(home: Path, source: MemoryBuilds, channel: str | None = None) -> RuntimeUpdater:
    return RuntimeUpdater(
        home,
        repo=REPO,
        backend="cpu",
        channel=channel,
        source_factory=lambda: source,
        host=lambda: host_for_platform("linux-x64"),
    )


def test_a_second_build_source_installs_checks_and_plans_through_the_seam_alone(
    home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    builds = _hosted(github, tmp_path, "b7000", "b7001")
    source = MemoryBuilds(builds, {"stable": "b7000", "nightly": "b7001"}, {"b7000": "v1.0.0"})
    before = len(github.requests_to("api", "/api/repos/"))
    updater = _updater(home, source)

    installed = updater.start_update().wait(30)
    assert installed.phase == "done", installed.error
    assert source.asked == [("stable", None, None)]

    up_to_date = updater.check()
    assert (up_to_date.installed, up_to_date.latest, up_to_date.update_available) == ("b7000", "b7000", False)
    assert up_to_date.latest_version == "v1.0.0"
    assert source.asked[-1] == ("stable", None, "b7000")  # the check's cheap path: the installed build is named

    source.channels["stable"] = "b7001"
    newer = updater.check()
    assert (newer.latest, newer.latest_version, newer.update_available) == ("b7001", None, True)

    listed = updater.list(available=True, limit=5).available
    assert listed is not None and [a.tag for a in listed] == ["b7001", "b7000"]  # stable: v1.0.0's and a plain build
    assert ("builds", None, "100") in source.asked

    planned = updater.plan("b7001")
    assert (planned.tag, planned.action) == ("b7001", "install")
    assert source.asked[-1] == ("stable", "b7001", None)
    # Nothing asked GitHub's API: the answers came from the seam, only the bytes from an HTTP host.
    assert len(github.requests_to("api", "/api/repos/")) == before


def test_a_build_source_that_names_nothing_is_a_clear_error_and_the_runtime_stays(
    home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    source = MemoryBuilds(_hosted(github, tmp_path, "b7000"), {"stable": "b7000"}, {})
    assert _updater(home, source).start_update().wait(30).phase == "done"
    frozen = HomeGuard(None, home)
    failed = _updater(home, source, channel="nightly").start_update().wait(30)
    assert failed.phase == "failed" and failed.error is not None
    assert "The memory source has no nightly" in str(failed.error), failed.error
    frozen.assert_intact("b7000")


def test_a_second_build_source_is_mirrored_to_a_directory_that_github_clients_then_resolve(
    home: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    """Proves: mirror sync asks only the seam; the directory writer writes the semver release's pointer."""
    builds = _hosted(github, tmp_path, "b7000", "b7001")
    source = MemoryBuilds(builds, {"stable": "b7001", "nightly": "b7001"}, {"b7001": "v1.0.0"})
    dest = tmp_path / "mirror"
    report = _updater(home, source).mirror_sync(dest, newest=2)
    assert (report.releases, report.versions, report.latest, report.latest_version) == (
        ["b7001", "b7000"],
        ["v1.0.0"],
        "b7001",
        "v1.0.0",
    )
    assert ("builds", None, "100") in source.asked
    url, repo, transport = _file_api(dest)
    with GitHubClient(url, repo, transport=transport) as mirror:
        assert (mirror.resolve().build_tag, mirror.resolve().version) == ("b7001", "v1.0.0")
        assert mirror.resolve(tag="v1.0.0").build_tag == "b7001"
        assert [(b.tag, b.versions) for b in mirror.builds(10)] == [("b7001", ("v1.0.0",)), ("b7000", ())]


def _file_api(dest: Path) -> tuple[str, str, FileTransport]:
    url, root = file_api_url(dest.as_uri())
    return url, REPO, FileTransport(root)


def test_the_memory_source_is_a_build_source_and_its_own_word_is_not_trusted() -> None:
    source: BuildSource = MemoryBuilds({}, {}, {})  # mypy checks the protocol here
    with source:
        assert source.repository().trusted_default_branch is None


# -- no caller asks which source it has --------------------------------------------------------------------------

#: What would tell a caller which source it holds: a class check, a capability flag, a probe by name.
_WHICH_SOURCE = re.compile(
    r"isinstance\([^)]*\b(?:GitHubClient|RegistrySource|PlainHttp|BuildSource|ReleaseSource)\b"
    r"|\baccepts_(?:digest_pins|channel_tags)\b"
    r"|getattr\(\s*(?:self\.)?(?:source|client|upstream)\b"
    r"|hasattr\(\s*(?:self\.)?(?:source|client|upstream)\b"
    r"|type\(\s*(?:self\.)?(?:source|client|upstream)\s*\)"
)
#: The adapters: the composition root picks one; nothing else outside sources/ imports them.
_ADAPTERS = {"llama_runtime.updater.sources.github", "llama_runtime.updater.sources.oci.source"}


def test_no_module_checks_a_sources_class_or_reads_capability_flags() -> None:
    """Outside sources/ and in the shared code inside it alike: a source says what it has by answering."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in (ROOT / "llama_runtime").rglob("*.py")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _WHICH_SOURCE.search(line)
    ]
    assert found == []


def test_only_the_composition_root_imports_a_source_adapter() -> None:
    graph = import_graph(type_only=True)
    found = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if not module.startswith("llama_runtime.updater.sources") and module != "llama_runtime.updater.engine"
        for target in targets & _ADAPTERS
    )
    assert found == []


def test_the_seam_is_shaped_like_builds_with_no_flags_and_no_github_members() -> None:
    own = {name for name in vars(BuildSource) if not name.startswith("_")}
    assert own == {"repo", "net", "resolve", "builds", "attestations", "repository", "close"}
    fetch = {name for name in vars(AssetHost) if not name.startswith("_")}
    assert fetch == {"http", "auth_headers_for", "asset_request"}
