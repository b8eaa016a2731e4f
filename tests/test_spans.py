"""The update's phase spans (what ``scripts/bench.py --breakdown`` prints): off unless collected, and
every phase of a real update recorded, in the order the update runs them, when they are.

Nothing here reads a duration: the order of events and the names recorded are what is checked.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from llama_runtime.runtime import spans
from tests.fakegithub import FakeGitHub
from tests.helpers import CPU_TAR, REPO, run_json, stand_in_tarball

#: The main thread's phases of an update of a .tar.gz, in the order they run.
PHASES = ("resolve", "download", "provenance", "extract", "verify", "fsync tree", "marker", "switch", "trim")


@pytest.fixture(autouse=True)
def not_collecting() -> Iterator[None]:
    spans.stop_collecting()
    yield
    spans.stop_collecting()


def test_spans_and_tallies_record_nothing_unless_a_caller_collects() -> None:
    with spans.span("before"):
        pass
    started = spans.timer()
    spans.tally("before", started)
    collected = spans.collect()
    with spans.span("during"):
        spans.tally("during", spans.timer())
    spans.stop_collecting()
    with spans.span("after"):
        pass

    assert started is None
    assert [s.name for s in collected.spans] == ["during"]
    assert collected.spans[0].end >= collected.spans[0].start
    assert list(collected.tallies) == ["during"] and collected.counts == {"during": 1}


def test_an_update_records_every_phase_in_order_when_collected(
    capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path
) -> None:
    archive = stand_in_tarball(tmp_path / "b7001.tar.gz", tag="b7001", libs=("ggml", "llama"))
    github.add_release(REPO, "b7001", {CPU_TAR.format(tag="b7001"): archive})
    collected = spans.collect()

    code, payload = run_json(capsys, tmp_path / "home", github.api_url, "update", "--tag", "b7001", "--backend", "cpu")

    assert code == 0, payload
    main_thread = sorted((s for s in collected.spans if s.name in PHASES), key=lambda s: s.start)
    assert [s.name for s in main_thread] == list(PHASES)
    assert all(a.end <= b.start for a, b in itertools.pairwise(main_thread))
    assert "binary run" in {s.name for s in collected.spans}  # the verification runs
    # The extraction that followed the download: inflating, writing and hashing each file.
    assert {"inflate+input", "input", "write", "hash files"} <= set(collected.tallies)
