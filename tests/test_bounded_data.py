"""Data can only produce documented exits.

Every JSON read is bounded in size and depth (error bodies too), every number
parsed from text is bounded in digits, and a FIFO or device where a file is
expected is refused instead of waited on. A damaged state file is either
authoritative (the pointer, a marker: ``corrupt_state``, exit 6, naming the
repair) or a cache or record the tool rebuilds (set aside as ``NAME.damaged``
with a warning); no verb exits 1 on either, and ``doctor --repair`` and
``update`` are never wedged by one. Each failure leaves the previously active
runtime unchanged and running.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from llama_runtime.errors import RemoteDataError
from llama_runtime.runtime.fsutil import NotRegularFileError, decimal, read_cache, read_regular
from llama_runtime.updater.fetch.download import download_name
from llama_runtime.updater.release.manifest import parse_manifest
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers import CPU_TAR, REPO, HomeGuard, assert_status_active, cli_process, publish_stand_in, run_json

#: 1,500 levels: past the interpreter's recursion limit, as the attack wrote them.
DEEP = b"[" * 1500 + b"]" * 1500
#: Every exit the contract documents (docs/cli-contract.md "Exit codes") but 1.
DOCUMENTED = {0, 2, 3, 4, 5, 6, 7, 8, 130}
LIST_PATH = f"/api/repos/{REPO}/releases"

fifo_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFO")


@pytest.fixture
def installed(capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path) -> Path:
    """A home with b7000 (previous) and b7001 (active), a job record, an ETag cache and a partial download."""
    home = tmp_path / "home"
    for tag in ("b7000", "b7001", "b7002"):
        publish_stand_in(github, tmp_path, tag)
    for tag in ("b7000", "b7001"):
        code, payload = run_json(capsys, home, github.api_url, "update", "--tag", tag, "--backend", "cpu")
        assert code == 0, payload
    assert run_json(capsys, home, None, "unpin")[0] == 0  # later updates ask for the newest build again
    return home


def _active_marker(home: Path) -> str:
    name = json.loads((home / "active.json").read_text())["active"]
    return f"runtimes/{name}/llama-runtime.json"


#: Every state file: name -> (path in the home, authoritative?). Caches and records are rebuilt.
STATE_FILES: dict[str, tuple[str, bool]] = {
    "pointer": ("active.json", True),
    "marker": ("MARKER", True),
    "current_job": ("jobs/current.json", False),
    "etags": ("cache/etags.json", False),
    "ratelimit": ("cache/ratelimit.json", False),
    "gate": ("gate.json", False),
    "server": ("server/server.json", False),
    "failed_builds": ("failed-builds.json", False),
    "lock_owner": ("locks/update.owner.json", False),
    "part_meta": ("PARTIAL.meta", False),
    "ranges": ("PARTIAL.ranges", False),
}


def _partial_of_b7002(home: Path) -> Path:
    """Where an update of b7002 keeps its partial download (named by the published sha256)."""
    data = (home.parent / "b7002.tar.gz").read_bytes()  # publish_stand_in wrote it beside the home
    name = download_name(hashlib.sha256(data).hexdigest(), CPU_TAR.format(tag="b7002"), repo=REPO, size=len(data))
    return home / "downloads" / name


def _state_path(home: Path, name: str) -> Path:
    relative = STATE_FILES[name][0]
    if relative.startswith("PARTIAL"):  # a partial download the record describes
        partial = _partial_of_b7002(home)
        partial.parent.mkdir(parents=True, exist_ok=True)
        data = (home.parent / "b7002.tar.gz").read_bytes()  # what an interrupted download left: its first bytes
        partial.write_bytes(data[:100])
        partial.with_name(partial.name + ".ranged").write_bytes(data[:100].ljust(len(data), b"\0"))
        return partial.with_name(partial.name + relative.removeprefix("PARTIAL"))
    path = home / (_active_marker(home) if relative == "MARKER" else relative)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.parametrize("name", list(STATE_FILES))
def test_deep_json_in_any_state_file_gives_documented_exits_and_never_wedges_the_repair(
    name: str, capsys: pytest.CaptureFixture[str], installed: Path, github: FakeGitHub
) -> None:
    path = _state_path(installed, name)
    path.write_bytes(DEEP)
    authoritative = STATE_FILES[name][1]
    frozen = HomeGuard(None, installed)
    for verb in (["status"], ["list"], ["which"], ["check"], ["doctor"], ["job", "status"], ["server", "status"]):
        code, payload = run_json(capsys, installed, github.api_url, *verb)
        assert code in DOCUMENTED, (verb, payload)
        if authoritative and verb == ["status"]:
            assert code == 6 and payload["error"]["code"] == "corrupt_state", payload
            assert "doctor --repair" in payload["error"]["hint"]
        elif not authoritative:
            assert code == 0, (verb, payload)
    frozen.assert_intact(None if authoritative else "b7001")
    for verb in (["gc", "--dry-run"], ["rollback"], ["gc"]):
        code, payload = run_json(capsys, installed, github.api_url, *verb)
        assert code in DOCUMENTED, (verb, payload)
    code, report = run_json(capsys, installed, github.api_url, "doctor", "--repair")
    assert code == 0, report
    code, payload = run_json(capsys, installed, github.api_url, "update", "--tag", "b7002", "--backend", "cpu")
    assert code == 0, payload
    assert_status_active(capsys, installed, "b7002")
    if not authoritative:  # set aside or rebuilt: no later verb reads those bytes again
        assert not path.exists() or path.read_bytes() != DEEP


@fifo_only
@pytest.mark.parametrize("name", ["pointer", "marker", "current_job", "etags", "server", "lock_owner", "part_meta"])
def test_a_fifo_in_place_of_a_state_file_is_refused_not_waited_on(
    name: str, capsys: pytest.CaptureFixture[str], installed: Path, github: FakeGitHub
) -> None:
    path = _state_path(installed, name)
    path.unlink(missing_ok=True)
    authoritative = STATE_FILES[name][1]
    frozen = HomeGuard(None, installed) if not authoritative else None  # the guard itself would read the FIFO
    os.mkfifo(path)  # no writer ever comes: an open for reading would block forever
    common = ["--home", str(installed), "--api-url", github.api_url, "--json"]
    for verb in (["status"], ["server", "status"], ["job", "status"], ["check"]):
        done = cli_process(*verb, *common, timeout=60)  # a hang fails here
        assert done.returncode in DOCUMENTED - {2}, (verb, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
    if frozen is not None:
        frozen.assert_intact("b7001")
    done = cli_process("doctor", "--repair", *common, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    done = cli_process("update", "--tag", "b7002", "--backend", "cpu", *common, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_status_active(capsys, installed, "b7002")


def test_a_damaged_cache_is_set_aside_with_a_warning_and_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "etags.json"
    path.write_bytes(DEEP)
    heard: list[str] = []
    assert read_cache(path, warn=heard.append) is None
    assert not path.exists() and (tmp_path / "etags.json.damaged").read_bytes() == DEEP
    assert len(heard) == 1 and "nests more than" in heard[0] and "etags.json.damaged" in heard[0]
    assert read_cache(path, warn=heard.append) is None and len(heard) == 1  # absent now: no second warning


@fifo_only
def test_reading_a_fifo_with_no_writer_returns_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "active.json"
    os.mkfifo(fifo)
    done = threading.Event()
    caught: list[BaseException] = []

    def read() -> None:
        try:
            read_regular(fifo, 1024)
        except BaseException as exc:
            caught.append(exc)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    if not done.wait(10):
        with fifo.open("wb"):  # unblock the reader so the test process can end
            pass
        pytest.fail("read_regular blocked on a FIFO")
    assert caught and isinstance(caught[0], NotRegularFileError)
    with pytest.raises(NotRegularFileError, match="directory"):
        read_regular(tmp_path, 1024)


# -- remote data ---------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [403, 429])
@pytest.mark.parametrize("verb", [["update", "--backend", "cpu"], ["check"], ["plan"]])
def test_a_rate_limit_answer_with_a_deeply_nested_body_is_a_network_error_not_exit_1(
    status: int, verb: list[str], capsys: pytest.CaptureFixture[str], installed: Path, github: FakeGitHub
) -> None:
    frozen = HomeGuard(None, installed)
    body = b'{"message": "rate limit", "x": ' + b"[" * 1500 + b"]" * 1500 + b"}"  # ~3 KB
    github.inject(f"{LIST_PATH}/latest", Fault(status=status, times=None, body=body))
    github.inject(LIST_PATH, Fault(status=status, times=None, body=body))
    code, payload = run_json(capsys, installed, github.api_url, *verb)
    assert code == 7, payload
    frozen.assert_intact("b7001", capsys=capsys)


def test_a_fork_manifest_with_a_5000_digit_sm_number_is_remote_data_that_breaks_the_rules() -> None:
    artifact = {"asset_name": "a.tar.gz", "install_kind": "linux-cuda", "min_sm": "8" * 5000}
    payload = {"schema_version": 1, "component": "llama.cpp", "upstream_tag": "b1", "artifacts": [artifact]}
    with pytest.raises(RemoteDataError, match="not an SM number"):
        parse_manifest(json.dumps(payload).encode(), "m")


def test_plan_for_a_host_file_with_huge_version_strings_plans_them_as_unknown(
    capsys: pytest.CaptureFixture[str], installed: Path, github: FakeGitHub, tmp_path: Path
) -> None:
    frozen = HomeGuard(None, installed)
    huge = "9" * 5000
    facts = {
        "os": "linux",
        "arch": "x64",
        "cuda_driver_version": f"{huge}.1",
        "nvidia_driver": huge,
        "glibc_version": f"2.{huge}",
        "vulkan_api_version": f"1.{huge}.0",
        "compute_capabilities": [f"{huge}.0"],
    }
    host = tmp_path / "host.json"
    host.write_text(json.dumps({"host": facts}))
    for backend in ("auto", "cuda", "cpu"):
        code, payload = run_json(capsys, installed, github.api_url, "plan", "--host", str(host), "--backend", backend)
        assert code in {0, 5}, payload
    frozen.assert_intact("b7001", capsys=capsys)


@pytest.mark.parametrize(
    ("variable", "value"),
    [("LLAMA_RUNTIME_SERVER_PORT", "8" * 5000), ("LLAMA_RUNTIME_PARALLEL_DOWNLOADS", "4" * 5000)],
)
def test_a_number_of_thousands_of_digits_in_a_setting_is_exit_2(
    variable: str,
    value: str,
    capsys: pytest.CaptureFixture[str],
    installed: Path,
    github: FakeGitHub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen = HomeGuard(None, installed)
    monkeypatch.setenv(variable, value)
    verb = ["server", "start"] if variable.endswith("PORT") else ["update", "--tag", "b7002", "--backend", "cpu"]
    code, payload = run_json(capsys, installed, github.api_url, *verb)
    assert code == 2, payload
    assert variable in payload["error"]["message"]
    monkeypatch.delenv(variable)
    frozen.assert_intact("b7001", capsys=capsys)


def test_decimal_takes_plain_ascii_digits_of_bounded_length_only() -> None:
    assert decimal(" 8080 ") == 8080
    assert decimal("9" * 20) == int("9" * 20)
    for bad in ("", "9" * 21, "8" * 5000, "²", "١٢", "-1", "1.0", "0x10"):
        assert decimal(bad) is None, bad


# -- local files named on the command line -------------------------------------------------------


def _named_archive(tmp_path: Path) -> Path:
    """b7002's stand-in archive (publish_stand_in wrote it) under upstream's asset name."""
    named = tmp_path / CPU_TAR.format(tag="b7002")
    shutil.copyfile(tmp_path / "b7002.tar.gz", named)
    return named


@fifo_only
def test_install_file_bundle_naming_a_fifo_is_exit_2_not_a_hang(
    capsys: pytest.CaptureFixture[str], installed: Path, tmp_path: Path
) -> None:
    frozen = HomeGuard(None, installed)
    archive = _named_archive(tmp_path)
    fifo = tmp_path / "bundle.jsonl"
    os.mkfifo(fifo)
    done = cli_process("install-file", str(archive), "--bundle", str(fifo), "--home", str(installed), "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not a regular file" in json.loads(done.stdout)["error"]["message"]
    frozen.assert_intact("b7001", capsys=capsys)


def test_install_file_bundle_of_deep_json_is_exit_2(
    capsys: pytest.CaptureFixture[str], installed: Path, tmp_path: Path
) -> None:
    frozen = HomeGuard(None, installed)
    bundle = tmp_path / "bundle.json"
    bundle.write_bytes(DEEP)
    code, payload = run_json(
        capsys, installed, None, "install-file", str(_named_archive(tmp_path)), "--bundle", str(bundle)
    )
    assert code == 2, payload
    assert "holds no Sigstore bundle" in payload["error"]["message"]
    frozen.assert_intact("b7001", capsys=capsys)


# -- the one bounded reader ----------------------------------------------------------------------

#: The modules allowed to call json.load(s) themselves: the bounded readers.
BOUNDED_READERS = {"runtime/fsutil.py", "updater/release/remote_json.py"}


def test_every_json_read_in_the_package_goes_through_a_bounded_reader() -> None:
    package = Path(__file__).resolve().parent.parent / "llama_runtime"
    calls: list[str] = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative in BOUNDED_READERS:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bjson\.loads?\(", line):
                calls.append(f"{relative}:{number}: {line.strip()}")
    assert calls == [], "read JSON through runtime.fsutil.parse_record/read_record/read_cache:\n" + "\n".join(calls)


# -- a typo in the provenance switch --------------------------------------------


def test_a_typo_in_require_provenance_warns_in_read_only_verbs_and_is_exit_2_where_builds_are_verified(
    capsys: pytest.CaptureFixture[str], installed: Path, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen = HomeGuard(None, installed)
    monkeypatch.setenv("LLAMA_RUNTIME_REQUIRE_PROVENANCE", "ture")
    for verb in (["status"], ["list"], ["which"], ["doctor"], ["job", "status"]):
        code, payload = run_json(capsys, installed, github.api_url, *verb)
        assert code == 0, (verb, payload)
    from llama_runtime.updater.cli.main import main

    assert main(["status", "--home", str(installed)]) == 0
    assert "LLAMA_RUNTIME_REQUIRE_PROVENANCE='ture'" in capsys.readouterr().err  # warned, never silently off
    archive = str(_named_archive(installed.parent))
    for verb in (["update", "--tag", "b7002", "--backend", "cpu"], ["check"], ["install-file", archive]):
        code, payload = run_json(capsys, installed, github.api_url, *verb)
        assert code == 2, (verb, payload)
        assert "LLAMA_RUNTIME_REQUIRE_PROVENANCE" in payload["error"]["message"]
    frozen.assert_intact("b7001")
    monkeypatch.delenv("LLAMA_RUNTIME_REQUIRE_PROVENANCE")
    assert_status_active(capsys, installed, "b7001")
