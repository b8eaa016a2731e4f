"""Shared fixtures (helpers live in tests/helpers.py): the real llama-server and release archives
built from it, a GitHub-like server on 127.0.0.1, a home, and the e2e marker for tests that start
servers or child processes."""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub
from tests.helpers import publish_stand_in, real_build, run_json


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``e2e`` every test that starts a server or a child process, so ``-m "not e2e"`` is the inner loop."""
    for item in items:
        if item.get_closest_marker("e2e") is None and _starts_servers(item):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True)
def _any_free_server_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """`server start` binds llama-server's 8080 by default; tests (run beside others) take any free port."""
    monkeypatch.setenv("LLAMA_RUNTIME_SERVER_PORT", "0")
