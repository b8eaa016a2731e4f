"""Randomised kill loop: SIGKILL and SIGINT at random moments during updates, with rollback and gc racing.

Each iteration starts ``llama-runtime update --tag <random>`` against the fake
GitHub on 127.0.0.1, sometimes races a ``rollback`` or a ``gc`` against it,
waits a random time within one update's duration, then sends SIGKILL or
SIGINT to the update (and, sometimes, to the racer). Afterwards the machine
must have a working runtime: ``status`` exits 0, its active binary runs, and
no process ever ended in exit 1 (a bug). Leftovers of a killed update are for
the next one to clean; nothing outside the home may change.

Usage::

    .venv/bin/python scripts/killloop.py --iterations 120 --seed 12

Prints the figures (kills by signal, which moment they hit, exit codes,
leftovers, failures) and exits 1 when any iteration left no working runtime.

With ``--serve`` a managed server runs throughout (a stand-in that answers
``/health`` and a streamed ``/completion``, slowly enough that random kills
land inside the switch), and named kills include the switch's own points
(the old server's stop, the health wait, the completion check). A kill that
leaves a trial (``<home>/trial.json``) must be finished by the next locking
command (``gc``): afterwards the runtime active before the update is active,
its server runs with the same arguments and generates.

With ``--small-disk MIB`` (root: it mounts a tmpfs) the home lives on a filesystem that
small, so updates also end in exit 4 (allowed); after some iterations the disk is filled to
its last byte and ``gc`` and ``status`` must still exit 0 there (cleaning works on a full disk).
A read-only home has no place here: no update can run in one (tests/test_offline_inputs.py).
A command still running :data:`EXIT_WAIT_SECONDS` after its signal is a wedge:
the loop sends it SIGUSR1 first (every child runs with
``LLAMA_RUNTIME_TEST_STACKS``, so its CLI dumps every thread's stack), records
the dump with the failure (the report prints it; the file stays in the stacks
directory the report names), then kills it.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llama_runtime.runtime.inference import probe_inference  # noqa: E402
from llama_runtime.runtime.layout import Home  # noqa: E402
from llama_runtime.runtime.server import ManagedServer  # noqa: E402
from llama_runtime.updater.checkpoints import (  # noqa: E402
    CHECKPOINTS,
    KILL_AT_ENV,
    SWITCH_CHECKPOINTS,
)
from llama_runtime.updater.cli.watchdog import STACKS_ENV  # noqa: E402
from tests.archives import build_release_archive  # noqa: E402
from tests.fakegithub import FakeGitHub  # noqa: E402

REPO: Final = "ggml-org/llama.cpp"
TAGS: Final = ("b7000", "b7001", "b7002", "b7003")
ASSET: Final = "llama-{tag}-bin-ubuntu-x64.tar.gz"
#: Exit codes the contract allows for an interrupted or racing command; 1 is a bug.
ALLOWED_EXITS: Final = frozenset({0, 2, 3, 5, 6, 7, 130, -signal.SIGKILL, -signal.SIGINT})
#: Size of the stand-in library in each release.
LIB_BYTES: Final = 3 * 1024 * 1024
#: Share of iterations that die at a named checkpoint (LLAMA_RUNTIME_TEST_KILL_AT) instead of at a
#: random moment, so every phase of the transaction is hit, not only the long ones.
CHECKPOINT_SHARE: Final = 0.25
#: Share of iterations (with --small-disk) after which the disk is filled and gc must still work.
FULL_DISK_SHARE: Final = 0.3
#: A command that has not ended this long after its signal is itself a failure (a wedge).
EXIT_WAIT_SECONDS: Final = 120.0
#: How long a wedged command has to write its stacks after SIGUSR1: faulthandler writes at once.
STACK_DUMP_SECONDS: Final = 5.0
#: Characters of a stack dump kept in a failure line (the whole dump stays in its file).
DUMP_CHARS: Final = 6000


@dataclass
class Figures:
    """What the loop saw."""

    iterations: int = 0
    signals: collections.Counter[str] = field(default_factory=collections.Counter)
    update_exits: collections.Counter[int] = field(default_factory=collections.Counter)
    racer_exits: collections.Counter[str] = field(default_factory=collections.Counter)
    finished_before_signal: int = 0
    active_changed: int = 0
    leftovers_seen: int = 0
    trials_left: int = 0
    full_disk_checks: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Where each child's stacks go on SIGUSR1 (a directory outside the home, kept after the run).
    stacks_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="killloop-stacks-")))


def stand_in_server(tag: str, *, serve: bool = False) -> bytes:
    return (
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --version) echo 'version: {tag[1:]} (kill-loop stand-in)' >&2; exit 0 ;;\n"
        "  --list-devices) echo 'Available devices:'; exit 0 ;;\n"
        "esac\n" + (f'exec {sys.executable} "$(dirname "$0")/serve.py" "$@"\n' if serve else "exit 0\n")
    ).encode()


#: The served stand-in: /health, and a streamed completion of 8 tokens over ~0.2 s.
SERVE_PY: Final = b"""
import json, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "15"); self.end_headers()
        self.wfile.write(b'{"status":"ok"}')
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
        for i, piece in enumerate("abcdefgh"):
            time.sleep(0.025)
            self.wfile.write(b"data: " + json.dumps({"content": piece, "stop": False}).encode() + b"\\n\\n")
        final = {"content": "", "stop": True, "tokens_predicted": 8, "timings": {"prompt_n": 30,
                 "prompt_per_second": 1000.0, "predicted_n": 8, "predicted_per_second": 40.0}}
        self.wfile.write(b"data: " + json.dumps(final).encode() + b"\\n\\n")
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def publish(github: FakeGitHub, work: Path, *, serve: bool = False) -> None:
    runtime_lib = os.urandom(LIB_BYTES // 4)  # identical in every build: stored once (hard links), killed mid-share
    for tag in TAGS:
        files: dict[str, bytes | Path] = {
            "llama-server": stand_in_server(tag, serve=serve),
            **({"serve.py": SERVE_PY} if serve else {}),
            # Incompressible bytes: a kill can land mid-download, mid-hash and mid-extraction.
            "libllama.so.0.0.1": os.urandom(LIB_BYTES),
            "libruntime.so.1": runtime_lib,
        }
        archive = build_release_archive(
            work / f"{tag}.tar.gz",
            "tar-tagdir",
            files,
            symlinks={"libllama.so.0": "libllama.so.0.0.1", "libllama.so": "libllama.so.0"},
            modes={"llama-server": 0o755},
            tag=tag,
        )
        github.add_release(REPO, tag, {ASSET.format(tag=tag): archive})


def cli(home: Path, api_url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "llama_runtime", *args, "--home", str(home), "--api-url", api_url, "--json"]


def run(home: Path, api_url: str, *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(cli(home, api_url, *args), capture_output=True, timeout=EXIT_WAIT_SECONDS, check=False)
    try:
        payload = json.loads(done.stdout or b"{}")
    except ValueError:
        payload = {"unparsable": done.stdout.decode(errors="replace")[-300:]}
    return done.returncode, payload


def snapshot_outside(root: Path, home: Path) -> dict[str, str]:
    seen: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if Path(dirpath, d) != home]
        for name in filenames:
            full = Path(dirpath, name)
            seen[str(full.relative_to(root))] = hashlib.sha256(full.read_bytes()).hexdigest()
    return seen


def working_runtime(home: Path, api_url: str) -> tuple[bool, str, str | None]:
    """Whether ``status`` exits 0 and its active binary runs; (ok, why, active tag)."""
    code, status = run(home, api_url, "status")
    if code != 0 or not status.get("active"):
        return False, f"status exit {code}: {json.dumps(status)[:300]}", None
    binary = status["active"]["binary"]
    done = subprocess.run([binary, "--version"], capture_output=True, timeout=30, check=False)
    if done.returncode != 0:
        return False, f"active binary {binary} does not run", status["active"]["tag"]
    return True, "", str(status["active"]["tag"])


def serving_after_trial(home: Path, api_url: str, figures: Figures) -> str | None:
    """With a server: finish a trial a kill left (``gc`` locks), then check the server serves; why not, or None."""
    trial_path = home / "trial.json"
    reverts_to = json.loads(trial_path.read_text())["before"]["active"] if trial_path.is_file() else None
    if trial_path.is_file():
        figures.trials_left += 1
        code, payload = run(home, api_url, "gc")
        if code != 0:
            return f"gc after a killed switch exited {code}: {json.dumps(payload)[:300]}"
        if trial_path.exists():
            return "the trial is still on record after gc"
    active = json.loads((home / "active.json").read_text()).get("active")
    if reverts_to is not None and active != reverts_to:
        return f"a killed switch left {active} active, not {reverts_to}, after gc"
    server = ManagedServer(Home(home).server_dir)
    status = server.status()
    if not (status.running and status.healthy):
        return f"the server is not serving: {status.to_json()}"
    if status.runtime_name != active:
        return f"the server runs {status.runtime_name}, the pointer names {active}"
    url = server.endpoint()
    if url is None or not probe_inference(url, timeout=30, samples=1).ok:
        return "the server does not generate"
    return None


def fill_up(disk: Path) -> Path:
    """Write zeros on ``disk`` until not one byte is left; returns the file to delete afterwards."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (bytes(1 << 20), bytes(4096), b"\0"):
            try:
                while True:
                    os.write(fd, chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def cleans_on_full_disk(home: Path, api_url: str, disk: Path, figures: Figures) -> str | None:
    """Fill ``disk``; ``gc`` and ``status`` must exit 0 there. Why not, or None."""
    figures.full_disk_checks += 1
    filler = fill_up(disk)
    try:
        for verb in (("gc",), ("status",)):
            code, payload = run(home, api_url, *verb)
            if code != 0:
                return f"{verb[0]} at 0 bytes free exited {code}: {json.dumps(payload)[:300]}"
        return None
    finally:
        filler.unlink()


def dump_stacks(proc: subprocess.Popen[bytes], stacks: Path, settle: float = STACK_DUMP_SECONDS) -> str:
    """Send SIGUSR1 to a wedged child whose CLI armed its stack dump; what it wrote to ``stacks``."""
    proc.send_signal(signal.SIGUSR1)
    give_up_at = time.monotonic() + settle
    while time.monotonic() < give_up_at:
        text = stacks.read_text(errors="replace") if stacks.is_file() else ""
        if "most recent call first" in text:
            time.sleep(0.2)  # the other threads' stacks follow the first one's
            return stacks.read_text(errors="replace")
        time.sleep(0.05)
    return f"(no stacks within {settle:g} s of SIGUSR1: the process did not run Python code to answer it)"


def wait_or_dump(proc: subprocess.Popen[bytes], stacks: Path, timeout: float = EXIT_WAIT_SECONDS) -> str | None:
    """Wait for ``proc``; if it outlives ``timeout``, its stack dump (then it is killed); None once it ended."""
    try:
        proc.wait(timeout=timeout)
        return None
    except subprocess.TimeoutExpired:
        dump = dump_stacks(proc, stacks)
        proc.kill()
        proc.wait()
        return dump


def child_env(figures: Figures, what: str, env: dict[str, str] | None = None) -> tuple[dict[str, str], Path]:
    """The environment of a child (its stack dump armed) and the file its stacks would go to."""
    stacks = figures.stacks_dir / f"{figures.iterations:04d}-{what}.txt"
    return {**(env if env is not None else os.environ), STACKS_ENV: str(stacks)}, stacks


def one_iteration(
    rng: random.Random,
    home: Path,
    api_url: str,
    window: float,
    figures: Figures,
    before: str,
    serve: bool = False,
    disk: Path | None = None,
) -> str:
    target = rng.choice([t for t in TAGS if t != before] or list(TAGS))
    env = dict(os.environ)
    at_checkpoint = rng.random() < CHECKPOINT_SHARE
    if at_checkpoint:
        points = [c for c in CHECKPOINTS if c != "during_gc"] + (list(SWITCH_CHECKPOINTS) if serve else [])
        env[KILL_AT_ENV] = rng.choice(points)
        figures.signals[f"SIGKILL at {env[KILL_AT_ENV]}"] += 1
    env, update_stacks = child_env(figures, "update", env)
    update = subprocess.Popen(
        cli(home, api_url, "update", "--tag", target, "--backend", "cpu"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    stacks = {update.pid: update_stacks}
    racer: subprocess.Popen[bytes] | None = None
    racer_verb = rng.choice(["none", "rollback", "gc", "gc-keep-0"])
    if racer_verb != "none":
        time.sleep(rng.uniform(0, window / 2))
        verb = {"rollback": ["rollback"], "gc": ["gc"], "gc-keep-0": ["gc", "--keep", "0"]}[racer_verb]
        racer_env, stacks_file = child_env(figures, racer_verb)
        racer = subprocess.Popen(
            cli(home, api_url, *verb), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=racer_env
        )
        stacks[racer.pid] = stacks_file
    time.sleep(rng.uniform(0, window))
    signame = rng.choice(["SIGKILL", "SIGINT"])
    if at_checkpoint:
        pass  # it kills itself at the checkpoint (or finishes, for a no-op switch)
    elif update.poll() is not None:
        figures.finished_before_signal += 1
    else:
        update.send_signal(getattr(signal, signame))
        figures.signals[signame] += 1
    if racer is not None and rng.random() < 0.3 and racer.poll() is None:
        racer.send_signal(signal.SIGKILL)
        figures.signals["SIGKILL (racer)"] += 1
    for proc, what in ((update, f"update {target}"), (racer, racer_verb)):
        if proc is None:
            continue
        dump = wait_or_dump(proc, stacks[proc.pid])
        if dump is not None:
            figures.failures.append(
                f"iteration {figures.iterations}: {what} did not end {EXIT_WAIT_SECONDS:.0f} s after its signal; "
                f"its stacks ({stacks[proc.pid]}):\n{dump[-DUMP_CHARS:]}"
            )
            continue
        code = proc.returncode
        if proc is update:
            figures.update_exits[code] += 1
        else:
            figures.racer_exits[f"{racer_verb}: {code}"] += 1
        if code not in ALLOWED_EXITS and not (disk is not None and code == 4):
            out = proc.stdout.read().decode(errors="replace")[-400:] if proc.stdout else ""
            figures.failures.append(f"iteration {figures.iterations}: {what} exited {code}: {out}")
    for path in stacks.values():  # only a dump is kept; the files of commands that ended are empty
        if path.is_file() and path.stat().st_size == 0:
            path.unlink()
    for where in ("staging", "downloads"):  # what a killed update left for the next one to clean or resume
        directory = home / where
        figures.leftovers_seen += len(os.listdir(directory)) if directory.is_dir() else 0
    if disk is not None and rng.random() < FULL_DISK_SHARE:
        why_not = cleans_on_full_disk(home, api_url, disk, figures)
        if why_not is not None:
            figures.failures.append(f"iteration {figures.iterations}: {why_not}")
    if serve:
        why_not = serving_after_trial(home, api_url, figures)
        if why_not is not None:
            figures.failures.append(f"iteration {figures.iterations}: {why_not}")
    ok, why, tag = working_runtime(home, api_url)
    if not ok:
        figures.failures.append(f"iteration {figures.iterations}: no working runtime after {signame}: {why}")
        # Recover the way a user would, so one failure does not hide the next.
        run(home, api_url, "doctor", "--repair")
        run(home, api_url, "update", "--tag", "b7000", "--backend", "cpu")
        return before
    if tag != before:
        figures.active_changed += 1
    return tag or before


def measure_window(home: Path, api_url: str) -> float:
    """One update's duration here (a switch plus a fresh install), the span kills are spread over."""
    started = time.monotonic()
    code, payload = run(home, api_url, "update", "--tag", "b7001", "--backend", "cpu")
    if code != 0:
        raise SystemExit(f"the baseline update failed: {payload}")
    return max(time.monotonic() - started, 0.3)


def report(figures: Figures, window: float) -> None:
    print(f"iterations:              {figures.iterations}")
    print(f"kill window:             0 - {window:.2f} s (one measured update)")
    print(f"signals sent:            {dict(figures.signals)}")
    print(f"update done before kill: {figures.finished_before_signal}")
    print(f"update exit codes:       {dict(sorted(figures.update_exits.items()))}")
    print(f"racer exit codes:        {dict(sorted(figures.racer_exits.items()))}")
    print(f"active runtime changed:  {figures.active_changed} times")
    print(f"trials left by kills:    {figures.trials_left} (each reverted by the next gc)")
    print(f"full-disk gc checks:     {figures.full_disk_checks}")
    print(f"leftovers seen:          {figures.leftovers_seen} staging/partial entries (cleaned or resumed later)")
    print(f"wall time:               {figures.seconds:.0f} s")
    dumps = sorted(figures.stacks_dir.glob("*.txt")) if figures.stacks_dir.is_dir() else []
    print(f"stack dumps of wedges:   {len(dumps)}" + (f" in {figures.stacks_dir}" if dumps else ""))
    if not dumps and figures.stacks_dir.is_dir():
        figures.stacks_dir.rmdir()
    print(f"working runtime after every iteration: {'yes' if not figures.failures else 'NO'}")
    for failure in figures.failures:
        print(f"FAILURE: {failure}")


def small_disk(mount_point: Path, mib: int) -> Path:
    """A tmpfs of ``mib`` MiB at ``mount_point`` (needs root)."""
    mount_point.mkdir()
    size = f"size={mib}m"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(mount_point)], capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"--small-disk needs to mount a tmpfs (root): {done.stderr.decode(errors='replace')}")
    return mount_point


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--serve", action="store_true", help="keep a managed (stand-in) server running throughout")
    parser.add_argument("--small-disk", type=int, default=0, metavar="MIB", help="put the home on a tmpfs this small")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed: {seed}")
    figures = Figures()
    with (
        tempfile.TemporaryDirectory(prefix="killloop-") as tmp,
        FakeGitHub() as github,
        contextlib.ExitStack() as mounts,  # unmounted first, before the temporary directory goes
    ):
        root = Path(tmp)
        disk = small_disk(root / "disk", args.small_disk) if args.small_disk else None
        if disk is not None:
            mounts.callback(subprocess.run, ["umount", "-l", str(disk)], capture_output=True, check=False)
        home = (disk or root) / "home"
        publish(github, root, serve=args.serve)
        code, payload = run(home, github.api_url, "update", "--tag", "b7000", "--backend", "cpu")
        if code != 0:
            raise SystemExit(f"the first install failed: {payload}")
        if args.serve:
            model = root / "stand-in.gguf"
            model.write_bytes(b"GGUF")  # the stand-in loads nothing; -m makes the gate run its check
            with socket.socket() as probe:  # a free port: 8080 (the default) may be another program's
                probe.bind(("127.0.0.1", 0))
                port = str(probe.getsockname()[1])
            start = [*cli(home, github.api_url, "server", "start"), "--", "-m", str(model), "--port", port]
            done = subprocess.run(start, capture_output=True, timeout=EXIT_WAIT_SECONDS, check=False)
            if done.returncode != 0:
                raise SystemExit(f"the server did not start: {done.stdout[-300:]!r} {done.stderr[-300:]!r}")
        window = measure_window(home, github.api_url)
        outside = snapshot_outside(root, home)
        active = "b7001"
        started = time.monotonic()
        for i in range(args.iterations):
            figures.iterations = i + 1
            active = one_iteration(rng, home, github.api_url, window, figures, active, args.serve, disk)
        figures.seconds = time.monotonic() - started
        if snapshot_outside(root, home) != outside:
            figures.failures.append("files outside the home changed")
        code, payload = run(home, github.api_url, "update", "--tag", "b7003", "--backend", "cpu")
        if code != 0 or not working_runtime(home, github.api_url)[0]:
            figures.failures.append(f"a final clean update failed: {payload}")
        if args.serve:
            run(home, github.api_url, "server", "stop")
    report(figures, window)
    return 1 if figures.failures else 0


if __name__ == "__main__":
    sys.exit(main())
