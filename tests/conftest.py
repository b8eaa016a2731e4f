"""Shared fixtures (helpers live in tests/helpers.py): the real llama-server and release archives
built from it, a GitHub-like server on 127.0.0.1, a home, and the e2e marker for tests that start
servers or child processes."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub
from tests.helpers import publish_stand_in, real_build, run_json
from tests.realbuild import describe_real_build


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """The llama-runtime home of one test; a managed llama-server it left running is killed."""
    path = tmp_path / "home"
    yield path
    if (path / "server").is_dir():
        from llama_runtime.runtime.server import ManagedServer

        # ManagedServer signals only a record it trusts (a test may have written a hostile one).
        with contextlib.suppress(Exception):
            ManagedServer(path / "server").stop(5)


@pytest.fixture(scope="session")
def archive_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("archives")


@pytest.fixture(scope="session")
def real_vulkan_tarball(archive_dir: Path) -> Iterator[Path]:
    """``llama-b7000-bin-ubuntu-vulkan-x64.tar.gz`` holding the real build (b7278+ layout)."""
    build = real_build()
    path = archive_dir / "real-vulkan.tar.gz"
    if not path.exists():
        build_release_archive(path, "tar-tagdir", build.files, symlinks=build.symlinks, tag="b7000")
    yield path


# -- the state a failure must not touch ------------------------------------------


@pytest.fixture
def vk_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment in which llama.cpp lists Mesa's software Vulkan device."""
    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "0")
    return dict(os.environ)


#: Upstream's asset names (asset_naming.md): the Linux x64 CPU and Vulkan builds of a tag.

#: How long a ``python -m llama_runtime`` child may take before the test fails (a hang is a failure).


@pytest.fixture
def b7000_home(capsys: pytest.CaptureFixture[str], github: FakeGitHub, tmp_path: Path) -> Path:
    """A home with b7000 (a stand-in CPU build) active: the runtime a failure must leave alone."""
    home = tmp_path / "home"
    publish_stand_in(github, tmp_path, "b7000")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
    assert code == 0, payload
    code, payload = run_json(capsys, home, None, "unpin")  # `update --tag` pins; later updates may move on
    assert code == 0, payload
    return home


@pytest.fixture(scope="session")
def minted_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``trusted_root.json`` of tests/sigstore_mint.py's private Sigstore (minted ggml-org bundles verify
    under it), as an operator would name it in ``LLAMA_RUNTIME_TRUSTED_ROOT``."""
    from tests.sigstore_mint import private_sigstore  # deferred: cryptography only for the tests that mint

    return private_sigstore().write_trusted_root(tmp_path_factory.mktemp("private-sigstore") / "trusted_root.json")


@pytest.fixture
def private_root_env(minted_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``LLAMA_RUNTIME_TRUSTED_ROOT`` names the private root; nothing else about provenance is configured."""
    monkeypatch.setenv("LLAMA_RUNTIME_TRUSTED_ROOT", str(minted_root))
    for name in ("LLAMA_RUNTIME_REQUIRE_PROVENANCE", "LLAMA_RUNTIME_PROVENANCE_WORKFLOW"):
        monkeypatch.delenv(name, raising=False)
    return minted_root


#: Fixtures that start the GitHub-like server or the real llama-server (directly or through others).
_E2E_FIXTURES = frozenset({"github", "real_vulkan_tarball", "tiny_model"})
#: What a test body calls when it starts those itself, or runs the CLI or the real build as a child.
_E2E_CALLS = ("FakeGitHub(", "real_build(", "cli_process(", "load_real_build(", "publish_today(")


def _starts_servers(item: pytest.Item) -> bool:
    if _E2E_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    function = getattr(item, "function", None)
    try:
        source = inspect.getsource(function) if function is not None else ""
    except (OSError, TypeError):
        return False
    return any(call in source for call in _E2E_CALLS)


#: Off Linux, why an end-to-end test is skipped: the fake GitHub publishes Linux x64 builds (stand-in
#: ``#!/bin/sh`` servers or the real Linux llama-server) and the CLI child picks assets for its own host.
NEEDS_LINUX = (
    "needs Linux: end-to-end tests publish Linux x64 builds (stand-in shell scripts, the real Linux "
    "llama-server) and the CLI chooses for its own host; the ubuntu CI jobs run them"
)
#: On Windows, why these modules' in-process tests are skipped too: they run ``#!/bin/sh`` stand-in
#: builds through the process seam, or use what Windows lacks (SIGKILL, FIFOs, ptys, POSIX modes).
NEEDS_POSIX = (
    "needs POSIX: runs #!/bin/sh stand-in builds in-process, or uses SIGKILL, FIFOs, ptys or POSIX "
    "file modes, which Windows lacks; the ubuntu and macOS CI jobs run it"
)
_POSIX_MODULES = frozenset(
    {
        "test_archive", "test_auto_down", "test_bounded_data", "test_bundle", "test_cache", "test_check_cost",
        "test_cli_surface", "test_corrupt_state", "test_crash", "test_cuda_companion", "test_deadlines",
        "test_disk_full", "test_docs_contract", "test_durability", "test_events", "test_events_pipe",
        "test_everyday_refusals_and_wording", "test_facts", "test_failed_builds", "test_fetch",
        "test_fingerprints", "test_front_door", "test_gc", "test_gpu_coverage_manifest",
        "test_home_snapshot", "test_hostile_archives_and_planted_files", "test_hostile_home",
        "test_hostile_remote", "test_install_file", "test_lifecycle", "test_lock", "test_macho",
        "test_mirror", "test_mirror_channels", "test_mirror_fetch", "test_mirror_writers",
        "test_nested_links", "test_no_secret_leaves", "test_offline_inputs", "test_process",
        "test_progress", "test_provenance_offline", "test_record", "test_retention_and_shared_files",
        "test_rollback_and_repair", "test_service", "test_single_read_extraction", "test_state_files",
        "test_stored_request", "test_trial",
    }
)  # fmt: skip


def pytest_report_header() -> str:
    """Which real llama-server the run uses: the wheel's, or the wheel's with the AVX2 CPU backend."""
    return describe_real_build()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``e2e`` every test that starts a server or a child process, so ``-m "not e2e"`` is the inner loop;
    off Linux, skip (with the reason, counted in the summary) what needs Linux or POSIX."""
    for item in items:
        if item.get_closest_marker("e2e") is None and _starts_servers(item):
            item.add_marker(pytest.mark.e2e)
        if sys.platform != "linux" and item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.skip(reason=NEEDS_LINUX))
        elif sys.platform == "win32" and item.path.stem in _POSIX_MODULES:
            item.add_marker(pytest.mark.skip(reason=NEEDS_POSIX))


@pytest.fixture(autouse=True)
def _any_free_server_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """`server start` binds llama-server's 8080 by default; tests (run beside others) take any free port."""
    monkeypatch.setenv("LLAMA_RUNTIME_SERVER_PORT", "0")
