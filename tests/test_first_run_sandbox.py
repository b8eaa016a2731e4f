"""A build's first run is confined for real: no secret read, no accepted runtime changed, nothing left running.

A hostile stand-in ``llama-server`` (a shell script, installed through the real update path against the
local GitHub) does on its first run (``--version``) what an attacker would: it reads every
``/proc/<pid>/environ`` and the real home's ``.netrc``, writes what it found wherever it can, appends to
every ``llama-server`` under the llama-runtime home, drops a ``libggml-evil.so`` beside them, rewrites
their markers, starts a ``setsid`` daemon, and exits 1 so the build is refused.

With bubblewrap, and without it (Landlock, PATH without ``bwrap``), none of that reaches the caller's
secrets, the accepted runtime or outlives the command. With no sandbox at all (the environment filter
alone, as on an old kernel), the damage is possible as root, and the trust records outside the runtime
folder make ``status`` name it (exit 6) and ``doctor --repair`` undo it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from llama_runtime.runtime.sandbox import Sandbox, SandboxSupport, detect_sandbox
from tests.fakegithub import FakeGitHub
from tests.helpers import HomeGuard, publish_stand_in, run_json

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="the hostile stand-in reads Linux's /proc")

#: What the caller's environment holds; the hostile build must not get any of it.
SECRET_ENV = {"GITHUB_TOKEN": "ghp_SECRET_caller_token", "LLAMA_RUNTIME_REGISTRY_PASSWORD": "SECRET_registry_pw"}
NETRC_SECRET = "SECRET_netrc_password"
#: The tools the hostile script uses, found on PATH (a PATH without bwrap links only these).
TOOLS = ("sh", "cat", "tr", "grep", "find", "chmod", "cp", "sed", "setsid", "sleep", "printf", "dirname", "mkdir")


def hostile_server(home: Path, drop: Path, tag: str) -> bytes:
    """The hostile first run: steal, tamper, leave a daemon, then fail so the build is refused."""
    return f"""#!/bin/sh
loot=""
for f in /proc/[0-9]*/environ; do loot="$loot $(tr '\\0' '\\n' < "$f" 2>/dev/null | grep SECRET)"; done
for h in /root "$REAL_HOME" {drop.parent / "userhome"}; do loot="$loot $(cat "$h/.netrc" 2>/dev/null)"; done
for where in "{drop}" "$HOME" /tmp "{home}"; do printf '%s' "$loot" > "$where/loot-$$.txt" 2>/dev/null; done
for bin in $(find "{home}/runtimes" -name llama-server 2>/dev/null); do
  dir=$(dirname "$bin")
  chmod u+w "$bin" "$dir" 2>/dev/null
  printf '\\n# pwned\\n' >> "$bin" 2>/dev/null
  printf 'evil' > "$dir/libggml-evil.so" 2>/dev/null
done
for marker in $(find "{home}/runtimes" -name llama-runtime.json 2>/dev/null); do
  chmod u+w "$marker" "$(dirname "$marker")" 2>/dev/null
  sed -i 's/"sha256": "[0-9a-f]*"/"sha256": "0000"/' "$marker" 2>/dev/null
done
setsid sh -c 'sleep 300' {tag} </dev/null >/dev/null 2>&1 &
echo "version: 7001 (hostile)" >&2
exit 1
""".encode()


def daemons(tag: str) -> list[psutil.Process]:
    """Live processes the hostile run started (their command line carries ``tag``)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if tag in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


def files_holding(root: Path, needle: bytes) -> list[str]:
    """Every regular file under ``root`` whose bytes contain ``needle``."""
    hits = []
    for top, _dirs, files in os.walk(root):
        for name in files:
            path = Path(top) / name
            try:
                if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                    hits.append(str(path))
            except OSError:
                continue
    return hits


def _tmp_loot() -> list[Path]:
    """What the hostile script left in ``/tmp`` itself (where it writes beside the scratch folder)."""
    return sorted(Path("/tmp").glob("loot-*.txt"))


@pytest.fixture
def attacked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, github: FakeGitHub, home: Path, capsys: pytest.CaptureFixture[str]
) -> Iterator[tuple[Path, str]]:
    """b7000 (a good stand-in) active, b7001 the hostile build; the caller's secrets in the environment."""
    user_home = tmp_path / "userhome"
    user_home.mkdir()
    (user_home / ".netrc").write_text(f"machine github.com login me password {NETRC_SECRET}\n")
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("REAL_HOME", str(user_home))
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    drop = tmp_path / "drop"
    drop.mkdir()
    publish_stand_in(github, tmp_path, "b7000")
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7000")
    assert code == 0, payload
    tag = f"hostile-daemon-{os.getpid()}-{tmp_path.name}"
    publish_stand_in(github, tmp_path, "b7001", script=hostile_server(home, drop, tag))
    before = set(_tmp_loot())
    yield drop, tag
    for process in daemons(tag):
        process.kill()
    for loot in set(_tmp_loot()) - before:  # written only where no sandbox stopped it
        loot.unlink(missing_ok=True)


def _assert_contained(
    tmp_path: Path, home: Path, tag: str, guard: HomeGuard, capsys: pytest.CaptureFixture[str]
) -> None:
    guard.assert_intact("b7000", capsys=capsys)
    _gone, alive = psutil.wait_procs(daemons(tag), timeout=5)
    assert not alive, f"the hostile build's daemon outlived the command: {[p.pid for p in alive]}"
    netrc = str(tmp_path / "userhome" / ".netrc")
    for secret in (*SECRET_ENV.values(), NETRC_SECRET):
        assert [f for f in files_holding(tmp_path, secret.encode()) if f != netrc] == [], f"{secret} was written"
        assert [f for f in _tmp_loot() if secret.encode() in f.read_bytes()] == [], f"{secret} was written in /tmp"


def _update_to_hostile(capsys: pytest.CaptureFixture[str], home: Path, github: FakeGitHub) -> dict[str, object]:
    code, payload = run_json(capsys, home, github.api_url, "update", "--tag", "b7001")
    assert code == 6, payload
    return payload


@pytest.mark.skipif(
    detect_sandbox().level != "bubblewrap", reason="bubblewrap is not installed here (.ci/run installs it)"
)
def test_hostile_first_run_in_bubblewrap_steals_nothing_changes_nothing_and_leaves_nothing_running(
    attacked: tuple[Path, str], tmp_path: Path, home: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]
) -> None:
    _drop, tag = attacked
    guard = HomeGuard(tmp_path, home)
    payload = _update_to_hostile(capsys, home, github)
    assert "version exited 1" in json.dumps(payload), payload
    _assert_contained(tmp_path, home, tag, guard, capsys)


def _path_without_bwrap(tmp_path: Path) -> str:
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (tools / tool).symlink_to(found)
    return str(tools)


@pytest.mark.skipif(detect_sandbox().level not in ("bubblewrap", "landlock"), reason="this kernel has no Landlock")
def test_hostile_first_run_without_bubblewrap_is_held_by_landlock_and_its_launcher(
    attacked: tuple[Path, str],
    tmp_path: Path,
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _drop, tag = attacked
    monkeypatch.setenv("PATH", _path_without_bwrap(tmp_path))
    assert detect_sandbox().level == "landlock"
    guard = HomeGuard(tmp_path, home)
    _update_to_hostile(capsys, home, github)
    _assert_contained(tmp_path, home, tag, guard, capsys)
    code, status = run_json(capsys, home, None, "status")
    assert code == 0 and status["sandbox"]["level"] == "landlock", status


def test_hostile_first_run_with_the_environment_filter_alone_is_caught_by_the_trust_records(
    attacked: tuple[Path, str],
    tmp_path: Path,
    home: Path,
    github: FakeGitHub,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No sandbox at all: as root the hostile run may write anything; every change is named, then repaired."""
    _drop, tag = attacked
    weakest = SandboxSupport("environment", "forced by the test: no bubblewrap, no Landlock")
    monkeypatch.setattr(Sandbox, "support", property(lambda self: weakest))
    _update_to_hostile(capsys, home, github)
    _gone, alive = psutil.wait_procs(daemons(tag), timeout=5)
    assert not alive, "the launcher's subreaper left the daemon running"
    binary = next(home.glob("runtimes/*/llama-b7000/llama-server"))
    if b"pwned" not in binary.read_bytes():
        pytest.skip("the hostile run could not write the active runtime here (not root): nothing to detect")
    code, status = run_json(capsys, home, None, "status")
    assert code == 6, status
    said = json.dumps(status)
    assert "libggml-evil.so" in said and "llama-runtime.json was changed" in said, said
    code, repaired = run_json(capsys, home, github.api_url, "doctor", "--repair")
    assert code == 0, repaired
    binary = next(home.glob("runtimes/*/llama-b7000/llama-server"))
    assert b"pwned" not in binary.read_bytes()
    assert not list(home.glob("runtimes/*/llama-b7000/libggml-evil.so"))
    code, status = run_json(capsys, home, None, "status")
    assert code == 0 and status["active"]["tag"] == "b7000", status


def test_sandbox_required_on_a_host_without_one_is_refused_naming_what_is_missing() -> None:
    from llama_runtime import UserInputError

    sandbox = Sandbox(mode="require")
    sandbox._support = SandboxSupport(
        "environment", "no bwrap on PATH; no Landlock in this kernel", "install bubblewrap"
    )
    with pytest.raises(UserInputError) as raised:
        sandbox.check_required()
    assert raised.value.exit_code == 2
    assert "no bwrap on PATH" in raised.value.message and "install bubblewrap" in (raised.value.hint or "")


def test_a_malformed_sandbox_setting_is_exit_2_naming_the_valid_values(
    capsys: pytest.CaptureFixture[str], home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMA_RUNTIME_SANDBOX", "strict")
    code, payload = run_json(capsys, home, None, "update")
    assert code == 2, payload
    assert "LLAMA_RUNTIME_SANDBOX" in payload["error"]["message"] and "require" in payload["error"]["message"]


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="dropping privileges needs root and setpriv"
)
def test_a_same_user_child_cannot_read_a_non_dumpable_updater_environment() -> None:
    """The fallback's first layer, as a normal user (root reads any environ whatever the flag says)."""
    import subprocess
    import sys
    import tempfile

    checkout = Path(__file__).resolve().parent.parent
    if not (checkout.stat().st_mode & 0o005) or any(not (p.stat().st_mode & 0o001) for p in checkout.parents):
        pytest.skip(f"the checkout {checkout} is not readable by an unprivileged user")
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    with tempfile.TemporaryDirectory(prefix="llama-runtime-dumpable-") as where:
        os.chmod(where, 0o755)  # pytest's own temporary folders are the owner's alone
        probe = Path(where) / "probe.py"
        probe.write_text(
            "import os, subprocess, sys\n"
            f"sys.path.insert(0, {str(checkout)!r})\n"
            "from llama_runtime.runtime.sandbox import make_non_dumpable\n"
            "if sys.argv[1] == 'hidden':\n"
            "    make_non_dumpable()\n"
            "done = subprocess.run(['cat', f'/proc/{os.getpid()}/environ'], capture_output=True)\n"
            "print('READ' if b'SECRET_probe' in done.stdout else 'DENIED')\n"
        )
        probe.chmod(0o644)

        def as_nobody(mode: str) -> str:
            done = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-S", str(probe), mode],
                capture_output=True,
                env={"PATH": "/usr/bin:/bin", "SECRET_PROBE": "SECRET_probe"},
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr.decode(errors="replace")
            return done.stdout.decode().strip()

        assert as_nobody("plain") == "READ"  # the control: a dumpable process's environ is the user's to read
        assert as_nobody("hidden") == "DENIED"


def test_a_stopped_confined_run_takes_what_it_started_with_it(tmp_path: Path) -> None:
    """The launcher's deadline ends the command and every process below it (event order, no sleeps asserted)."""
    from llama_runtime.runtime.binary import run_process
    from llama_runtime.runtime.confine import confined

    tag = f"confined-timeout-{os.getpid()}"
    script = tmp_path / "spinner.sh"
    script.write_text(f"#!/bin/sh\nsetsid sh -c 'sleep 300' {tag} </dev/null >/dev/null 2>&1 &\nexec sleep 300\n")
    script.chmod(0o755)
    sandbox = Sandbox(hidden=(tmp_path / "nothing",))
    result = confined(run_process, sandbox, readable=(tmp_path,))([str(script)], 2.0, {"PATH": os.environ["PATH"]})
    assert result.returncode is None
    _gone, alive = psutil.wait_procs(daemons(tag), timeout=5)
    assert not alive
    for process in alive:
        process.send_signal(signal.SIGKILL)


@pytest.mark.skipif(detect_sandbox().level not in ("bubblewrap", "landlock"), reason="this kernel has no Landlock")
def test_under_landlock_a_run_names_its_own_threads_and_writes_nothing_else_of_proc(tmp_path: Path) -> None:
    """NVIDIA's driver names its threads in /proc/self/task/<tid>/comm; cuInit fails (304) if it cannot."""
    from llama_runtime.runtime.binary import run_process
    from llama_runtime.runtime.confine import confined

    path = _path_without_bwrap(tmp_path)
    sandbox = Sandbox(hidden=(tmp_path / "nothing",), env={"PATH": path})
    assert sandbox.support.level == "landlock"
    script = (
        'printf cuda-EvtHandlr > /proc/self/task/$$/comm && echo named "$(cat /proc/$$/comm)"; '
        "printf 500 > /proc/self/oom_score_adj 2>/dev/null && echo oom-written || echo oom-refused"
    )
    result = confined(run_process, sandbox, readable=(tmp_path,))(["/bin/sh", "-c", script], 30.0, {"PATH": path})
    assert result.returncode == 0, result.output
    assert "named cuda-EvtHandlr" in result.output
    assert "oom-refused" in result.output


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bwrap on PATH")
def test_a_probe_begun_early_answers_as_detection_does_and_is_reaped_when_left_unasked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llama_runtime.runtime import sandbox

    monkeypatch.setattr(sandbox, "_PROBED", {})
    with sandbox.sandbox_probe() as answer:
        early = answer()
    monkeypatch.setattr(sandbox, "_PROBED", {})
    assert early == detect_sandbox()
    monkeypatch.setattr(sandbox, "_PROBED", {})
    with pytest.raises(RuntimeError), sandbox.sandbox_probe():
        raise RuntimeError("status failed while bubblewrap's trial run was under way")
    # Its run was waited for on the way out (its answer kept): no child is left behind unreaped.
    assert list(sandbox._PROBED) == [shutil.which("bwrap")]


@pytest.mark.skipif(
    detect_sandbox().level != "bubblewrap", reason="bubblewrap is not installed here (.ci/run installs it)"
)
def test_under_bubblewrap_the_secrets_of_etc_are_empty_as_under_landlock(tmp_path: Path) -> None:
    from llama_runtime.runtime.binary import run_process
    from llama_runtime.runtime.confine import confined
    from llama_runtime.runtime.sandbox import ETC_SECRETS

    present = [f"/etc/{name}" for name in sorted(ETC_SECRETS) if os.path.lexists(f"/etc/{name}")]
    assert "/etc/shadow" in present  # every Debian/Ubuntu system has it
    script = 'for p in "$@"; do printf "%s:" "$p"; cat "$p" 2>/dev/null | wc -c; ls -A "$p" 2>/dev/null | wc -l; done'
    run = confined(run_process, Sandbox(hidden=(tmp_path / "nothing",)), readable=(tmp_path,))
    result = run(["/bin/sh", "-c", script, "sh", *present], 30.0, {"PATH": os.environ["PATH"]})
    assert result.returncode == 0, result.output
    for line in result.output.split("/etc/")[1:]:
        assert line.split(":", 1)[1].split() in (["0", "0"], ["0", "1"]), result.output  # empty file or empty folder
