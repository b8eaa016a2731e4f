"""The sandbox a build not yet accepted runs in: what this host offers, and how one run is confined.

Every run of a build before it is accepted (``--version``, ``--list-devices``, the compute check's
server) goes through :class:`Sandbox`. The strongest level the host offers is used:

``bubblewrap``
    ``bwrap`` on ``PATH`` (Debian, Fedora, Arch; what Flatpak runs apps in): new PID, IPC and UTS
    namespaces and, except for a server that must listen on loopback, a new network namespace;
    the whole filesystem read-only, ``/tmp``, ``/run``, the user's ``HOME`` and the llama-runtime
    home hidden under empty tmpfs mounts, only the staged build, the check's model and a private
    scratch directory shown (the scratch one writable), a fresh ``/proc`` and ``/dev`` with only
    the GPU nodes a backend needs (``/dev/dri``, ``/dev/nvidia*``, ``/dev/kfd``).
``landlock``
    Linux without bubblewrap, kernel 5.13+: a Landlock ruleset that allows reads of the system's
    directories, llama-runtime's own Python installation, the staged build and the model only,
    writes of the scratch directory only, no TCP but the server's own port (ABI 4+), and no
    signals or abstract sockets outside the run (ABI 6+). Landlock also refuses reading another
    process's ``/proc/<pid>/environ``.
``sandbox-exec``
    macOS: a profile that denies writes outside the scratch directory and reads of ``HOME`` and
    the llama-runtime home.
``environment``
    Nothing above (Windows, an old kernel): the environment filter of
    :mod:`~llama_runtime.runtime.confine` alone.

On Linux every level runs the command under a launcher (``_confined_exec.py``) that kills every
process the command left behind, limits CPU time and file size, and reports a death by signal as
that signal; the updater itself is made non-dumpable first, so a same-user process cannot read
its environment through ``/proc``. ``LLAMA_RUNTIME_SANDBOX=require`` refuses (exit 2) a host that
offers only ``environment``.

Invariants:

* A staged build never runs outside :meth:`Sandbox.wrap`'s command line, whatever the level.
* The scratch directory is the only place a run can write (plus the shader cache the sandbox
  keeps for runs of builds not yet accepted, never the user's).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from llama_runtime.runtime.binary import CANNOT_EXECUTE, ProcessResult
from llama_runtime.runtime.errors import UserInputError

if TYPE_CHECKING:
    import subprocess

__all__ = [
    "LAUNCHER",
    "SANDBOX_MODES",
    "Confinement",
    "Sandbox",
    "SandboxLevel",
    "SandboxMode",
    "SandboxSupport",
    "detect_sandbox",
    "exit_status_file",
    "sandbox_for",
    "sandbox_probe",
]

SandboxLevel = Literal["bubblewrap", "landlock", "sandbox-exec", "environment"]
#: ``auto``: the strongest level the host offers; ``require``: refuse a host with none but the environment filter.
SandboxMode = Literal["auto", "require"]
SANDBOX_MODES: Final[tuple[SandboxMode, ...]] = ("auto", "require")

#: The launcher script, run with the standard library only (see its docstring).
LAUNCHER: Final = Path(__file__).with_name("_confined_exec.py")
#: The name the launcher writes the command's wait status to, in the scratch directory.
_STATUS_NAME: Final = ".llama-runtime-exit-status"

#: CPU seconds one confined run may use: ``--list-devices`` and the compute check take well under
#: a minute of CPU; a build spinning forever is stopped by this even when its wall clock is not.
CPU_SECONDS: Final = 600
#: Largest file a confined run may write: a shader cache entry or a log is far smaller; a run
#: filling the disk is not.
FILE_BYTES: Final = 1024**3
#: Seconds the launcher has to clean up after it is told to stop, before it is killed.
STOP_GRACE_SECONDS: Final = 5.0
#: Device nodes a GPU backend opens (NVIDIA, AMD KFD, DRM render nodes for Vulkan/ROCm/Intel).
GPU_DEVICE_GLOBS: Final = ("/dev/dri", "/dev/kfd", "/dev/nvidia*", "/dev/nvidia-caps")
#: Plain device nodes every program may use.
PLAIN_DEVICES: Final = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: System directories a confined run may read under Landlock (the loader, the drivers, their config).
SYSTEM_READ: Final = (
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/opt",
    "/etc",
    "/sys",
    "/proc",
    "/nix/store",
    "/gnu/store",
)
#: The command's own files under /proc it may write under Landlock (resolved in the command's process, so
#: never another process's): NVIDIA's driver names its threads (``/proc/self/task/<tid>/comm``), and
#: ``cuInit`` fails with 304 "OS call failed" when it cannot (seen on an H200, driver 580, Landlock ABI 7).
OWN_PROCESS_FILES: Final = ("/proc/self/task",)
#: Files under /etc no confined run needs and that may hold secrets (Landlock reads are allow-listed).
ETC_SECRETS: Final = frozenset(
    {"shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "ssh", "ssl", "netrc", "docker", "krb5.keytab"}
)


@dataclass(frozen=True)
class SandboxSupport:
    """What this host offers a build not yet accepted.

    Attributes:
        level: The strongest level available.
        detail: One line for people (``bwrap 0.8.0 at /usr/bin/bwrap``, ``Landlock ABI 7``).
        stronger: How to get a stronger level here (empty at ``bubblewrap``, or where none exists).
    """

    level: SandboxLevel
    detail: str
    stronger: str = ""

    def to_json(self) -> dict[str, str]:
        """A JSON-ready dictionary (``status``/``doctor``)."""
        return {"level": self.level, "detail": self.detail, "stronger": self.stronger}


@dataclass(frozen=True)
class Confinement:
    """One run's rules.

    Attributes:
        scratch: The private directory the run may write (its home, temp and working directory).
        readable: Paths the run may read besides the system (the staged build, the check's model).
        network: ``loopback`` for a server the updater must reach; ``none`` otherwise.
        bind_port: The port a server will listen on (Landlock allows binding only it).
        shader_cache: A writable directory for GPU drivers' compiled shaders (None: none kept).
    """

    scratch: Path
    readable: tuple[Path, ...] = ()
    network: Literal["none", "loopback"] = "none"
    bind_port: int | None = None
    shader_cache: Path | None = None


def _landlock_abi() -> int:
    if sys.platform != "linux":
        return 0
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(int(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))), 0)


_PROBED: dict[str, bool] = {}


def _start_bwrap_probe(bwrap: str) -> int | None:
    """Start ``bwrap`` making the namespaces this host needs (user namespaces may be off); its pid, or None.

    Spawned with ``os.posix_spawn``: ``status`` names the level, and must not import ``subprocess``.
    """
    argv = [bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--proc", "/proc", "--", "true"]
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    try:
        return os.posix_spawn(bwrap, argv, {"PATH": os.defpath}, file_actions=quiet)
    except OSError:
        return None


def _bwrap_probe_result(pid: int | None) -> bool:
    """Whether the probe ``pid`` (:func:`_start_bwrap_probe`) succeeded; waits for it and reaps it."""
    if pid is None:
        return False
    try:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    except OSError:
        return False


def _bwrap_works(bwrap: str) -> bool:
    """Whether ``bwrap`` can make the namespaces this host needs (tried once per process)."""
    if bwrap not in _PROBED:
        _PROBED[bwrap] = _bwrap_probe_result(_start_bwrap_probe(bwrap))
    return _PROBED[bwrap]


def detect_sandbox(env: Mapping[str, str] | None = None) -> SandboxSupport:
    """The strongest sandbox this host offers (bubblewrap is tried once per process).

    ``env``'s ``PATH`` is where ``bwrap`` is looked for (None: ours).
    """
    with sandbox_probe(env) as answer:
        return answer()


@contextlib.contextmanager
def sandbox_probe(env: Mapping[str, str] | None = None) -> Iterator[Callable[[], SandboxSupport]]:
    """:func:`detect_sandbox`, begun on entering: bubblewrap's trial run overlaps the caller's own work.

    Inside, call the value for the answer (it waits for the trial run); on leaving, a trial run
    whose answer was not asked for is waited for and reaped all the same.
    """
    bwrap = _bwrap_on_path(env)
    pid = _start_bwrap_probe(bwrap) if bwrap is not None and bwrap not in _PROBED else None

    def answer() -> SandboxSupport:
        nonlocal pid
        if bwrap is not None and pid is not None:
            _PROBED[bwrap], pid = _bwrap_probe_result(pid), None
        return _support(bwrap)

    try:
        yield answer
    finally:
        if bwrap is not None and pid is not None:
            _PROBED[bwrap] = _bwrap_probe_result(pid)


def _bwrap_on_path(env: Mapping[str, str] | None) -> str | None:
    """``bwrap`` on ``env``'s ``PATH`` (None: ours), on Linux only."""
    if sys.platform != "linux":
        return None
    return shutil.which("bwrap", path=(os.environ if env is None else env).get("PATH", os.defpath))


def _support(bwrap: str | None) -> SandboxSupport:
    """The level this host offers, ``bwrap`` being ``bwrap`` on the path (its trial run, if any, is over)."""
    if sys.platform == "darwin":
        if os.path.exists("/usr/bin/sandbox-exec"):
            return SandboxSupport("sandbox-exec", "sandbox-exec at /usr/bin/sandbox-exec")
        return SandboxSupport("environment", "no sandbox-exec on this Mac")
    if sys.platform != "linux":
        return SandboxSupport(
            "environment", f"no sandbox is implemented on {sys.platform}: the environment filter alone"
        )
    install = "install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`, `pacman -S bubblewrap`)"
    if bwrap is not None and _bwrap_works(bwrap):
        return SandboxSupport("bubblewrap", f"bwrap at {bwrap}")
    abi = _landlock_abi()  # asked only now: ctypes and its libc look-up cost status ~2 ms
    reason = (
        f"bwrap at {bwrap} cannot create namespaces here (unprivileged user namespaces off?)"
        if bwrap
        else "no bwrap on PATH"
    )
    if abi >= 1:
        return SandboxSupport("landlock", f"Landlock ABI {abi}; {reason}", stronger=install)
    return SandboxSupport(
        "environment", f"{reason}; no Landlock in this kernel", stronger=install + ", or a kernel with Landlock (5.13+)"
    )


def exit_status_file(scratch: Path) -> Path:
    """Where the launcher records the command's wait status in ``scratch``."""
    return scratch / _STATUS_NAME


@dataclass
class Sandbox:
    """Confines the runs of builds not yet accepted on this host.

    Args:
        mode: ``auto`` or ``require`` (``LLAMA_RUNTIME_SANDBOX``).
        hidden: Directories no run may see: the user's ``HOME`` and the llama-runtime home.
        shader_cache: A directory the runs keep GPU shaders in (the home's, apart from the user's).
        env: Where ``bwrap`` is looked for (its ``PATH``).
    """

    mode: SandboxMode = "auto"
    hidden: tuple[Path, ...] = ()
    shader_cache: Path | None = None
    env: Mapping[str, str] | None = None
    _support: SandboxSupport | None = field(default=None, repr=False)

    @property
    def support(self) -> SandboxSupport:
        """The level this host offers (detected once)."""
        if self._support is None:
            self._support = detect_sandbox(self.env)
        return self._support

    def check_required(self) -> None:
        """Refuse a host without a real sandbox when one is required.

        Raises:
            UserInputError: ``require`` and only the environment filter is available (exit 2).
        """
        support = self.support
        if self.mode == "require" and support.level == "environment":
            raise UserInputError(
                f"LLAMA_RUNTIME_SANDBOX=require, but this host offers no sandbox for a new build's first run "
                f"({support.detail}).",
                hint=(support.stronger or "Run on Linux or macOS") + "; or unset LLAMA_RUNTIME_SANDBOX to accept "
                "the environment filter alone.",
            )

    def wrap(self, argv: Sequence[str], rules: Confinement) -> list[str]:
        """The command line that runs ``argv`` under ``rules`` at this host's level.

        Raises:
            UserInputError: See :meth:`check_required`.
        """
        self.check_required()
        if rules.shader_cache is not None:
            rules.shader_cache.mkdir(parents=True, exist_ok=True)
        level = self.support.level
        if sys.platform == "darwin":
            return self._sandbox_exec(argv, rules) if level == "sandbox-exec" else list(argv)
        if sys.platform != "linux":
            return list(argv)
        make_non_dumpable()
        launched = self._launcher(argv, rules, landlock=level == "landlock")
        if level == "bubblewrap":
            return [*self._bwrap(rules), "--", *launched]
        return launched

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str], rules: Confinement) -> ProcessResult:
        """Run ``argv`` confined to completion (killed, with all it started, after ``timeout`` seconds).

        Returns:
            Its exit code (negative: the signal that ended it) and output; ``returncode`` None on a timeout.
        """
        import subprocess  # deferred: status imports this module to name the level

        command = self.wrap(argv, rules)
        try:
            child = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=rules.scratch,
                close_fds=True,
                start_new_session=sys.platform != "win32",
            )
        except OSError as exc:
            return ProcessResult(CANNOT_EXECUTE, f"cannot execute {command[0]}: {exc.strerror or exc}")
        from llama_runtime.runtime.capture import wait_and_capture

        out, timed_out = wait_and_capture(child, timeout, self.stop)
        if timed_out:
            return ProcessResult(None, out)
        return ProcessResult(self.returncode(child.returncode, rules), out)

    def stop(self, child: subprocess.Popen[bytes]) -> None:
        """Stop a confined run: the launcher kills what it started, then it is killed if still there."""
        import subprocess

        if child.poll() is not None:
            return
        child.terminate()
        try:
            child.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    def returncode(self, code: int, rules: Confinement) -> int:
        """The command's own exit code: bubblewrap reports a signal as ``128 + N``; the launcher said which."""
        try:
            word, _, number = exit_status_file(rules.scratch).read_text("ascii").partition(" ")
            value = int(number)
        except (OSError, ValueError):
            return code
        return -value if word == "signal" else value if word == "exit" else code

    # -- levels ---------------------------------------------------------------------------------

    def _launcher(self, argv: Sequence[str], rules: Confinement, *, landlock: bool) -> list[str]:
        spec: dict[str, object] = {
            "cpu_seconds": CPU_SECONDS,
            "file_bytes": FILE_BYTES,
            "status_file": str(exit_status_file(rules.scratch)),
            "cwd": str(rules.scratch),
            "landlock": landlock,
        }
        if landlock:
            spec.update(
                read=[*_system_read(), *(str(p) for p in rules.readable), *_interpreter_paths()],
                write=[str(rules.scratch), *([str(rules.shader_cache)] if rules.shader_cache else [])],
                devices=[*PLAIN_DEVICES, *_gpu_devices()],
                own_files=list(OWN_PROCESS_FILES),
                bind_port=rules.bind_port if rules.network == "loopback" else None,
            )
        python = os.path.realpath(sys.executable)
        return [python, "-I", "-S", "-B", str(LAUNCHER), json.dumps(spec), "--", *argv]

    def _bwrap(self, rules: Confinement) -> list[str]:
        bwrap = shutil.which("bwrap", path=(os.environ if self.env is None else self.env).get("PATH", os.defpath))
        assert bwrap is not None  # detected at this level
        args = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        args += ["--unshare-cgroup-try"]
        if rules.network == "none":
            args.append("--unshare-net")
        args += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
        for device in _gpu_devices():
            args += ["--dev-bind-try", device, device]
        for hidden in ("/tmp", "/var/tmp", "/run", "/dev/shm", *(str(p) for p in self.hidden)):
            if _hideable(hidden):
                args += ["--tmpfs", hidden]
        args += _etc_secrets_hidden()
        for path in (*rules.readable, *_interpreter_paths()):
            args += ["--ro-bind-try", str(path), str(path)]
        if rules.shader_cache is not None:
            args += ["--bind-try", str(rules.shader_cache), str(rules.shader_cache)]
        args += ["--bind", str(rules.scratch), str(rules.scratch), "--chdir", str(rules.scratch)]
        return args

    def _sandbox_exec(self, argv: Sequence[str], rules: Confinement) -> list[str]:
        return ["/usr/bin/sandbox-exec", "-p", macos_profile(self.hidden, rules), *argv]


def macos_profile(hidden: Sequence[Path], rules: Confinement) -> str:
    """A ``sandbox-exec`` profile: writes only to the scratch directory, no reads of ``hidden`` (pure)."""
    allowed = [rules.scratch, *([rules.shader_cache] if rules.shader_cache else [])]
    lines = [
        "(version 1)",
        "(allow default)",
        "(deny file-write*)",
        *(f'(allow file-write* (subpath "{_sb_escape(p)}"))' for p in allowed),
        '(allow file-write* (literal "/dev/null") (literal "/dev/zero") (regex #"^/dev/tty"))',
        *(f'(deny file-read* (subpath "{_sb_escape(p)}"))' for p in hidden),
        *(f'(allow file-read* (subpath "{_sb_escape(p)}"))' for p in rules.readable),
        "(deny process-info* (target others))",
    ]
    if rules.network == "none":
        lines.append("(deny network*)")
    return "\n".join(lines)


def _sb_escape(path: Path) -> str:
    return str(path).replace("\\", "\\\\").replace('"', '\\"')


def _hideable(path: str) -> bool:
    """A directory that exists and is not ``/`` (hiding the root would hide the system)."""
    return os.path.isabs(path) and os.path.normpath(path) != "/" and os.path.isdir(path)


def _etc_secrets_hidden() -> list[str]:
    """bwrap arguments that hide :data:`ETC_SECRETS` as Landlock does (an empty folder, an empty file)."""
    args: list[str] = []
    for name in sorted(ETC_SECRETS):
        path = os.path.join("/etc", name)
        if os.path.islink(path) or not os.path.lexists(path):
            continue  # a link's target is outside /etc's secrets or missing: nothing to cover here
        args += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    return args


def _gpu_devices() -> list[str]:
    import glob

    found: list[str] = []
    for pattern in GPU_DEVICE_GLOBS:
        found.extend(sorted(glob.glob(pattern)))
    return found


def _system_read() -> list[str]:
    """The system paths a Landlock run may read: :data:`SYSTEM_READ`, ``/etc`` without its secrets."""
    paths = [p for p in SYSTEM_READ if p != "/etc"]
    with contextlib.suppress(OSError):
        paths += [os.path.join("/etc", name) for name in os.listdir("/etc") if name not in ETC_SECRETS]
    return paths


def _interpreter_paths() -> list[str]:
    """What the launcher needs to start: this Python's installation and environment, and the launcher.

    None of it is the user's data: the interpreter, its standard library and the environment
    llama-runtime itself is installed in.
    """
    return sorted({sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)), str(LAUNCHER)})


_NON_DUMPABLE: list[bool] = []


def make_non_dumpable() -> None:
    """Make this process non-dumpable (Linux): a same-user, non-root process can no longer read its
    ``/proc/<pid>/environ`` or attach to it. Done once, before the first confined run."""
    if _NON_DUMPABLE or sys.platform != "linux":
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    _NON_DUMPABLE.append(True)


def sandbox_for(home_root: Path, mode: SandboxMode = "auto", env: Mapping[str, str] | None = None) -> Sandbox:
    """The sandbox of builds not yet accepted for the home at ``home_root``.

    It hides the user's ``HOME`` (``env``'s, else ours) and the home itself. Compiled shaders are
    kept in the user's cache folder under ``llama-runtime/sandbox-shaders``, apart from the user's
    own driver caches (a build not yet accepted never writes those) and shared by every home of
    the user: a software Vulkan device compiles ggml's pipelines once (tens of seconds), not on
    every check.
    """
    import platformdirs  # deferred: only an install needs it

    user_home = (os.environ if env is None else env).get("HOME") or os.path.expanduser("~")
    hidden = tuple(dict.fromkeys(Path(p).absolute() for p in (user_home, home_root) if p))
    cache = Path(platformdirs.user_cache_dir("llama-runtime", appauthor=False)) / "sandbox-shaders"
    return Sandbox(mode=mode, hidden=hidden, shader_cache=cache, env=env)
