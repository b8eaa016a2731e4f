"""TLS to a registry as companies have it: a company CA (LLAMA_RUNTIME_CA_BUNDLE), a refused unknown one,
against Debian's docker-registry serving HTTPS on 127.0.0.1 with a certificate from a test CA."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from llama_runtime import UserInputError
from llama_runtime.errors import NetworkError
from llama_runtime.updater.net.tls import CA_BUNDLE_VAR
from llama_runtime.updater.sources.oci.client import sha256_digest
from llama_runtime.updater.sources.oci.connect import open_registry
from tests.registry import Registry

pytestmark = pytest.mark.e2e


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_ca_and_server(root: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for 127.0.0.1 and localhost it signed: (ca.pem, server.pem, server.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(_name("test company CA")).issuer_name(_name("test company CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder().subject_name(_name("127.0.0.1")).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    root.mkdir(parents=True, exist_ok=True)
    paths = root / "ca.pem", root / "server.pem", root / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@pytest.fixture
def tls_registry(tmp_path: Path) -> Iterator[tuple[Registry, Path]]:
    ca, cert, key = make_ca_and_server(tmp_path / "pki")
    with Registry(tmp_path / "registry", tls=(cert, key)) as registry:
        yield registry, ca


def test_a_registry_with_a_company_ca_is_trusted_through_the_ca_bundle(
    tls_registry: tuple[Registry, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    registry, ca = tls_registry
    monkeypatch.setenv(CA_BUNDLE_VAR, str(ca))
    with open_registry(f"oci+https://{registry.host}/fleet/llama.cpp") as client:
        assert client.ref.base_url.startswith("https://")
        data = b"over TLS"
        client.push_blob(sha256_digest(data), len(data), lambda offset: iter([data[offset:]]))
        assert client.get_blob(sha256_digest(data), 100) == data


def test_a_registry_whose_ca_is_not_trusted_is_a_network_error(
    tls_registry: tuple[Registry, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    registry, _ca = tls_registry
    for var in (CA_BUNDLE_VAR, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(var, raising=False)
    with (
        open_registry(f"oci+https://{registry.host}/fleet/llama.cpp") as client,
        pytest.raises(NetworkError, match="TLS certificate is not trusted"),
    ):
        client.has_blob(sha256_digest(b"x"))


def test_an_unreadable_ca_bundle_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate")
    monkeypatch.setenv(CA_BUNDLE_VAR, str(tmp_path / "junk.pem"))
    with pytest.raises(UserInputError, match="LLAMA_RUNTIME_CA_BUNDLE"), open_registry("oci://reg.example/a/b"):
        pass
