"""Runs one command of a build not yet accepted, so that nothing it starts outlives it (Linux).

Started as ``python -I -S _confined_exec.py SPEC -- ARGV...`` by :mod:`llama_runtime.runtime.sandbox`,
with only the standard library (no site-packages, no package import): it must start inside a
bubblewrap sandbox that shows none of the user's files, and it runs before the command does.

The launcher becomes a child subreaper and forks the command. In the child, before ``exec``: a
new session, ``no_new_privs``, death with the launcher, resource limits (CPU seconds, file size,
no core dumps) and, when SPEC asks for it, a Landlock ruleset that allows writes only to the
scratch directory and reads only of the paths SPEC names. When the command ends (or the deadline
passes, or the launcher is told to stop), every process still below the launcher is killed (an
orphaned ``setsid`` daemon is reparented to the subreaper, so it is found) and the launcher ends
as the command did: the same exit code, or the same signal. The command's wait status is also
written to SPEC's ``status_file`` (bubblewrap reports a signal as ``128 + N``, which a plain exit
could also be).

Invariants:

* Nothing below the launcher survives it, unless it is itself killed with ``SIGKILL`` before it
  could clean up; the Landlock scope (ABI 6+) stops the command from signalling it at all.
* The command never runs unconfined: any failure to apply a requested rule ends the child with
  exit code 126 and a sentence on stderr, before ``exec``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import time

# -- Landlock (include/uapi/linux/landlock.h) -----------------------------------------------------
_SYS_CREATE_RULESET = 444  # the same number on every architecture that has Landlock
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2

_EXECUTE = 1 << 0
_WRITE_FILE = 1 << 1
_READ_FILE = 1 << 2
_READ_DIR = 1 << 3
_REMOVE_DIR = 1 << 4
_REMOVE_FILE = 1 << 5
_MAKE_CHAR = 1 << 6
_MAKE_DIR = 1 << 7
_MAKE_REG = 1 << 8
_MAKE_SOCK = 1 << 9
_MAKE_FIFO = 1 << 10
_MAKE_BLOCK = 1 << 11
_MAKE_SYM = 1 << 12
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_IOCTL_DEV = 1 << 15  # ABI 5
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1  # ABI 6

_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV
_READ_RIGHTS = _EXECUTE | _READ_FILE | _READ_DIR

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36

#: Exit code of a command that could not be confined or started (the shell's "cannot execute").
CANNOT_CONFINE = 126

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or disabled)."""
    found = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(found), 0)


def _fail(message: str) -> None:
    os.write(2, f"llama-runtime sandbox: {message}\n".encode())
    os._exit(CANNOT_CONFINE)


def _handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    if abi >= 5:
        rights |= _IOCTL_DEV
    return rights


def _add_path(ruleset: int, path: str, allowed: int, handled: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path that is not there grants nothing
    try:
        if not os.path.isdir(path):
            allowed &= _FILE_RIGHTS
        attr = _PathBeneath(allowed & handled, fd)
        if _libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(attr), 0) != 0:
            _fail(f"Landlock refused a rule for {path} (errno {ctypes.get_errno()})")
    finally:
        os.close(fd)


def _apply_landlock(spec: dict[str, object]) -> None:
    abi = landlock_abi()
    if abi < 1:
        _fail("Landlock was asked for but this kernel has none")
    handled = _handled_fs(abi)
    net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    attr = _RulesetAttr(handled, net, scoped)
    ruleset = int(_libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0))
    if ruleset < 0:
        _fail(f"Landlock would not create a ruleset (errno {ctypes.get_errno()})")
    for path in _paths(spec, "read"):
        _add_path(ruleset, path, _READ_RIGHTS, handled)
    for path in _paths(spec, "devices"):
        _add_path(ruleset, path, _READ_FILE | _WRITE_FILE | _IOCTL_DEV | _READ_DIR, handled)
    for path in _paths(spec, "write"):
        _add_path(ruleset, path, handled, handled)
    for path in _paths(spec, "own_files"):  # resolved here, in the command's own process
        _add_path(ruleset, path, _READ_FILE | _WRITE_FILE | _TRUNCATE | _READ_DIR, handled)
    port = spec.get("bind_port")
    if net and isinstance(port, int) and port > 0:
        rule = _NetPort(_NET_BIND_TCP, port)
        if _libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(rule), 0) != 0:
            _fail(f"Landlock refused the port rule (errno {ctypes.get_errno()})")
    if _libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
        _fail(f"Landlock would not restrict the command (errno {ctypes.get_errno()})")
    os.close(ruleset)


def _paths(spec: dict[str, object], key: str) -> list[str]:
    value = spec.get(key)
    return [p for p in value if isinstance(p, str)] if isinstance(value, list) else []


def _limit(which: int, value: object) -> None:
    if isinstance(value, int) and value >= 0:
        resource.setrlimit(which, (value, value))


def _confine_child(spec: dict[str, object], argv: list[str]) -> None:
    """In the forked child: confine, then become the command (never returns)."""
    try:
        os.setsid()
        if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            _fail("could not tie the command's life to its launcher")
        _limit(resource.RLIMIT_CORE, 0)
        _limit(resource.RLIMIT_CPU, spec.get("cpu_seconds"))
        _limit(resource.RLIMIT_FSIZE, spec.get("file_bytes"))
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            _fail("could not set no_new_privs")
        if spec.get("landlock"):
            _apply_landlock(spec)
        workdir = spec.get("cwd")
        if isinstance(workdir, str):
            os.chdir(workdir)
        os.execv(argv[0], argv)
    except OSError as exc:
        _fail(f"cannot execute {argv[0]}: {exc.strerror or exc}")
    _fail("exec returned")


def _children(me: int) -> list[int]:
    """Pids whose parent is ``me`` (what the subreaper inherited included)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(entry))
    return found


def _kill_all_below(me: int) -> None:
    """Kill and reap every process below the launcher, until none is left."""
    for _ in range(10_000):  # each round reaps at least one process, or ends
        pids = _children(me)
        if not pids:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    return
            except ChildProcessError:
                return
            continue
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            return
        time.sleep(0.001)


def _write_status(spec: dict[str, object], status: int) -> None:
    path = spec.get("status_file")
    if not isinstance(path, str):
        return
    word = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.waitstatus_to_exitcode(status)}"
    try:
        with open(path + ".tmp", "w", encoding="ascii") as handle:
            handle.write(word)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def _end_as(status: int) -> None:
    """Exit the way the command did: its code, or its signal."""
    sys.stdout.flush()
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
        os._exit(128 + number)  # a signal that does not end a process by default
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def main(args: list[str]) -> None:
    """``SPEC -- ARGV...``: run ARGV confined as SPEC (JSON) says."""
    if len(args) < 3 or args[1] != "--":
        _fail("usage: _confined_exec.py SPEC -- ARGV...")
    spec = json.loads(args[0])
    argv = args[2:]
    me = os.getpid()
    if _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        _fail("could not become a child subreaper")
    for signum in _STOP_SIGNALS:
        signal.signal(signum, _request_stop)
    # Whoever started the launcher dying (the updater killed) ends the run like a stop request.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    deadline = spec.get("timeout_seconds")
    if isinstance(deadline, (int, float)) and deadline > 0:
        signal.setitimer(signal.ITIMER_REAL, float(deadline))
    child = os.fork()
    if child == 0:
        _confine_child(spec, argv)
    status = _wait_for(child)
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    _kill_all_below(me)
    if status is None:
        os._exit(124)  # stopped, or out of time: the caller knows which
    _write_status(spec, status)
    _end_as(status)


class _Stop(Exception):
    """A stop was requested: a signal to the launcher, or its deadline."""


#: What ends a run early: the caller's stop (SIGTERM, SIGINT, SIGHUP) and the deadline (SIGALRM).
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM)


def _request_stop(signum: int, _frame: object) -> None:
    raise _Stop


def _wait_for(child: int) -> int | None:
    """The command's wait status; ``None`` when a stop came first (the command is killed then)."""
    try:
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                return None
            if pid == child:
                return status
    except _Stop:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child, signal.SIGKILL)
        return None


if __name__ == "__main__":
    main(sys.argv[1:])
