"""Release tag parsing, ordering and validation."""

from __future__ import annotations

import pytest

from llama_runtime import UserInputError
from llama_runtime.updater.release.tags import compare_tags, is_upgrade, parse_tag, validate_tag


@pytest.mark.parametrize(
    ("tag", "build", "scheme", "decoration"),
    [
        ("b7000", 7000, "upstream", None),
        ("b10018", 10018, "upstream", None),
        ("b9596-mix-e6f2453", 9596, "mix", "mix-e6f2453"),
        ("b10018-1.3.0", 10018, "semver", "1.3.0"),
        ("master-b4000-1a2b3c4", 4000, "branch", "master-1a2b3c4"),
        ("b7000-rc1", 7000, "decorated", "rc1"),
        ("llama-prebuilt-master-1f1aaa4", None, "prebuilt", None),
        ("nightly", None, "other", None),
    ],
)
def test_tag_forms_parse_to_build_and_scheme(tag: str, build: int | None, scheme: str, decoration: str | None) -> None:
    parsed = parse_tag(tag)
    assert (parsed.build, parsed.scheme, parsed.decoration) == (build, scheme, decoration)
    assert parsed.tag == tag


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("b9999", "b10000"),  # integer order, not string order
        ("b7000", "b7001"),
        ("b7000", "b7000-mix-abcdef1"),  # decorated rebuild beats its bare base
        ("b10018", "b10018-1.3.0"),
        ("b10018-1.3.0", "b10018-1.10.0"),  # semver decorations compare as versions
        ("b7000-mix-abcdef1", "b7001"),
    ],
)
def test_newer_tag_is_an_upgrade_and_never_the_reverse(older: str, newer: str) -> None:
    assert is_upgrade(older, newer)
    assert not is_upgrade(newer, older)


def test_same_tag_is_not_an_upgrade() -> None:
    assert not is_upgrade("b7000", "b7000")


def test_two_hash_decorations_of_one_build_are_unorderable() -> None:
    a, b = parse_tag("b7000-mix-aaaaaaa"), parse_tag("b7000-mix-bbbbbbb")
    assert compare_tags(a, b) is None
    assert not is_upgrade(a, b)
    assert not is_upgrade(b, a)


def test_prebuilt_hash_tag_is_never_an_upgrade_either_way() -> None:
    assert not is_upgrade("b7000", "llama-prebuilt-master-1f1aaa4")
    assert not is_upgrade("llama-prebuilt-master-1f1aaa4", "b7000")


def test_anything_is_an_upgrade_when_nothing_is_installed() -> None:
    assert is_upgrade(None, "b2500")


@pytest.mark.parametrize(
    "bad", ["", "   ", "b70 00", "b7000/../x", "../b7000", "a..b", "b7000\\x", "-b7000", "b7000;rm"]
)
def test_malformed_tag_is_refused_with_an_example(bad: str) -> None:
    with pytest.raises(UserInputError) as caught:
        validate_tag(bad)
    assert caught.value.exit_code == 2
    assert "b7000" in caught.value.message


def test_surrounding_whitespace_is_trimmed_from_a_tag() -> None:
    assert validate_tag(" b7000\n") == "b7000"


def test_overlong_tag_is_refused() -> None:
    with pytest.raises(UserInputError):
        parse_tag("b" + "1" * 200)
