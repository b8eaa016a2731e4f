"""``mirror sync`` in every direction: GitHub → directory, GitHub → registry, registry → directory,
directory → registry, registry → registry; what a client installs from the copy is the upstream build."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, cli_json
from tests.registry import Registry
from tests.test_mirror import mirrored_file, publish

pytestmark = pytest.mark.e2e


@pytest.fixture
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with Registry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg


def sync(capsys: pytest.CaptureFixture[str], source: str, dest: str) -> dict[str, object]:
    code, report = cli_json(
        capsys, "mirror", "sync", "--dest", dest, "--api-url", source,
        "--platform", "linux-x64", "--backend", "cpu", "--newest", "2",
    )  # fmt: skip
    assert code == 0, report
    return report


def installs(capsys: pytest.CaptureFixture[str], home: Path, api_url: str, tag: str) -> None:
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", api_url, "--backend", "cpu")
    assert code == 0 and payload["active"]["tag"] == tag, payload


def test_registry_to_directory_and_back_to_another_registry(
    capsys: pytest.CaptureFixture[str], registry: Registry, tmp_path: Path, home: Path
) -> None:
    (tmp_path / "src").mkdir()
    with FakeGitHub() as github:
        publish(github, tmp_path, "b7000")
        publish(github, tmp_path, "b7001")
        sync(capsys, github.api_url, registry.url())  # GitHub → registry
    directory = tmp_path / "dir"
    sync(capsys, registry.url(), str(directory))  # registry → directory (upstream stopped)
    copied = mirrored_file(directory, "b7001", CPU_TAR.format(tag="b7001"))
    assert copied.stat().st_size > 0
    sync(capsys, directory.as_uri(), registry.url("fleet/from-dir"))  # directory → registry
    installs(capsys, home, registry.url("fleet/from-dir"), "b7001")
    sync(capsys, registry.url("fleet/from-dir"), registry.url("fleet/third"))  # registry → registry
    installs(capsys, tmp_path / "home2", registry.url("fleet/third"), "b7001")
    installs(capsys, tmp_path / "home3", directory.as_uri(), "b7001")


def test_a_registrys_semver_release_copies_to_a_directory_with_its_pointer(
    capsys: pytest.CaptureFixture[str], registry: Registry, tmp_path: Path
) -> None:
    (tmp_path / "src").mkdir()
    with FakeGitHub() as github:
        publish(github, tmp_path, "b7000")
        publish(github, tmp_path, "b7001")
        sync(capsys, github.api_url, registry.url())
    directory = tmp_path / "dir"
    code, report = cli_json(capsys, "mirror", "sync", "--dest", str(directory), "--api-url", registry.url())
    assert code == 0, report  # stable: the semver release and its nightly-tag.txt, which the registry holds as a tag
    pointer = mirrored_file(directory, "v0.2.0", "nightly-tag.txt")
    assert pointer.read_text().strip() == "b7001"
    code, payload = cli_json(capsys, "plan", "--api-url", directory.as_uri(), "--tag", "v0.2.0", "--backend", "cpu")
    assert code == 0 and payload["tag"] == "b7001", payload
