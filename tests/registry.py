"""A real OCI registry on 127.0.0.1 for tests: Debian's ``docker-registry`` (CNCF Distribution 2.8).

``Registry(tmp, users={"ci": "secret"})`` starts ``docker-registry serve`` on a
free port with its storage in ``tmp``; with ``users`` it requires HTTP Basic
from an htpasswd file (bcrypt, made by ``htpasswd -B``); ``auth`` is another ``auth:``
block (a token realm: tests/token_server.py). ``.ci/run`` installs
both packages; a machine without them skips the tests that need one.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import httpx
import pytest

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"
HTPASSWD_BIN = shutil.which("htpasswd") or "/usr/bin/htpasswd"
#: How long the registry may take to answer /v2/ after it starts (seconds).
START_TIMEOUT_S = 20.0
#: A request in Distribution's access log (Apache combined format): the method and the path.
_ACCESS_LINE = re.compile(r'"(GET|HEAD|PUT|POST|PATCH|DELETE) (\S+) HTTP/[0-9.]+"')


def require_registry() -> None:
    """Skip the calling test where Debian's docker-registry (and htpasswd) is not installed."""
    if not Path(REGISTRY_BIN).is_file():
        pytest.skip("docker-registry is not installed (apt-get install docker-registry apache2-utils)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    """A running ``docker-registry serve`` with its own storage and config."""

    def __init__(
        self,
        root: Path,
        *,
        users: dict[str, str] | None = None,
        auth: str = "",
        tls: tuple[Path, Path] | None = None,
        access_log: bool = False,
    ) -> None:
        require_registry()
        self.root = root
        self.port = free_port()
        root.mkdir(parents=True, exist_ok=True)
        if users:
            htpasswd = root / "htpasswd"
            lines = []
            for user, password in users.items():
                out = subprocess.run(
                    [HTPASSWD_BIN, "-Bbn", user, password], capture_output=True, check=True, text=True
                ).stdout
                lines.append(out.strip())
            htpasswd.write_text("\n".join(lines) + "\n")
            auth = f"auth:\n  htpasswd:\n    realm: test-realm\n    path: {htpasswd}\n"
        self.config = root / "config.yml"
        self.config.write_text(
            f"version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: {'false' if access_log else 'true'}\n"
            f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n"
            + (f"  tls:\n    certificate: {tls[0]}\n    key: {tls[1]}\n" if tls else "")
            + auth
        )
        self.scheme = "https" if tls else "http"
        self._log = (root / "registry.log").open("wb")
        self.process = subprocess.Popen([REGISTRY_BIN, "serve", str(self.config)], stdout=self._log, stderr=self._log)
        self._wait_ready()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, name: str = "fleet/llama.cpp") -> str:
        """``oci://127.0.0.1:PORT/NAME``."""
        return f"oci://{self.host}/{name}"

    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request the registry's access log holds so far (``access_log=True``)."""
        text = (self.root / "registry.log").read_text(errors="replace")
        return [(m.group(1), m.group(2)) for m in _ACCESS_LINE.finditer(text)]

    def writes(self) -> list[tuple[str, str]]:
        """The requests that change the repository (PUT, POST, PATCH, DELETE)."""
        return [(m, p) for m, p in self.requests() if m in ("PUT", "POST", "PATCH", "DELETE")]

    def garbage_collect(self) -> str:
        """``docker-registry garbage-collect --delete-untagged`` on the storage, with the registry stopped
        (as Distribution's docs ask), then the registry started again on the same port."""
        self.close()
        done = subprocess.run(
            [REGISTRY_BIN, "garbage-collect", "--delete-untagged", str(self.config)],
            capture_output=True,
            text=True,
            check=True,
        )
        self._log = (self.root / "registry.log").open("ab")
        self.process = subprocess.Popen([REGISTRY_BIN, "serve", str(self.config)], stdout=self._log, stderr=self._log)
        self._wait_ready()
        return done.stdout + done.stderr

    def blob_files(self) -> list[Path]:
        """Every blob the registry stores (content-addressed: one file per distinct content)."""
        return sorted((self.root / "data").rglob("blobs/sha256/*/*/data"))

    def _wait_ready(self) -> None:
        give_up = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < give_up:
            if self.process.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {(self.root / 'registry.log').read_text()[-2000:]}")
            try:
                answer = httpx.get(f"{self.scheme}://{self.host}/v2/", timeout=1.0, verify=False)
                if answer.status_code in (200, 401):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.close()
        raise RuntimeError("docker-registry did not start")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
