"""The OCI distribution client against a real registry (Debian's docker-registry, Distribution 2.8)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from llama_runtime import RemoteError, UserInputError
from llama_runtime.errors import DigestMismatchError, RemoteDataError
from llama_runtime.updater.sources.oci import client as oci_client
from llama_runtime.updater.sources.oci.auth import Credential, RegistryAuthError, find_credential, parse_challenge
from llama_runtime.updater.sources.oci.client import (
    INDEX_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    Descriptor,
    RegistryClient,
    sha256_digest,
)
from llama_runtime.updater.sources.oci.reference import parse_reference
from tests.registry import Registry

pytestmark = pytest.mark.e2e

EMPTY_CONFIG = b"{}"
EMPTY_MEDIA = "application/vnd.oci.empty.v1+json"


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with Registry(tmp_path / "registry") as reg:
        yield reg


def _client(url: str, credential: Credential | None = None) -> RegistryClient:
    return RegistryClient(parse_reference(url), httpx.Client(timeout=10), credential)


def _chunks(data: bytes):  # type: ignore[no-untyped-def]
    return lambda offset: iter([data[offset:]])


def _push(client: RegistryClient, data: bytes) -> str:
    digest = sha256_digest(data)
    client.push_blob(digest, len(data), _chunks(data))
    return digest


def _manifest(client: RegistryClient, layer: bytes, subject: str | None = None, artifact: str = "x/y") -> bytes:
    config = _push(client, EMPTY_CONFIG)
    digest = _push(client, layer)
    doc: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": artifact,
        "config": {"mediaType": EMPTY_MEDIA, "digest": config, "size": 2},
        "layers": [{"mediaType": "application/octet-stream", "digest": digest, "size": len(layer)}],
    }
    if subject:
        doc["subject"] = {"mediaType": MANIFEST_MEDIA_TYPE, "digest": subject, "size": 1}
    return json.dumps(doc).encode()


def test_reference_forms_parse_and_bad_ones_say_what_is_valid() -> None:
    ref = parse_reference("oci://registry.example.com:5000/llama/llama.cpp:b7000@sha256:" + "a" * 64)
    assert (ref.host, ref.name, ref.tag, ref.digest, ref.plain_http) == (
        "registry.example.com:5000",
        "llama/llama.cpp",
        "b7000",
        "sha256:" + "a" * 64,
        False,
    )
    assert parse_reference("oci://127.0.0.1:5000/a/b").base_url == "http://127.0.0.1:5000"
    assert parse_reference("oci+http://reg.lan/a/b").plain_http
    for bad in ("oci://host", "oci://host/UPPER/case", "oci://host/a/b@sha256:xyz", "https://host/a/b"):
        with pytest.raises(UserInputError, match="is not a registry reference"):
            parse_reference(bad)


def test_blob_push_head_and_get_round_trip_with_digest_check(registry: Registry) -> None:
    client = _client(registry.url())
    data = b"llama" * 1000
    digest = sha256_digest(data)
    assert not client.has_blob(digest)
    client.push_blob(digest, len(data), _chunks(data))
    assert client.has_blob(digest)
    assert client.get_blob(digest, max_bytes=len(data)) == data
    with pytest.raises(RemoteDataError, match="over"):
        client.get_blob(digest, max_bytes=10)


def test_large_blob_goes_up_in_patch_chunks(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oci_client, "MONOLITHIC_MAX_BYTES", 1000)
    monkeypatch.setattr(oci_client, "CHUNK_BYTES", 1024)
    client = _client(registry.url())
    data = bytes(range(256)) * 20  # 5 chunks
    seen: list[int] = []
    digest = sha256_digest(data)
    client.push_blob(digest, len(data), _chunks(data), progress=seen.append)
    assert seen == [1024, 2048, 3072, 4096, 5120]
    assert client.get_blob(digest, max_bytes=len(data)) == data


def test_interrupted_chunked_upload_resumes_from_the_registrys_offset(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_runtime.errors import NetworkError

    monkeypatch.setattr(oci_client, "MONOLITHIC_MAX_BYTES", 1000)
    monkeypatch.setattr(oci_client, "CHUNK_BYTES", 1024)
    client = _client(registry.url())
    data = bytes(range(256)) * 16  # 4 chunks
    original = RegistryClient._patch
    calls: list[int] = []
    asked: list[int] = []

    def flaky(self: RegistryClient, location: str, part: bytes, offset: int) -> str:
        calls.append(offset)
        if len(calls) == 3:  # the connection drops during the third chunk
            raise NetworkError("reset")
        return original(self, location, part, offset)

    def chunks(offset: int):  # type: ignore[no-untyped-def]
        asked.append(offset)
        return iter([data[offset:]])

    monkeypatch.setattr(RegistryClient, "_patch", flaky)
    digest = sha256_digest(data)
    client.push_blob(digest, len(data), chunks)
    assert asked == [0, 2048]  # read again from where the registry said it stood
    assert calls == [0, 1024, 2048, 2048, 3072]
    assert client.get_blob(digest, len(data)) == data


def test_upload_with_a_wrong_digest_is_refused_by_the_registry(registry: Registry) -> None:
    client = _client(registry.url())
    with pytest.raises(RemoteError, match="PUT blob"):
        client.push_blob(sha256_digest(b"other"), 4, _chunks(b"data"))


def test_manifest_put_head_get_and_tag_list(registry: Registry) -> None:
    client = _client(registry.url())
    raw = _manifest(client, b"layer")
    digest, _subject_seen = client.put_manifest("b7000", raw, MANIFEST_MEDIA_TYPE)
    head = client.head_manifest("b7000")
    assert head is not None and head.digest == digest == sha256_digest(raw)
    got = client.get_manifest(digest)
    assert got is not None and got.raw == raw and got.media_type == MANIFEST_MEDIA_TYPE
    assert client.head_manifest("b6999") is None and client.get_manifest("b6999") is None
    client.put_manifest("stable", raw, MANIFEST_MEDIA_TYPE)
    assert sorted(client.tags()) == ["b7000", "stable"]


def test_cross_repository_mount_reuses_a_blob_without_upload(registry: Registry) -> None:
    first = _client(registry.url("fleet/one"))
    digest = _push(first, b"shared bytes")
    second = _client(registry.url("fleet/two"))
    assert second.mount_blob(digest, "fleet/one")
    assert second.get_blob(digest, 100) == b"shared bytes"
    assert not second.mount_blob(sha256_digest(b"nowhere"), "fleet/one")


def test_referrers_fall_back_to_the_tag_schema_on_distribution_2_8(registry: Registry) -> None:
    client = _client(registry.url())
    subject, _ = client.put_manifest("b7000", _manifest(client, b"build"), MANIFEST_MEDIA_TYPE)
    assert client.referrers(subject) == []
    raw = _manifest(client, b"bundle", subject=subject, artifact="application/vnd.dev.sigstore.bundle.v0.3+json")
    digest, processed = client.put_manifest(sha256_digest(raw), raw, MANIFEST_MEDIA_TYPE)
    assert not processed  # Distribution 2.8 has no referrers API: the client keeps the tag
    ref = Descriptor(MANIFEST_MEDIA_TYPE, digest, len(raw), "application/vnd.dev.sigstore.bundle.v0.3+json")
    client.add_referrer_to_tag(subject, ref)
    client.add_referrer_to_tag(subject, ref)  # idempotent
    found = client.referrers(subject, "application/vnd.dev.sigstore.bundle.v0.3+json")
    assert [d.digest for d in found] == [digest]
    assert client.referrers(subject, "other/type") == []
    index = client.get_manifest("sha256-" + subject.removeprefix("sha256:"))
    assert index is not None and index.media_type == INDEX_MEDIA_TYPE


def test_basic_auth_registry_refuses_anonymous_and_accepts_the_credential(tmp_path: Path) -> None:
    with Registry(tmp_path / "reg", users={"ci": "s3cret"}) as registry:
        with pytest.raises(RegistryAuthError, match="refused anonymous access"):
            _client(registry.url()).has_blob(sha256_digest(b"x"))
        with pytest.raises(RegistryAuthError, match="refused the credential from test"):
            _client(registry.url(), Credential("ci", "wrong", "test")).has_blob(sha256_digest(b"x"))
        good = _client(registry.url(), Credential("ci", "s3cret", "test"))
        digest = _push(good, b"authorised")
        assert good.get_blob(digest, 100) == b"authorised"


def test_bearer_token_flow_against_distribution_behind_a_token_service(tmp_path: Path) -> None:
    from tests.token_server import TokenServer

    tokens = TokenServer(tmp_path / "token", {"ci": "s3cret"}, anonymous_pull=True)
    try:
        with Registry(tmp_path / "reg", auth=tokens.registry_auth()) as registry:
            pusher = _client(registry.url(), Credential("ci", "s3cret", "test"))
            digest = _push(pusher, b"through a token")
            scopes = [p for p, _a in tokens.requests]
            # Distribution names the actions in either order ("pull,push" or "push,pull"): Go map order.
            pushing = ("%3Apull%2Cpush", "%3Apush%2Cpull")
            assert any("scope=repository%3Afleet%2Fllama.cpp" in p and p.endswith(pushing) for p in scopes), scopes
            assert all(a == "Basic Y2k6czNjcmV0" for _p, a in tokens.requests)  # the realm gets the credential
            # An anonymous client earns a pull token and reads; it cannot push.
            reader = _client(registry.url())
            assert reader.get_blob(digest, 100) == b"through a token"
            with pytest.raises(RegistryAuthError, match="refused anonymous access"):
                _push(reader, b"not allowed")
            with pytest.raises(RegistryAuthError, match=r"token service .* refused the credential for scope"):
                _client(registry.url(), Credential("ci", "wrong", "test")).has_blob(digest)
    finally:
        tokens.close()


def test_credentials_come_from_the_tools_variables_then_docker_config(tmp_path: Path) -> None:
    import base64

    config = tmp_path / "config.json"
    auth = base64.b64encode(b"alice:pw").decode()
    config.write_text(json.dumps({"auths": {"https://reg.example:5000/v1/": {"auth": auth}}}))
    found = find_credential("reg.example:5000", {"DOCKER_CONFIG": str(tmp_path)})
    assert found is not None and (found.username, found.secret) == ("alice", "pw")
    assert "pw" not in repr(found)
    assert find_credential("other.example", {"DOCKER_CONFIG": str(tmp_path)}) is None
    env = {"LLAMA_RUNTIME_REGISTRY_USERNAME": "bot", "LLAMA_RUNTIME_REGISTRY_PASSWORD": "t", "DOCKER_CONFIG": "/x"}
    own = find_credential("reg.example:5000", env)
    assert own is not None and (own.username, own.secret) == ("bot", "t")
    helper = {"credHelpers": {"reg.example:5000": "nothere-xyz"}}
    config.write_text(json.dumps(helper))
    with pytest.raises(RegistryAuthError, match=r"docker-credential-nothere-xyz .* not installed"):
        find_credential("reg.example:5000", {"DOCKER_CONFIG": str(tmp_path)})


def test_challenge_header_parses_quoted_parameters() -> None:
    c = parse_challenge('Bearer realm="https://auth.example/token",service="reg",scope="repository:a/b:pull,push"')
    assert c is not None and c.scheme == "bearer"
    assert dict(c.params) == {
        "realm": "https://auth.example/token",
        "service": "reg",
        "scope": "repository:a/b:pull,push",
    }


# -- a small fake for what Distribution is not configured to do here: the bearer flow, hostile answers ---------


class _Fake(BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, dict[str, str], bytes]]] = {}
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        key = self.path.split("?", 1)[0]
        if key == "/token":
            ok = self.headers.get("Authorization") == "Basic Y2k6czNjcmV0" and "scope=repository" in self.path
            self._send(200 if ok else 401, {"Content-Type": "application/json"}, b'{"token":"T0K"}' if ok else b"")
            return
        if key.startswith("/v2/") and self.headers.get("Authorization") != "Bearer T0K" and "cdn" not in key:
            port = getattr(self.server, "server_port", 0)
            realm = f"http://127.0.0.1:{port}/token"
            challenge = f'Bearer realm="{realm}",service="fake",scope="repository:a/b:pull"'
            self._send(401, {"WWW-Authenticate": challenge}, b"")
            return
        self._send(*self.routes.get(key, (404, {}, b"")))

    do_HEAD = do_GET

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[tuple[str, type[_Fake]]]:
    _Fake.routes, _Fake.seen = {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"oci://127.0.0.1:{server.server_address[1]}/a/b", _Fake
    server.shutdown()
    server.server_close()


def test_bearer_challenge_earns_a_token_and_a_cdn_redirect_gets_no_credential(fake) -> None:  # type: ignore[no-untyped-def]
    url, handler = fake
    port = url.split(":")[2].split("/")[0]
    data = b"blob bytes"
    digest = sha256_digest(data)
    # The CDN is another origin (localhost, not 127.0.0.1): no Authorization may reach it.
    handler.routes[f"/v2/a/b/blobs/{digest}"] = (307, {"Location": f"http://localhost:{port}/cdn/x"}, b"")
    handler.routes["/cdn/x"] = (200, {}, data)
    client = _client(url, Credential("ci", "s3cret", "test"))
    assert client.get_blob(digest, 100) == data
    assert ("/cdn/x", None) in handler.seen
    assert any(p.startswith("/token?") for p, _ in handler.seen)
    assert all(a is None for p, a in handler.seen if p.startswith("/cdn"))


def test_bearer_realm_refusing_the_credential_names_the_scope(fake) -> None:  # type: ignore[no-untyped-def]
    url, _handler = fake
    with pytest.raises(
        RegistryAuthError, match=r"token service .* refused the credential for scope 'repository:a/b:pull'"
    ):
        _client(url, Credential("ci", "wrong", "test")).has_blob(sha256_digest(b"x"))


def _serve_manifest(handler: type[_Fake], tag: str, body: bytes, media: str, token: bool = True) -> None:
    handler.routes[f"/v2/a/b/manifests/{tag}"] = (200, {"Content-Type": media}, body)


def test_hostile_manifests_are_refused(fake, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    url, handler = fake
    client = _client(url, Credential("ci", "s3cret", "test"))
    _serve_manifest(handler, "html", b"<html></html>", "text/html")
    with pytest.raises(RemoteDataError, match="not JSON"):
        client.get_manifest("html")
    _serve_manifest(handler, "docker", b'{"schemaVersion":2}', "application/vnd.docker.distribution.manifest.v2+json")
    with pytest.raises(RemoteDataError, match="not an OCI manifest"):
        client.get_manifest("docker")
    deep = b'{"schemaVersion":2,"a":' + b"[" * 40 + b"]" * 40 + b"}"
    _serve_manifest(handler, "deep", deep, MANIFEST_MEDIA_TYPE)
    with pytest.raises(RemoteDataError, match="nested"):
        client.get_manifest("deep")
    monkeypatch.setattr(oci_client, "MAX_MANIFEST_BYTES", 100)
    _serve_manifest(handler, "huge", b'{"schemaVersion":2,"x":"' + b"a" * 200 + b'"}', MANIFEST_MEDIA_TYPE)
    with pytest.raises(RemoteDataError, match="larger than"):
        client.get_manifest("huge")
    good = b'{"schemaVersion":2}'
    _serve_manifest(handler, "sha256:" + "0" * 64, good, MANIFEST_MEDIA_TYPE)
    with pytest.raises(DigestMismatchError, match="other bytes"):
        client.get_manifest("sha256:" + "0" * 64)


def test_blob_whose_bytes_are_not_its_digest_is_refused(fake) -> None:  # type: ignore[no-untyped-def]
    url, handler = fake
    digest = sha256_digest(b"expected")
    handler.routes[f"/v2/a/b/blobs/{digest}"] = (200, {}, b"tampered")
    with pytest.raises(DigestMismatchError, match="not used"):
        _client(url, Credential("ci", "s3cret", "test")).get_blob(digest, 100)


def test_redirect_from_https_to_plain_http_is_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(307, headers={"Location": "http://evil.example/blob"})

    client = RegistryClient(
        parse_reference("oci://reg.example/a/b"), httpx.Client(transport=httpx.MockTransport(handler))
    )
    with pytest.raises(RemoteError, match="redirected to a http:// URL from HTTPS"):
        client.get_blob(sha256_digest(b"x"), 10)


def test_digest_helper_matches_hashlib() -> None:
    assert sha256_digest(b"a") == "sha256:" + hashlib.sha256(b"a").hexdigest()
