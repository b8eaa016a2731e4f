"""One of each: the state-file record helper, the retry schedule, the disk-full set and the clock seam."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import pytest

from llama_runtime.runtime.clock import RETRY_ATTEMPTS, epoch_of, tries, utc_iso
from llama_runtime.runtime.fsutil import (
    DISK_FULL_ERRNOS,
    MAX_RECORD_DEPTH,
    DamagedRecordError,
    flag,
    integer,
    is_disk_full,
    mapping,
    number,
    parse_record,
    pread,
    pwrite,
    read_record,
    text,
    write_record,
)
from llama_runtime.runtime.lock import UpdateLock
from llama_runtime.updater.fetch.ranges import Span, data_path, load_record, save_record, state_path
from tests.fakeclock import FakeClock


def test_written_record_reads_back_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "state" / "gate.json"
    write_record(path, {"enabled": True, "timeout": 30})
    assert read_record(path) == {"enabled": True, "timeout": 30}
    assert [p.name for p in path.parent.iterdir()] == ["gate.json"]


def test_record_over_its_bound_is_damaged_not_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "failed-builds.json"
    path.write_text(json.dumps({"failed": ["x" * 200]}))
    with pytest.raises(DamagedRecordError, match="larger than 100 bytes"):
        read_record(path, max_bytes=100)


def test_small_record_read_under_the_large_default_bound_allocates_little(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "active.json"
    write_record(path, {"active": "a", "previous": None})
    tracemalloc.start()
    try:
        assert read_record(path) == {"active": "a", "previous": None}
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024  # not the 64 MiB bound: read(n) allocates n up front


def test_record_whose_size_is_not_known_up_front_is_read_in_steps_to_the_end() -> None:
    import threading

    from llama_runtime.runtime.fsutil import _read_at_most

    read_fd, write_fd = os.pipe()  # fstat says 0 bytes, as for a file that is still growing
    body = json.dumps({"k": "x" * 300_000}).encode()

    def feed() -> None:
        with os.fdopen(write_fd, "wb") as handle:
            handle.write(body)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        with os.fdopen(read_fd, "rb") as handle:
            assert json.loads(_read_at_most(handle, 1024 * 1024)) == {"k": "x" * 300_000}
    finally:
        writer.join(timeout=10)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFO")
def test_a_record_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    from llama_runtime.runtime.fsutil import NotRegularFileError

    path = tmp_path / "etags.json"
    os.mkfifo(path)  # no writer: opening it for reading would block forever
    with pytest.raises(NotRegularFileError, match="not a regular file"):
        read_record(path)


def test_record_nested_too_deep_is_damaged_not_a_recursion_error(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DamagedRecordError, match="levels deep"):
        read_record(deep)
    with pytest.raises(DamagedRecordError, match="levels deep"):
        parse_record(b"[" * (MAX_RECORD_DEPTH + 1) + b"]" * (MAX_RECORD_DEPTH + 1))
    assert parse_record(b"[" * MAX_RECORD_DEPTH + b"]" * MAX_RECORD_DEPTH) is not None


@pytest.mark.parametrize("raw", [b"{not json", b"\xff\xfe\x00garbage", b""])
def test_damaged_record_is_a_json_decode_error_so_each_readers_damaged_branch_still_applies(raw: bytes) -> None:
    with pytest.raises(json.JSONDecodeError):
        parse_record(raw)
    with pytest.raises(ValueError):
        parse_record(raw)


def test_missing_record_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_record(tmp_path / "absent.json")


def test_typed_getters_read_a_field_of_the_wrong_type_as_absent() -> None:
    payload = {"s": "x", "i": 3, "f": 1.5, "b": True, "m": {"k": 1}, "n": None}
    assert (text(payload, "s"), text(payload, "i")) == ("x", None)
    assert (integer(payload, "i"), integer(payload, "b"), integer(payload, "f")) == (3, None, None)
    assert (number(payload, "f"), number(payload, "i"), number(payload, "b"), number(payload, "s")) == (
        1.5,
        3.0,
        None,
        None,
    )
    assert (flag(payload, "b"), flag(payload, "i")) == (True, None)
    assert (mapping(payload, "m"), mapping(payload, "s"), mapping(payload, "absent")) == ({"k": 1}, None, None)


def test_range_record_is_written_atomically_and_read_back(tmp_path: Path) -> None:
    partial = tmp_path / "a.tar.gz.part"
    data_path(partial).write_bytes(b"\0" * 10)
    save_record(partial, "https://x/a", 10, '"etag"', [Span(0, 10, 4)])
    assert load_record(partial, "https://x/a", 10) == ([Span(0, 10, 4)], '"etag"')
    assert sorted(tmp_path.iterdir()) == sorted([data_path(partial), state_path(partial)])


def test_retry_schedule_tries_three_times_waiting_one_then_two_seconds() -> None:
    waits: list[float] = []
    lasts = list(tries(waits.append))
    assert RETRY_ATTEMPTS == 3
    assert lasts == [False, False, True]
    assert waits == [1.0, 2.0]


def test_retry_schedule_waits_nothing_when_the_first_try_succeeds() -> None:
    waits: list[float] = []
    for _last in tries(waits.append, attempts=5):
        break
    assert waits == []


@pytest.mark.parametrize("code", sorted(DISK_FULL_ERRNOS))
def test_each_disk_full_errno_is_disk_full(code: int) -> None:
    assert is_disk_full(OSError(code, os.strerror(code)))
    assert not is_disk_full(OSError(errno.EACCES, "denied"))
    assert errno.ENOSPC in DISK_FULL_ERRNOS


def test_lock_owner_since_comes_from_the_clock_seam(tmp_path: Path) -> None:
    lock = UpdateLock(tmp_path / "locks" / "update.lock", clock=FakeClock(1234.5))
    with lock.hold("update"):
        owner = lock.owner()
    assert owner is not None
    assert owner.since == 1234.5


def test_install_stamp_converts_back_to_its_epoch_to_the_millisecond() -> None:
    assert epoch_of(utc_iso(1_764_547_200.123)) == pytest.approx(1_764_547_200.123, abs=1e-3)
    with pytest.raises(ValueError):
        epoch_of("yesterday")


@pytest.mark.parametrize("platform", [sys.platform, "win32"])
def test_positioned_reads_and_writes_work_where_os_has_no_pread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, platform: str
) -> None:
    """Windows has no ``os.pread``/``os.pwrite``: the ranged download's writes and the follower's reads
    go through the emulation there, and neither moves what the other reads."""
    monkeypatch.setattr(sys, "platform", platform)
    path = tmp_path / "data"
    path.write_bytes(b"\0" * 8)
    fd = os.open(path, os.O_RDWR | getattr(os, "O_BINARY", 0))
    try:
        assert pwrite(fd, b"cd", 2) == 2
        assert pwrite(fd, b"ab", 0) == 2
        assert pread(fd, 4, 0) == b"abcd"
        assert pread(fd, 8, 6) == b"\0\0"
    finally:
        os.close(fd)
