"""The pure rules behind a hostile release server's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_runtime.errors import RemoteDataError
from llama_runtime.updater.credentials import redact_text, redact_url, token_for
from llama_runtime.updater.release.release import (
    check_asset_name,
    check_tag,
    is_valid_remote_tag,
    path_inside,
)
from llama_runtime.updater.release.remote_json import loads_bounded


@pytest.mark.parametrize(
    ("tag", "valid"),
    [
        ("b7000", True),
        ("b9596-mix-e6f2453", True),
        ("b10018-1.3.0", True),
        ("master-b7000-1a2b3c4", True),
        ("v1.2.3", True),
        ("llama-prebuilt-master-1a2b3c4", True),
        ("../b7000", False),
        ("b7000/../../x", False),
        ("nightly", False),
        ("b7000\x1b[31m", False),
        (" b7000", False),
        ("b" + "1" * 200, False),
        (7000, False),
    ],
)
def test_tag_grammar(tag: object, valid: bool) -> None:
    assert is_valid_remote_tag(tag) is valid
    if not valid:
        with pytest.raises(RemoteDataError):
            check_tag(tag)


@pytest.mark.parametrize("name", ["..", ".hidden", "a/b", "a\\b", "", "x" * 256, "a b.zip", "ok..zip", None])
def test_asset_names_must_be_plain_file_names(name: object) -> None:
    with pytest.raises(RemoteDataError):
        check_asset_name(name, tag="b7000")


def test_path_inside_refuses_every_name_that_leaves_the_directory(tmp_path: Path) -> None:
    assert path_inside(tmp_path, "a.part") == tmp_path / "a.part"
    for name in ("..", ".", "", "../x", "x/../../y", "/etc/passwd", "a\x00b"):
        with pytest.raises(RemoteDataError):
            path_inside(tmp_path, name)


def test_json_depth_bound_is_checked_below_the_parser_limit() -> None:
    assert loads_bounded(b'{"a": [{"b": 1}]}', what="x") == {"a": [{"b": 1}]}
    with pytest.raises(RemoteDataError):
        loads_bounded(b"[" * 65 + b"]" * 65, what="x")


@pytest.mark.parametrize(
    ("api_url", "env", "expected"),
    [
        ("https://api.github.com", {"GITHUB_TOKEN": "gh"}, "gh"),
        ("https://api.github.com", {"GH_TOKEN": "gh2"}, "gh2"),
        ("https://api.github.com:443", {"GITHUB_TOKEN": "gh"}, "gh"),
        ("https://mirror.example", {"GITHUB_TOKEN": "gh"}, None),
        ("http://api.github.com", {"GITHUB_TOKEN": "gh"}, None),
        ("https://ghe.example/api/v3", {"LLAMA_RUNTIME_GITHUB_TOKEN": "own"}, "own"),
        ("http://127.0.0.1:8080/api", {"LLAMA_RUNTIME_GITHUB_TOKEN": "own"}, "own"),
        ("http://[::1]:8080/api", {"LLAMA_RUNTIME_GITHUB_TOKEN": "own"}, "own"),
        ("http://mirror.example/api", {"LLAMA_RUNTIME_GITHUB_TOKEN": "own"}, None),
        ("http://127.0.0.1.evil.example/api", {"LLAMA_RUNTIME_GITHUB_TOKEN": "own"}, None),
        ("https://api.github.com", {"LLAMA_RUNTIME_GITHUB_TOKEN": "own", "GITHUB_TOKEN": "gh"}, "own"),
    ],
)
def test_token_policy_of_the_contract(api_url: str, env: dict[str, str], expected: str | None) -> None:
    assert token_for(api_url, env) == expected


def test_redact_url_drops_user_info_and_query() -> None:
    assert redact_url("https://u:p@host:8/x/y?X-Amz-Signature=abc") == "https://host:8/x/y?…"
    assert redact_url("not a url") == "not a url"
    assert redact_text("see https://t@h/a?sig=1 and more") == "see https://h/a?… and more"
