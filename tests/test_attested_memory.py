"""The home remembers which archives verified here: no bundle later is not "absent".

The real Vulkan archive is published as b7000 (unattested), b7001 (attested under
the private Sigstore) and b7002 (the same bytes again, as a mirror synced without
its bundle would list them). Once b7001 installed verified, b7002 cannot read
``absent``: its builder attested these very bytes, only this source lacks the proof.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llama_runtime.updater.verify.attested import ATTESTED_FILE, ATTESTED_UPSTREAM_BUNDLE_MISSING
from tests.fakegithub import FakeGitHub
from tests.helpers import REPO, VULKAN_TAR, run_json
from tests.sigstore_mint import PrivateSigstore, release_yml_identity
from tests.test_minted_bundles import publish_attested, sigstore
from tests.test_update_e2e import failing_update, installed_b7000

__all__ = ["sigstore"]  # the session fixture, shared with test_minted_bundles


@pytest.mark.e2e
@pytest.mark.usefixtures(installed_b7000.__name__, "private_root_env")
def test_a_build_once_verified_then_listed_without_its_bundle_is_unverified_not_absent(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    sigstore: PrivateSigstore,
) -> None:
    digest, _ = publish_attested(github, sigstore, real_vulkan_tarball, release_yml_identity())
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 0 and payload["active"]["provenance"]["status"] == "verified", payload
    assert json.loads((home / ATTESTED_FILE).read_text()) == {"sha256": [digest]}
    # The same bytes again, listed with no attestation (a mirror synced without the bundle).
    github.add_release(REPO, "b7002", {VULKAN_TAR.format(tag="b7002"): real_vulkan_tarball})
    github.drop_attestations(REPO, digest)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7002")
    assert code == 0, payload
    provenance = payload["active"]["provenance"]
    assert provenance["status"] == "unverified", provenance
    assert provenance["reason"].startswith(ATTESTED_UPSTREAM_BUNDLE_MISSING), provenance


@pytest.mark.e2e
@pytest.mark.usefixtures(installed_b7000.__name__, "private_root_env")
def test_a_build_once_verified_then_listed_without_its_bundle_is_refused_under_require_provenance(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    sigstore: PrivateSigstore,
) -> None:
    digest, _ = publish_attested(github, sigstore, real_vulkan_tarball, release_yml_identity())
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 0, payload
    code, payload = run_json(capsys, home, github.api_url, "rollback")
    assert code == 0, payload
    github.add_release(REPO, "b7002", {VULKAN_TAR.format(tag="b7002"): real_vulkan_tarball})
    github.drop_attestations(REPO, digest)
    code, payload = failing_update(capsys, home, github, "--tag", "b7002", "--require-provenance")
    assert code == 8 and payload["error"]["code"] == "provenance_missing", payload
