"""Attestation bundles listed by ``bundle_url``: the fetch, the snappy decoding, and the decision.

Payloads are compressed with real snappy (cramjam's compressor, through
tests/fakegithub.py ``snappy_payload``); the bundle is the real Sigstore staging
bundle of tests/data/sigstore. End-to-end installs through such answers are in
tests/test_provenance_e2e.py, mirrors in tests/test_provenance_offline.py.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from llama_runtime import RemoteError
from llama_runtime.errors import NetworkError, ProvenanceMissingError, RemoteDataError
from llama_runtime.updater.sources import bundle_url
from llama_runtime.updater.sources.bundle_url import (
    ResolvedAttestations,
    bundle_url_refusal,
    decode_bundle_payload,
    resolve_bundle_urls,
)
from llama_runtime.updater.sources.github import GitHubClient
from llama_runtime.updater.verify.provenance import Provenance, ProvenanceCheck, read_listing
from tests.fakegithub import (
    BUNDLE_URL_SIGNATURE,
    RELEASE_PREDICATE,
    FakeGitHub,
    Fault,
    release_attestation,
    snappy_payload,
)
from tests.test_provenance import ATTESTED, BEACON, beacon_check

DATA = Path(__file__).parent / "data" / "sigstore"
REPO = "ggml-org/llama.cpp"
SHA = "ab" * 32
#: A snappy block whose length preamble claims 1 GiB (varint 80 80 80 80 04 = 2^30), then junk.
BOMB = b"\x80\x80\x80\x80\x04" + b"\x00\x01" * 32


def real_bundle() -> dict[str, Any]:
    bundle: dict[str, Any] = json.loads((DATA / "a.dsse.staging-rekor-v2.txt.sigstore.json").read_text())
    return bundle


@pytest.fixture
def no_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the decoder is reached: a size refusal must come before any allocation."""

    def refuse(*_args: object, **_kwargs: object) -> bytes:
        raise AssertionError("the decoder ran before the size check")

    monkeypatch.setattr(bundle_url, "_cramjam_decode", refuse)


# -- decoding ----------------------------------------------------------------------------


@pytest.mark.parametrize("framing", ["block", "framed", "json"])
def test_block_framed_and_plain_json_payloads_decode_to_the_bundle(framing: str) -> None:
    decoded = decode_bundle_payload(snappy_payload(real_bundle(), framing))
    assert json.loads(decoded) == real_bundle()


@pytest.mark.usefixtures(no_decoder.__name__)
def test_block_claiming_1_gib_is_refused_before_the_decoder_allocates() -> None:
    with pytest.raises(RemoteDataError) as caught:
        decode_bundle_payload(BOMB)
    assert "declares 1073741824 bytes once decoded, more than the 16 MiB" in caught.value.message


@pytest.mark.usefixtures(no_decoder.__name__)
def test_framed_stream_whose_chunks_add_up_past_the_cap_is_refused_before_decoding() -> None:
    chunk = b"\x00" + (4 + 3 + 4).to_bytes(3, "little") + b"\0\0\0\0" + b"\x80\x80\x04" + b"\0" * 4  # claims 65536
    stream = b"\xff\x06\x00\x00sNaPpY" + chunk * 3
    with pytest.raises(RemoteDataError) as caught:
        decode_bundle_payload(stream, cap=2 * 65536)
    assert "declares 196608 bytes" in caught.value.message


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\xff\x06\x00\x00sNaPpY\x05\x01\x00\x00x", "reserved chunk type 0x05"),
        (b"\xff\x06\x00\x00sNaPpY\x00\x10\x00\x00abc", "cut short inside a chunk"),
        (b"\xff\x06\x00\x00sNaPpY\x01\x04\x00", "cut short inside a chunk header"),
        (b"\x80\x80\x80", "no valid length preamble"),
        (b"\x05\xff\xff\xff\xff\xff", "not valid snappy"),
    ],
)
def test_corrupt_payloads_are_refused_with_a_reason(payload: bytes, why: str) -> None:
    with pytest.raises(RemoteDataError) as caught:
        decode_bundle_payload(payload)
    assert why in caught.value.message


def test_framed_stream_with_a_wrong_checksum_is_refused() -> None:
    stream = bytearray(snappy_payload(real_bundle(), "framed"))
    stream[14] ^= 0xFF  # inside the first chunk's masked CRC-32C
    with pytest.raises(RemoteDataError, match="not valid snappy"):
        decode_bundle_payload(bytes(stream))


# -- which URLs may be fetched -----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "api", "refusal"),
    [
        ("https://tmaproduction.blob.core.windows.net/a/1.json.sn?sig=x", "https://api.github.com", None),
        ("http://localhost:9/a.json.sn", "http://127.0.0.1:8/api", None),
        ("http://localhost:9/a.json.sn", "https://api.github.com", "only https"),
        ("http://blob.example/a.json.sn", "http://127.0.0.1:8/api", "only https"),
        ("ftp://blob.example/a.json.sn", "https://api.github.com", "only https"),
        ("https://user:pw@blob.example/a.json.sn", "https://api.github.com", "user information"),
        ("/attestations/1.json.sn", "https://api.github.com", "not an absolute URL"),
        ("https://blob.example/a.json.sn", "file://localhost/srv/mirror", "stores bundles inline"),
    ],
)
def test_only_https_urls_without_credentials_are_fetched_or_loopback_for_a_loopback_api(
    url: str, api: str, refusal: str | None
) -> None:
    found = bundle_url_refusal(url, api)
    assert (found is None) if refusal is None else (found is not None and refusal in found)


def test_resolving_drops_the_url_and_records_each_failure() -> None:
    answer = {
        "attestations": [
            {"bundle": None, "bundle_url": "https://b/1.json.sn?sig=s", "repository_id": 1},
            {"bundle": None, "bundle_url": "https://b/2.json.sn?sig=s", "repository_id": 1},
            {"bundle": {"verificationMaterial": {}}, "bundle_url": None},
        ]
    }

    def fetch(url: str, budget: int) -> tuple[dict[str, Any], int]:
        if "2.json" in url:
            raise RemoteError("the attestation bundle https://b/2.json.sn?… could not be fetched (HTTP 403)")
        return real_bundle(), 9000

    resolved = resolve_bundle_urls(answer, fetch)
    assert resolved.answer == {
        "attestations": [{"bundle": real_bundle(), "repository_id": 1}, answer["attestations"][2]]
    }
    assert resolved.failures == ("the attestation bundle https://b/2.json.sn?… could not be fetched (HTTP 403)",)


def test_one_answer_shares_one_decoded_byte_budget() -> None:
    budgets: list[int] = []

    def fetch(url: str, budget: int) -> tuple[dict[str, Any], int]:
        budgets.append(budget)
        return real_bundle(), 10 * 1024 * 1024

    entry = {"bundle": None, "bundle_url": "https://b/x.json.sn"}
    resolve_bundle_urls({"attestations": [entry, entry]}, fetch)
    assert budgets == [16 * 1024 * 1024, 6 * 1024 * 1024]


# -- through the client and the fake ---------------------------------------------------------


def test_client_fetches_bundle_urls_without_the_token_or_github_headers(github: FakeGitHub) -> None:
    github.add_attestation(REPO, SHA, real_bundle(), by_url=True)
    github.add_attestation(REPO, SHA, real_bundle(), by_url=True, framing="framed")
    with GitHubClient(github.api_url, REPO, token="t0k") as client:
        resolved = client.attestations(SHA)
    assert isinstance(resolved, ResolvedAttestations) and resolved.failures == ()
    assert isinstance(resolved.answer, dict)
    entries = resolved.answer["attestations"]
    assert [e["bundle"] for e in entries] == [real_bundle(), real_bundle()]
    assert all("bundle_url" not in e for e in entries)
    assert [r.headers.get("authorization") for r in github.requests_to("api", "/attestations/")] == ["Bearer t0k"]
    blob = github.requests_to("blob", "/attestations/")
    assert [r.status for r in blob] == [200, 200]
    for request in blob:
        assert "authorization" not in request.headers
        assert not any(name.startswith("x-github") for name in request.headers)
        assert "github" not in request.headers.get("accept", "")


def test_a_failing_blob_is_a_redacted_failure_of_that_entry(github: FakeGitHub) -> None:
    path = github.add_attestation(REPO, SHA, real_bundle(), by_url=True)
    assert path is not None
    github.inject(path, Fault(status=403))
    with GitHubClient(github.api_url, REPO) as client:
        resolved = client.attestations(SHA)
    assert isinstance(resolved, ResolvedAttestations)
    (failure,) = resolved.failures
    assert "could not be fetched (HTTP 403)" in failure and "json.sn?…" in failure
    assert BUNDLE_URL_SIGNATURE not in failure


def test_httpx_request_log_lines_carry_no_signature(github: FakeGitHub, caplog: pytest.LogCaptureFixture) -> None:
    github.add_attestation(REPO, SHA, real_bundle(), by_url=True)
    caplog.set_level(logging.DEBUG)  # an embedding application that logs everything
    with GitHubClient(github.api_url, REPO) as client:
        client.attestations(SHA)
    requests = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert any("/attestations/" in line and ".json.sn?…" in line for line in requests), requests
    assert BUNDLE_URL_SIGNATURE not in caplog.text


# -- the decision ----------------------------------------------------------------------------


def test_release_attestations_are_set_aside_and_provenance_decides() -> None:
    answer = {"attestations": [{"bundle": release_attestation(REPO, SHA)}, {"bundle": real_bundle()}]}
    listing = read_listing(answer, REPO)
    assert listing.provenance == [real_bundle()]
    assert listing.other_kinds == [RELEASE_PREDICATE]
    assert listing.problems == []


def test_only_a_release_attestation_is_absent_and_says_what_was_set_aside() -> None:
    answer = {"attestations": [{"bundle": release_attestation(REPO, SHA)}]}
    result = ProvenanceCheck().evaluate_answer("x.tar.gz", SHA, REPO, answer)
    assert result.status == "absent"
    assert f"(only attestations of another kind: {RELEASE_PREDICATE})" in result.reason


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"attestations": "none"}, "holds no list of attestations"),
        ({"message": "Moved"}, "is not a list of attestations"),
        ("surprise", "is not a list of attestations"),
        ({"attestations": [{"bundle": None, "bundle_url": None}]}, "with neither a bundle nor a bundle_url"),
        ({"attestations": [{"bundle": None, "bundle_url": "https://b/x.json.sn"}]}, "by bundle_url that were not"),
        (ResolvedAttestations({"attestations": []}, ("the bundle could not be fetched",)), "could not be fetched"),
    ],
)
def test_a_wrong_shaped_200_is_unverified_never_absent_and_refused_when_required(answer: object, why: str) -> None:
    result = ProvenanceCheck().evaluate_answer("x.tar.gz", SHA, REPO, answer)
    assert result.status == "unverified" and why in result.reason
    with pytest.raises(ProvenanceMissingError) as caught:
        ProvenanceCheck(require=True).evaluate_answer("x.tar.gz", SHA, REPO, answer)
    assert caught.value.exit_code == 8 and why in caught.value.message


def test_no_attestation_at_all_is_still_absent() -> None:
    answers: list[object] = [[], {"attestations": []}, ResolvedAttestations({"attestations": []})]
    for answer in answers:
        result = ProvenanceCheck().evaluate_answer("x.tar.gz", SHA, REPO, answer)
        assert result == Provenance("absent", f"{REPO} publishes no build attestation for x.tar.gz")


def test_more_entries_by_url_than_the_cap_are_not_fetched_and_inline_ones_are_kept() -> None:
    asked: list[str] = []

    def fetch(url: str, budget: int) -> tuple[dict[str, Any], int]:
        asked.append(url)
        return real_bundle(), 1

    by_url = [{"bundle": None, "bundle_url": f"https://b/{i}.json.sn"} for i in range(bundle_url.MAX_BUNDLE_URLS + 2)]
    inline = {"bundle": real_bundle()}
    resolved = resolve_bundle_urls({"attestations": [*by_url, inline]}, fetch)
    assert len(asked) == bundle_url.MAX_BUNDLE_URLS
    assert isinstance(resolved.answer, dict) and resolved.answer["attestations"][-1] == inline
    assert resolved.failures == (
        f"more than {bundle_url.MAX_BUNDLE_URLS} attestations listed by bundle_url; the rest were not fetched",
    )


def fetch_direct(github: FakeGitHub, path: str, *, seconds: float = 60.0) -> tuple[dict[str, Any], int]:
    blob_id = int(path.removeprefix("/attestations/").removesuffix(".json.sn"))
    with GitHubClient(github.api_url, REPO) as client:
        return bundle_url.fetch_bundle(
            client.net,
            github.bundle_url(blob_id),
            api_url=github.api_url,
            budget=bundle_url.MAX_BUNDLE_BYTES,
            give_up_at=time.monotonic() + seconds,
            deadline_s=seconds,
        )


def test_a_blob_that_drips_past_the_deadline_is_given_up(github: FakeGitHub) -> None:
    path = github.add_attestation(REPO, SHA, real_bundle(), by_url=True, framing="json")
    assert path is not None
    github.inject(path, Fault(drip_seconds=0.05, drip_chunk=256))
    started = time.monotonic()
    with pytest.raises(NetworkError) as caught:
        fetch_direct(github, path, seconds=0.5)
    assert time.monotonic() - started < 5
    assert "took longer than 0.5 s" in caught.value.message and BUNDLE_URL_SIGNATURE not in caught.value.message


def test_a_redirect_from_the_blob_host_is_not_followed(github: FakeGitHub) -> None:
    path = github.add_attestation(REPO, SHA, real_bundle(), by_url=True)
    assert path is not None
    github.inject(path, Fault(redirect_loop=True))
    with pytest.raises(RemoteError, match=r"could not be fetched \(HTTP 302\)"):
        fetch_direct(github, path)
    assert len(github.requests_to("blob", "/attestations/")) == 1


@pytest.mark.parametrize("framing", ["block", "framed", "json"])
def test_a_bundle_url_answer_verifies_exactly_like_the_same_bundle_inline(framing: str) -> None:
    results: list[Provenance] = []
    for by_url in (False, True):
        with FakeGitHub() as hub:
            hub.add_attestation(BEACON, ATTESTED, real_bundle(), by_url=by_url, framing=framing)
            hub.add_release_attestation(BEACON, ATTESTED, by_url=by_url)
            with GitHubClient(hub.api_url, BEACON) as client:
                answer = client.attestations(ATTESTED)
        results.append(beacon_check().evaluate_answer("a.txt", ATTESTED, BEACON, answer))
    inline, by_url_result = results
    assert inline.status == "verified"
    assert by_url_result == inline and by_url_result.bundle == inline.bundle == real_bundle()
