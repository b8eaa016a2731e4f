"""Process identity on every OS: a pid plus its creation time names one process.

Also which paths running processes use (gc must not delete a runtime an app
runs by itself). A pid alone is recycled by the OS; a record (the managed server's, an update
job's) stores the creation time next to the pid, and only a live process with
both the same is its owner. psutil answers both questions the same way on
Linux, macOS and Windows; it is imported on first use, so app start-up never
pays for it, and on Linux the identity questions read ``/proc`` directly.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pathlib import Path

    import psutil

__all__ = ["paths_in_use", "pid_alive", "process_carries", "process_runs", "process_start_ticks"]

#: The largest pid any OS hands out (Linux caps at 2**22, Windows and macOS stay in 32 bits);
#: a larger number in a record is damage, never a process.
MAX_PID: Final[int] = 2**31 - 1
#: Creation times are kept in hundredths of a second: Linux counts process
#: start in clock ticks (100 per second), so finer units would only add noise.
_TICKS_PER_SECOND: Final[int] = 100
#: Linux keeps a process's state and start time in ``/proc/<pid>/stat``, readable for every
#: process: the identity checks of every locked command (the update job's owner, the lock's) read
#: it directly, and only gc's scan of open files imports psutil (two extension modules, ~10-25 ms
#: of an update's start). Elsewhere, or where /proc is not mounted, psutil answers.
_PROC_STAT: Final[bool] = sys.platform.startswith("linux") and os.path.exists("/proc/self/stat")
#: Fields of /proc/<pid>/stat after ``pid (comm) ``: the state (3rd) and the start time in clock ticks (22nd).
_STATE: Final[int] = 0
_START_TIME: Final[int] = 19
if sys.platform == "win32":
    _CLOCK_TICKS: Final[int] = 100
else:
    _CLOCK_TICKS: Final[int] = os.sysconf("SC_CLK_TCK") if _PROC_STAT else 100


def _proc_stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or ``None`` when no such process is there."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses; it ends at the last ")".
    fields = data[data.rfind(b")") + 2 :].split()
    return fields if len(fields) > _START_TIME else None


def _boot_time() -> float | None:
    """The boot time in seconds since the epoch, as ``/proc/stat`` says (read each time, as psutil does)."""
    try:
        with open("/proc/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"btime"):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` names a live (not zombie) process, ours or another user's (never one out of range)."""
    if not 0 < pid <= MAX_PID:
        return False
    if _PROC_STAT:
        fields = _proc_stat(pid)
        if fields is not None:
            return fields[_STATE] != b"Z"
        try:  # a /proc mounted with hidepid hides other users' processes: ask the kernel, as psutil does
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # exists, owned by someone we may not ask
        return True
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # exists, owned by someone we may not ask


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` was created (hundredths of a second since the epoch), or ``None`` if unknown.

    A pid names the same process only while this value is unchanged: records
    that store it next to a pid can tell a recycled pid from their owner.
    """
    if not 0 < pid <= MAX_PID:
        return None
    if _PROC_STAT:
        fields = _proc_stat(pid)
        boot = _boot_time()
        if fields is None or boot is None:
            return None
        # psutil's create_time on Linux, in its order of operations, so records written either way agree.
        return round((float(fields[_START_TIME]) / _CLOCK_TICKS + boot) * _TICKS_PER_SECOND)
    import psutil

    try:
        return round(psutil.Process(pid).create_time() * _TICKS_PER_SECOND)
    except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
        return None


def process_runs(pid: int, binary: Path) -> bool | None:
    """Whether ``pid`` runs ``binary``: its executable, or the script its interpreter runs.

    A script started as ``llama-server`` shows as ``sh <path>``, so the first
    two words of the command line count as well as the executable.

    Returns:
        None when the OS will not say (another user's process, a platform psutil cannot read).
    """
    if not 0 < pid <= MAX_PID:
        return False
    names = _exe_and_command(pid)
    if names is None:
        return None
    want = os.path.realpath(binary)
    return any(name and os.path.realpath(name) == want for name in names)


def process_carries(pid: int, key: str, value: str) -> bool | None:
    """Whether ``pid``'s environment holds ``key=value`` (set when it was started, kept across ``exec``).

    Returns:
        None when the OS will not say (another user's process, a platform psutil cannot read).
    """
    if not 0 < pid <= MAX_PID:
        return False
    if _PROC_STAT:
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                data = handle.read()
        except OSError:
            return None if os.path.exists(f"/proc/{pid}") else False
        if not data:
            return None  # an exiting process (its memory already released) shows no environment
        return os.fsencode(f"{key}={value}") in data.split(b"\0")
    import psutil

    try:
        return psutil.Process(pid).environ().get(key) == value
    except psutil.NoSuchProcess:
        return False
    except (psutil.Error, OSError):
        return None


def _exe_and_command(pid: int) -> list[str] | None:
    """The executable and the first two command-line words of ``pid``, or None when they cannot be read."""
    if _PROC_STAT:
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                words = handle.read(64 * 1024).split(b"\0")[:2]
        except OSError:
            # Gone: it runs nothing. Still there (an exiting process has no executable link any
            # more, another user's cannot be read): unknown.
            return None if os.path.exists(f"/proc/{pid}") else []
        return [exe, *(os.fsdecode(w) for w in words)]
    import psutil

    try:
        proc = psutil.Process(pid)
        return [proc.exe(), *proc.cmdline()[:2]]
    except psutil.NoSuchProcess:
        return []
    except (psutil.Error, OSError):
        return None


def paths_in_use(under: Path) -> set[str] | None:
    """Paths inside ``under`` that running processes use, or ``None`` where processes cannot be seen.

    A process uses a path when it is its executable or working directory, an
    argument (a script started as ``llama-server`` shows as ``sh <path>``), an
    open file or a mapped file (a loaded shared library). Processes and
    fields we may not read (other users', or a platform without memory maps)
    are skipped; ``None`` only when even our own process cannot be read.

    Args:
        under: A resolved directory (e.g. ``<home>/runtimes``).
    """
    import psutil

    try:
        own = psutil.Process()
        own.exe()
        own.cmdline()
    except (psutil.Error, OSError):
        return None
    prefix = str(under)
    found: set[str] = set()
    for proc in psutil.process_iter():
        found.update(path for path in _paths_of(proc) if path.startswith(prefix))
    return found


def _paths_of(proc: psutil.Process) -> Iterator[str]:
    """Every path one process uses that psutil lets us read."""
    import psutil

    unreadable = (psutil.Error, OSError, NotImplementedError, AttributeError)
    cwd: str | None = None
    with contextlib.suppress(*unreadable):
        cwd = proc.cwd()
        yield cwd
    with contextlib.suppress(*unreadable):
        yield proc.exe()
    with contextlib.suppress(*unreadable):
        for arg in proc.cmdline():
            if os.sep in arg and cwd is not None:
                yield os.path.realpath(os.path.join(cwd, arg))
    with contextlib.suppress(*unreadable):
        if sys.platform != "darwin":  # psutil has no memory maps on macOS
            for mapped in proc.memory_maps(grouped=True):
                yield mapped.path
    with contextlib.suppress(*unreadable):
        for opened in proc.open_files():
            yield opened.path
