"""An install's facts are frozen: a later step adds to a copy, never to what an earlier step decided."""

from __future__ import annotations

import dataclasses

import pytest

from llama_runtime.updater.verify.install_facts import InstallFacts
from llama_runtime.updater.verify.provenance import Provenance, record_each_provenance

COMPANION = "cudart-llama-bin-win-cuda-12.4-x64.zip"


def downloaded() -> InstallFacts:
    return InstallFacts(
        repo="ggml-org/llama.cpp",
        tag="b7001",
        backend="cuda",
        backend_request="auto",
        asset="llama-b7001-bin-win-cuda-12.4-x64.zip",
        source="download",
        reason="the newest build",
        size=10,
        sha256="a" * 64,
        extra_assets=({"name": COMPANION, "size": 5, "sha256": "b" * 64, "provenance": {"status": "claimed"}},),
    )


def test_facts_cannot_be_changed_in_place() -> None:
    facts = downloaded()
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.sha256 = "c" * 64  # type: ignore[misc]


def test_recording_provenance_leaves_the_earlier_facts_and_their_entries_as_they_were() -> None:
    before = downloaded()
    entry_before = dict(before.extra_assets[0])
    after = record_each_provenance(before, [(COMPANION, Provenance("verified", "attested"))])
    assert after.extra_assets[0]["provenance"] == Provenance("verified", "attested").to_marker()
    assert before.extra_assets[0] == entry_before
    assert dataclasses.replace(after, extra_assets=before.extra_assets) == before


def test_an_unjudged_companion_loses_a_claimed_provenance_in_the_new_facts_only() -> None:
    before = downloaded()
    after = record_each_provenance(before, [])
    assert "provenance" not in after.extra_assets[0]
    assert before.extra_assets[0]["provenance"] == {"status": "claimed"}


def test_an_updates_identity_is_typed_on_the_way_in() -> None:
    identity = {
        "release_version": "",
        "channel": "nightly",
        "attempts": ({"asset": "x.zip", "outcome": "failed"},),
        "explicit_backend": True,
        "allow_no_device": False,
    }
    facts = downloaded().with_identity(identity)
    assert (facts.release_version, facts.channel, facts.explicit_backend, facts.allow_no_device) == (
        None,
        "nightly",
        True,
        False,
    )
    assert facts.attempts == ({"asset": "x.zip", "outcome": "failed"},)
    assert downloaded().with_identity(None) == downloaded()
