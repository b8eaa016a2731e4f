"""How much of the machine's CPU other work took while the speed guard timed a server.

A switch times the old server just before it stops and the new one right
after; a job that starts in between (a build, another app) slows the new
figure by the CPU it takes, and the guard would read that as the new build's
slowdown. :func:`busy_drop` is the drop other work alone explains (pure);
:class:`OtherWork` measures it (IO, through psutil): the CPU seconds of every
process except llama-server's, per process, over the measurement.

Invariant: the figure only ever widens the noise bound: a guard that cannot
tell a slower build from a busier machine says "within noise", never rolls back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Final

__all__ = ["OtherWork", "busy_drop", "other_share"]

#: The server whose speed is measured; its own CPU time is no other work.
SERVER_NAMES: Final[frozenset[str]] = frozenset({"llama-server", "llama-server.exe"})
#: Shorter windows say nothing: the kernel accounts CPU time in ticks of 10 ms or less.
MIN_WINDOW_SECONDS: Final[float] = 0.05


def other_share(cpu_seconds: float, window_seconds: float, cpus: int) -> float:
    """The share of the machine's CPU (0 to 1) that ``cpu_seconds`` of other work over ``window_seconds`` is."""
    if window_seconds < MIN_WINDOW_SECONDS or cpus < 1:
        return 0.0
    return min(1.0, max(0.0, cpu_seconds / (window_seconds * cpus)))


def busy_drop(old_share: float | None, new_share: float | None) -> float:
    """The relative drop of speed that other work alone explains between two measurements.

    A server that could use the whole CPU gets what other work leaves it: with
    shares ``u`` of the CPU taken by others, its speed scales with ``1 - u``, so
    the new figure may be ``1 - (1 - new) / (1 - old)`` lower for that alone (a
    one-thread job beside a server on both cores of two gets a third of the CPU:
    a third slower). An unknown old share counts
    as an idle machine, so a busy one now still widens the bound; a machine that
    got quieter explains no drop.

    Args:
        old_share: Other work's share of the CPU while the old runtime was timed (None: unknown).
        new_share: The same while the new one was timed (None: unknown).
    """
    if new_share is None:
        return 0.0
    old = min(max(old_share or 0.0, 0.0), 1.0)
    new = min(max(new_share, 0.0), 1.0)
    if new <= old:
        return 0.0
    return 1.0 - (1.0 - new) / (1.0 - old) if old < 1.0 else 1.0


def _other_cpu_seconds() -> dict[int, float]:
    """CPU seconds (user + system) of each process that is not llama-server nor this one, by pid."""
    import psutil

    own = os.getpid()
    seconds: dict[int, float] = {}
    for proc in psutil.process_iter(["name", "cpu_times"]):
        info = proc.info
        times = info.get("cpu_times")
        if proc.pid == own or info.get("name") in SERVER_NAMES or times is None:
            continue
        seconds[proc.pid] = times.user + times.system
    return seconds


class OtherWork:
    """Measures other work's share of the CPU between :meth:`start` and :meth:`share`.

    Args:
        sample: CPU seconds by pid (the seam; default: every process but llama-server and this one).
        monotonic: Seconds that never go back.
        cpus: Logical CPUs of the machine.
    """

    def __init__(
        self,
        sample: Callable[[], dict[int, float]] = _other_cpu_seconds,
        monotonic: Callable[[], float] = time.monotonic,
        cpus: int | None = None,
    ) -> None:
        self._sample = sample
        self._monotonic = monotonic
        self._cpus = cpus or os.cpu_count() or 1
        self._before: dict[int, float] | None = None
        self._since = 0.0

    def start(self) -> None:
        """Begin a measurement (a failure to read processes leaves it unknown)."""
        self._before, self._since = self._read(), self._monotonic()

    def share(self) -> float | None:
        """Other work's share of the CPU since :meth:`start` (None: unknown).

        Only processes seen at both ends count, each by its own growth: one that
        ended in between takes its seconds with it, and a pid cannot go back.
        """
        after = self._read()
        if self._before is None or after is None:
            return None
        grown = sum(max(0.0, after[pid] - was) for pid, was in self._before.items() if pid in after)
        return other_share(grown, self._monotonic() - self._since, self._cpus)

    def _read(self) -> dict[int, float] | None:
        try:
            return self._sample()
        except Exception:  # psutil missing or refused: unknown, and the guard keeps its usual bound
            return None
