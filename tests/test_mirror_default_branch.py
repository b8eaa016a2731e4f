"""A mirror cannot widen which branch may sign: the default branch it reports is what it says about itself.

A directory mirror stores ``GET /repos/{owner}/{repo}`` (``repos/OWNER/NAME/index.json``) beside
the releases; whoever can edit it could name any branch there. The signer policy keys only on
what does not move: upstream's default branch is known (``master``), GitHub's own answer counts
for a fork, and a mirror's answer leaves a fork's default branch unknown (``master`` or ``main``).
Bundles are minted under the private test trust root (tests/sigstore_mint.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, cli_json, stand_in_tarball
from tests.sigstore_mint import GitHubIdentity, PrivateSigstore, private_sigstore, slsa_statement

FORK = "someone/llama.cpp"


@pytest.fixture(scope="module")
def sigstore() -> PrivateSigstore:
    return private_sigstore()


def _signed_from(repo: str, branch: str) -> GitHubIdentity:
    return GitHubIdentity(repo, ".github/workflows/release.yml", f"refs/heads/{branch}", "push", "5e" * 20, 31000000077)


def _mirror(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sigstore: PrivateSigstore, repo: str, signed_on: str
) -> Path:
    """A directory mirror of ``repo`` b7000 (unattested) and b7001 (attested from ``signed_on``)."""
    dest = tmp_path / "mirror"
    with FakeGitHub() as hub:
        for tag in ("b7000", "b7001"):
            tarball = stand_in_tarball(tmp_path / CPU_TAR.format(tag=tag), tag=tag)
            hub.add_release(repo, tag, {tarball.name: tarball})
        tarball = tmp_path / CPU_TAR.format(tag="b7001")
        digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
        identity = _signed_from(repo, signed_on)
        hub.add_attestation(repo, digest, sigstore.mint(slsa_statement({tarball.name: digest}, identity), identity))
        for tag in ("b7000", "b7001"):
            code, report = cli_json(
                capsys, "mirror", "sync", "--dest", str(dest), "--api-url", hub.api_url, "--repo", repo, "--tag", tag
            )
            assert code == 0, report
    return dest


def _claim_default_branch(mirror: Path, repo: str, branch: str) -> None:
    """Edit the mirror's copy of the repository object, as anyone who can write the mirror could."""
    path = mirror / "repos" / repo / "index.json"
    doc = json.loads(path.read_text())
    doc["default_branch"] = branch
    path.write_text(json.dumps(doc))


def _update(capsys: pytest.CaptureFixture[str], home: Path, mirror: Path, repo: str, tag: str) -> tuple[int, Any]:
    return cli_json(
        capsys, "update", "--home", str(home), "--api-url", mirror.as_uri(), "--repo", repo, "--tag", tag,
        "--backend", "cpu",
    )  # fmt: skip


@pytest.mark.e2e
@pytest.mark.usefixtures("private_root_env")
@pytest.mark.parametrize("repo", [FORK, REPO], ids=["fork", "upstream"])
def test_a_mirror_claiming_another_default_branch_does_not_let_that_branch_sign(
    repo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], sigstore: PrivateSigstore
) -> None:
    mirror = _mirror(tmp_path, capsys, sigstore, repo, signed_on="experimental")
    _claim_default_branch(mirror, repo, "experimental")
    home = tmp_path / "home"
    code, payload = _update(capsys, home, mirror, repo, "b7000")
    assert code == 0, payload
    guard = HomeGuard(None, home)
    code, payload = _update(capsys, home, mirror, repo, "b7001")
    assert code == 8, payload
    assert "refs/heads/experimental" in payload["error"]["message"], payload
    guard.assert_intact("b7000", staging_empty=True, capsys=capsys)


@pytest.mark.e2e
@pytest.mark.usefixtures("private_root_env")
def test_a_forks_build_signed_on_main_through_a_mirror_verifies_and_says_the_default_branch_is_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sigstore: PrivateSigstore
) -> None:
    mirror = _mirror(tmp_path, capsys, sigstore, FORK, signed_on="main")
    code, payload = _update(capsys, tmp_path / "home", mirror, FORK, "b7001")
    assert code == 0, payload
    provenance = payload["active"]["provenance"]
    assert provenance["status"] == "verified", provenance
    assert "default branch unknown" in provenance["reason"]
