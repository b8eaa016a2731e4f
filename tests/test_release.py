"""Release/Asset records from GitHub JSON: validation and the published digest."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from llama_runtime import IntegrityError, RemoteError
from llama_runtime.updater.release.release import parse_asset, parse_release

SHA = hashlib.sha256(b"llama").hexdigest()


def asset_json(name: str = "llama-b7000-bin-ubuntu-x64.tar.gz", **extra: Any) -> dict[str, Any]:
    return {"name": name, "size": 1234, "browser_download_url": f"https://example/{name}", **extra}


def test_sha256_digest_is_exposed_as_lowercase_hex() -> None:
    asset = parse_asset(asset_json(digest="sha256:" + SHA.upper()))
    assert (asset.sha256, asset.digest_problem) == (SHA, None)


def test_missing_or_null_digest_means_no_digest_published() -> None:
    for payload in (asset_json(), asset_json(digest=None)):
        asset = parse_asset(payload)
        assert (asset.digest, asset.sha256, asset.digest_problem) == (None, None, None)


@pytest.mark.parametrize(
    "digest",
    ["sha512:" + "ab" * 64, "sha256:" + "Z" * 64, "sha256:" + SHA[:-1], SHA, "", "md5:d41d8cd9"],
)
def test_published_digest_that_is_not_a_sha256_refuses_instead_of_passing_for_none(digest: str) -> None:
    asset = parse_asset(asset_json(digest=digest))
    assert asset.digest == digest
    assert asset.digest_problem is not None
    with pytest.raises(IntegrityError) as err:
        _ = asset.sha256
    assert err.value.exit_code == 8
    assert err.value.message.startswith(f"{asset.name} publishes a digest this version cannot check (")
    assert err.value.message.endswith("refusing to install it unverified.")


def test_non_string_digest_is_kept_as_unverifiable_not_dropped() -> None:
    asset = parse_asset(asset_json(digest={"sha256": SHA}))
    with pytest.raises(IntegrityError, match="cannot check"):
        _ = asset.sha256


def test_release_with_one_unreadable_digest_keeps_its_other_assets_usable() -> None:
    odd = asset_json("llama-b7000-bin-ubuntu-vulkan-x64.tar.gz", digest="sha512:" + "ab" * 64)
    fine = asset_json(digest=f"sha256:{SHA}")
    release = parse_release(
        "ggml-org/llama.cpp", {"tag_name": "b7000", "assets": [odd, fine, asset_json("x", digest=7)]}
    )
    assert len(release.assets) == 3
    good = release.asset(fine["name"])
    assert good is not None and good.sha256 == SHA


def test_huge_unreadable_digest_is_quoted_shortened() -> None:
    asset = parse_asset(asset_json(digest="sha512:" + "f" * 10_000))
    with pytest.raises(IntegrityError) as err:
        _ = asset.sha256
    assert len(err.value.message) < 300


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ("<html>rate limited</html>", "expected a JSON object"),
        ({"assets": []}, "no valid 'tag_name'"),
        ({"tag_name": "b7000", "assets": {}}, "has no asset list"),
        ({"tag_name": "b7000", "assets": [asset_json(size=-1)]}, "negative size"),
        ({"tag_name": "b7000", "assets": [asset_json(size=True)]}, "no valid 'size'"),
    ],
)
def test_malformed_release_json_is_a_remote_error(payload: object, fragment: str) -> None:
    with pytest.raises(RemoteError, match=fragment):
        parse_release("ggml-org/llama.cpp", payload)
