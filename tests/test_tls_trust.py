"""TLS as companies have it, for GitHub and its CDN as for a registry: a company CA through
``--ca-bundle`` / ``LLAMA_RUNTIME_CA_BUNDLE``, and an untrusted certificate refused as a network error.

The fake GitHub serves HTTPS on 127.0.0.1 with a certificate from a test CA (as a TLS-inspecting
proxy's CA would sign it); every failure leaves the installed b7000 active and running.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, HomeGuard, run_json, stand_in_tarball
from tests.test_oci_tls import make_ca_and_server

pytestmark = pytest.mark.e2e


@pytest.fixture
def tls_github(tmp_path: Path) -> Iterator[tuple[FakeGitHub, Path]]:
    ca, cert, key = make_ca_and_server(tmp_path / "pki")
    github = FakeGitHub(tls=(cert, key)).start()
    for tag in ("b7000", "b7001"):
        github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): stand_in_tarball(tmp_path / f"{tag}.tar.gz", tag=tag)})
    yield github, ca
    github.stop()


@pytest.fixture
def clean_trust(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LLAMA_RUNTIME_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(var, raising=False)


def test_github_behind_a_company_ca_installs_with_ca_bundle_and_not_without(
    capsys: pytest.CaptureFixture[str], home: Path, tls_github: tuple[FakeGitHub, Path], clean_trust: None
) -> None:
    github, ca = tls_github
    assert github.api_url.startswith("https://")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--ca-bundle", str(ca))
    assert code == 0, payload
    guard = HomeGuard(None, home)
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 7, payload
    assert "certificate" in payload["error"]["message"].lower(), payload
    guard.assert_intact("b7000", capsys=capsys)


def test_the_ca_bundle_variable_is_honoured_for_github_and_its_cdn(
    capsys: pytest.CaptureFixture[str],
    home: Path,
    tls_github: tuple[FakeGitHub, Path],
    clean_trust: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    github, ca = tls_github
    monkeypatch.setenv("LLAMA_RUNTIME_CA_BUNDLE", str(ca))
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 0, payload
    assert github.requests_to("blob"), "the asset came from the HTTPS CDN host"


def test_a_ca_bundle_that_is_not_a_file_is_exit_2_naming_it(
    capsys: pytest.CaptureFixture[str], home: Path, tls_github: tuple[FakeGitHub, Path], tmp_path: Path
) -> None:
    github, _ca = tls_github
    code, payload = run_json(capsys, home, github.api_url, "check", "--ca-bundle", str(tmp_path / "missing.pem"))
    assert code == 2, payload
    assert "--ca-bundle" in payload["error"]["message"] and "missing.pem" in payload["error"]["message"]
    assert github.requests == []
