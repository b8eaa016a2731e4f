"""The Sigstore trust-root refresh has an overall deadline.

python-tuf bounds each socket wait (30 s) but not the refresh: a proxy that
accepts and never answers, or answers a byte at a time, held ``update`` in
"checking build provenance" (and its lock) for minutes. Here a real local
server plays that proxy (``HTTPS_PROXY``, which python-tuf's fetcher honours),
so nothing reaches the internet: the refresh gives up within seconds and the
cached or shipped root is used, and the result says so.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llama_runtime.updater.verify import signer
from tests.fakegithub import FakeGitHub
from tests.sigstore_mint import PrivateSigstore, release_yml_identity
from tests.test_minted_bundles import publish_attested, sigstore
from tests.test_update_e2e import failing_update, installed_b7000

# The deadline the tests run under: short, so a stall costs little, yet far above a refresh's own work.
_TEST_DEADLINE_S = 1.5
# What "within seconds" allows on a loaded two-core machine: the deadline and the offline load.
_ALLOWED_S = 8.0


class StallingProxy:
    """A TCP server on 127.0.0.1 that accepts every connection and then never answers (``drip``: one byte a second)."""

    def __init__(self, *, drip: bool = False) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.drip = drip
        self.accepted = 0
        self.stop = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self.held.append(conn)
            if self.drip:
                threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 Connection established\r\n"
        for byte in answer * 1000:
            if self.stop.wait(1.0):
                return
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.fixture(params=[False, True], ids=["silent", "drip"])
def stalling_proxy(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[StallingProxy]:
    """HTTPS (the TUF refresh) through a proxy that stalls; a fresh TUF cache; a short deadline."""
    proxy = StallingProxy(drip=request.param)
    # HTTPS only: the fake GitHub is plain http on 127.0.0.1 and must stay reachable.
    for name in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, proxy.url)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setattr(signer, "TRUST_ROOT_REFRESH_DEADLINE_S", _TEST_DEADLINE_S)
    monkeypatch.setattr(signer, "_refresh_memo", None)
    yield proxy
    proxy.close()


def test_a_stalling_refresh_gives_up_at_the_deadline_and_uses_the_shipped_root_saying_so(
    stalling_proxy: StallingProxy,
) -> None:
    started = time.monotonic()
    trust = signer.load_trust_root(None, offline=False)
    elapsed = time.monotonic() - started
    assert stalling_proxy.accepted >= 1, "the refresh did not go through the stalling proxy"
    assert elapsed < _ALLOWED_S, elapsed
    assert "as last refreshed or shipped" in trust.description
    assert f"the refresh did not finish within {_TEST_DEADLINE_S:g} s" in trust.description
    # A second verification in the same process does not pay the deadline again.
    started = time.monotonic()
    again = signer.load_trust_root(None, offline=False)
    assert time.monotonic() - started < _TEST_DEADLINE_S
    assert again.description == trust.description


@pytest.mark.e2e
@pytest.mark.usefixtures(installed_b7000.__name__)
def test_update_behind_a_stalling_proxy_ends_within_seconds_and_b7000_stays(
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    real_vulkan_tarball: Path,
    sigstore: PrivateSigstore,
    stalling_proxy: StallingProxy,
) -> None:
    # Attested under the private Sigstore, checked against the production root (no LLAMA_RUNTIME_TRUSTED_ROOT):
    # the refresh stalls, the shipped root is used, and it rightly refuses the private CA's bundle.
    publish_attested(github, sigstore, real_vulkan_tarball, release_yml_identity())
    started = time.monotonic()
    code, payload = failing_update(capsys, home, github)
    assert time.monotonic() - started < 60  # the download and unpacking, plus at most the deadline
    assert stalling_proxy.accepted >= 1
    assert code == 8, payload
    assert f"the refresh did not finish within {_TEST_DEADLINE_S:g} s" in payload["error"]["message"]


__all__ = ["sigstore"]  # the session fixture, shared with test_minted_bundles
