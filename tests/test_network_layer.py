"""The one network layer: origins, origin-bound credentials, redirects, retries with Retry-After, caps, identity.

Fast tests run the layer (and the registry client on it) over ``httpx.MockTransport`` with the fake
clock; the end-to-end ones put a real registry (Debian's docker-registry) behind a fault proxy
and run the CLI, so a fault or a rate limit gets the answer GitHub's gets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llama_runtime._version import __version__
from llama_runtime.runtime.clock import TimeBudget
from llama_runtime.runtime.errors import (
    NetworkError,
    RateLimitError,
    RegistryAuthError,
    RemoteDataError,
    RemoteError,
)
from llama_runtime.updater.net.body import read_capped
from llama_runtime.updater.net.identity import DETAIL_VAR, describe_runtime, user_agent
from llama_runtime.updater.net.limits import rate_limit_refusal, retry_after_seconds
from llama_runtime.updater.net.origin import may_carry_credentials, origin_of, same_origin
from llama_runtime.updater.net.session import OriginCredential, Session
from llama_runtime.updater.sources.oci.auth import Credential, JsonFileTokenCache
from llama_runtime.updater.sources.oci.client import RegistryClient, sha256_digest
from llama_runtime.updater.sources.oci.reference import parse_reference
from tests.fakeclock import FakeClock
from tests.faultproxy import FaultProxy

Handler = Callable[[httpx.Request], httpx.Response]


def session(handler: Handler, clock: FakeClock, *, budget: float | None = None) -> Session:
    http = httpx.Client(transport=httpx.MockTransport(handler), timeout=10)
    spent = TimeBudget(budget, clock) if budget is not None else None
    return Session(http, who="the server", budget=spent, sleep=clock.sleep, clock=clock)


def registry(
    url: str, handler: Handler, clock: FakeClock, credential: Credential | None = None, **kw: Any
) -> RegistryClient:
    http = httpx.Client(transport=httpx.MockTransport(handler), timeout=10)
    return RegistryClient(parse_reference(url), http, credential, sleep=clock.sleep, clock=clock, **kw)


# -- origins -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("https://reg.example/v2/", "https://reg.example:443/token", True),
        ("https://REG.example/a", "https://reg.example/b", True),
        ("http://reg.example/a", "http://reg.example:80/b", True),
        ("https://reg.example/a", "http://reg.example/a", False),
        ("https://reg.example/a", "https://reg.example:8443/a", False),
        ("https://reg.example/a", "https://cdn.example/a", False),
        ("https://reg.example:x/a", "https://reg.example/a", False),
    ],
)
def test_same_origin_normalises_default_ports_and_case(a: str, b: str, same: bool) -> None:
    assert same_origin(a, b) is same


def test_credentials_travel_over_tls_or_to_this_machine_only() -> None:
    assert may_carry_credentials("https://reg.example/v2/")
    assert may_carry_credentials("http://127.0.0.1:5000/v2/") and may_carry_credentials("http://[::1]:5000/")
    assert not may_carry_credentials("http://reg.example/v2/")
    bound = OriginCredential("https://reg.example", "Basic c2VjcmV0")
    assert bound.auth_headers_for("https://reg.example:443/v2/x") == {"Authorization": "Basic c2VjcmV0"}
    assert bound.auth_headers_for("https://cdn.example/v2/x") == {}
    assert bound.auth_headers_for("http://reg.example/v2/x") == {}
    assert "c2VjcmV0" not in repr(bound)
    assert str(origin_of("https://reg.example:443/x?sig=1")) == "https://reg.example"


# -- redirects ---------------------------------------------------------------------------------------------------


def test_a_redirect_to_another_origin_carries_no_credential_nor_the_callers_authorization() -> None:
    clock, seen = FakeClock(), []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("authorization")))
        if request.url.host == "reg.example":
            return httpx.Response(307, headers={"Location": "https://cdn.example/blob?sig=abc"})
        return httpx.Response(200, content=b"ok")

    net = session(handler, clock)
    bound = OriginCredential("https://reg.example", "Bearer t0ken")
    response = net.send("GET", "https://reg.example/v2/a/blobs/x", credentials=bound)
    assert response.status_code == 200
    assert seen == [("reg.example", "Bearer t0ken"), ("cdn.example", None)]
    seen.clear()
    net.send("GET", "https://reg.example/v2/a/blobs/x", headers={"Authorization": "Bearer leaked"})
    assert seen == [("reg.example", "Bearer leaked"), ("cdn.example", None)]


def test_a_redirect_from_https_to_plain_http_is_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "http://reg.example/plain"})

    with pytest.raises(RemoteError, match="redirected to a http:// URL from HTTPS"):
        session(handler, FakeClock()).send("GET", "https://reg.example/v2/")


# -- retries -----------------------------------------------------------------------------------------------------


def test_a_502_is_tried_again_after_the_backoff_and_a_post_is_not() -> None:
    clock, answers = FakeClock(), [502, 200]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(answers.pop(0) if answers else 502)

    net = session(handler, clock)
    assert net.send("GET", "https://reg.example/v2/").status_code == 200
    assert clock.now == 1.0  # the one backoff schedule: 1 s before the second try
    answers[:] = [502, 200]
    assert net.send("POST", "https://reg.example/v2/x/blobs/uploads/").status_code == 502
    assert answers == [200]


def test_a_short_retry_after_is_waited_out_and_a_long_one_is_the_answer() -> None:
    clock, answers = FakeClock(), [(429, "3"), (200, None)]

    def handler(request: httpx.Request) -> httpx.Response:
        status, after = answers.pop(0)
        return httpx.Response(status, headers={"Retry-After": after} if after else {})

    net = session(handler, clock)
    assert net.send("GET", "https://reg.example/v2/").status_code == 200
    assert clock.now == 3.0  # Retry-After, not the 1 s backoff
    answers[:] = [(429, "120"), (200, None)]
    refused = net.send("GET", "https://reg.example/v2/")
    assert refused.status_code == 429 and answers == [(200, None)] and clock.now == 3.0
    error = rate_limit_refusal(refused, "The registry reg.example", clock)
    assert isinstance(error, RateLimitError) and error.code == "rate_limited" and error.retry_after == 120


def test_retries_never_outlast_the_one_deadline() -> None:
    clock, count = FakeClock(), [0]

    def handler(request: httpx.Request) -> httpx.Response:
        count[0] += 1
        return httpx.Response(503, headers={"Retry-After": "4"})

    net = session(handler, clock, budget=5.0)
    assert net.send("GET", "https://reg.example/v2/").status_code == 503
    assert count[0] == 2 and clock.now == 4.0  # 4 s + another 4 s would pass the 5 s deadline


def test_a_connection_reset_is_tried_again_and_names_the_origin_when_it_persists() -> None:
    clock = FakeClock()

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("reset", request=request)

    with pytest.raises(NetworkError, match=r"Could not connect to the server at https://reg.example \(ConnectError\)"):
        session(handler, clock).send("GET", "https://user:pw@reg.example/v2/?sig=secret")
    assert clock.now == 3.0  # three tries: 1 s + 2 s of backoff


def test_retry_after_as_an_http_date_counts_from_the_clock() -> None:
    clock = FakeClock(1_700_000_000)
    response = httpx.Response(429, headers={"Retry-After": "Tue, 14 Nov 2023 22:14:20 GMT"})
    assert retry_after_seconds(response, clock) == 60.0  # 1_700_000_000 is 22:13:20 GMT
    assert retry_after_seconds(httpx.Response(429, headers={"Retry-After": "soon"}), clock) is None


# -- caps --------------------------------------------------------------------------------------------------------


def test_a_body_is_capped_while_it_streams_and_the_cap_is_in_the_error() -> None:
    pulled = [0]

    def endless() -> Iterator[bytes]:
        while True:
            pulled[0] += 1
            yield b"x" * 65536

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Stream(endless()))

    net = session(handler, FakeClock())
    with pytest.raises(RemoteDataError, match="larger than 64 KiB once decoded"):
        net.fetch("https://reg.example/token", cap=65536, what="a registry token")
    assert pulled[0] <= 3  # stopped at the cap, not at the end of a 400 MB body


class _Stream(httpx.SyncByteStream):
    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        return self.chunks


def test_read_capped_names_its_cap() -> None:
    response = httpx.Response(200, stream=_Stream(iter([b"a" * 2000])))
    with pytest.raises(RemoteDataError, match="larger than 1000 bytes once decoded"):
        read_capped(response, cap=1000, what="an error page")


# -- identity ----------------------------------------------------------------------------------------------------


def test_every_request_says_llama_runtime_and_the_detail_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    agents: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        agents.append(request.headers["user-agent"])
        return httpx.Response(200)

    describe_runtime(build="b7001", backend="vulkan")
    try:
        monkeypatch.delenv(DETAIL_VAR, raising=False)
        session(handler, FakeClock()).send("GET", "https://reg.example/v2/")
        monkeypatch.setenv(DETAIL_VAR, "0")
        session(handler, FakeClock()).send("GET", "https://reg.example/v2/")
    finally:
        describe_runtime(build=None, backend=None)
    assert agents[0].startswith(f"llama-runtime/{__version__} (") and "build b7001; backend vulkan)" in agents[0]
    assert agents[1] == f"llama-runtime/{__version__}" == user_agent()


# -- the registry client on the layer ------------------------------------------------------------------------------

CRED = Credential("ci", "s3cret", "test")
BASIC = "Basic Y2k6czNjcmV0"


def test_a_cdns_401_naming_a_third_hosts_realm_gets_no_registry_credential() -> None:
    seen: list[tuple[str | None, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("authorization")))
        if request.url.host == "reg.example":
            return httpx.Response(307, headers={"Location": "https://cdn.example/blob"})
        if request.url.host == "cdn.example":
            return httpx.Response(401, headers={"WWW-Authenticate": 'Bearer realm="https://evil.example/token"'})
        return httpx.Response(200, json={"token": "stolen"})

    client = registry("oci://reg.example/a/b", handler, FakeClock(), CRED)
    with pytest.raises(RegistryAuthError, match="only sent to the registry itself"):
        client.get_blob(sha256_digest(b"x"), 10)
    assert ("evil.example", BASIC) not in seen and all(host != "evil.example" for host, _ in seen)
    assert ("cdn.example", None) in seen


def test_a_plain_http_realm_asking_for_credentials_is_refused_saying_so() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        if request.url.host == "reg.example":
            return httpx.Response(401, headers={"WWW-Authenticate": 'Bearer realm="http://auth.example/token"'})
        return httpx.Response(200, json={"token": "t"})

    client = registry("oci+http://127.0.0.1:5000/a/b", handler, FakeClock(), CRED)
    client.ref = parse_reference("oci+http://reg.example/a/b")  # plain HTTP asked for, to a host on a network
    with pytest.raises(RegistryAuthError) as caught:
        client.head_manifest("stable")
    assert caught.value.exit_code == 7 and "never sent in clear text" in caught.value.message
    assert "auth.example" not in seen


def test_oci_plus_http_to_a_network_host_never_sends_basic() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})

    client = registry("oci+http://reg.example/a/b", handler, FakeClock(), CRED)
    with pytest.raises(RegistryAuthError, match="never sent in clear text"):
        client.head_manifest("stable")
    assert seen == [None]


def test_a_huge_token_answer_is_capped_while_it_streams() -> None:
    pulled = [0]

    def endless() -> Iterator[bytes]:
        while True:
            pulled[0] += 1
            yield b" " * 65536

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "reg.example":
            return httpx.Response(401, headers={"WWW-Authenticate": 'Bearer realm="https://reg.example/token"'})
        raise AssertionError(request.url)

    def token_too(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            return httpx.Response(200, stream=_Stream(endless()))
        return handler(request)

    client = registry("oci://reg.example/a/b", token_too, FakeClock())
    with pytest.raises(RemoteDataError, match="64 KiB"):
        client.head_manifest("stable")
    assert pulled[0] <= 3


def test_a_502_on_a_manifest_is_retried_and_a_long_429_is_rate_limited() -> None:
    clock, answers = FakeClock(), [502]
    digest = "sha256:" + "a" * 64

    def handler(request: httpx.Request) -> httpx.Response:
        if answers:
            status = answers.pop(0)
            return httpx.Response(status, headers={"Retry-After": "120"} if status == 429 else {})
        return httpx.Response(200, headers={"Docker-Content-Digest": digest, "Content-Length": "7"})

    client = registry("oci://reg.example/a/b", handler, clock)
    head = client.head_manifest("stable")
    assert head is not None and head.digest == digest
    answers[:] = [429]
    with pytest.raises(RateLimitError) as caught:
        client.head_manifest("stable")
    assert caught.value.code == "rate_limited" and caught.value.retry_after == 120 and caught.value.exit_code == 7


def test_a_manifest_whose_transfer_breaks_off_is_read_again() -> None:
    import json as _json

    doc = _json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}).encode()
    clock, broken = FakeClock(), [True]

    def cut() -> Iterator[bytes]:
        yield doc[:10]
        raise httpx.ReadError("connection reset by peer")

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}
        if broken and broken.pop():
            return httpx.Response(200, stream=_Stream(cut()), headers=headers)
        return httpx.Response(200, stream=_Stream(iter([doc])), headers=headers)

    manifest = registry("oci://reg.example/a/b", handler, clock).get_manifest("stable")
    assert manifest is not None and manifest.raw == doc and clock.now == 1.0


def test_upload_put_and_post_are_retried_on_one_502() -> None:
    clock, faults = FakeClock(), {"POST": 1, "PUT": 1}
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if faults.get(request.method):
            faults[request.method] -= 1
            return httpx.Response(502)
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v2/a/b/blobs/uploads/u1"})
        return httpx.Response(201)

    client = registry("oci://reg.example/a/b", handler, clock)
    client.push_blob(sha256_digest(b"abc"), 3, lambda offset: iter([b"abc"[offset:]]))
    assert calls == ["POST", "POST", "PUT", "PUT"]


def test_a_tag_page_link_to_another_origin_is_not_followed() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        return httpx.Response(
            200, json={"tags": ["b1"]}, headers={"Link": '<http://evil.example/v2/a/b/tags/list?n=1>; rel="next"'}
        )

    client = registry("oci://reg.example/a/b", handler, FakeClock())
    with pytest.raises(RemoteError, match="another origin"):
        client.tags()
    assert seen == ["reg.example"]


def test_a_bearer_token_is_kept_with_its_expiry_so_a_repeat_is_one_request(tmp_path: Path) -> None:
    clock, seen = FakeClock(1_000_000), []
    digest = "sha256:" + "b" * 64

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("authorization")))
        if request.url.path == "/token":
            return httpx.Response(200, json={"token": "tok1", "expires_in": 300})
        if request.headers.get("authorization") != "Bearer tok1":
            return httpx.Response(401, headers={"WWW-Authenticate": 'Bearer realm="https://reg.example/token"'})
        return httpx.Response(200, headers={"Docker-Content-Digest": digest})

    cache = JsonFileTokenCache(tmp_path / "tokens.json", clock)
    registry("oci://reg.example/a/b", handler, clock, CRED, tokens=cache).head_manifest("stable")
    assert [p for p, _ in seen] == ["/v2/a/b/manifests/stable", "/token", "/v2/a/b/manifests/stable"]
    assert "s3cret" not in (tmp_path / "tokens.json").read_text()
    seen.clear()
    registry("oci://reg.example/a/b", handler, clock, CRED, tokens=cache).head_manifest("stable")
    assert seen == [("/v2/a/b/manifests/stable", "Bearer tok1")]
    clock.now += 300  # expired: earned again
    seen.clear()
    registry("oci://reg.example/a/b", handler, clock, CRED, tokens=cache).head_manifest("stable")
    assert [p for p, _ in seen] == ["/v2/a/b/manifests/stable", "/token", "/v2/a/b/manifests/stable"]


def test_basic_goes_first_to_the_registrys_own_origin() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(404)

    assert registry("oci://reg.example/a/b", handler, FakeClock(), CRED).head_manifest("stable") is None
    assert seen == [BASIC]


def test_the_registry_token_cache_file_is_the_owners_only(tmp_path: Path) -> None:
    cache = JsonFileTokenCache(tmp_path / "t.json", FakeClock(10))
    cache.put("k", "tok", 60)
    assert cache.get("k") == "tok" and (tmp_path / "t.json").stat().st_mode & 0o077 == 0
    assert json.loads((tmp_path / "t.json").read_text())["k"]["expires_at"] == 70


# -- end to end: a real registry behind a fault proxy ---------------------------------------------------------------


@pytest.fixture
def proxied(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FaultProxy]:
    """A real registry holding b7001 (linux-x64 cpu), behind a fault proxy; upstream stopped afterwards."""
    from tests.fakegithub import FakeGitHub
    from tests.helpers import cli_json
    from tests.registry import Registry
    from tests.test_mirror import publish

    (tmp_path / "src").mkdir()
    with Registry(tmp_path_factory.mktemp("registry")) as reg:
        with FakeGitHub() as github:
            publish(github, tmp_path, "b7001")
            code, report = cli_json(
                capsys, "mirror", "sync", "--dest", reg.url(), "--api-url", github.api_url,
                "--platform", "linux-x64", "--backend", "cpu",
            )  # fmt: skip
            assert code == 0, report
        with FaultProxy(f"http://{reg.host}") as proxy:
            yield proxy


def _check(capsys: pytest.CaptureFixture[str], home: Path, proxy: FaultProxy) -> tuple[int, dict[str, Any]]:
    from tests.helpers import cli_json

    return cli_json(capsys, "check", "--home", str(home), "--api-url", f"oci://{proxy.host}/fleet/llama.cpp")


@pytest.mark.e2e
def test_a_registry_502_on_the_manifest_is_retried_as_githubs_is(
    capsys: pytest.CaptureFixture[str], proxied: FaultProxy, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.faultproxy import Rule

    monkeypatch.setattr("llama_runtime.runtime.clock.RETRY_BACKOFF_SECONDS", 0.0)
    proxied.add(Rule("HEAD", r"/manifests/stable$", 502))
    code, payload = _check(capsys, home, proxied)
    assert code == 0 and payload["latest"] == "b7001", payload
    assert len(proxied.requests("HEAD", r"/manifests/stable$")) == 2
    assert all(s.headers["user-agent"].startswith("llama-runtime/") for s in proxied.seen)


@pytest.mark.e2e
def test_a_registry_429_is_rate_limited_recorded_and_the_next_check_is_skipped(
    capsys: pytest.CaptureFixture[str], proxied: FaultProxy, home: Path
) -> None:
    from tests.faultproxy import Rule

    proxied.add(Rule("HEAD", r"/manifests/stable$", 429, {"Retry-After": "120"}))
    code, payload = _check(capsys, home, proxied)
    assert code == 7 and payload["error"]["code"] == "rate_limited", payload
    assert "120" in payload["error"]["message"]
    stored = json.loads((home / "cache" / "ratelimit.json").read_text())
    asked = len(proxied.seen)
    code, skipped = _check(capsys, home, proxied)
    assert code == 0 and skipped["skipped"] == "rate_limited", skipped
    assert skipped["not_before"] == stored["not_before"] and len(proxied.seen) == asked


@pytest.mark.e2e
def test_a_registry_blob_redirected_to_a_cdn_naming_a_hostile_realm_sends_it_nothing(
    capsys: pytest.CaptureFixture[str],
    proxied: FaultProxy,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from tests.faultproxy import FaultProxy, Rule
    from tests.helpers import cli_json

    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "nodocker"))
    monkeypatch.setenv("LLAMA_RUNTIME_REGISTRY_USERNAME", "ci")
    monkeypatch.setenv("LLAMA_RUNTIME_REGISTRY_PASSWORD", "s3cret")
    with FaultProxy("http://127.0.0.1:9") as realm, FaultProxy("http://127.0.0.1:9") as cdn:
        cdn.add(Rule("GET", r"", 401, {"WWW-Authenticate": f'Bearer realm="{realm.url}/token"'}, times=None))
        proxied.add(Rule("GET", r"/blobs/sha256:", 307, {"Location": f"{cdn.url}/blob"}, times=None))
        code, payload = cli_json(
            capsys, "update", "--home", str(home), "--api-url", f"oci://{proxied.host}/fleet/llama.cpp",
            "--backend", "cpu",
        )  # fmt: skip
        assert code == 7, payload
        assert realm.seen == [] and all("authorization" not in s.headers for s in cdn.seen)
    assert not (home / "runtimes").exists() or not any((home / "runtimes").iterdir())


# -- downloads ---------------------------------------------------------------------------------------------------


def _asset_host(handler: Handler) -> Any:
    from llama_runtime.updater.sources.source import PlainHttp

    return PlainHttp(httpx.Client(transport=httpx.MockTransport(handler), timeout=10))


def test_a_download_waits_out_a_short_retry_after_and_a_long_one_is_rate_limited(tmp_path: Path) -> None:
    import hashlib

    from llama_runtime.updater.fetch.download import download_asset
    from llama_runtime.updater.release.release import Asset

    body = b"asset bytes"
    asset = Asset("a.bin", len(body), "https://cdn.example/a.bin", "sha256:" + hashlib.sha256(body).hexdigest())
    clock, answers = FakeClock(), [(429, "3"), (200, None)]

    def handler(request: httpx.Request) -> httpx.Response:
        status, after = answers.pop(0)
        return httpx.Response(
            status,
            stream=_Stream(iter([body] if status == 200 else [])),
            headers={"Retry-After": after} if after else {},
        )

    sha = hashlib.sha256(body).hexdigest()
    checks: dict[str, Any] = {"max_bytes": 1000, "expected_size": len(body), "expected_sha256": sha}
    download_asset(_asset_host(handler), asset, tmp_path / "a.partial", sleep=clock.sleep, **checks)
    assert clock.now == 3.0 and answers == []  # 1 s backoff + 2 s more: the server's 3 s, not 12 GETs
    answers[:] = [(429, "120"), (200, None)]
    with pytest.raises(RateLimitError) as caught:
        download_asset(_asset_host(handler), asset, tmp_path / "b.partial", sleep=clock.sleep, **checks)
    assert caught.value.retry_after == 120 and answers == [(200, None)]


def test_an_interrupted_ranged_download_saves_its_record_and_resumes_to_the_byte(tmp_path: Path) -> None:
    import hashlib
    import signal
    import threading

    from llama_runtime.updater.fetch.ranges import RangedDownload, load_record
    from llama_runtime.updater.release.release import Asset

    body = bytes(range(256)) * 4096  # 1 MiB in 4 KiB chunks: far below the 8 MiB periodic save
    asset = Asset("a.bin", len(body), "https://cdn.example/a.bin", "sha256:" + hashlib.sha256(body).hexdigest())
    asked: list[int] = []
    release = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        first, _, last = request.headers["range"].removeprefix("bytes=").partition("-")
        start, end = int(first), int(last)
        asked.append(start)
        part = body[start : end + 1]
        chunks = [part[i : i + 4096] for i in range(0, len(part), 4096)]

        def slow() -> Iterator[bytes]:
            for n, chunk in enumerate(chunks):
                if n == 8:
                    release.wait(2)  # the rest waits: the interrupt comes with 32 KiB of each range on disk
                yield chunk

        headers = {"Content-Range": f"bytes {start}-{end}/{len(body)}", "ETag": '"v1"'}
        return httpx.Response(206, stream=_Stream(slow()), headers=headers)

    interrupted = [False]
    main = threading.main_thread().ident
    assert main is not None

    def progress(done: int, total: int | None) -> None:
        if done >= 2 * 8 * 4096 and not interrupted[0]:
            interrupted[0] = True
            # Ctrl-C (the CLI turns SIGTERM into the same interrupt), sent to the main thread: a signal the
            # kernel hands to this worker thread would wait until the main thread's join returned.
            signal.pthread_kill(main, signal.SIGINT)

    partial = tmp_path / "a.partial"
    # Python's own Ctrl-C handler, also where the test runner was started with SIGINT ignored (a shell's `&`).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            RangedDownload(_asset_host(handler), asset, partial, parallel=2, progress=progress).run()
    finally:
        signal.signal(signal.SIGINT, before)
    release.set()
    recorded = load_record(partial, asset.download_url, asset.size)
    assert recorded is not None, "the ranges record was not saved on the interrupt"
    saved = sum(s.done for s in recorded[0])
    assert saved >= 2 * 8 * 4096
    asked.clear()
    result = RangedDownload(_asset_host(handler), asset, partial, parallel=2).run()
    assert result is not None and partial.read_bytes() == body
    assert sorted(asked) == sorted(s.next for s in recorded[0])  # resumed at the recorded bytes, not from 0


# -- scratch and abandoned uploads -----------------------------------------------------------------------------------


def test_an_interrupted_pushs_scratch_dir_is_found_by_the_next_run_and_removed_when_done(tmp_path: Path) -> None:
    import os

    from llama_runtime.updater.fetch.scratch import PREFIX, STALE_AFTER_SECONDS, scratch_dir

    with pytest.raises(KeyboardInterrupt), scratch_dir("oci://reg/a", root=tmp_path) as first:
        (first / "b7001-a.tar.gz.part").write_bytes(b"half")
        raise KeyboardInterrupt
    with scratch_dir("oci://reg/a", root=tmp_path) as again:
        assert again == first and (again / "b7001-a.tar.gz.part").read_bytes() == b"half"
    assert not first.exists()
    stale = tmp_path / (PREFIX + "0123456789abcdef")
    stale.mkdir()
    os.utime(stale, (0, 0))
    with scratch_dir("oci://reg/b", root=tmp_path) as other:
        assert other != first and not stale.exists()
    assert STALE_AFTER_SECONDS >= 24 * 3600


def test_a_scratch_name_that_is_a_link_is_not_used(tmp_path: Path) -> None:
    from llama_runtime.updater.fetch.scratch import scratch_dir

    with scratch_dir("oci://reg/a", root=tmp_path) as first:
        name = first
    (tmp_path / "elsewhere").mkdir()
    name.symlink_to(tmp_path / "elsewhere")
    with scratch_dir("oci://reg/a", root=tmp_path) as used:
        assert used != name and used.parent == tmp_path
    assert (tmp_path / "elsewhere").is_dir()


def test_a_failed_upload_closes_its_session() -> None:
    calls: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append((request.method, request.url.path))
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v2/a/b/blobs/uploads/u1"})
        if request.method == "PUT":
            return httpx.Response(400)
        return httpx.Response(204)

    client = registry("oci://reg.example/a/b", handler, FakeClock())
    with pytest.raises(RemoteError, match="PUT blob"):
        client.push_blob(sha256_digest(b"abc"), 3, lambda offset: iter([b"abc"[offset:]]))
    assert calls[-1] == ("DELETE", "/v2/a/b/blobs/uploads/u1")


@pytest.mark.e2e
def test_requests_name_the_active_runtime_unless_the_detail_is_turned_off(
    capsys: pytest.CaptureFixture[str], proxied: FaultProxy, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers import cli_json

    url = f"oci://{proxied.host}/fleet/llama.cpp"
    code, payload = cli_json(capsys, "update", "--home", str(home), "--api-url", url, "--backend", "cpu")
    assert code == 0 and payload["active"]["tag"] == "b7001", payload
    assert _check(capsys, home, proxied)[0] == 0
    agent = proxied.seen[-1].headers["user-agent"]
    assert agent.startswith(f"llama-runtime/{__version__} (") and agent.endswith("; build b7001; backend cpu)"), agent
    monkeypatch.setenv(DETAIL_VAR, "0")
    assert _check(capsys, home, proxied)[0] == 0
    assert proxied.seen[-1].headers["user-agent"] == f"llama-runtime/{__version__}"


def test_mirror_sync_to_a_registry_honours_the_settings_deadline_and_minimum_rate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from llama_runtime.updater.offline import registry_push
    from tests.helpers import cli_json

    seen: list[Any] = []

    def capture(client: Any, registry: Any, **kw: Any) -> Any:
        seen.append((kw["fetch"].options.pace, registry.net.http.timeout.read))
        raise RemoteError("captured")

    monkeypatch.setattr(registry_push, "sync_registry", capture)
    monkeypatch.setenv("LLAMA_RUNTIME_DOWNLOAD_DEADLINE", "5")
    monkeypatch.setenv("LLAMA_RUNTIME_MIN_RATE", "123")
    monkeypatch.setenv("LLAMA_RUNTIME_READ_TIMEOUT", "7")
    code, payload = cli_json(
        capsys, "mirror", "sync", "--dest", "oci://127.0.0.1:9/fleet/llama.cpp", "--api-url", "https://gh.invalid"
    )
    assert code == 7 and payload["error"]["message"] == "captured", payload
    ((pace, read),) = seen
    assert (pace.deadline, pace.min_rate, read) == (5.0, 123.0, 7.0)


def test_an_interrupted_chunked_upload_is_resumed_in_its_open_session_by_the_next_push(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_runtime.updater.sources.oci import client as oci_client

    monkeypatch.setattr(oci_client, "MONOLITHIC_MAX_BYTES", 4)
    monkeypatch.setattr(oci_client, "CHUNK_BYTES", 4)
    data = b"0123456789ab"
    held: list[bytes] = []
    calls: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append((request.method, request.headers.get("content-range", "")))
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v2/a/b/blobs/uploads/u1"})
        if request.method == "PATCH":
            held.append(request.content)
            return httpx.Response(202, headers={"Location": "/v2/a/b/blobs/uploads/u1"})
        if request.method == "GET":
            return httpx.Response(204, headers={"Range": f"0-{len(b''.join(held)) - 1}"})
        assert b"".join(held) == data
        return httpx.Response(201)

    def interrupted(offset: int) -> Iterator[bytes]:
        yield data[offset : offset + 4]
        yield data[offset + 4 : offset + 8]
        raise KeyboardInterrupt  # Ctrl-C with 8 of 12 bytes sent

    session = tmp_path / "blob.upload"
    digest = sha256_digest(data)
    client = registry("oci://reg.example/a/b", handler, FakeClock())
    with pytest.raises(KeyboardInterrupt):
        client.push_blob(digest, len(data), interrupted, session=session)
    assert session.is_file() and ("DELETE", "") not in calls
    calls.clear()
    client.push_blob(digest, len(data), lambda offset: iter([data[offset:]]), session=session)
    assert [m for m, _ in calls] == ["GET", "PATCH", "PUT"] and calls[1][1] == "8-11"
    assert not session.exists()


@pytest.mark.e2e
def test_a_sync_whose_upload_requests_meet_one_502_and_one_429_is_retried_and_exits_0(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sync's own requests go through the layer: a real registry behind the fault proxy, faults on uploads."""
    from tests.fakegithub import FakeGitHub
    from tests.faultproxy import FaultProxy, Rule
    from tests.helpers import cli_json
    from tests.registry import Registry
    from tests.test_mirror import publish

    monkeypatch.setattr("llama_runtime.runtime.clock.RETRY_BACKOFF_SECONDS", 0.0)
    (tmp_path / "src").mkdir()
    with Registry(tmp_path_factory.mktemp("registry")) as reg, FaultProxy(f"http://{reg.host}") as proxy:
        proxy.add(Rule("POST", r"/blobs/uploads/$", 502))
        proxy.add(Rule("PUT", r"/blobs/uploads/", 429, {"Retry-After": "0"}))
        with FakeGitHub() as github:
            publish(github, tmp_path, "b7001")
            code, report = cli_json(
                capsys, "mirror", "sync", "--dest", f"oci://{proxy.host}/fleet/llama.cpp", "--api-url",
                github.api_url, "--platform", "linux-x64", "--backend", "cpu",
            )  # fmt: skip
        assert code == 0, report
        assert [rule.used for rule in proxy.rules] == [1, 1], "both faults were met"
        assert len(proxy.requests("POST", r"/blobs/uploads/$")) >= 2
        home = tmp_path / "home"
        code, checked = cli_json(
            capsys, "check", "--home", str(home), "--api-url", f"oci://{proxy.host}/fleet/llama.cpp"
        )
        assert code == 0 and checked["latest"] == "b7001", checked
